//! Held-out evaluation: accuracy at answer positions by lag bucket (1-100, 101-1000, >1000)
//! and in doubling lag bins (for accuracy-against-lag plots), plus the learned orders α of a
//! VORT model on memorable tokens (keys, values, entities, labels) and on the rest.

use std::path::Path;

use candle_core::{Device, D};
use candle_nn::VarMap;
use serde::{Deserialize, Serialize};

use super::{
    checkpoint, losses, tokens_tensor, RunConfig, TrainError, Trainer, CHECKPOINT_FILE,
    CONFIG_FILE, EVAL_FILE,
};
use crate::model::Model;
use crate::tasks::{bucket_of, Stream, BUCKETS};

/// Most α values kept per class in [`AlphaSample`].
pub const ALPHA_SAMPLES: usize = 20_000;

/// Accuracy over a lag range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LagAccuracy {
    /// Label ("1-100", ...).
    pub label: String,
    /// Smallest lag (inclusive).
    pub lo: usize,
    /// Largest lag (inclusive).
    pub hi: usize,
    /// Answers in range.
    pub n: usize,
    /// Correct answers.
    pub correct: usize,
    /// correct / n (NaN when n = 0).
    pub accuracy: f64,
}

/// Learned orders α of the VORT blocks (all layers and heads) on the evaluation set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlphaSample {
    /// Mean α on memorable tokens (keys, values, entities, labels).
    pub mean_memorable: f64,
    /// Mean α on the other tokens (filler, query markers, repeats).
    pub mean_other: f64,
    /// Up to [`ALPHA_SAMPLES`] α values on memorable tokens.
    pub memorable: Vec<f32>,
    /// Up to [`ALPHA_SAMPLES`] α values on the other tokens.
    pub other: Vec<f32>,
}

/// Result of [`evaluate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalResult {
    /// Task name.
    pub task: String,
    /// Memory kind.
    pub memory: String,
    /// Run seed.
    pub seed: u64,
    /// Training steps of the evaluated parameters.
    pub step: u64,
    /// Held-out sequences.
    pub sequences: usize,
    /// Overall accuracy at answer positions.
    pub accuracy: f64,
    /// Mean answer cross-entropy.
    pub loss: f64,
    /// Accuracy by report bucket ([`BUCKETS`]).
    pub buckets: Vec<LagAccuracy>,
    /// Accuracy in doubling lag bins [1,1], [2,3], [4,7], ...
    pub lag_bins: Vec<LagAccuracy>,
    /// Orders α (VORT only).
    pub alpha: Option<AlphaSample>,
}

impl EvalResult {
    /// Accuracy at lags > 1000 (the headline number).
    pub fn long_lag_accuracy(&self) -> f64 {
        self.buckets.last().map_or(f64::NAN, |b| b.accuracy)
    }
}

