//! RULER's metric on a trained model: `string_match_all` (NVIDIA/RULER
//! `scripts/eval/synthetic/constants.py`: per sample, the share of its reference items found
//! in the prediction, averaged over samples, in percent) for one task at one length, and by
//! the needle's depth. The prediction is greedy decoding under teacher forcing: an item is
//! found when each of its bytes is the model's most likely next byte ([`crate::tasks::ruler`]).

use candle_core::{Device, D};
use serde::{Deserialize, Serialize};
use vort::model::Model;
use vort::vort_math::rng::{derive, SplitMix64};

use super::eval::answer_logits;
use super::{RunConfig, TrainError};
use crate::tasks::ruler::{self, RulerKind, RulerSample};
use crate::tasks::Batch;

/// Depth bins of the heat map: the needle's place in the context, in tenths.
pub const DEPTH_BINS: usize = 10;

/// `string_match_all` of one task at one length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RulerScore {
    /// The task.
    pub task: RulerKind,
    /// Sequence length (bytes).
    pub seq_len: usize,
    /// Samples scored.
    pub samples: usize,
    /// Reference items over all samples, and how many were found.
    pub items: usize,
    /// Items found.
    pub found: usize,
    /// RULER's score: the mean over samples of (items found / items), percent.
    pub score: f64,
    /// (samples, score %) by depth tenth of the (first) needle (0 samples: no score); empty
    /// for fwe (no needle).
    pub by_depth: Vec<(usize, f64)>,
}

/// The share of `refs` (answer items, as byte positions of the sequence) whose every byte was
/// predicted: `correct(p)` tells whether the byte at `p` was the most likely next byte at
/// `p - 1`.
pub fn string_match_all(
    refs: &[std::ops::Range<usize>],
    correct: impl Fn(usize) -> bool,
) -> (usize, f64) {
    let found = refs
        .iter()
        .filter(|r| (r.start..r.end).all(&correct))
        .count();
    (found, found as f64 / refs.len().max(1) as f64)
}

/// Sample `index` of `kind` at `seq_len` bytes for the evaluation of a run with `seed`: its
/// own stream of the RULER tasks (3 + the task's place), apart from training's mixture.
pub fn sample(kind: RulerKind, seq_len: usize, seed: u64, index: u64) -> Option<RulerSample> {
    let task = RulerKind::ALL.iter().position(|&k| k == kind).unwrap_or(0) as u64;
    let mut rng = SplitMix64::new(derive(seed, 3 + task, index));
    ruler::generate(kind, seq_len, &mut rng)
}

/// Scores `model` on `n` samples of `kind` at `seq_len` bytes, in one pass per batch or
/// streamed in pieces of `piece` bytes with the state carried (lengths past training).
///
/// # Errors
/// [`TrainError::Flag`] when the task does not fit `seq_len`; candle errors.
pub fn score(
    model: &Model,
    cfg: &RunConfig,
    (kind, seq_len, n): (RulerKind, usize, usize),
    piece: Option<usize>,
    device: &Device,
) -> Result<RulerScore, TrainError> {
    let bs = cfg.train.eval_batch().max(1);
    let (mut items, mut found, mut total) = (0usize, 0usize, 0.0f64);
    let mut depth = vec![(0usize, 0.0f64); DEPTH_BINS];
    let mut done = 0;
    while done < n {
        let b = bs.min(n - done);
        let drawn: Option<Vec<RulerSample>> = (0..b)
            .map(|i| sample(kind, seq_len, cfg.seed, (done + i) as u64))
            .collect();
        let drawn = drawn.ok_or_else(|| {
            TrainError::Flag(format!(
                "{} does not fit in {seq_len} bytes (at least {})",
                kind.name(),
                kind.min_len()
            ))
        })?;
        let samples: Vec<_> = drawn.iter().map(|r| r.sample.clone()).collect();
        let batch = Batch::from_samples(&samples);
        let pos = batch.answer_positions();
        let (logits, _) = answer_logits(model, &batch, &pos, piece, device)?;
        let pred: Vec<u32> = logits.argmax(D::Minus1)?.to_vec1()?;
        // flat position of each answer -> whether its prediction was right
        let right: std::collections::HashMap<usize, bool> = pos
            .iter()
            .zip(&pred)
            .map(|(&p, &x)| (p, x == batch.targets[p]))
            .collect();
        for (i, r) in drawn.iter().enumerate() {
            let correct = |at: usize| right.get(&(i * seq_len + at - 1)).copied() == Some(true);
            let (k, share) = string_match_all(&r.refs, correct);
            items += r.refs.len();
            found += k;
            total += share;
            if r.depth.is_finite() {
                let bin = ((r.depth * DEPTH_BINS as f64) as usize).min(DEPTH_BINS - 1);
                depth[bin].0 += 1;
                depth[bin].1 += share;
            }
        }
        done += b;
    }
    Ok(RulerScore {
        task: kind,
        seq_len,
        samples: n,
        items,
        found,
        score: 100.0 * total / n.max(1) as f64,
        by_depth: if depth.iter().all(|d| d.0 == 0) {
            Vec::new()
        } else {
            depth
                .into_iter()
                .map(|(k, s)| (k, if k == 0 { 0.0 } else { 100.0 * s / k as f64 }))
                .collect()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RULER's `string_match_all`: per sample, the share of its items found.
    #[test]
    fn an_item_counts_only_when_every_byte_is_predicted() {
        let refs = [10..13, 14..17, 18..21];
        assert_eq!(string_match_all(&refs, |_| true), (3, 1.0));
        assert_eq!(string_match_all(&refs, |_| false), (0, 0.0));
        // one wrong byte loses its item only
        let (k, s) = string_match_all(&refs, |p| p != 15);
        assert_eq!(k, 2);
        assert!((s - 2.0 / 3.0).abs() < 1e-15);
    }
}
