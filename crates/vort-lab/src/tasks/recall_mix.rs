//! Synthetic recall windows mixed into the books training batches (issue #40 item 1): byte
//! windows whose later part can only be predicted by retrieving an earlier part, so that the
//! training signal asks for the copying that books-d256's models never learned (40 random
//! letters repeated 20 times cost ~9 bits a byte on the 20th copy).
//!
//! ```toml
//! [train.recall_mix]
//! share = 0.25          # the chance that a training row is a recall window
//! kind = "copy"         # copy | pairs
//! min_period = 16       # copy: the repeated string's length, log-uniform on
//! max_period = 1024     #   [min_period, max_period]
//! records = 32          # pairs: distinct records (default: as many as fill half a window)
//! ```
//!
//! - **copy**: P random lowercase letters repeated to fill the window (the first copy is
//!   noise, every later byte is a copy from P bytes back).
//! - **pairs** (Zoology's MQAR on bytes): `key=value ` records of three random letters each
//!   fill the first half; the second half lists the same records in a random order, so each
//!   value is predictable from its key's earlier record. With `records = K` the window holds
//!   K distinct records: the K in order, then shuffled passes over the same K until the
//!   window is full (MQAR's K key–value pairs and many queries; a 64 x 64 state per head
//!   cannot hold the 512 records that fill half an 8192-byte window).
//!
//! Every byte is a target, as in books. Row r of training step s is a recall window with
//! chance `share`, decided and drawn from (seed, s, r) alone (so at batch size 1, a share of
//! the steps); the other rows are the books rows they were, so a resumed run sees exactly the
//! data an uninterrupted one would. Validation and test stay books.
//!
//! With the state carried (`train.carry_state`) the mix goes by step, not by row: step s is a
//! recall step with chance `share` (row 0's draw), and then every row is a recall window read
//! from a copy of its lane's carried state (a repeat that follows book text, as in a book; from
//! an empty state a model learns that an empty state means a recall window), while the lanes
//! through the books wait: their carried state and their place in the books are those of the
//! last books step, so a lane reads its book without a gap. Lane window k is read at the
//! (k+1)-th books step ([`RecallMix::book_steps_before`]), still a pure function of (seed,
//! step).

use serde::{Deserialize, Serialize};

use super::{Batch, Sample};
use vort::vort_math::rng::{derive, SplitMix64};

/// Which recall windows ([`RecallMix::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RecallWindow {
    /// A random string repeated.
    #[default]
    Copy,
    /// Key–value records, then the same records shuffled (MQAR on bytes).
    Pairs,
}

/// The `[train.recall_mix]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecallMix {
    /// The chance that a training row is a recall window, in (0, 1).
    pub share: f64,
    /// Which windows.
    #[serde(default)]
    pub kind: RecallWindow,
    /// Copy: the shortest repeated string.
    #[serde(default = "default_min_period")]
    pub min_period: usize,
    /// Copy: the longest repeated string.
    #[serde(default = "default_max_period")]
    pub max_period: usize,
    /// Pairs: the distinct records of a window (None: as many as fill its first half).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<usize>,
}

fn default_min_period() -> usize {
    16
}
fn default_max_period() -> usize {
    1024
}

/// Stream number of the recall windows' generator (the tasks' streams are 0-2).
const RECALL_STREAM: u64 = 0x7265_6361_6c6c; // "recall"

/// Bytes of one `key=value ` record.
const RECORD: usize = 8;

impl RecallMix {
    /// Checks the table against windows of `seq_len` bytes.
    ///
    /// # Errors
    /// The field out of its domain, named.
    pub fn validate(&self, seq_len: usize) -> Result<(), String> {
        if !(self.share > 0.0 && self.share < 1.0) {
            return Err(format!(
                "train.recall_mix.share = {:?} must be in (0, 1)",
                self.share
            ));
        }
        match self.kind {
            RecallWindow::Copy => {
                if self.min_period < 1 || self.min_period > self.max_period {
                    return Err(format!(
                        "train.recall_mix: min_period = {} must be in [1, max_period = {}]",
                        self.min_period, self.max_period
                    ));
                }
                if 2 * self.max_period > seq_len {
                    return Err(format!(
                        "train.recall_mix.max_period = {} leaves no second copy in a window \
                         of seq_len = {seq_len} (at most seq_len / 2)",
                        self.max_period
                    ));
                }
            }
            RecallWindow::Pairs => {
                if seq_len < 4 * RECORD {
                    return Err(format!(
                        "train.recall_mix: pairs need seq_len >= {} (two records a half)",
                        4 * RECORD
                    ));
                }
                if let Some(k) = self.records {
                    if k < 1 || 2 * k * RECORD > seq_len + 1 {
                        return Err(format!(
                            "train.recall_mix.records = {k} must be in [1, {}] (every record \
                             seen twice in a window of seq_len = {seq_len})",
                            (seq_len + 1) / (2 * RECORD)
                        ));
                    }
                }
            }
        }
        if self.records.is_some() && self.kind != RecallWindow::Pairs {
            return Err("train.recall_mix.records applies to kind = \"pairs\" only".into());
        }
        Ok(())
    }

