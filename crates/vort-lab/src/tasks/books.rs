//! Byte-level language modelling on books (docs/DESIGN.md §3, the PG-19 claim), served as a task so
//! the training loop, checkpoints and evaluation are the same as for the synthetic tasks.
//!
//! Tokens are bytes (vocabulary 256), so the cross-entropy in bits is exactly bits per
//! character of the UTF-8 text. Every position is an answer (next-byte prediction); the "lag"
//! of a position is its context length (position in the window + 1), so the report buckets
//! ([`super::CONTEXT_BUCKETS`]) give BPC by context.
//!
//! - Training windows: T + 1 consecutive bytes of a training book, the book drawn with
//!   probability proportional to its number of window starts, the start uniform; a pure
//!   function of (seed, index) like the synthetic tasks, so resume stays exact.
//! - Evaluation windows: the test books cut into consecutive non-overlapping windows, in
//!   manifest order; index i is window i (mod their number).
//! - Validation windows (`train.eval_every`): the validation books, cut the same way, so a
//!   held-out score during training never reads a test byte.
//!
//! Each byte carries the class of the word it belongs to (entity, function word, other; see
//! [`crate::data::lexicon`]): entities feed the router's entity-probe loss and the α analysis.

use std::path::Path;

use super::lanes::LanePlan;
use super::{Sample, Stream, TaskConfig, TaskError};
use crate::data::books::{load_split, Split};
use crate::data::lexicon::{tag_bytes, Lexicon, TokenClass};
use vort::vort_math::rng::{derive, SplitMix64};

/// One book with a class per byte.
#[derive(Debug, Clone)]
pub struct TaggedBook {
    /// Title (from the manifest).
    pub title: String,
    /// The text, byte-level.
    pub bytes: Vec<u8>,
    /// Class of each byte (same length as `bytes`).
    pub class: Vec<TokenClass>,
}

impl TaggedBook {
    /// Tags `bytes` with `lex`.
    pub fn new(title: String, bytes: Vec<u8>, lex: &Lexicon) -> TaggedBook {
        let class = tag_bytes(&bytes, lex);
        TaggedBook {
            title,
            bytes,
            class,
        }
    }
}

/// Training, validation and test books, loaded and tagged once per run.
#[derive(Debug, Clone)]
pub struct BookCorpus {
    train: Vec<TaggedBook>,
    valid: Vec<TaggedBook>,
    test: Vec<TaggedBook>,
}

impl BookCorpus {
    /// Loads the three splits written by `vort data fetch books` into
    /// `cfg.data_dir` (verified against its manifest) and tags them with its lexicon.
    ///
    /// # Errors
    /// [`TaskError::Data`] saying what is missing and how to get it.
    pub fn open(cfg: &TaskConfig) -> Result<BookCorpus, TaskError> {
        let dir = Path::new(cfg.data_dir().unwrap_or_default());
        // the data errors already say which command writes the directory
        let data = |e: crate::data::DataError| TaskError::Data(e.to_string());
        let lex = Lexicon::load(dir).map_err(data)?;
        let load = |split: Split| -> Result<Vec<TaggedBook>, TaskError> {
            Ok(load_split(dir, split)
                .map_err(data)?
                .into_iter()
                .map(|b| TaggedBook::new(b.title, b.bytes, &lex))
                .collect())
        };
        BookCorpus::from_books(
            load(Split::Train)?,
            load(Split::Validation)?,
            load(Split::Test)?,
            cfg.seq_len,
        )
    }

    /// A corpus from tagged books; every split needs at least one book of T + 1 bytes.
    ///
    /// # Errors
    /// [`TaskError::Data`] when a split has no book long enough for one window.
    pub fn from_books(
        train: Vec<TaggedBook>,
        valid: Vec<TaggedBook>,
        test: Vec<TaggedBook>,
        seq_len: usize,
    ) -> Result<BookCorpus, TaskError> {
        for (name, books) in [("train", &train), ("validation", &valid), ("test", &test)] {
            if !books.iter().any(|b| b.bytes.len() > seq_len) {
                return Err(TaskError::Data(format!(
                    "no {name} book has more than seq_len = {seq_len} bytes"
                )));
            }
        }
        Ok(BookCorpus { train, valid, test })
    }

    /// The test books, in manifest order.
    pub fn test_books(&self) -> &[TaggedBook] {
        &self.test
    }

    /// Bytes in the (train, test) splits.
    pub fn sizes(&self) -> (usize, usize) {
        let n = |v: &[TaggedBook]| v.iter().map(|b| b.bytes.len()).sum();
        (n(&self.train), n(&self.test))
    }

    /// Number of non-overlapping test windows of `seq_len + 1` bytes.
    pub fn test_windows(&self, seq_len: usize) -> usize {
        self.test
            .iter()
            .map(|b| b.bytes.len() / (seq_len + 1))
            .sum()
    }

    /// (test book, start byte) of evaluation window `index` (wrapping around).
    fn eval_window(&self, seq_len: usize, index: u64) -> (usize, usize) {
        let lens: Vec<usize> = self.test.iter().map(|b| b.bytes.len()).collect();
        eval_window(&lens, seq_len, index)
    }

    /// (validation book, start byte) of validation window `index` (wrapping around).
    fn valid_window(&self, seq_len: usize, index: u64) -> (usize, usize) {
        let lens: Vec<usize> = self.valid.iter().map(|b| b.bytes.len()).collect();
        eval_window(&lens, seq_len, index)
    }

    /// Number of non-overlapping validation windows of `seq_len + 1` bytes.
    pub fn valid_windows(&self, seq_len: usize) -> usize {
        self.valid
            .iter()
            .map(|b| b.bytes.len() / (seq_len + 1))
            .sum()
    }

