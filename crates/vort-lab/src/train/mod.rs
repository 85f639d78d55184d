//! The training loop: AdamW with warm-up + cosine schedule and global-norm clipping, fixed
//! seeds, metrics to JSON lines, a progress bar, atomic safetensors checkpoints and an exact
//! resume.
//!
//! A run directory holds `config.toml` (the resolved config), `metrics.jsonl` (one JSON object
//! per logged step), `checkpoint.safetensors` (latest checkpoint, see [`checkpoint`]) and
//! `eval.json` (held-out accuracy by lag, written at the end).
//!
//! Exactness of resume: batch `s` is a pure function of (seed, s) ([`crate::tasks::Source::batch`]),
//! the model has no dropout, and the checkpoint holds the parameters, both AdamW moments and
//! the step counters, so a run resumed from step k computes bit-for-bit what the uninterrupted
//! run computed after step k (tested). A killed run loses at most `checkpoint_every` steps.

pub mod checkpoint;
pub mod eval;
pub mod generate;
pub mod optim;
pub mod stream;

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
use vort::model::{Model, ModelConfig, ModelError, ModelOutput};

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

/// Why training (or evaluation) stopped.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The config file cannot be parsed (unknown field, wrong type) or is out of domain.
    #[error("config {path}: {message}")]
    Config {
        /// The file (or `<inline>`).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The task configuration is invalid.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// The model configuration is invalid, or the layer failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// candle failed.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `resume` was asked but the run has no checkpoint.
    #[error("no checkpoint at {0}: the run has not saved one (train it, or check the directory)")]
    NoCheckpoint(String),
    /// The checkpoint cannot be read or fails its checksum.
    #[error("checkpoint {path} is corrupt: {reason}")]
    CheckpointCorrupt {
        /// The file.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The checkpoint belongs to another configuration or model.
    #[error("checkpoint {path} does not match this run: {reason}")]
    CheckpointMismatch {
        /// The file.
        path: String,
        /// What differs.
        reason: String,
    },
    /// A fresh run was asked in a directory that already holds one.
    #[error("{0} already holds a run (checkpoint present); resume it or choose another directory")]
    RunExists(String),
    /// Another process holds the run directory's lock ([`RunLock`]).
    #[error("{0} is in use by another vort process ({LOCK_FILE} is locked): wait for it to finish, or choose another directory")]
    RunBusy(String),
    /// Training diverged: a non-finite loss, or a non-finite gradient from a finite loss
    /// (caught before the update, which would have made every weight it reaches NaN).
    #[error("training diverged at step {step}: loss {loss}, gradient norm {grad_norm} (nothing was updated)")]
    Diverged {
        /// Step.
        step: u64,
        /// Loss.
        loss: f64,
        /// Global gradient norm (NaN when the loss already was not finite).
        grad_norm: f64,
    },
    /// The model's output at inference (evaluation, streams) is not finite: the weights or
    /// the activations overflowed. Nothing is reported or written from it (exit status 1).
    #[error("the model produced non-finite outputs ({0}); the checkpoint's weights or its activations overflow, so no score is reported")]
    NonFinite(String),
    /// Writing a plot failed.
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
    /// Serialising JSON or TOML failed.
    #[error("serialise: {0}")]
    Serialise(String),
}

impl TrainError {
    /// True for errors caused by the user's input (unknown task or memory kind, a config with
    /// a wrong field or value, a missing, corrupt or mismatched checkpoint, a fresh run in an
    /// existing run directory): the CLI maps these to exit status 2. In every such case
    /// nothing in the run directory was written.
    pub fn is_bad_input(&self) -> bool {
        if let TrainError::Model(ModelError::Layer(e)) = self {
            // the layer's refusals of its input (a stream past the horizon, a bad recipe)
            return e.is_input_error();
        }
        matches!(
            self,
            TrainError::Config { .. }
                | TrainError::Task(_)
                | TrainError::Model(ModelError::UnknownMixer(_) | ModelError::Invalid(_))
                | TrainError::NoCheckpoint(_)
                | TrainError::CheckpointCorrupt { .. }
                | TrainError::CheckpointMismatch { .. }
                | TrainError::RunExists(_)
                | TrainError::RunBusy(_)
        )
    }
}

/// Optimisation and bookkeeping (the `[train]` table of a run config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Optimiser steps.
    pub steps: u64,
    /// Sequences per batch.
    pub batch_size: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Linear warm-up steps.
    pub warmup_steps: u64,
    /// Final learning rate as a fraction of the peak (cosine decay).
    pub min_lr_ratio: f64,
    /// AdamW decoupled weight decay.
    pub weight_decay: f64,
    /// AdamW β1.
    pub beta1: f64,
    /// AdamW β2.
    pub beta2: f64,
    /// AdamW ε.
    pub adam_eps: f64,
    /// Clip the global gradient norm to this (0: no clipping).
    pub grad_clip: f64,
    /// Write a checkpoint every this many steps (and at the end).
    pub checkpoint_every: u64,
    /// Append a metrics line every this many steps (and at the end).
    pub log_every: u64,
    /// Held-out sequences in the final evaluation.
    pub eval_sequences: usize,
    /// Weight of the entity-probe auxiliary loss (VORT; target: the task's memorable tokens).
    pub entity_aux_weight: f64,
    /// Weight of the bigram predictor's next-token loss (VORT with an entropy router).
    pub bigram_weight: f64,
    /// Multiplier of the learning rate for the bigram table. Adam moves each parameter by at
    /// most about lr per step, and a table of logits must travel several units: at lr 3e-3 the
    /// byte bigram's cross-entropy was still 4.9 nats (uniform: 5.5) after 145 steps, so its
    /// entropy, the router's input, was nearly the same at every token. (Runs whose
    /// config.toml lacks this field were trained with 1; reproductions retrain them, since
    /// their saved config no longer matches.)
    pub bigram_lr_scale: f64,
    /// Apply the weight decay to weight matrices only: not to norms, biases, the router,
    /// decay rates, mixture logits, the convolution taps or the bigram table (Zoology's
    /// recipe). False: every parameter decays (the synthetic and books runs).
    pub decay_matrices_only: bool,
    /// Score the validation stream every this many steps (0 = never): a `val_acc` field in
    /// the metrics, and early stopping.
    pub eval_every: u64,
    /// Validation sequences per check (a stream of its own, disjoint from train and test).
    pub val_sequences: usize,
    /// Stop early once the validation accuracy reaches this (0 = never; Zoology stops at
    /// 0.99). The stopped run is finished: it is checkpointed and evaluated at that step.
    pub early_stop_accuracy: f64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            steps: 300,
            batch_size: 4,
            lr: 3e-3,
            warmup_steps: 30,
            min_lr_ratio: 0.1,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.99,
            adam_eps: 1e-8,
            grad_clip: 1.0,
            checkpoint_every: 50,
            log_every: 10,
            eval_sequences: 64,
            entity_aux_weight: 0.1,
            bigram_weight: 1.0,
            bigram_lr_scale: 30.0,
            decay_matrices_only: false,
            eval_every: 0,
            val_sequences: 256,
            early_stop_accuracy: 0.0,
        }
    }
}