    /// The generator of row `row` at training step `step`.
    fn rng(seed: u64, step: u64, row: usize) -> SplitMix64 {
        SplitMix64::new(derive(derive(seed, RECALL_STREAM, step), 0, row as u64))
    }

    /// Whether row `row` of training step `step` is a recall window (chance `share`).
    pub fn is_recall(&self, seed: u64, step: u64, row: usize) -> bool {
        Self::rng(seed, step, row).unif() < self.share
    }

    /// Whether training step `step` is a recall step of a run that carries its state (row
    /// 0's draw of [`RecallMix::is_recall`]: at batch size 1, the steps the mix picks without
    /// the state carried).
    pub fn is_recall_step(&self, seed: u64, step: u64) -> bool {
        self.is_recall(seed, step, 0)
    }

    /// Books steps (those [`RecallMix::is_recall_step`] does not pick) before step `step`:
    /// the window of its lane that each row reads at a books step.
    pub fn book_steps_before(&self, seed: u64, step: u64) -> u64 {
        (0..step).filter(|&s| !self.is_recall_step(seed, s)).count() as u64
    }

    /// The batch of recall step `step`: row r is [`RecallMix::window`] of (seed, step, r).
    pub fn recall_batch(&self, seq_len: usize, seed: u64, step: u64, b: usize) -> Batch {
        let rows: Vec<Sample> = (0..b)
            .map(|r| self.window(seq_len, seed, step, r))
            .collect();
        Batch::from_samples(&rows)
    }

    /// Rows of training batch `step` (of `b`) that are recall windows, with the state carried
    /// or not: the count the metrics log.
    pub fn recall_rows(&self, seed: u64, step: u64, b: usize, carried: bool) -> usize {
        match carried {
            true if self.is_recall_step(seed, step) => b,
            true => 0,
            false => (0..b).filter(|&r| self.is_recall(seed, step, r)).count(),
        }
    }

    /// The recall window of row `row` at training step `step` (`seq_len` tokens, the
    /// targets the next bytes), a pure function of (seed, step, row).
    pub fn window(&self, seq_len: usize, seed: u64, step: u64, row: usize) -> Sample {
        let mut rng = Self::rng(seed, step, row);
        rng.unif(); // the draw of `is_recall`
        let bytes = match self.kind {
            RecallWindow::Copy => self.copy_bytes(&mut rng, seq_len + 1),
            RecallWindow::Pairs => match self.records {
                None => pairs_bytes(&mut rng, seq_len + 1),
                Some(k) => repeated_pairs_bytes(&mut rng, seq_len + 1, k),
            },
        };
        Sample {
            tokens: bytes[..seq_len].iter().map(|&b| u32::from(b)).collect(),
            targets: bytes[1..].iter().map(|&b| u32::from(b)).collect(),
            mask: vec![true; seq_len],
            lags: (1..=seq_len as u32).collect(),
            entity: vec![false; seq_len],
            memorable: vec![false; seq_len],
            function: vec![false; seq_len],
        }
    }

    /// `n` bytes: a string of P random lowercase letters repeated, P log-uniform.
    fn copy_bytes(&self, rng: &mut SplitMix64, n: usize) -> Vec<u8> {
        let (lo, hi) = (self.min_period as f64, self.max_period as f64);
        let p = ((lo.ln() + rng.unif() * (hi.ln() - lo.ln())).exp().round() as usize)
            .clamp(self.min_period, self.max_period);
        let s: Vec<u8> = (0..p).map(|_| letter(rng)).collect();
        (0..n).map(|i| s[i % p]).collect()
    }