    /// What the evaluation of `n_seq` windows scores ([`scored_bytes`]) on these test books.
    pub fn scored_bytes(&self, seq_len: usize, n_seq: usize) -> Vec<(String, Vec<u8>)> {
        let books: Vec<(&str, &[u8])> = self
            .test
            .iter()
            .map(|b| (b.title.as_str(), b.bytes.as_slice()))
            .collect();
        scored_bytes(&books, seq_len, n_seq)
    }

    /// Title of the test book that evaluation window `index` comes from.
    pub fn eval_book(&self, seq_len: usize, index: u64) -> &str {
        &self.test[self.eval_window(seq_len, index).0].title
    }

    /// Title of the validation book that validation window `index` comes from.
    pub fn valid_book(&self, seq_len: usize, index: u64) -> &str {
        &self.valid[self.valid_window(seq_len, index).0].title
    }

    /// Window `index` of `stream` (T = `seq_len`) under `seed`.
    pub fn sample(&self, seq_len: usize, seed: u64, stream: Stream, index: u64) -> Sample {
        let (book, start) = match stream {
            Stream::Train => {
                // book ∝ its window starts, start uniform: every train window equally likely
                let starts: Vec<u64> = self
                    .train
                    .iter()
                    .map(|b| b.bytes.len().saturating_sub(seq_len) as u64)
                    .collect();
                let mut rng = SplitMix64::new(derive(seed, 2, index));
                let mut r = rng.below(starts.iter().sum());
                let mut k = 0;
                while r >= starts[k] {
                    r -= starts[k];
                    k += 1;
                }
                (&self.train[k], r as usize)
            }
            Stream::Eval => {
                let (k, start) = self.eval_window(seq_len, index);
                (&self.test[k], start)
            }
            // the validation books, tiled as the test books are: model selection and early
            // stopping never see a test byte
            Stream::Valid => {
                let (k, start) = self.valid_window(seq_len, index);
                (&self.valid[k], start)
            }
        };
        window(book, start, seq_len)
    }

    /// Window `k` of lane `lane` (T = `seq_len`) under `seed`, for training with the state
    /// carried ([`LanePlan`]): the sample, and whether it starts a new context (a book's
    /// first window, or the first after `context_cap` bytes of the book), where the carried
    /// state must be reset.
    pub fn lane_sample(&self, plan: &LanePlan, seed: u64, lane: u64, k: u64) -> (Sample, bool) {
        let (book, w, fresh) = plan.window(seed, lane, k);
        (
            window(&self.train[book], w * plan.seq_len(), plan.seq_len()),
            fresh,
        )
    }

    /// The lane plan of these training books for windows of `seq_len` and contexts of at most
    /// `context_cap` bytes.
    ///
    /// # Errors
    /// [`TaskError::Data`] when no training book holds a window, or the cap is below one.
    pub fn lane_plan(&self, seq_len: usize, context_cap: u64) -> Result<LanePlan, TaskError> {
        LanePlan::new(
            &self.train.iter().map(|b| b.bytes.len()).collect::<Vec<_>>(),
            seq_len,
            context_cap,
        )
    }
}

/// The sample of `book`'s bytes `start..start + seq_len + 1`: tokens and next-byte targets,
/// every position an answer, the lag its position + 1, and the classes of the input bytes.
fn window(book: &TaggedBook, start: usize, seq_len: usize) -> Sample {
    let win = &book.bytes[start..start + seq_len + 1];
    let cls = &book.class[start..start + seq_len];
    let entity: Vec<bool> = cls.iter().map(|&c| c == TokenClass::Entity).collect();
    Sample {
        tokens: win[..seq_len].iter().map(|&b| u32::from(b)).collect(),
        targets: win[1..].iter().map(|&b| u32::from(b)).collect(),
        mask: vec![true; seq_len],
        lags: (1..=seq_len as u32).collect(),
        memorable: entity.clone(),
        entity,
        function: cls.iter().map(|&c| c == TokenClass::Function).collect(),
    }
}

/// (book, start byte) of evaluation window `index` (wrapping around) over test books of
/// lengths `lens`: consecutive non-overlapping windows of `seq_len + 1` bytes, book by book.
/// Needs at least one window.
fn eval_window(lens: &[usize], seq_len: usize, index: u64) -> (usize, usize) {
    let w = seq_len + 1;
    let n: usize = lens.iter().map(|l| l / w).sum();
    let mut i = (index % n as u64) as usize;
    let mut k = 0;
    while i >= lens[k] / w {
        i -= lens[k] / w;
        k += 1;
    }
    (k, i * w)
}

/// The bytes an evaluation of the first `n_seq` test windows (at most as many as the books
/// hold, as [`crate::train::eval`] caps them) scores, per test book in order: the targets of
/// each window (its bytes after the first, which is only context), its windows concatenated.
/// Books with no scored window are left out. The compressor anchors are measured on these.
pub fn scored_bytes(
    books: &[(&str, &[u8])],
    seq_len: usize,
    n_seq: usize,
) -> Vec<(String, Vec<u8>)> {
    let lens: Vec<usize> = books.iter().map(|b| b.1.len()).collect();
    let n = lens
        .iter()
        .map(|l| l / (seq_len + 1))
        .sum::<usize>()
        .min(n_seq);
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    for index in 0..n as u64 {
        let (k, start) = eval_window(&lens, seq_len, index);
        // the same slice as `BookCorpus::sample`'s targets
        let targets = &books[k].1[start + 1..start + seq_len + 1];
        match out.last_mut() {
            Some((title, bytes)) if title == books[k].0 => bytes.extend_from_slice(targets),
            _ => out.push((books[k].0.to_string(), targets.to_vec())),
        }
    }
    out
}