impl TrainConfig {
    /// Sequences per evaluation batch.
    pub fn eval_batch(&self) -> usize {
        self.batch_size.clamp(1, 64)
    }
}

/// A whole run: seed, task, model and training (the TOML file saved as `config.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// Seed of the data order and of the initialisation.
    pub seed: u64,
    /// The task.
    pub task: TaskConfig,
    /// The model.
    pub model: ModelConfig,
    /// The optimisation.
    pub train: TrainConfig,
}

impl RunConfig {
    /// Parses a TOML config (unknown fields are errors) and validates it.
    ///
    /// # Errors
    /// [`TrainError::Config`] with the parser's message (it names the field).
    pub fn from_toml(text: &str, origin: &str) -> Result<RunConfig, TrainError> {
        let cfg: RunConfig = toml::from_str(text).map_err(|e| TrainError::Config {
            path: origin.into(),
            message: e.to_string(),
        })?;
        cfg.validate().map_err(|e| TrainError::Config {
            path: origin.into(),
            message: e.to_string(),
        })?;
        Ok(cfg)
    }

    /// Reads a TOML config file.
    ///
    /// # Errors
    /// I/O errors, [`TrainError::Config`].
    pub fn load(path: &Path) -> Result<RunConfig, TrainError> {
        // a missing file, a directory or a binary file is the user's to fix (exit status 2)
        let text = std::fs::read_to_string(path).map_err(|e| TrainError::Config {
            path: path.display().to_string(),
            message: format!("cannot read it as a TOML text file ({e})"),
        })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// The resolved config as TOML.
    ///
    /// # Errors
    /// Serialisation errors (not expected).
    pub fn to_toml(&self) -> Result<String, TrainError> {
        toml::to_string(self).map_err(|e| TrainError::Serialise(e.to_string()))
    }

    /// Checks task, model and training fields.
    ///
    /// # Errors
    /// The first invalid field.
    pub fn validate(&self) -> Result<(), TrainError> {
        self.task.validate()?;
        self.model.validate()?;
        let t = &self.train;
        let bad = |m: &str| {
            Err(TrainError::Config {
                path: "<config>".into(),
                message: m.into(),
            })
        };
        if t.steps == 0 || t.batch_size == 0 || t.checkpoint_every == 0 || t.log_every == 0 {
            return bad("train.steps, batch_size, checkpoint_every and log_every must be >= 1");
        }
        if !(t.lr > 0.0 && t.lr.is_finite() && (0.0..=1.0).contains(&t.min_lr_ratio)) {
            return bad("train.lr must be > 0 and min_lr_ratio in [0, 1]");
        }
        // every real field of [train], by name: finite, and >= 0 or > 0
        for (name, x, positive) in [
            ("weight_decay", t.weight_decay, false),
            ("adam_eps", t.adam_eps, true),
            ("grad_clip", t.grad_clip, false),
            ("entity_aux_weight", t.entity_aux_weight, false),
            ("bigram_weight", t.bigram_weight, false),
        ] {
            let ok = x.is_finite() && if positive { x > 0.0 } else { x >= 0.0 };
            if !ok {
                let domain = if positive { "> 0" } else { ">= 0" };
                return bad(&format!("train.{name} = {x:?} must be finite and {domain}"));
            }
        }
        let horizon = self.model.mixer.horizon().unwrap_or(0);
        if horizon != 0 && horizon < self.task.seq_len as u64 {
            return bad(&format!(
                "the mixer's horizon = {horizon} is below task.seq_len = {}: every training \
                 sequence would run past the certified kernel (0 = the sequence length)",
                self.task.seq_len
            ));
        }
        if !(t.bigram_lr_scale > 0.0 && t.bigram_lr_scale.is_finite()) {
            return bad("train.bigram_lr_scale must be a finite number > 0");
        }
        if !(0.0..1.0).contains(&t.beta1) || !(0.0..1.0).contains(&t.beta2) {
            return bad("train.beta1 and beta2 must be in [0, 1)");
        }
        if t.eval_sequences == 0 || t.eval_sequences > 10_000_000 {
            return bad("train.eval_sequences must be in [1, 10^7]");
        }
        if self.task.test_examples > 10_000_000 || t.val_sequences > 10_000_000 {
            return bad("task.test_examples and train.val_sequences must be <= 10^7");
        }
        if t.eval_every > 0 && t.val_sequences == 0 {
            return bad("train.val_sequences must be >= 1 when eval_every > 0");
        }
        if !(0.0..=1.0).contains(&t.early_stop_accuracy) {
            return bad("train.early_stop_accuracy must be in [0, 1] (0 = never)");
        }
        if t.early_stop_accuracy > 0.0 && t.eval_every == 0 {
            return bad("train.early_stop_accuracy needs train.eval_every >= 1");
        }
        Ok(())
    }
}

/// Per-call options that are not part of the run's identity (not saved in the config).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Stop after this step even if the config asks for more (a checkpoint is written there);
    /// used to simulate an interrupted run.
    pub stop_at: Option<u64>,
    /// Show the progress bar.
    pub progress: bool,
    /// Print the resolved config to stderr.
    pub print_config: bool,
    /// Skip the final evaluation.
    pub skip_eval: bool,
    /// Refuse a run whose memory estimate exceeds this many bytes (None: the machine's
    /// available memory).
    pub max_memory: Option<u64>,
}

