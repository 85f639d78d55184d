//! The memory a run needs, estimated before anything is allocated, against what the machine
//! has.

// the module's shared imports and the other jobs' items (re-exported from `train`)
use super::*;

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
