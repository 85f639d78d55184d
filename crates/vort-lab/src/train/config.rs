//! The run config: seed, task, model and training ([`RunConfig`], saved as `config.toml`), and
//! its checks.

// the module's shared imports and the other jobs' items (re-exported from `train`)
use super::*;

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
    /// Train with the state carried through the book (truncated backpropagation; books
    /// only): batch row r streams through the training books (`tasks::lanes::LanePlan`),
    /// each window starting from the row's state after the previous one, detached; a row's
    /// state resets at a book's start and every `carry_context` bytes. False: independent
    /// windows, each from an empty state.
    pub carry_state: bool,
    /// The longest context a carried row holds, in bytes (rounded down to whole windows); the
    /// mixer's node tables must be certified to it (`[model.mixer.nodes] horizon`).
    pub carry_context: u64,
    /// Synthetic recall windows in place of some rows of each books training batch
    /// (`[train.recall_mix]`, [`crate::tasks::recall_mix`]); absent: books only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall_mix: Option<crate::tasks::recall_mix::RecallMix>,
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
            carry_state: false,
            carry_context: 1 << 20,
            recall_mix: None,
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
    /// The model (read in the current form or the older flat one, `train/model_table.rs`).
    #[serde(deserialize_with = "super::model_table::deserialize")]
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
            // validate's own errors already say "config <config>:": the message alone, once
            message: match e {
                TrainError::Config { message, .. } => message,
                e => e.to_string(),
            },
        })?;
        Ok(cfg)
    }

    /// Reads a TOML config file.
    ///
    /// # Errors
    /// I/O errors, [`TrainError::Config`].
    pub fn load(path: &Path) -> Result<RunConfig, TrainError> {
        // a missing file, a directory or a binary file is the user's to fix (exit status 2); a
        // FIFO is refused before it is opened (reading one blocks until a writer comes)
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            return Err(TrainError::Config {
                path: path.display().to_string(),
                message: "not a regular file".into(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|e| TrainError::Config {
            path: path.display().to_string(),
            message: format!("cannot read it as a TOML text file ({e})"),
        })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// The layer crate's config of the run's model: its task's vocabulary and sequence
    /// length, and `[model]`.
    pub fn model_config(&self) -> vort::Config {
        vort::Config::new(self.model.clone(), self.task.vocab(), self.task.seq_len)
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
        let test_examples = self.task.mqar().map_or(0, |m| m.test_examples);
        if test_examples > 10_000_000 || t.val_sequences > 10_000_000 {
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
        if t.carry_state {
            self.check_carry()?;
        }
        if let Some(mix) = &t.recall_mix {
            if self.task.kind() != crate::tasks::TaskKind::Books {
                return bad(
                    "train.recall_mix mixes recall windows into books batches: it needs \
                     task.kind = \"books\"",
                );
            }
            mix.validate(self.task.seq_len)
                .map_err(|message| TrainError::Config {
                    path: "<config>".into(),
                    message,
                })?;
        }
        Ok(())
    }

    /// The settings training with the state carried needs: books, a mixer with a state of
    /// fixed size, and node tables certified for the longest context carried.
    fn check_carry(&self) -> Result<(), TrainError> {
        let t = &self.train;
        let bad = |m: String| {
            Err(TrainError::Config {
                path: "<config>".into(),
                message: m,
            })
        };
        if self.task.kind() != crate::tasks::TaskKind::Books {
            return bad(format!(
                "train.carry_state streams through books; task.kind = \"{}\" has no books",
                self.task.kind().name()
            ));
        }
        if matches!(self.model.mixer, vort::Mixer::Softmax { .. }) {
            return bad(
                "train.carry_state needs a retention mixer: a softmax cache grows with \
                        the context"
                    .into(),
            );
        }
        if t.carry_context < self.task.seq_len as u64 {
            return bad(format!(
                "train.carry_context = {} is below task.seq_len = {}: no window would carry",
                t.carry_context, self.task.seq_len
            ));
        }
        let horizon = self.model.mixer.resolved(self.task.seq_len).horizon();
        if let Some(h) = horizon.filter(|&h| h < t.carry_context) {
            return bad(format!(
                "train.carry_context = {} is past the mixer's certified horizon {h}: set \
                 [model.mixer.nodes] horizon >= {} (the longest context carried)",
                t.carry_context, t.carry_context
            ));
        }
        Ok(())
    }
}