    /// Replaces the rows of training batch `step` that [`RecallMix::is_recall`] picks by
    /// recall windows.
    pub fn mix_into(&self, batch: &mut Batch, seed: u64, step: u64) {
        let t = batch.t;
        for row in (0..batch.b).filter(|&r| self.is_recall(seed, step, r)) {
            let w = self.window(t, seed, step, row);
            let at = row * t..(row + 1) * t;
            batch.tokens[at.clone()].copy_from_slice(&w.tokens);
            batch.targets[at.clone()].copy_from_slice(&w.targets);
            batch.mask[at.clone()].copy_from_slice(&w.mask);
            batch.lags[at.clone()].copy_from_slice(&w.lags);
            batch.entity[at.clone()].copy_from_slice(&w.entity);
            batch.memorable[at.clone()].copy_from_slice(&w.memorable);
            batch.function[at].copy_from_slice(&w.function);
        }
    }
}

fn letter(rng: &mut SplitMix64) -> u8 {
    b'a' + rng.below(26) as u8
}

/// One record: three random letters, `=`, three more, a space.
fn record(rng: &mut SplitMix64) -> [u8; RECORD] {
    let mut r = [0, 0, 0, b'=', 0, 0, 0, b' '];
    for i in [0, 1, 2, 4, 5, 6] {
        r[i] = letter(rng);
    }
    r
}

/// A uniform permutation of 0..k (Fisher–Yates).
fn permutation(rng: &mut SplitMix64, k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..k).collect();
    for i in (1..k).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    order
}

/// `n` bytes: `k` records in order, then shuffled passes over the same `k` until `n` bytes
/// are written (the last record cut at the window's end).
fn repeated_pairs_bytes(rng: &mut SplitMix64, n: usize, k: usize) -> Vec<u8> {
    let records: Vec<[u8; RECORD]> = (0..k).map(|_| record(rng)).collect();
    let mut out: Vec<u8> = records.concat();
    while out.len() < n {
        for i in permutation(rng, k) {
            out.extend_from_slice(&records[i]);
        }
    }
    out.truncate(n);
    out
}

