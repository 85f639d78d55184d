//! The parts of one residual layer, each loaded from its own `VarBuilder` prefix as candle
//! models load theirs (`vb.pp("blocks").pp(l)`):
//!
//! ```text
//! x <- x + mix(conv(norm1(x)))        mix: crate::block::Block (retention or softmax)
//! x <- x + w2 · gelu(w1 · norm2(x))   the feed-forward, when mlp_mult > 0
//! ```
//!
//! The norms, the convolution and the GELU run the fused parallel ops of `crate::ops` (whose
//! plain twins are `ops::reference::*`). The projections are not `candle_nn::Linear`: the
//! committed runs store them as [in, out] and multiply x · w, where `Linear` stores
//! [out, in] and multiplies by the transpose, which rounds differently.

use super::{ModelConfig, ModelError};
use crate::block::{Block, BlockConfig, BlockState, Pass};
use candle_core::{Module, Tensor};
use candle_nn::VarBuilder;

/// The tensor `name` of shape `shape` under `vb`, or an error naming it with its prefix.
pub(super) fn get_param(
    vb: &VarBuilder,
    shape: &[usize],
    name: &str,
) -> Result<Tensor, ModelError> {
    if !vb.contains_tensor(name) {
        let prefix = vb.prefix();
        let full = if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}.{name}")
        };
        return Err(ModelError::Invalid(format!(
            "parameter `{full}` is missing (a VarMap is filled by Model::init)"
        )));
    }
    Ok(vb.get(shape, name)?)
}

/// RMSNorm with a learned gain: x / sqrt(mean(x²) + 1e-6) · w over the last axis, x \[.., D\],
/// w \[D\] (the fused parallel op; `crate::ops::reference::rms_norm` is its plain twin).
#[derive(Debug, Clone)]
pub struct RmsNorm {
    weight: Tensor,
}

impl RmsNorm {
    const EPS: f64 = 1e-6;

    /// The norm whose gain is `name` \[d\] under `vb`.
    ///
    /// # Errors
    /// A gain missing or misshapen.
    pub fn new(d: usize, vb: &VarBuilder, name: &str) -> Result<RmsNorm, ModelError> {
        Ok(RmsNorm {
            weight: get_param(vb, &[d], name)?,
        })
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        crate::ops::rms_norm(x, &self.weight, Self::EPS).map_err(crate::VortError::into_candle)
    }
}

/// Short causal depthwise convolution (Zoology's recipe in front of every mixer):
/// y[b, t, c] = Σ_{i<k} w[i, c] · x[b, t-i, c], with w [k, d_model].
#[derive(Debug, Clone)]
pub struct ShortConv {
    weight: Tensor,
}

impl ShortConv {
    /// The convolution of kernel `k` over `d` channels, its taps `conv` [k, d] under `vb`.
    ///
    /// # Errors
    /// Taps missing or misshapen.
    pub fn new(k: usize, d: usize, vb: &VarBuilder) -> Result<ShortConv, ModelError> {
        Ok(ShortConv {
            weight: get_param(vb, &[k, d], "conv")?,
        })
    }

    /// The kernel length k.
    pub fn kernel(&self) -> usize {
        self.weight.dims()[0]
    }

    /// y [B, T, C] of x [B, T, C], with the inputs before the piece taken from `prev`
    /// [B, k-1, C] (zeros at a sequence start), and the last k-1 inputs (detached) for the next
    /// piece (the fused op; `crate::ops::reference::short_conv` is its plain twin).
    ///
    /// # Errors
    /// Shape mismatches.
    pub fn forward(
        &self,
        x: &Tensor,
        prev: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor), ModelError> {
        Ok(crate::ops::short_conv(x, &self.weight, prev)?)
    }
}

/// The pre-norm feed-forward of a layer: w2 · gelu(w1 · norm2(x)), w1 [d_model, hidden],
/// w2 [hidden, d_model].
#[derive(Debug, Clone)]
struct FeedForward {
    norm: RmsNorm,
    w1: Tensor,
    w2: Tensor,
}

/// x [B, T, K] · w [K, N] -> [B, T, N].
fn project(x: &Tensor, w: &Tensor) -> Result<Tensor, ModelError> {
    let (b, t, k) = x.dims3()?;
    Ok(x.reshape((b * t, k))?.matmul(w)?.reshape((b, t, ()))?)
}