/// Evaluates `model` on `train.eval_sequences` held-out sequences.
///
/// # Errors
/// candle errors.
pub fn evaluate(
    model: &Model,
    cfg: &RunConfig,
    step: u64,
    device: &Device,
) -> Result<EvalResult, TrainError> {
    let n_seq = cfg.train.eval_sequences;
    let bs = cfg.train.batch_size.max(1);
    let max_lag = cfg.task.max_lag;
    let mut bins: Vec<(usize, usize)> = Vec::new();
    let mut lo = 1;
    while lo <= max_lag {
        bins.push((lo, (2 * lo - 1).min(max_lag)));
        lo *= 2;
    }
    let mut bin_counts = vec![(0usize, 0usize); bins.len()];
    let mut bucket_counts = [(0usize, 0usize); BUCKETS.len()];
    let (mut loss_sum, mut answers) = (0.0, 0usize);
    let (mut mem, mut oth) = (Vec::new(), Vec::new());
    let (mut mem_sum, mut mem_n, mut oth_sum, mut oth_n) = (0.0, 0usize, 0.0, 0usize);
    let mut done = 0;
    let mut batch_idx = 0u64;
    while done < n_seq {
        let b = bs.min(n_seq - done);
        let samples: Vec<_> = (0..b)
            .map(|i| cfg.task.sample(cfg.seed, Stream::Eval, (done + i) as u64))
            .collect();
        let batch = crate::tasks::Batch::from_samples(&samples);
        let out = model.forward(&tokens_tensor(&batch, device)?)?;
        let l = losses(model, cfg, &batch, &out, device)?;
        let pos = batch.answer_positions();
        let logits = model.logits_at(&out.hidden, &pos)?;
        let pred: Vec<u32> = logits.argmax(D::Minus1)?.to_vec1()?;
        loss_sum += l
            .task
            .to_dtype(candle_core::DType::F64)?
            .to_scalar::<f64>()?
            * pos.len() as f64;
        answers += pos.len();
        for (k, &p) in pos.iter().enumerate() {
            let lag = batch.lags[p] as usize;
            let ok = usize::from(pred[k] == batch.targets[p]);
            let bk = bucket_of(lag);
            bucket_counts[bk].0 += 1;
            bucket_counts[bk].1 += ok;
            if let Some(i) = bins.iter().position(|&(lo, hi)| lag >= lo && lag <= hi) {
                bin_counts[i].0 += 1;
                bin_counts[i].1 += ok;
            }
        }
        let t = batch.t;
        for a in &out.alphas {
            let (bb, h, tt) = a.dims3()?;
            let v: Vec<f32> = a.flatten_all()?.to_vec1()?;
            for i in 0..bb {
                for hh in 0..h {
                    for j in 0..tt {
                        let x = v[(i * h + hh) * tt + j];
                        if batch.memorable[i * t + j] {
                            mem_sum += x as f64;
                            mem_n += 1;
                            if mem.len() < ALPHA_SAMPLES {
                                mem.push(x);
                            }
                        } else {
                            oth_sum += x as f64;
                            oth_n += 1;
                            // keep a spread-out subset of the (many) other tokens
                            if oth.len() < ALPHA_SAMPLES && (j + 7 * hh) % 16 == 0 {
                                oth.push(x);
                            }
                        }
                    }
                }
            }
        }
        done += b;
        batch_idx += 1;
    }
    let _ = batch_idx;
    let acc = |(n, c): (usize, usize)| {
        if n == 0 {
            f64::NAN
        } else {
            c as f64 / n as f64
        }
    };
    let buckets = BUCKETS
        .iter()
        .zip(bucket_counts)
        .map(|(&(label, lo, hi), nc)| LagAccuracy {
            label: label.into(),
            lo,
            hi: hi.min(max_lag),
            n: nc.0,
            correct: nc.1,
            accuracy: acc(nc),
        })
        .collect();
    let lag_bins = bins
        .iter()
        .zip(&bin_counts)
        .map(|(&(lo, hi), &nc)| LagAccuracy {
            label: format!("{lo}-{hi}"),
            lo,
            hi,
            n: nc.0,
            correct: nc.1,
            accuracy: acc(nc),
        })
        .collect();
    let total_correct: usize = bucket_counts.iter().map(|x| x.1).sum();
    Ok(EvalResult {
        task: cfg.task.kind.name().into(),
        memory: cfg.model.memory.name().into(),
        seed: cfg.seed,
        step,
        sequences: n_seq,
        accuracy: acc((answers, total_correct)),
        loss: loss_sum / answers.max(1) as f64,
        buckets,
        lag_bins,
        alpha: if mem_n + oth_n > 0 {
            Some(AlphaSample {
                mean_memorable: mem_sum / mem_n.max(1) as f64,
                mean_other: oth_sum / oth_n.max(1) as f64,
                memorable: mem,
                other: oth,
            })
        } else {
            None
        },
    })
}

/// Writes an evaluation as pretty JSON (atomically).
///
/// # Errors
/// I/O or serialisation errors.
pub fn write(res: &EvalResult, path: &Path) -> Result<(), TrainError> {
    let text =
        serde_json::to_string_pretty(res).map_err(|e| TrainError::Serialise(e.to_string()))?;
    checkpoint::write_atomic(path, text.as_bytes())
}

/// Evaluates the run in `run_dir` (its config.toml and latest checkpoint) and writes
/// `eval.json` there.
///
/// # Errors
/// Missing or invalid config, missing, corrupt or mismatched checkpoint.
pub fn run(run_dir: &Path) -> Result<EvalResult, TrainError> {
    let cfg = RunConfig::load(&run_dir.join(CONFIG_FILE))?;
    let dev = super::device();
    let mut tr = Trainer::new(&cfg, &dev)?;
    let ck_path = run_dir.join(CHECKPOINT_FILE);
    let ck = checkpoint::Checkpoint::load(&ck_path)?;
    tr.restore(&ck, &ck_path)?;
    let res = evaluate(&tr.model, &cfg, tr.step, &dev)?;
    write(&res, &run_dir.join(EVAL_FILE))?;
    Ok(res)
}

/// Loads only the parameters of a run into a fresh model (for inspection).
///
/// # Errors
/// As [`run`].
pub fn load_model(run_dir: &Path) -> Result<(RunConfig, Model, VarMap), TrainError> {
    let cfg = RunConfig::load(&run_dir.join(CONFIG_FILE))?;
    let dev = super::device();
    let mut tr = Trainer::new(&cfg, &dev)?;
    let ck_path = run_dir.join(CHECKPOINT_FILE);
    tr.restore(&checkpoint::Checkpoint::load(&ck_path)?, &ck_path)?;
    Ok((cfg, tr.model, tr.vm))
}
