//! What a recall experiment measured: each run, each (cell, mixer), the whole report (written
//! as `results.json`).

use serde::{Deserialize, Serialize};

use super::{Preset, Section};
use crate::tasks::TaskConfig;
use crate::train::eval::LagAccuracy;
use crate::train::RunConfig;
use vort::Mixer;

/// One trained run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    /// Seed.
    pub seed: u64,
    /// Peak learning rate.
    pub lr: f64,
    /// Last validation accuracy (the learning-rate choice).
    pub val_accuracy: f64,
    /// Test accuracy over every answer.
    pub accuracy: f64,
    /// Correct test answers.
    pub correct: usize,
    /// Test answers.
    pub answers: usize,
    /// Test accuracy by lag bucket.
    pub buckets: Vec<LagAccuracy>,
    /// Test accuracy in doubling lag bins.
    pub lag_bins: Vec<LagAccuracy>,
    /// Steps trained (fewer than configured when stopped early).
    pub steps: u64,
    /// Mean training tokens/s.
    pub tokens_per_s: f64,
    /// Training tokens seen.
    pub tokens: u64,
    /// Training wall time (s) of the run's last call (its metrics' last `elapsed_s`).
    #[serde(default)]
    pub train_s: f64,
    /// Whether it reached the preset's `learned_accuracy`.
    pub learned: bool,
    /// Mean α on the pair tokens and on the rest (VORT), and a sample of each.
    pub alpha: Option<crate::train::eval::AlphaSample>,
    /// Scores at the cell's extrapolation lengths.
    #[serde(default)]
    pub extrapolation: Vec<Extrapolation>,
    /// The step at which the loss became non-finite (the run is then not evaluated).
    #[serde(default)]
    pub diverged_at: Option<u64>,
}

/// A trained model scored at another sequence length.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Extrapolation {
    /// Sequence length L of the scored sequences.
    pub seq_len: usize,
    /// Sequences scored (a cached score of another count is recomputed).
    #[serde(default)]
    pub examples: usize,
    /// Accuracy over every answer.
    pub accuracy: f64,
    /// Correct answers.
    pub correct: usize,
    /// Answers.
    pub answers: usize,
    /// By lag bucket.
    pub buckets: Vec<LagAccuracy>,
}

/// One (cell, mixer): the sweep and the seeds at the chosen rate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellResult {
    /// Cell name.
    pub cell: String,
    /// Section.
    pub section: Section,
    /// The mixer's name in the preset (its settings are the preset's mixer of this name).
    pub mixer: String,
    /// The mixer's kind.
    pub kind: vort::MixerKind,
    /// The cell's task: its kind, length L and settings (MQAR: pairs K, gap law a, the
    /// training mixture of lengths).
    pub task: TaskConfig,
    /// d_model.
    pub d_model: usize,
    /// Recurrent state of the whole model in floats at length L (softmax: its KV cache).
    pub state_floats: usize,
    /// The sweep on the first seed, in learning-rate order.
    pub sweep: Vec<RunResult>,
    /// The chosen learning rate (best validation accuracy).
    pub best_lr: f64,
    /// Every seed at the chosen rate (the first is the sweep's run).
    pub seeds: Vec<RunResult>,
}

impl CellResult {
    /// The sequence length L the cell tests at.
    pub fn seq_len(&self) -> usize {
        self.task.seq_len
    }

    /// MQAR's pairs K (0 for another task).
    pub fn num_kv_pairs(&self) -> usize {
        self.task.mqar().map_or(0, |m| m.num_kv_pairs)
    }

    /// Mean and sample sd of the test accuracy over seeds.
    pub fn mean_sd(&self) -> (f64, f64) {
        let x: Vec<f64> = self.seeds.iter().map(|r| r.accuracy).collect();
        crate::reproduce::mean_sd(&x)
    }

