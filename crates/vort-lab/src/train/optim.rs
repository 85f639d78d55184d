//! AdamW with inspectable state, the learning-rate schedule and global-norm gradient clipping.
//!
//! The update is candle-nn's `AdamW::step` line for line (decoupled weight decay,
//! bias-corrected moments), with one addition: a per-parameter learning-rate multiplier (the
//! bigram table's logits must move far faster than the network's weights). It is
//! re-implemented here because candle-nn keeps the moment estimates private, and a checkpoint
//! must hold them for an exact resume.

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};

/// AdamW hyper-parameters (the learning rate is passed to each step).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamParams {
    /// β1.
    pub beta1: f64,
    /// β2.
    pub beta2: f64,
    /// ε.
    pub eps: f64,
    /// Decoupled weight decay λ (θ <- θ (1 - lr λ) - lr m̂ / (√v̂ + ε)).
    pub weight_decay: f64,
}

/// One parameter and its moments.
pub struct Slot {
    /// Parameter name in the VarMap.
    pub name: String,
    /// The parameter.
    pub var: Var,
    /// First moment.
    pub m: Tensor,
    /// Second moment.
    pub v: Tensor,
    /// Multiplier of the learning rate for this parameter (1 for most; the bigram table has
    /// `train.bigram_lr_scale`). Derived from the name and config, so a checkpoint need not
    /// hold it.
    pub lr_scale: f64,
    /// Whether the decoupled weight decay applies to this parameter (all by default; see
    /// [`AdamW::decay_only`]).
    pub decays: bool,
}

/// AdamW over named parameters, in name order (deterministic).
pub struct AdamW {
    /// Parameters and moments, sorted by name.
    pub slots: Vec<Slot>,
    /// Steps taken.
    pub t: u64,
    /// Hyper-parameters.
    pub params: AdamParams,
}

impl AdamW {
    /// Zero moments for every (name, var); `lr_scale(name)` multiplies that parameter's
    /// learning rate.
    ///
    /// # Errors
    /// candle allocation errors.
    pub fn new(
        mut vars: Vec<(String, Var)>,
        params: AdamParams,
        lr_scale: impl Fn(&str) -> f64,
    ) -> candle_core::Result<Self> {
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let slots = vars
            .into_iter()
            .map(|(name, var)| {
                let m = var.as_tensor().zeros_like()?;
                let v = var.as_tensor().zeros_like()?;
                let lr_scale = lr_scale(&name);
                Ok(Slot {
                    name,
                    var,
                    m,
                    v,
                    lr_scale,
                    decays: true,
                })
            })
            .collect::<candle_core::Result<_>>()?;
        Ok(AdamW {
            slots,
            t: 0,
            params,
        })
    }

    /// Restricts the weight decay to the parameters for which `decays(name, shape)` holds
    /// (e.g. matrices only, as Zoology's recipe asks).
    pub fn decay_only(mut self, decays: impl Fn(&str, &[usize]) -> bool) -> Self {
        for s in &mut self.slots {
            s.decays = decays(&s.name, s.var.as_tensor().dims());
        }
        self
    }

    /// One update with learning rate `lr`, every gradient multiplied by `grad_scale` first
    /// (clipping). Parameters without a gradient are left alone (their moments too).
    ///
    /// # Errors
    /// candle errors.
    pub fn step(&mut self, grads: &GradStore, lr: f64, grad_scale: f64) -> candle_core::Result<()> {
        self.t += 1;
        let p = self.params;
        let scale_m = 1.0 / (1.0 - p.beta1.powi(self.t as i32));
        let scale_v = 1.0 / (1.0 - p.beta2.powi(self.t as i32));
        for s in &mut self.slots {
            let Some(g) = grads.get(s.var.as_tensor()) else {
                continue;
            };
            // detached: a gradient may carry the backward graph (and its activations); the
            // moments must not chain it from step to step
            let g = if grad_scale == 1.0 {
                g.detach()
            } else {
                (g.detach() * grad_scale)?
            };
            let m = ((&s.m * p.beta1)? + (&g * (1.0 - p.beta1))?)?;
            let v = ((&s.v * p.beta2)? + (g.sqr()? * (1.0 - p.beta2))?)?;
            let m_hat = (&m * scale_m)?;
            let v_hat = (&v * scale_v)?;
            let lr = lr * s.lr_scale;
            let decay = if s.decays { p.weight_decay } else { 0.0 };
            let theta = (s.var.as_tensor() * (1.0 - lr * decay))?;
            let upd = (m_hat / (v_hat.sqrt()? + p.eps)?)?;
            s.var.set(&(theta - (upd * lr)?)?)?;
            s.m = m.detach();
            s.v = v.detach();
        }
        Ok(())
    }
}

/// Linear warm-up over `warmup` steps to `peak`, then cosine decay to `peak · min_ratio` at
/// `total` steps (step counted from 0; constant after `total`).
pub fn learning_rate(step: u64, warmup: u64, total: u64, peak: f64, min_ratio: f64) -> f64 {
    if step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    let span = total.saturating_sub(warmup).max(1);
    let progress = ((step - warmup) as f64 / span as f64).min(1.0);
    let cos = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
    peak * (min_ratio + (1.0 - min_ratio) * cos)
}

/// Global L2 norm of the gradients of `vars` and the factor min(1, max_norm / norm) that
/// clips it to `max_norm` (max_norm <= 0: no clipping).
///
/// # Errors
/// candle errors.
pub fn clip_factor(
    grads: &GradStore,
    vars: &[&Var],
    max_norm: f64,
) -> candle_core::Result<(f64, f64)> {
    let mut sq = 0.0f64;
    for v in vars {
        if let Some(g) = grads.get(v.as_tensor()) {
            sq += g
                .sqr()?
                .sum_all()?
                .to_dtype(candle_core::DType::F64)?
                .to_scalar::<f64>()?;
        }
    }
    let norm = sq.sqrt();
    let factor = if max_norm > 0.0 && norm > max_norm {
        max_norm / (norm + 1e-6)
    } else {
        1.0
    };
    Ok((norm, factor))
}