/// What a finished (or stopped) run reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainSummary {
    /// Steps completed.
    pub steps: u64,
    /// Loss of the last step.
    pub final_loss: f64,
    /// Mean training throughput over this call (tokens/s).
    pub tokens_per_s: f64,
    /// Wall time of this call (s).
    pub wall_s: f64,
    /// Held-out evaluation (None when skipped or interrupted).
    pub eval: Option<eval::EvalResult>,
    /// The run was already finished (all steps, or stopped early and evaluated): a resume
    /// had nothing to do.
    #[serde(default)]
    pub already_finished: bool,
}

/// One metrics line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metrics {
    /// Steps completed.
    pub step: u64,
    /// Total loss.
    pub loss: f64,
    /// Cross-entropy at answer positions.
    pub task_loss: f64,
    /// Accuracy at the batch's answer positions.
    pub acc: f64,
    /// Learning rate of the step.
    pub lr: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// Training tokens per second of the step.
    pub tokens_per_s: f64,
    /// Seconds since the start of this call.
    pub elapsed_s: f64,
    /// Accuracy on the validation stream (steps where it was scored, `train.eval_every`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_acc: Option<f64>,
}

/// The CPU device (the CUDA path is not built in this workspace).
pub fn device() -> Device {
    Device::Cpu
}

/// Model, parameters and optimiser of a run.
pub struct Trainer {
    /// The resolved config.
    pub cfg: RunConfig,
    /// The model.
    pub model: Model,
    /// Its parameters.
    pub vm: VarMap,
    /// The optimiser.
    pub opt: AdamW,
    /// Steps completed.
    pub step: u64,
    /// Where the sequences come from.
    pub source: Source,
}

/// Losses of one forward pass.
pub struct StepLoss {
    /// Total (what is differentiated).
    pub total: Tensor,
    /// Answer cross-entropy.
    pub task: Tensor,
    /// Correct answers and answers.
    pub correct: (usize, usize),
}

/// Mean binary cross-entropy with logits, stable: relu(z) - y z + log(1 + e^(-|z|)).
fn bce_with_logits(z: &Tensor, y: &Tensor) -> candle_core::Result<Tensor> {
    let t = ((z.relu()? - (z * y)?)? + ((z.abs()?.neg()?.exp()? + 1.0)?.log()?))?;
    t.mean_all()
}

/// Answer cross-entropy (+ bigram and entity auxiliary losses) of `out` on `batch`.
///
/// # Errors
/// candle errors.
pub fn losses(
    model: &Model,
    cfg: &RunConfig,
    batch: &Batch,
    out: &ModelOutput,
    device: &Device,
) -> Result<StepLoss, TrainError> {
    let pos = batch.answer_positions();
    let logits = model.logits_at(&out.hidden, &pos)?;
    let targets: Vec<u32> = pos.iter().map(|&p| batch.targets[p]).collect();
    let tgt = Tensor::from_vec(targets.clone(), pos.len(), device)?;
    let task = candle_nn::loss::cross_entropy(&logits, &tgt)?;
    let pred: Vec<u32> = logits.argmax(D::Minus1)?.to_vec1()?;
    let correct = pred.iter().zip(&targets).filter(|(a, b)| a == b).count();
    let mut total = task.clone();
    let (b, t) = (batch.b, batch.t);
    if let Some(bg) = &out.bigram_logits {
        if cfg.train.bigram_weight > 0.0 && t > 1 {
            let v = model.vocab;
            let lg = bg.narrow(1, 0, t - 1)?.reshape((b * (t - 1), v))?;
            let nxt: Vec<u32> = (0..b)
                .flat_map(|i| batch.tokens[i * t + 1..(i + 1) * t].to_vec())
                .collect();
            let nxt = Tensor::from_vec(nxt, b * (t - 1), device)?;
            let l = candle_nn::loss::cross_entropy(&lg, &nxt)?;
            total = (total + (l * cfg.train.bigram_weight)?)?;
        }
    }
    // The probe learns the task's annotation of what must be remembered (`memorable`): entity
    // bytes in books; entity and label in label copy, key and value in Zipf retrieval. With
    // the one-token shift a pair is stored at its second token, so marking only the first
    // (the entity) would raise α where nothing is written.
    if cfg.train.entity_aux_weight > 0.0
        && !out.entity_logits.is_empty()
        && batch.memorable.iter().any(|&e| e)
    {
        let y: Vec<f32> = batch
            .memorable
            .iter()
            .map(|&e| if e { 1.0 } else { 0.0 })
            .collect();
        let y = Tensor::from_vec(y, (b, t), device)?;
        let n = out.entity_logits.len() as f64;
        for z in &out.entity_logits {
            let l = bce_with_logits(z, &y)?;
            total = (total + (l * (cfg.train.entity_aux_weight / n))?)?;
        }
    }
    Ok(StepLoss {
        total,
        task,
        correct: (correct, pos.len()),
    })
}