/// `n` bytes: `key=value ` records (three letters each) filling the first half, the same
/// records shuffled in the second, spaces after the last whole record of each half.
fn pairs_bytes(rng: &mut SplitMix64, n: usize) -> Vec<u8> {
    let half = n / 2;
    let k = half / RECORD;
    let records: Vec<[u8; RECORD]> = (0..k).map(|_| record(rng)).collect();
    let order = permutation(rng, k);
    let mut out = vec![b' '; n];
    for (i, r) in records.iter().enumerate() {
        out[i * RECORD..(i + 1) * RECORD].copy_from_slice(r);
    }
    for (j, &i) in order.iter().enumerate() {
        let at = half + j * RECORD;
        out[at..at + RECORD].copy_from_slice(&records[i]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(kind: RecallWindow) -> RecallMix {
        RecallMix {
            share: 0.25,
            kind,
            min_period: 16,
            max_period: 64,
            records: None,
        }
    }

    /// A copy window repeats its string: every byte past the first period equals the byte P
    /// back, for some P in [min, max]; the targets are the next bytes.
    #[test]
    fn copy_windows_repeat_a_string_and_are_pure_functions() {
        let m = mix(RecallWindow::Copy);
        for (step, row) in [(0, 0), (3, 1), (1000, 5)] {
            let w = m.window(256, 9, step, row);
            assert_eq!(w, m.window(256, 9, step, row));
            assert_ne!(w.tokens, m.window(256, 9, step + 1, row).tokens);
            assert_eq!(&w.tokens[1..], &w.targets[..255]);
            let p = (16..=64)
                .find(|&p| (p..256).all(|i| w.tokens[i] == w.tokens[i - p]))
                .expect("a period in [16, 64]");
            assert!(w.tokens[..p].iter().all(|&b| (97..123).contains(&b)));
            assert!(w.mask.iter().all(|&x| x));
        }
    }

    /// A pairs window's second half holds the first half's records, permuted.
    #[test]
    fn pairs_windows_repeat_their_records_shuffled() {
        let w = mix(RecallWindow::Pairs).window(255, 4, 2, 0);
        let bytes: Vec<u8> = w.tokens.iter().map(|&b| b as u8).collect();
        let half = 256 / 2;
        // the 256 bytes: the tokens, then the last target
        let mut all = bytes.clone();
        all.push(w.targets[254] as u8);
        let records = |from: usize| -> Vec<Vec<u8>> {
            let mut v: Vec<Vec<u8>> = (0..half / RECORD)
                .map(|i| all[from + i * RECORD..from + (i + 1) * RECORD].to_vec())
                .collect();
            v.sort();
            v
        };
        let first = records(0);
        assert_eq!(first.len(), 16);
        assert!(first
            .iter()
            .all(|r| r[3] == b'=' && r[7] == b' ' && r[..3].iter().all(u8::is_ascii_lowercase)));
        assert_eq!(first, records(half));
        assert_ne!(all[..half], all[half..], "the second half is shuffled");
    }

    /// With `records = K` a pairs window introduces K distinct records, then repeats only
    /// them, each pass a permutation; `records` is checked against the window.
    #[test]
    fn pairs_windows_with_few_records_repeat_only_those() {
        let m = RecallMix {
            records: Some(5),
            ..mix(RecallWindow::Pairs)
        };
        let w = m.window(203, 4, 2, 0);
        let mut all: Vec<u8> = w.tokens.iter().map(|&b| b as u8).collect();
        all.push(w.targets[202] as u8);
        assert_eq!(all.len(), 204);
        let recs: Vec<&[u8]> = all.chunks(RECORD).collect();
        let mut first: Vec<&[u8]> = recs[..5].to_vec();
        first.sort();
        first.dedup();
        assert_eq!(first.len(), 5, "five distinct records");
        for pass in recs[5..]
            .chunks(5)
            .filter(|c| c.len() == 5 && c[4].len() == RECORD)
        {
            let mut p = pass.to_vec();
            p.sort();
            assert_eq!(p, first, "every pass is a permutation of the five");
        }
        let tail = recs.last().unwrap();
        assert!(
            first.iter().any(|r| r.starts_with(tail)),
            "the cut record is one of them"
        );
        assert!(m.validate(80).is_ok() && m.validate(78).is_err());
        let copy = RecallMix {
            records: Some(5),
            ..mix(RecallWindow::Copy)
        };
        assert!(copy.validate(256).is_err(), "records is for pairs only");
    }

    /// The rows `is_recall` picks (about `share` of them) are replaced, the rest untouched;
    /// bad tables are refused.
    #[test]
    fn the_mix_replaces_the_rows_it_picks_and_checks_its_table() {
        let m = mix(RecallWindow::Copy);
        let picked = (0..4000u64).filter(|&s| m.is_recall(1, s, 0)).count();
        assert!(
            (850..1150).contains(&picked),
            "{picked} of 4000 at share 0.25"
        );
        let t = 128;
        let orig = Batch::from_samples(&vec![
            Sample {
                tokens: vec![7; t],
                targets: vec![7; t],
                mask: vec![true; t],
                lags: (1..=t as u32).collect(),
                entity: vec![true; t],
                memorable: vec![true; t],
                function: vec![true; t],
            };
            8
        ]);
        let mut b = orig.clone();
        let step = (0..)
            .find(|&s| (0..8).filter(|&r| m.is_recall(1, s, r)).count() == 2)
            .unwrap();
        m.mix_into(&mut b, 1, step);
        for r in 0..8 {
            let row = r * t..(r + 1) * t;
            if m.is_recall(1, step, r) {
                assert_eq!(&b.tokens[row.clone()], &m.window(t, 1, step, r).tokens[..]);
                assert!(!b.entity[row].iter().any(|&x| x));
            } else {
                assert_eq!(&b.tokens[row.clone()], &orig.tokens[row.clone()]);
                assert_eq!(&b.entity[row.clone()], &orig.entity[row]);
            }
        }
        for bad in [
            RecallMix {
                share: 0.0,
                ..m.clone()
            },
            RecallMix {
                share: 1.0,
                ..m.clone()
            },
            RecallMix {
                min_period: 0,
                ..m.clone()
            },
            RecallMix {
                min_period: 65,
                ..m.clone()
            },
            RecallMix {
                max_period: 100,
                ..m.clone()
            },
        ] {
            assert!(bad.validate(128).is_err(), "{bad:?}");
        }
        assert!(m.validate(128).is_ok());
        let pairs = mix(RecallWindow::Pairs);
        assert!(pairs.validate(31).is_err() && pairs.validate(32).is_ok());
    }
}
