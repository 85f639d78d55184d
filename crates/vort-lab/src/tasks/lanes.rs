//! The lanes of training with the state carried: where each batch row reads, a pure function
//! of (seed, row, step).

use super::TaskError;
use vort::vort_math::rng::{derive, SplitMix64};

/// Where each batch row reads when training with the state carried (truncated
/// backpropagation through the book, issue #40): row r is lane r, a stream through the
/// training books. Lane r reads its epoch e's books in an order drawn from (seed, r, e), each
/// book in consecutive windows of T bytes (window w holds bytes wT ..= wT + T, so the next
/// window's first input is this one's last target), the tail of fewer than T + 1 bytes
/// unread. Window k of a lane is a pure function of (seed, lane, k): a resume needs the step,
/// and the carried state from the checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct LanePlan {
    /// Windows of each training book, floor((len - 1) / T).
    windows: Vec<u64>,
    /// Windows in one epoch (their sum).
    per_epoch: u64,
    /// T.
    seq_len: usize,
    /// Windows between two resets inside a book: the context never passes the cap.
    windows_per_context: usize,
}

impl LanePlan {
    /// The plan over training books of lengths `lens` (bytes), for windows of `seq_len` and
    /// contexts of at most `context_cap` bytes.
    ///
    /// # Errors
    /// [`TaskError::Data`] when the window is empty, no book holds a window, or the cap is
    /// below one window.
    pub fn new(lens: &[usize], seq_len: usize, context_cap: u64) -> Result<LanePlan, TaskError> {
        if seq_len == 0 {
            return Err(TaskError::Data(
                "lanes need windows of seq_len >= 1 bytes".into(),
            ));
        }
        let windows: Vec<u64> = lens
            .iter()
            .map(|&l| (l.saturating_sub(1) / seq_len) as u64)
            .collect();
        let per_epoch = windows.iter().sum();
        if per_epoch == 0 {
            return Err(TaskError::Data(format!(
                "no training book holds a window of seq_len + 1 = {} bytes",
                seq_len + 1
            )));
        }
        let windows_per_context = (context_cap / seq_len as u64) as usize;
        if windows_per_context == 0 {
            return Err(TaskError::Data(format!(
                "a context cap of {context_cap} bytes holds no window of {seq_len}"
            )));
        }
        Ok(LanePlan {
            windows,
            per_epoch,
            seq_len,
            windows_per_context,
        })
    }

    /// Windows in one epoch of a lane (every training book once).
    pub fn epoch_windows(&self) -> u64 {
        self.per_epoch
    }

    /// T, the window length.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// (book, window w in the book, whether it starts a context) of lane `lane`'s window `k`
    /// under `seed`: a context starts at a book's first window and every
    /// `windows_per_context` windows after it.
    pub fn window(&self, seed: u64, lane: u64, k: u64) -> (usize, usize, bool) {
        let (epoch, mut j) = (k / self.per_epoch, k % self.per_epoch);
        let mut order: Vec<usize> = (0..self.windows.len()).collect();
        let mut rng = SplitMix64::new(derive(derive(seed, 7, lane), 8, epoch));
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for &book in &order {
            if j < self.windows[book] {
                let w = j as usize;
                return (book, w, w.is_multiple_of(self.windows_per_context));
            }
            j -= self.windows[book];
        }
        unreachable!("j < per_epoch, the sum of the windows")
    }
}