/// Tokens of a batch as a [B, T] u32 tensor.
///
/// # Errors
/// candle errors.
pub fn tokens_tensor(batch: &Batch, device: &Device) -> Result<Tensor, TrainError> {
    Ok(Tensor::from_vec(
        batch.tokens.clone(),
        (batch.b, batch.t),
        device,
    )?)
}

fn scalar(t: &Tensor) -> Result<f64, TrainError> {
    Ok(t.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}

/// The run's model (its task's vocabulary and sequence length, its seed), parameters in `vm`.
///
/// # Errors
/// Invalid sizes, an SOE that cannot be certified.
pub fn run_model(cfg: &RunConfig, vm: &VarMap, device: &Device) -> Result<Model, TrainError> {
    Ok(Model::seeded(
        &cfg.model,
        cfg.task.vocab(),
        cfg.task.seq_len,
        cfg.seed,
        vm,
        device,
    )?)
}

/// AdamW over every parameter in `vm` with the run's settings; the bigram table learns at its
/// own rate (`train.bigram_lr_scale`).
///
/// # Errors
/// candle errors.
pub fn optimizer(cfg: &RunConfig, vm: &VarMap) -> Result<AdamW, TrainError> {
    let t = &cfg.train;
    let opt = AdamW::new(
        named_vars(vm),
        AdamParams {
            beta1: t.beta1,
            beta2: t.beta2,
            eps: t.adam_eps,
            weight_decay: t.weight_decay,
        },
        |name| {
            if name == Model::BIGRAM_PARAM {
                t.bigram_lr_scale
            } else {
                1.0
            }
        },
    )?;
    Ok(if t.decay_matrices_only {
        // the model's own list (its blocks' projections, embeddings, MLPs, head)
        let decayed = cfg.model.decayed_params();
        opt.decay_only(|name, _| decayed.iter().any(|d| d == name))
    } else {
        opt
    })
}

/// One optimisation step on `batch`, the `step`-th of the run: forward, losses, backward,
/// gradient clipping, AdamW at the scheduled learning rate. Returns the step's metrics
/// (`step` is the count after it; timing fields are 0).
///
/// # Errors
/// candle errors, [`TrainError::Diverged`] for a non-finite loss or gradient (nothing
/// updated).
pub fn optimizer_step(
    model: &Model,
    opt: &mut AdamW,
    c: &RunConfig,
    batch: &Batch,
    step: u64,
    device: &Device,
) -> Result<Metrics, TrainError> {
    let out = model.forward(&tokens_tensor(batch, device)?)?;
    let l = losses(model, c, batch, &out, device)?;
    let loss = scalar(&l.total)?;
    if !loss.is_finite() {
        return Err(TrainError::Diverged {
            step,
            loss,
            grad_norm: f64::NAN,
        });
    }
    let grads = l.total.backward()?;
    let vars: Vec<&Var> = opt.slots.iter().map(|s| &s.var).collect();
    let (norm, factor) = clip_factor(&grads, &vars, c.train.grad_clip)?;
    if !norm.is_finite() {
        return Err(TrainError::Diverged {
            step,
            loss,
            grad_norm: norm,
        });
    }
    let lr = learning_rate(
        step,
        c.train.warmup_steps,
        c.train.steps,
        c.train.lr,
        c.train.min_lr_ratio,
    );
    opt.step(&grads, lr, factor)?;
    Ok(Metrics {
        step: step + 1,
        loss,
        task_loss: scalar(&l.task)?,
        acc: l.correct.0 as f64 / l.correct.1.max(1) as f64,
        lr,
        grad_norm: norm,
        tokens_per_s: 0.0,
        elapsed_s: 0.0,
        val_acc: None,
    })
}

impl Trainer {
    /// A fresh model and optimiser from the config.
    ///
    /// # Errors
    /// Invalid config, layer errors.
    pub fn new(cfg: &RunConfig, device: &Device) -> Result<Trainer, TrainError> {
        cfg.validate()?;
        let source = Source::open(&cfg.task)?;
        let vm = VarMap::new();
        let model = run_model(cfg, &vm, device)?;
        let opt = optimizer(cfg, &vm)?;
        Ok(Trainer {
            cfg: cfg.clone(),
            model,
            vm,
            opt,
            step: 0,
            source,
        })
    }

    /// Runs step `self.step` and advances it; returns (metrics without timing).
    ///
    /// # Errors
    /// candle errors, [`TrainError::Diverged`].
    pub fn train_step(&mut self, device: &Device) -> Result<Metrics, TrainError> {
        let c = &self.cfg;
        let batch = self
            .source
            .batch(c.seed, Stream::Train, self.step, c.train.batch_size);
        let m = optimizer_step(&self.model, &mut self.opt, c, &batch, self.step, device)?;
        self.step += 1;
        Ok(m)
    }

    /// The checkpoint of the current state.
    ///
    /// # Errors
    /// candle errors.
    pub fn checkpoint(&self) -> Result<Checkpoint, TrainError> {
        let host = |t: &Tensor| -> Result<HostTensor, TrainError> {
            Ok(HostTensor {
                shape: t.dims().to_vec(),
                data: t.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?,
            })
        };
        let mut tensors = BTreeMap::new();
        for s in &self.opt.slots {
            tensors.insert(format!("param/{}", s.name), host(s.var.as_tensor())?);
            tensors.insert(format!("adam_m/{}", s.name), host(&s.m)?);
            tensors.insert(format!("adam_v/{}", s.name), host(&s.v)?);
        }
        Ok(Checkpoint {
            step: self.step,
            adam_t: self.opt.t,
            config: self.cfg.to_toml()?,
            tensors,
        })
    }

    /// Loads `ck` into this trainer after checking that it belongs to the same config and
    /// model (every tensor present with the right shape, no extra ones).
    ///
    /// # Errors
    /// [`TrainError::CheckpointMismatch`]; nothing is modified on error.
    pub fn restore(&mut self, ck: &Checkpoint, path: &Path) -> Result<(), TrainError> {
        let mismatch = |reason: String| TrainError::CheckpointMismatch {
            path: path.display().to_string(),
            reason,
        };
        ck.check_config(&self.cfg.to_toml()?, path)?;
        let want = 3 * self.opt.slots.len();
        if ck.tensors.len() != want {
            return Err(mismatch(format!(
                "{} tensors, the model has {want}",
                ck.tensors.len()
            )));
        }
        // check everything first, then write
        let mut loaded = Vec::new();
        for s in &self.opt.slots {
            let v = s.var.as_tensor();
            let three = ["param", "adam_m", "adam_v"]
                .iter()
                .map(|kind| ck.tensor(&format!("{kind}/{}", s.name), v.dims(), v.device(), path))
                .collect::<Result<Vec<_>, _>>()?;
            loaded.push(three);
        }
        for (s, three) in self.opt.slots.iter_mut().zip(loaded) {
            s.var.set(&three[0])?;
            s.m = three[1].clone();
            s.v = three[2].clone();
        }
        self.opt.t = ck.adam_t;
        self.step = ck.step;
        Ok(())
    }
}

/// The (name, var) pairs of a VarMap, sorted by name.
pub fn named_vars(vm: &VarMap) -> Vec<(String, Var)> {
    let data = vm.data().lock().expect("VarMap lock");
    let mut v: Vec<(String, Var)> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Trains the run in `run_dir` (created if needed) with default options (progress bar on,
/// config printed). See [`run_with`].
///
/// # Errors
/// As [`run_with`].
pub fn run(config: &RunConfig, run_dir: &Path, resume: bool) -> Result<TrainSummary, TrainError> {
    run_with(
        config,
        run_dir,
        resume,
        &RunOptions {
            progress: true,
            print_config: true,
            ..RunOptions::default()
        },
    )
}

/// An exclusive lock on a run directory, held while a process trains or extends the run: a
/// second process on the same directory (a `reproduce` and a `train --resume`, say) is refused
/// with [`TrainError::RunBusy`] instead of interleaving its checkpoints and metrics with the
/// first's. It is an advisory `flock` on `run_dir/run.lock`, released by the OS when the
/// process ends however it ends, so a killed run leaves no stale lock; the empty file stays.
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
}

impl RunLock {
    /// Takes the lock of `run_dir`, which must exist.
    ///
    /// # Errors
    /// [`TrainError::RunBusy`] if another process (or another lock in this one) holds it; I/O.
    pub fn acquire(run_dir: &Path) -> Result<RunLock, TrainError> {
        let path = run_dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| checkpoint::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(RunLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => {
                Err(TrainError::RunBusy(run_dir.display().to_string()))
            }
            Err(std::fs::TryLockError::Error(e)) => Err(checkpoint::io(&path, e)),
        }
    }
}

/// Trains `config` in `run_dir`, holding its [`RunLock`]. Fresh (`resume = false`): refuses a
/// directory that already holds a checkpoint. Resume: loads and verifies
/// `run_dir/checkpoint.safetensors` against `config` before writing anything, drops metrics
/// lines past the checkpoint, and continues. Writes config.toml, metrics.jsonl, checkpoints
/// and eval.json (and the empty run.lock).
///
/// # Errors
/// Invalid config, [`TrainError::RunExists`], [`TrainError::NoCheckpoint`],
/// [`TrainError::CheckpointCorrupt`], [`TrainError::CheckpointMismatch`],
/// [`TrainError::RunBusy`], I/O, divergence.
pub fn run_with(
    config: &RunConfig,
    run_dir: &Path,
    resume: bool,
    opts: &RunOptions,
) -> Result<TrainSummary, TrainError> {
    config.validate()?;
    // before anything is allocated: an absurd size is one line, not an abort
    config.check_memory(opts.max_memory)?;
    let created = !run_dir.exists();
    std::fs::create_dir_all(run_dir).map_err(|e| checkpoint::io(run_dir, e))?;
    let result =
        RunLock::acquire(run_dir).and_then(|_lock| run_locked(config, run_dir, resume, opts));
    if result.is_err() && created {
        // a run refused before it wrote anything leaves no directory behind
        let _ = std::fs::remove_file(run_dir.join(LOCK_FILE));
        let _ = std::fs::remove_dir(run_dir);
    }
    result
}

/// The metrics lines of the run in `run_dir` (none if it has no metrics.jsonl; unreadable
/// lines, such as one cut short by a kill, are skipped).
pub fn read_metrics(run_dir: &Path) -> Vec<Metrics> {
    std::fs::read_to_string(run_dir.join(METRICS_FILE))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Metrics>(l).ok())
        .collect()
}

/// What [`adopt_early_stop`] made of a run directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopted {
    /// The run is not the wanted one (another field differs, there is no checkpoint, or under
    /// the wanted threshold it would have stopped at a step whose state is not kept).
    No,
    /// The run is exactly the one the wanted config trains: its files now say so.
    Same,
    /// The run is a prefix of the wanted one (it stopped early under the old threshold, and
    /// the wanted threshold was not reached): its files now say the wanted config, its
    /// evaluation and released weights are removed, and resuming continues it.
    Continues,
}

