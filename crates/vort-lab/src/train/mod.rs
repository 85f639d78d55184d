//! The training loop: AdamW with warm-up + cosine schedule and global-norm clipping, fixed
//! seeds, metrics to JSON lines, a progress bar, atomic safetensors checkpoints and an exact
//! resume.
//!
//! A run directory ([`RunDir`], which owns the file names and the operations on them) holds
//! `config.toml` (the resolved config), `metrics.jsonl` (one JSON object per logged step),
//! `checkpoint.safetensors` (latest checkpoint, see [`checkpoint`]) and `eval.json` (held-out
//! accuracy by lag, written at the end).
//!
//! Exactness of resume: batch `s` is a pure function of (seed, s)
//! ([`crate::tasks::Source::batch`]), the model has no dropout, and the checkpoint holds the
//! parameters, both AdamW moments and the step counters, so a run resumed from step k computes
//! bit-for-bit what the uninterrupted run computed after step k (tested). A killed run loses at
//! most `checkpoint_every` steps.
//!
//! One job per file, all re-exported here: `error.rs` ([`TrainError`]), `config.rs`
//! ([`RunConfig`], [`TrainConfig`]), `trainer.rs` (the losses, the optimizer, one
//! [`optimizer_step`], [`Trainer`]), `run.rs` (the loop, the lock, resume, extension and
//! early-stop adoption), `run_dir.rs` ([`RunDir`]: the files) and `estimate.rs`
//! ([`MemoryEstimate`]).

pub mod checkpoint;
pub mod eval;
pub mod generate;
pub mod optim;
pub mod retrieval;
pub mod ruler_eval;
pub mod stream;

mod config;
mod error;
mod estimate;
mod model_table;
mod output_rule;
mod run;
mod run_dir;
mod trainer;

pub use config::*;
pub use error::*;
pub use estimate::*;
pub use run::*;
pub use run_dir::*;
pub use trainer::*;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::VarMap;
use serde::{Deserialize, Serialize};

use crate::tasks::{Batch, Source, Stream, TaskConfig, TaskError};
use checkpoint::{Checkpoint, HostTensor};
use optim::{clip_factor, learning_rate, AdamParams, AdamW};
use vort::model::{Model, ModelConfig, ModelError, ModelOutput, ModelState};

/// File names inside a run directory.
pub const CONFIG_FILE: &str = "config.toml";
/// Metrics, one JSON object per logged step.
pub const METRICS_FILE: &str = "metrics.jsonl";
/// Latest checkpoint.
pub const CHECKPOINT_FILE: &str = "checkpoint.safetensors";
/// Held-out evaluation.
pub const EVAL_FILE: &str = "eval.json";
/// Released weights (the checkpoint without optimizer state; see
/// [`checkpoint::Checkpoint::weights_only`]): evaluation and generation read it when the run
/// has no checkpoint.
pub const WEIGHTS_FILE: &str = "weights.safetensors";
/// The lock file of a run directory ([`RunLock`]).
pub const LOCK_FILE: &str = "run.lock";
pub use output_rule::check_output;

/// What a command that reads the trained model at `path` must not overwrite ([`check_output`]):
/// a run directory and each of its files (resolved separately, since a run file may be a
/// symlink to a file elsewhere), or the one file (a checkpoint or an export) it reads.
pub fn protected_paths(path: &Path) -> Vec<PathBuf> {
    let mut p = vec![path.to_path_buf()];
    if path.is_dir() {
        p.extend(RunDir::new(path).own_files());
    }
    p
}