impl FeedForward {
    fn new(dm: usize, hidden: usize, vb: &VarBuilder) -> Result<FeedForward, ModelError> {
        Ok(FeedForward {
            norm: RmsNorm::new(dm, vb, "norm2")?,
            w1: get_param(vb, &[dm, hidden], "mlp.w1")?,
            w2: get_param(vb, &[hidden, dm], "mlp.w2")?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        // the fused parallel GELU: candle's backward is ~10 single-threaded passes
        let h = crate::ops::gelu(&project(&self.norm.forward(x)?, &self.w1)?)?;
        project(&h, &self.w2)
    }
}

/// Streaming state of one [`ResidualBlock`]: the mixer's retention state or KV cache, and the
/// short convolution's window into the previous piece.
#[derive(Debug, Clone, Default)]
pub struct LayerState {
    /// The mixer's state (None before the first token).
    pub(super) mix: Option<BlockState>,
    /// The last k-1 normalised inputs [B, k-1, d_model] (None before the first token, or
    /// without a convolution).
    pub(super) conv: Option<Tensor>,
}

/// What the router reads besides the hidden states: the bigram entropy [B, T] and the
/// memorable marks [B, T] of oracle routing.
#[derive(Clone, Copy, Default)]
pub(super) struct RouterInputs<'a> {
    pub entropy: Option<&'a Tensor>,
    pub marks: Option<&'a Tensor>,
}

/// What a layer gives besides the new hidden states: the orders α [B, H, T] and the entity
/// logits [B, T] of a routed mixer.
pub(super) struct LayerOutput {
    pub x: Tensor,
    pub alpha: Option<Tensor>,
    pub entity_logit: Option<Tensor>,
}

/// One pre-norm residual layer: a norm, the optional short convolution, the mixer
/// ([`Block`]) and the optional feed-forward. Its tensors are `norm1`, `conv`, `mix.*`,
/// `norm2` and `mlp.{w1,w2}` under the layer's prefix (`blocks.<l>` in a model).
pub struct ResidualBlock {
    norm1: RmsNorm,
    conv: Option<ShortConv>,
    mix: Block,
    ffn: Option<FeedForward>,
}

impl ResidualBlock {
    /// The layer of `cfg` with mixer config `mix`, from the tensors under `vb`.
    ///
    /// # Errors
    /// A tensor missing or misshapen; a mixer the layer refuses.
    pub fn new(
        cfg: &ModelConfig,
        mix: BlockConfig,
        vb: &VarBuilder,
    ) -> Result<ResidualBlock, ModelError> {
        let dm = cfg.d_model;
        Ok(ResidualBlock {
            norm1: RmsNorm::new(dm, vb, "norm1")?,
            conv: match cfg.short_conv {
                0 => None,
                k => Some(ShortConv::new(k, dm, vb)?),
            },
            mix: Block::new(mix, vb.pp("mix"))?,
            ffn: match cfg.mlp_mult {
                0 => None,
                m => Some(FeedForward::new(dm, m * dm, vb)?),
            },
        })
    }

    /// The mixer.
    pub fn mixer(&self) -> &Block {
        &self.mix
    }

    /// The mixer, mutably (node tables and their horizon).
    pub(super) fn mixer_mut(&mut self) -> &mut Block {
        &mut self.mix
    }

    /// The short convolution, if any.
    pub fn conv(&self) -> Option<&ShortConv> {
        self.conv.as_ref()
    }

    /// The pass `pass` over x [B, T, d_model]: training ignores `state`; a stream or decode
    /// pass continues it and leaves the state after the last token.
    pub(super) fn run(
        &self,
        x: &Tensor,
        inputs: RouterInputs,
        state: &mut LayerState,
        pass: Pass,
    ) -> Result<LayerOutput, ModelError> {
        let mut xn = self.norm1.forward(x)?;
        if let Some(conv) = &self.conv {
            let prev = if pass == Pass::Train {
                None
            } else {
                state.conv.as_ref()
            };
            let (y, tail) = conv.forward(&xn, prev)?;
            if pass != Pass::Train {
                state.conv = Some(tail);
            }
            xn = y;
        }
        let out = self
            .mix
            .run(&xn, inputs.entropy, inputs.marks, &mut state.mix, pass)?;
        let mut x = (x + out.y)?;
        if let Some(ffn) = &self.ffn {
            x = (&x + ffn.forward(&x)?)?;
        }
        Ok(LayerOutput {
            x,
            alpha: out.alpha,
            entity_logit: out.entity_logit,
        })
    }
}