/// Lets a run trained with one `train.early_stop_accuracy` serve a config that differs from
/// its own only in that threshold, without training it again.
///
/// Training is deterministic in (config, step), and the threshold decides only where a run
/// ends: the first validation step whose accuracy reaches it (0 = never), else
/// `train.steps`. So if no validation score up to the run's checkpoint reached the wanted
/// threshold, the wanted run passes through that checkpoint: it is the same run when the
/// checkpoint is at `train.steps`, and the same run continued otherwise. If the first score
/// to reach it is at the checkpoint's step of a run evaluated there, it is the same run.
/// If it is earlier, that step's state is gone: [`Adopted::No`].
///
/// Holds the run's [`RunLock`] while it reads and rewrites (config.toml and the
/// checkpoint's config, through the atomic writer).
///
/// # Errors
/// [`TrainError::RunBusy`] if another process holds the run; I/O; a corrupt checkpoint.
pub fn adopt_early_stop(run_dir: &Path, wanted: &RunConfig) -> Result<Adopted, TrainError> {
    let config_path = run_dir.join(CONFIG_FILE);
    let ck_path = run_dir.join(CHECKPOINT_FILE);
    if !config_path.is_file() || !ck_path.is_file() {
        return Ok(Adopted::No);
    }
    let _lock = RunLock::acquire(run_dir)?;
    let Some(saved) = std::fs::read_to_string(&config_path)
        .ok()
        .and_then(|t| RunConfig::from_toml(&t, "config.toml").ok())
    else {
        return Ok(Adopted::No);
    };
    let mut only_threshold = saved.clone();
    only_threshold.train.early_stop_accuracy = wanted.train.early_stop_accuracy;
    if only_threshold != *wanted {
        return Ok(Adopted::No);
    }
    let mut ck = Checkpoint::load(&ck_path)?;
    let end = ck.step;
    let evaluated_at_end = std::fs::read_to_string(run_dir.join(EVAL_FILE))
        .ok()
        .and_then(|t| serde_json::from_str::<eval::EvalResult>(&t).ok())
        .is_some_and(|e| e.step == end);
    let threshold = wanted.train.early_stop_accuracy;
    // the first validation step (up to the checkpoint) where the wanted run would stop
    let stops_at = read_metrics(run_dir)
        .into_iter()
        .filter(|m| m.step <= end)
        .find(|m| threshold > 0.0 && m.val_acc.is_some_and(|v| v >= threshold))
        .map(|m| m.step);
    let adopted = match stops_at {
        Some(s) if s == end && evaluated_at_end => Adopted::Same,
        Some(_) => return Ok(Adopted::No),
        None if end >= wanted.train.steps => Adopted::Same,
        None => Adopted::Continues,
    };
    if adopted == Adopted::Continues {
        // what the run's end produced is not the continued run's: removed first, so that an
        // interruption below leaves a run that is adopted again, never one reused as finished
        for f in [EVAL_FILE, WEIGHTS_FILE] {
            let p = run_dir.join(f);
            if p.exists() {
                std::fs::remove_file(&p).map_err(|e| checkpoint::io(&p, e))?;
            }
        }
    }
    let toml_text = wanted.to_toml()?;
    ck.config.clone_from(&toml_text);
    ck.save(&ck_path)?;
    checkpoint::write_atomic(&config_path, toml_text.as_bytes())?;
    Ok(adopted)
}