    /// Where the chosen rate sits among the rates swept. A choice at either end means the
    /// sweep did not bracket an optimum: validation still rose toward that end, so the
    /// rung's own best rate may lie beyond it (the d128 ladder's 3e-3, 1e-2, 3e-2 grid
    /// chose its smallest rate for 8 of 12 rungs, and at d256 the next smaller rate lifted
    /// every rung).
    pub fn sweep_place(&self) -> SweepPlace {
        let lrs = self.sweep.iter().map(|r| r.lr);
        let (lo, hi) = lrs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), lr| {
            (lo.min(lr), hi.max(lr))
        });
        if self.sweep.len() < 2 {
            SweepPlace::OneRate
        } else if self.best_lr <= lo {
            SweepPlace::Smallest
        } else if self.best_lr >= hi {
            SweepPlace::Largest
        } else {
            SweepPlace::Inside
        }
    }
}

/// Where a sweep's chosen rate sits among the rates it swept ([`CellResult::sweep_place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepPlace {
    /// One rate ran (or none): nothing was swept.
    OneRate,
    /// The smallest rate swept: the optimum may lie below it.
    Smallest,
    /// The largest rate swept: the optimum may lie above it.
    Largest,
    /// Between two rates swept: the sweep brackets it.
    Inside,
}

impl SweepPlace {
    /// "one rate", "the smallest rate swept", "the largest rate swept"; None when bracketed.
    pub fn unbracketed(self) -> Option<&'static str> {
        match self {
            Self::OneRate => Some("one rate"),
            Self::Smallest => Some("the smallest rate swept"),
            Self::Largest => Some("the largest rate swept"),
            Self::Inside => None,
        }
    }
}

/// The whole experiment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecallReport {
    /// The preset.
    pub preset: Preset,
    /// Every (cell, mixer).
    pub cells: Vec<CellResult>,
    /// Whether softmax attention passed the gate (None: no gate cell).
    pub gate_passed: Option<bool>,
    /// Wall time of this call (s).
    pub wall_s: f64,
    /// Runs reused from an earlier call.
    pub reused: usize,
    /// (cell, mixer) pairs left out because a run of theirs is not finished (a report
    /// written without training, `--report-only`): "cell / mixer (first missing run)".
    #[serde(default)]
    pub pending: Vec<String>,
}

impl RecallReport {
    /// The task of the preset's runs: MQAR (`vort reproduce recall`) or entity label copy
    /// (`vort reproduce exp2`).
    pub fn task_kind(&self) -> crate::tasks::TaskKind {
        self.preset.task_kind()
    }

    /// The paper's claim the report's lag cells measure (its numbers at lags > 1000).
    pub fn claim(&self) -> crate::reproduce::paper::Claim {
        crate::reproduce::paper::Claim::of_task(self.task_kind())
            .unwrap_or(crate::reproduce::paper::Claim::Recall)
    }
}

/// Floats of the recurrent state of `cfg`'s model at sequence length `l`: per layer and head,
/// N nodes × F features × (head_dim + 1) (the numerator and the normaliser); softmax keeps
/// keys and values of every token (of the window).
pub fn state_floats(cfg: &RunConfig, nodes: usize) -> usize {
    let m = &cfg.model;
    let l = cfg.task.seq_len;
    let per_head = match m.mixer {
        Mixer::Softmax { window } => {
            let kept = if window > 0 { window.min(l) } else { l };
            2 * kept * m.head_dim
        }
        _ => {
            let f = m.feature_map.dim(m.head_dim, m.features);
            nodes * f * (m.head_dim + 1)
        }
    };
    m.layers * m.heads * per_head
}

impl RunResult {
    /// The result of a run that diverged at `step`: no accuracy, no answers.
    pub(super) fn diverged(seed: u64, lr: f64, step: u64, c: &RunConfig) -> RunResult {
        RunResult {
            seed,
            lr,
            val_accuracy: f64::NAN,
            accuracy: 0.0,
            correct: 0,
            answers: 0,
            buckets: Vec::new(),
            lag_bins: Vec::new(),
            steps: step,
            tokens_per_s: f64::NAN,
            tokens: step * (c.train.batch_size * c.task.seq_len) as u64,
            train_s: 0.0,
            learned: false,
            alpha: None,
            extrapolation: Vec::new(),
            diverged_at: Some(step),
        }
    }
}