/// [`run_with`] once the run directory exists and is locked.
fn run_locked(
    config: &RunConfig,
    run_dir: &Path,
    resume: bool,
    opts: &RunOptions,
) -> Result<TrainSummary, TrainError> {
    let dev = device();
    let mut tr = Trainer::new(config, &dev)?;
    let ck_path = run_dir.join(CHECKPOINT_FILE);
    // a run killed before its first checkpoint has only its config: resuming it starts over
    let resume = if resume && !ck_path.exists() && run_dir.join(CONFIG_FILE).is_file() {
        eprintln!(
            "{}: no checkpoint yet (killed before the first one): starting from step 0 with \
             the config given",
            run_dir.display()
        );
        false
    } else {
        resume
    };
    if resume {
        let ck = Checkpoint::load(&ck_path)?;
        tr.restore(&ck, &ck_path)?;
        // finished: every step done, or stopped early and evaluated at the checkpoint's step
        let evaluated = std::fs::read_to_string(run_dir.join(EVAL_FILE))
            .ok()
            .and_then(|t| serde_json::from_str::<eval::EvalResult>(&t).ok())
            .filter(|e| e.step == tr.step);
        if tr.step >= config.train.steps || evaluated.is_some() {
            let last = std::fs::read(run_dir.join(METRICS_FILE))
                .ok()
                .and_then(|b| {
                    String::from_utf8_lossy(&b)
                        .lines()
                        .rev()
                        .find_map(|l| serde_json::from_str::<Metrics>(l).ok())
                })
                .map_or(f64::NAN, |m| m.loss);
            return Ok(TrainSummary {
                steps: tr.step,
                final_loss: last,
                tokens_per_s: 0.0,
                wall_s: 0.0,
                eval: evaluated,
                already_finished: true,
            });
        }
    } else if ck_path.exists() {
        return Err(TrainError::RunExists(run_dir.display().to_string()));
    }
    // from here on, files are written
    std::fs::create_dir_all(run_dir).map_err(|e| checkpoint::io(run_dir, e))?;
    let toml_text = config.to_toml()?;
    checkpoint::write_atomic(&run_dir.join(CONFIG_FILE), toml_text.as_bytes())?;
    if opts.print_config {
        eprintln!(
            "# resolved config ({})\n{toml_text}",
            run_dir.join(CONFIG_FILE).display()
        );
    }
    let metrics_path = run_dir.join(METRICS_FILE);
    if resume {
        truncate_metrics(&metrics_path, tr.step)?;
    } else if metrics_path.exists() {
        std::fs::remove_file(&metrics_path).map_err(|e| checkpoint::io(&metrics_path, e))?;
    }
    let mut metrics = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&metrics_path)
        .map_err(|e| checkpoint::io(&metrics_path, e))?;
    let end = opts
        .stop_at
        .map_or(config.train.steps, |s| s.min(config.train.steps));
    let bar = if opts.progress {
        indicatif::ProgressBar::new(config.train.steps)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {pos}/{len} {msg} [{elapsed_precise}<{eta_precise}]",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_position(tr.step);
    let tokens_per_step = (config.train.batch_size * config.task.seq_len) as f64;
    let plain_log = opts.progress && !std::io::IsTerminal::is_terminal(&std::io::stderr());
    let t0 = Instant::now();
    let start_step = tr.step;
    let mut last_loss = f64::NAN;
    let mut end = end;
    let mut stopped_early = false;
    let t = &config.train;
    while tr.step < end {
        let ts = Instant::now();
        let mut m = tr.train_step(&dev)?;
        m.tokens_per_s = tokens_per_step / ts.elapsed().as_secs_f64();
        if t.eval_every > 0 && tr.step % t.eval_every == 0 {
            let v = eval::evaluate_stream(
                &tr.model,
                &tr.source,
                config,
                tr.step,
                Stream::Valid,
                t.val_sequences,
                None,
                &dev,
            )?;
            m.val_acc = Some(v.accuracy);
            if t.early_stop_accuracy > 0.0 && v.accuracy >= t.early_stop_accuracy {
                // Zoology's rule: the run is finished at this step (the cosine schedule is
                // the one of the full run, cut short)
                stopped_early = true;
                end = tr.step;
            }
        }
        m.elapsed_s = t0.elapsed().as_secs_f64();
        last_loss = m.loss;
        bar.set_position(tr.step);
        bar.set_message(format!(
            "loss {:.4} acc {:.3}{} {:.0} tok/s",
            m.loss,
            m.acc,
            m.val_acc.map_or(String::new(), |v| format!(" val {v:.3}")),
            m.tokens_per_s
        ));
        if plain_log && (tr.step % config.train.log_every == 0 || tr.step == end) {
            // nobody watches a bar in a log file: one plain line per logged step
            let done = (tr.step - start_step) as f64;
            let eta = t0.elapsed().as_secs_f64() / done.max(1.0) * (end - tr.step) as f64;
            eprintln!(
                "{}: step {}/{} loss {:.4} acc {:.3}{} {:.0} tok/s ETA {:.0} s",
                run_dir.display(),
                tr.step,
                end,
                m.loss,
                m.acc,
                m.val_acc.map_or(String::new(), |v| format!(" val {v:.3}")),
                m.tokens_per_s,
                eta
            );
        }
        if tr.step % config.train.log_every == 0 || tr.step == end || m.val_acc.is_some() {
            let line =
                serde_json::to_string(&m).map_err(|e| TrainError::Serialise(e.to_string()))?;
            writeln!(metrics, "{line}").map_err(|e| checkpoint::io(&metrics_path, e))?;
        }
        if tr.step % config.train.checkpoint_every == 0 || tr.step == end {
            metrics
                .flush()
                .map_err(|e| checkpoint::io(&metrics_path, e))?;
            tr.checkpoint()?.save(&ck_path)?;
        }
    }
    bar.finish_and_clear();
    let wall = t0.elapsed().as_secs_f64();
    let done = tr.step - start_step;
    let mut summary = TrainSummary {
        steps: tr.step,
        final_loss: last_loss,
        tokens_per_s: if wall > 0.0 {
            done as f64 * tokens_per_step / wall
        } else {
            0.0
        },
        wall_s: wall,
        eval: None,
        already_finished: false,
    };
    if !opts.skip_eval && (tr.step == config.train.steps || stopped_early) {
        let res = eval::evaluate(&tr.model, &tr.source, config, tr.step, &dev)?;
        eval::write(&res, &run_dir.join(EVAL_FILE))?;
        summary.eval = Some(res);
    }
    Ok(summary)
}

/// Keeps only the metrics lines with step <= `step` (rewritten atomically).
fn truncate_metrics(path: &PathBuf, step: u64) -> Result<(), TrainError> {
    // a log: bytes that are not UTF-8 (a torn or edited line) must not block a resume
    let text = match std::fs::read(path) {
        Ok(t) => String::from_utf8_lossy(&t).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(checkpoint::io(path, e)),
    };
    let unreadable = text
        .lines()
        .filter(|l| serde_json::from_str::<Metrics>(l).is_err())
        .count();
    if unreadable > 0 {
        eprintln!(
            "{}: {unreadable} unreadable line(s) dropped on resume",
            path.display()
        );
    }
    let kept: String = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<Metrics>(l)
                .map(|m| m.step <= step)
                .unwrap_or(false)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    checkpoint::write_atomic(path, kept.as_bytes())
}

/// A coarse estimate of the memory a training run needs, for refusing absurd configs before
/// anything is allocated (it errs high: every activation of a step kept for the backward
/// pass). Bytes, f32 throughout.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemoryEstimate {
    /// Parameters with their gradients and both AdamW moments (4 copies).
    pub parameters: f64,
    /// Activations: of the largest training step (one length of the mixture, if any), kept
    /// for the backward pass, or of an evaluation batch at the config's length (forward
    /// only), whichever is larger.
    pub activations: f64,
}

impl MemoryEstimate {
    /// Total bytes.
    pub fn total(&self) -> f64 {
        self.parameters + self.activations
    }
}

impl RunConfig {
    /// The memory estimate of this run's largest step, training or evaluation (see
    /// [`MemoryEstimate`]).
    pub fn estimate_memory(&self) -> MemoryEstimate {
        let m = &self.model;
        let (v, dm) = (self.task.vocab() as f64, m.d_model as f64);
        let (l, h, dh) = (m.layers as f64, m.heads as f64, m.head_dim as f64);
        let hd = h * dh;
        let mlp = (m.mlp_mult as f64) * dm;
        let mut params = v * dm * 2.0 + l * (4.0 * dm * hd + 2.0 * dm * mlp + 4.0 * dm);
        if m.token_shift {
            params += v * dm;
        }
        if m.uses_entropy() {
            params += v * v;
        }
        let feats = match m.feature_map {
            vort::features::FeatureMap::Elu => dh,
            _ => m.features as f64,
        };
        // floats of `b` sequences of `t` tokens through `kept` layers at once, with `scores`
        // copies of softmax's T x window scores. Per layer: the residual stream and its norms,
        // projections, the feature maps, the node weights (VORT: up to ~32 nodes), the MLP
        let activations = |b: f64, t: f64, kept: f64, scores: f64| {
            let nodes = 32.0;
            let mixer = if let vort::Mixer::Softmax { window } = m.mixer {
                let window = match window {
                    0 => t,
                    w => (w as f64).min(t),
                };
                scores * h * t * window
            } else {
                h * t * (4.0 * feats + 3.0 * (dh + 1.0) + 2.0 * nodes)
            };
            let per_layer = b * (t * (12.0 * dm + 6.0 * hd + 3.0 * mlp) + mixer);
            let mut act = kept * per_layer + b * t * dm * 4.0;
            if m.uses_entropy() {
                act += 3.0 * b * t * v;
            }
            act
        };
        // a training step keeps every layer for the backward pass (4 copies of the scores);
        // with a length mixture, each step has one entry's length at the same tokens per step
        let mix = self.task.train_mix.len().max(1) as u64;
        let train = (0..mix)
            .map(|step| {
                let (tc, b) = self.task.train_length(step, self.train.batch_size);
                activations(b as f64, tc.seq_len as f64, l, 4.0)
            })
            .fold(0.0, f64::max);
        // evaluation runs forward only, at the config's own length: one layer live at a time
        // (the scores and their softmax: counted 3 times, to err high)
        let eval = activations(
            self.train.eval_batch() as f64,
            self.task.seq_len as f64,
            1.0,
            3.0,
        );
        MemoryEstimate {
            parameters: 4.0 * 4.0 * params,
            activations: 4.0 * train.max(eval),
        }
    }

    /// Refuses a run whose [`RunConfig::estimate_memory`] exceeds `limit` bytes (default: the
    /// machine's available memory), naming the sizes that drive it.
    ///
    /// # Errors
    /// [`TrainError::Config`] with the estimate, the limit and the fields involved.
    pub fn check_memory(&self, limit: Option<u64>) -> Result<(), TrainError> {
        let Some(limit) = limit.or_else(available_memory) else {
            return Ok(());
        };
        let e = self.estimate_memory();
        if e.total() <= limit as f64 {
            return Ok(());
        }
        let gb = |x: f64| x / 1e9;
        Err(TrainError::Config {
            path: "<config>".into(),
            message: format!(
                "this run needs about {:.1} GB (parameters and optimizer state {:.1} GB from \
                 vocabulary, d_model = {}, layers = {}, heads x head_dim = {} x {}; activations \
                 {:.1} GB from batch_size = {} x seq_len = {}), more than the {:.1} GB limit \
                 (the available memory; --max-memory overrides)",
                gb(e.total()),
                gb(e.parameters),
                self.model.d_model,
                self.model.layers,
                self.model.heads,
                self.model.head_dim,
                gb(e.activations),
                self.train.batch_size,
                self.task.seq_len,
                gb(limit as f64)
            ),
        })
    }
}

/// The machine's available memory in bytes (`MemAvailable` of /proc/meminfo; None elsewhere).
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Extends the run in `run_dir` to `steps` optimiser steps (`vort train --resume --steps N`):
/// its config.toml and the checkpoint's copy of the config get the new `train.steps`, and an
/// evaluation of the shorter run is removed (the extended run writes its own at the end).
///
/// Schedule: the learning rate of every later step is the one of a run configured for
/// `steps` from the start (warm-up, then cosine to `min_lr_ratio` at `steps`): it is not
/// restarted, so when a finished run is extended the rate jumps from its final value back up
/// to the new cosine's value at the resume step. Returns the updated config.
///
/// # Errors
/// No run or checkpoint in `run_dir`; `steps` not above the checkpoint's step (nothing to
/// add: shortening a run is not resuming it); another process holds the run; I/O.
pub fn extend_run(run_dir: &Path, steps: u64) -> Result<RunConfig, TrainError> {
    let cfg_path = run_dir.join(CONFIG_FILE);
    let mut cfg = RunConfig::load(&cfg_path)?;
    let _lock = RunLock::acquire(run_dir)?;
    let ck_path = run_dir.join(CHECKPOINT_FILE);
    let mut ck = Checkpoint::load(&ck_path)?;
    ck.check_config(&cfg.to_toml()?, &ck_path)?;
    if steps <= ck.step {
        return Err(TrainError::Config {
            path: cfg_path.display().to_string(),
            message: format!(
                "--steps {steps} must be above the checkpoint's step {} to extend the run",
                ck.step
            ),
        });
    }
    cfg.train.steps = steps;
    cfg.validate()?;
    let text = cfg.to_toml()?;
    ck.config = text.clone();
    ck.save(&ck_path)?;
    checkpoint::write_atomic(&cfg_path, text.as_bytes())?;
    let eval_path = run_dir.join(EVAL_FILE);
    if eval_path.exists() {
        std::fs::remove_file(&eval_path).map_err(|e| checkpoint::io(&eval_path, e))?;
    }
    Ok(cfg)
}
