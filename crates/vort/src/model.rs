//! The sequence model of the experiments: token embedding (plus a previous-token embedding,
//! a one-token shift as in RWKV / H3 so that a pair `[key][value]` can be stored at one
//! position) -> L pre-norm residual blocks (memory mixer from `vort::block`, then an MLP)
//! -> RMSNorm -> linear head. All parameters are initialised from the run seed with a
//! seeded generator (candle's own initialisers draw from an unseeded RNG).
//!
//! For VORT with an entropy-driven router, a bigram table (the "shallow next-token
//! predictor" of docs/DESIGN.md §2) gives the entropy H_i of its next-token distribution at each
//! token, in units of ln V (so H_i ∈ [0, 1]); it is trained on next-token prediction of every
//! position and enters the router as a constant (stop-gradient).

use crate::block::{Block, BlockConfig, BlockState, Memory, Routing};
use crate::features::FeatureMap;
use crate::nodes::{MemoryMode, NodeSpec};
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{VarBuilder, VarMap};
use serde::{Deserialize, Serialize};
use vort_math::rng::{stream_seed, Stream, XorShift64Star};

/// Why a model could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The memory kind is not one of vort|power-law|exponential|retnet|mixture|softmax.
    #[error(
        "unknown memory kind `{0}` (expected vort|power-law|exponential|retnet|mixture|softmax)"
    )]
    UnknownMemory(String),
    /// A field is out of its domain.
    #[error("invalid model config: {0}")]
    Invalid(String),
    /// The layer refused its configuration or input.
    #[error(transparent)]
    Layer(#[from] crate::VortError),
    /// candle failed.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
}

/// The memory mixer of every block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryKind {
    /// Power-law retention with routed per-token orders (VORT).
    #[default]
    Vort,
    /// Fixed-order power law (no routing).
    PowerLaw,
    /// One learned exponential per head.
    Exponential,
    /// RetNet's fixed per-head decays γ_h = 1 - 2^(-5-h).
    Retnet,
    /// Mixture of M fixed exponentials with learned weights.
    Mixture,
    /// Full causal softmax attention.
    Softmax,
}

impl MemoryKind {
    /// The kinds of the synthetic and books reproductions, in report order (RetNet's fixed
    /// decays joined with the recall reproduction).
    pub const ALL: [MemoryKind; 5] = [
        MemoryKind::Vort,
        MemoryKind::PowerLaw,
        MemoryKind::Exponential,
        MemoryKind::Mixture,
        MemoryKind::Softmax,
    ];
    /// Name in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::Vort => "vort",
            MemoryKind::PowerLaw => "power-law",
            MemoryKind::Exponential => "exponential",
            MemoryKind::Retnet => "retnet",
            MemoryKind::Mixture => "mixture",
            MemoryKind::Softmax => "softmax",
        }
    }
}

impl std::fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for MemoryKind {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self, ModelError> {
        MemoryKind::ALL
            .into_iter()
            .chain([MemoryKind::Retnet])
            .find(|k| k.name() == s || k.name().replace('-', "_") == s)
            .ok_or_else(|| ModelError::UnknownMemory(s.into()))
    }
}

/// Router signals of the VORT memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RouterKind {
    /// Entity probe and entropy.
    #[default]
    Full,
    /// Entity probe only.
    EntityOnly,
    /// Entropy only.
    EntropyOnly,
}

/// Model configuration (the `[model]` table of a run config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Memory mixer: "vort", "power-law", "exponential", "retnet", "mixture" or "softmax".
    pub memory: MemoryKind,
    /// Residual width d_model.
    pub d_model: usize,
    /// Blocks L.
    pub layers: usize,
    /// Heads per block.
    pub heads: usize,
    /// Head dim of queries, keys and values.
    pub head_dim: usize,
    /// Random features per head (FAVOR+).
    pub features: usize,
    /// Feature map: "favor" (FAVOR+, `features` of them), "elu" (ELU+1, m = head_dim) or
    /// "taylor" (Based's second-order Taylor map, m = 1 + d + d(d+1)/2 for head_dim d).
    pub feature_map: FeatureMap,
    /// MLP hidden width = mlp_mult · d_model (0: no MLP).
    pub mlp_mult: usize,
    /// Chunk length of the chunked retention.
    pub chunk: usize,
    /// Add a previous-token embedding to the input (one-token shift).
    pub token_shift: bool,
    /// Kernel of the short causal depthwise convolution in front of every mixer (Zoology's
    /// recipe; 0 = none).
    pub short_conv: usize,
    /// VORT memory mode: "shared" nodes or "banks".
    pub vort_mode: MemoryMode,
    /// VORT banks K (banks mode).
    pub banks: usize,
    /// Smallest order δ of the VORT router.
    pub delta: f64,
    /// Router signals: "full", "entity-only" or "entropy-only".
    pub router: RouterKind,
    /// Initial router bias c of every head (the layer's own default is 0; with the entropy
    /// signal near 1 at start, c = 0 starts tokens at α ≈ δ + 0.3 (1 - δ)).
    pub router_bias_init: f64,
    /// Order of the fixed power-law baseline.
    pub power_law_alpha: f64,
    /// SOE horizon (lags certified); 0 = the task's sequence length.
    pub horizon: u64,
    /// SOE relative tolerance.
    pub soe_eps: f64,
    /// Exponentials M of the mixture baseline.
    pub mixture_m: usize,
    /// Smallest rate Λ of the mixture baseline.
    pub mixture_min_rate: f64,
    /// Initial q/k scale (|q̂| = |k̂| = scale).
    pub qk_scale_init: f64,
    /// eps_den of the normalised retention.
    pub eps_den: f64,
    /// Attention window of the softmax memory: 0 = full causal softmax (O(T²)); w > 0 =
    /// each token attends to the last w tokens, itself included (`Memory::SlidingSoftmax`,
    /// O(T·w)), the affordable softmax baseline at long T (8K-byte book sequences).
    pub softmax_window: usize,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            memory: MemoryKind::Vort,
            d_model: 64,
            layers: 2,
            heads: 4,
            head_dim: 16,
            features: 32,
            feature_map: FeatureMap::Favor,
            mlp_mult: 2,
            chunk: 64,
            token_shift: true,
            short_conv: 0,
            vort_mode: MemoryMode::Shared,
            banks: 4,
            delta: 0.1,
            router: RouterKind::Full,
            router_bias_init: 0.0,
            power_law_alpha: 0.8,
            horizon: 0,
            soe_eps: 1e-3,
            mixture_m: 5,
            mixture_min_rate: 1e-3,
            qk_scale_init: 2.0,
            eps_den: 1e-6,
            softmax_window: 0,
        }
    }
}

impl ModelConfig {
    /// The recipe of VORT's node table at `horizon` (the `[model]` fields vort_mode, banks,
    /// delta and soe_eps).
    pub fn node_spec(&self, horizon: u64) -> NodeSpec {
        NodeSpec {
            mode: self.vort_mode,
            banks: self.banks,
            delta: self.delta,
            horizon,
            eps: self.soe_eps,
        }
    }

    /// The certified SOE horizon of the memory for sequences of `seq_len` (`horizon`, or
    /// `seq_len` where it is 0).
    pub fn memory_horizon(&self, seq_len: usize) -> u64 {
        if self.horizon == 0 {
            seq_len as u64
        } else {
            self.horizon
        }
    }

    /// The block configuration of layer `layer` (seeded from `seed`), for sequences of `seq_len`.
    pub fn block_config(&self, seed: u64, layer: usize, seq_len: usize) -> BlockConfig {
        let horizon = self.memory_horizon(seq_len);
        let memory = match self.memory {
            MemoryKind::Vort => Memory::Vort {
                nodes: self.node_spec(horizon),
                routing: match self.router {
                    RouterKind::Full => Routing::Full,
                    RouterKind::EntityOnly => Routing::EntityOnly,
                    RouterKind::EntropyOnly => Routing::EntropyOnly,
                },
            },
            MemoryKind::PowerLaw => Memory::PowerLaw {
                alpha: self.power_law_alpha,
                horizon,
                eps: self.soe_eps,
            },
            MemoryKind::Exponential => Memory::Exponential,
            MemoryKind::Retnet => Memory::RetNet,
            MemoryKind::Mixture => Memory::ExpMixture {
                m: self.mixture_m,
                min_rate: self.mixture_min_rate,
            },
            MemoryKind::Softmax if self.softmax_window > 0 => Memory::SlidingSoftmax {
                window: self.softmax_window,
            },
            MemoryKind::Softmax => Memory::Softmax,
        };
        BlockConfig {
            d_model: self.d_model,
            heads: self.heads,
            head_dim: self.head_dim,
            features: self.features,
            feature_map: self.feature_map,
            memory,
            chunk: self.chunk,
            eps_den: self.eps_den,
            qk_scale_init: self.qk_scale_init,
            seed: stream_seed(seed, Stream::Block, layer as u64),
            fused: true,
        }
    }

    /// Checks the sizes.
    ///
    /// # Errors
    /// [`ModelError::Invalid`] naming the field.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.d_model == 0 || self.layers == 0 || self.heads == 0 || self.head_dim == 0 {
            return Err(ModelError::Invalid(
                "d_model, layers, heads and head_dim must be >= 1".into(),
            ));
        }
        if self.chunk == 0 || self.features == 0 {
            return Err(ModelError::Invalid(
                "chunk and features must be >= 1".into(),
            ));
        }
        if self.short_conv == 1 || self.short_conv > 16 {
            return Err(ModelError::Invalid(format!(
                "short_conv = {} must be 0 (none) or in [2, 16] (a short convolution)",
                self.short_conv
            )));
        }
        if !(self.delta > 0.0 && self.delta < 1.0) {
            return Err(ModelError::Invalid(format!(
                "delta = {:?} must be in (0, 1)",
                self.delta
            )));
        }
        let finite = |name: &str, x: f64, ok: bool, domain: &str| -> Result<(), ModelError> {
            if x.is_finite() && ok {
                Ok(())
            } else {
                Err(ModelError::Invalid(format!(
                    "{name} = {x:?} must be {domain}"
                )))
            }
        };
        finite("router_bias_init", self.router_bias_init, true, "finite")?;
        finite(
            "qk_scale_init",
            self.qk_scale_init,
            self.qk_scale_init > 0.0,
            "finite and > 0",
        )?;
        finite(
            "eps_den",
            self.eps_den,
            self.eps_den > 0.0,
            "finite and > 0",
        )?;
        let (lo, hi) = (vort_math::limits::MIN_EPS, vort_math::limits::MAX_EPS);
        finite(
            "soe_eps",
            self.soe_eps,
            (lo..=hi).contains(&self.soe_eps),
            &format!("in [{lo:e}, {hi}]"),
        )?;
        finite(
            "mixture_min_rate",
            self.mixture_min_rate,
            self.mixture_min_rate > 0.0 && self.mixture_min_rate <= 1.0,
            "in (0, 1]",
        )?;
        if self.mixture_m == 0 {
            return Err(ModelError::Invalid("mixture_m must be >= 1".into()));
        }
        if self.horizon > vort_math::limits::MAX_HORIZON {
            return Err(ModelError::Invalid(format!(
                "horizon = {} must be <= {} (0 = the sequence length)",
                self.horizon,
                vort_math::limits::MAX_HORIZON
            )));
        }
        if self.memory == MemoryKind::Vort && self.vort_mode == MemoryMode::Banks && self.banks < 2
        {
            return Err(ModelError::Invalid(format!(
                "banks = {} must be >= 2 in banks mode (one bank is a fixed order δ)",
                self.banks
            )));
        }
        if !(self.power_law_alpha > 0.0 && self.power_law_alpha <= 1.0) {
            return Err(ModelError::Invalid(format!(
                "power_law_alpha = {:?} must be in (0, 1]",
                self.power_law_alpha
            )));
        }
        Ok(())
    }

    /// Whether the blocks have a router (VORT).
    pub fn routed(&self) -> bool {
        self.memory == MemoryKind::Vort
    }
    /// Whether the router uses the bigram entropy.
    pub fn uses_entropy(&self) -> bool {
        self.routed() && matches!(self.router, RouterKind::Full | RouterKind::EntropyOnly)
    }
}

/// What [`Model::forward`] returns.
#[derive(Debug)]
pub struct ModelOutput {
    /// Final hidden states after the last norm, [B, T, d_model].
    pub hidden: Tensor,
    /// Bigram logits [B, T, V] (only when the router uses entropy).
    pub bigram_logits: Option<Tensor>,
    /// Per block, the orders α [B, H, T] (VORT only).
    pub alphas: Vec<Tensor>,
    /// Per block, the entity-probe logits [B, T] (VORT only).
    pub entity_logits: Vec<Tensor>,
}

/// Streaming state of a [`Model`]: each block's retention state (or KV cache) and the last
/// token seen (for the one-token shift).
#[derive(Debug, Clone)]
pub struct ModelState {
    blocks: Vec<Option<BlockState>>,
    /// Per block, the last short_conv - 1 normalised inputs [B, k-1, d_model] (the short
    /// convolution's window into the previous piece).
    conv: Vec<Option<Tensor>>,
    last_token: Option<Tensor>,
}

impl ModelState {
    /// Resident bytes of the block states (retention states or KV caches).
    pub fn bytes(&self) -> usize {
        let size = |t: &Tensor| t.elem_count() * t.dtype().size_in_bytes();
        self.blocks
            .iter()
            .flatten()
            .map(|s| match s {
                BlockState::Retention(s) => s.bytes(),
                BlockState::Kv { k, v } => size(k) + size(v),
            })
            .sum()
    }
}

struct Mlp {
    w1: Tensor,
    w2: Tensor,
}

/// The model: its parameters come from a [`VarBuilder`] ([`Model::new`]), seeded ones from
/// [`Model::init`] / [`Model::seeded`].
pub struct Model {
    /// Its configuration.
    pub cfg: ModelConfig,
    /// Vocabulary size.
    pub vocab: usize,
    emb: Tensor,
    prev_emb: Option<Tensor>,
    bigram: Option<Tensor>,
    blocks: Vec<Block>,
    norms1: Vec<Tensor>,
    convs: Vec<Option<Tensor>>, // [k, d_model] per block
    norms2: Vec<Tensor>,
    mlps: Vec<Option<Mlp>>,
    norm_f: Tensor,
    head: Tensor,
}

/// Inserts `init` under `name` in `vm` unless a parameter of that name exists.
fn init_param(vm: &VarMap, name: &str, init: Tensor) -> Result<(), ModelError> {
    let mut data = vm
        .data()
        .lock()
        .map_err(|_| ModelError::Invalid("VarMap lock poisoned".into()))?;
    if !data.contains_key(name) {
        data.insert(name.into(), Var::from_tensor(&init)?);
    }
    Ok(())
}

/// The parameter `name` of shape `shape` from `vb`, or an error naming it.
fn get_param(vb: &VarBuilder, shape: &[usize], name: &str) -> Result<Tensor, ModelError> {
    if !vb.contains_tensor(name) {
        return Err(ModelError::Invalid(format!(
            "parameter `{name}` is missing (a VarMap is filled by Model::init)"
        )));
    }
    let t = vb.get(shape, name)?;
    Ok(t)
}

/// RMSNorm with a learned gain: x / sqrt(mean(x²) + 1e-6) · w, x [.., D], w [D] (the fused
/// parallel op; `crate::ops::reference::rms_norm` is its plain twin).
fn rms_norm(x: &Tensor, w: &Tensor) -> Result<Tensor, ModelError> {
    Ok(crate::ops::rms_norm(x, w, 1e-6)?)
}

/// Short causal depthwise convolution: y[b, t, c] = Σ_{i<k} w[i, c] · x[b, t-i, c], with x
/// before the piece taken from `prev` [B, k-1, C] (zeros at a sequence start). Returns y
/// [B, T, C] and the last k-1 inputs (detached) for the next piece (the fused op;
/// `crate::ops::reference::short_conv` is its plain twin).
fn short_conv(
    x: &Tensor,
    w: &Tensor,
    prev: Option<&Tensor>,
) -> Result<(Tensor, Tensor), ModelError> {
    Ok(crate::ops::short_conv(x, w, prev)?)
}

/// x [B, T, K] · w [K, N] -> [B, T, N].
fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor, ModelError> {
    let (b, t, k) = x.dims3()?;
    Ok(x.reshape((b * t, k))?.matmul(w)?.reshape((b, t, ()))?)
}

impl Model {
    /// Name of the bigram table in the VarMap (the trainer gives it its own learning rate).
    pub const BIGRAM_PARAM: &'static str = "bigram";

    /// Seeded initialisation: fills `vm` with every parameter of the model for a vocabulary of
    /// `vocab`, drawn from `seed` (parameters already present are kept). [`Model::new`] reads
    /// them back; [`Model::seeded`] does both.
    ///
    /// # Errors
    /// Invalid sizes.
    pub fn init(
        cfg: &ModelConfig,
        vocab: usize,
        seed: u64,
        vm: &VarMap,
        device: &Device,
    ) -> Result<(), ModelError> {
        cfg.validate()?;
        let dm = cfg.d_model;
        let mut rng = XorShift64Star::new(stream_seed(seed, Stream::ModelInit, 0));
        let mut mat = |rows: usize, cols: usize, std: f64| -> Result<Tensor, ModelError> {
            Ok(
                Tensor::from_vec(rng.normals(rows * cols, std), (rows, cols), device)?
                    .to_dtype(DType::F32)?,
            )
        };
        let ones = |n: usize| Tensor::ones(n, DType::F32, device);
        // the draw order is part of every committed run's numbers: emb, prev_emb, bigram, each
        // layer's MLP, head (blocks and convolutions draw from generators of their own)
        init_param(vm, "emb", mat(vocab, dm, 1.0)?)?;
        if cfg.token_shift {
            init_param(vm, "prev_emb", mat(vocab, dm, 1.0)?)?;
        }
        if cfg.uses_entropy() {
            init_param(vm, Self::BIGRAM_PARAM, mat(vocab, vocab, 0.0)?)?;
        }
        // the sequence length only sets the node tables' horizon, which no parameter depends on
        for l in 0..cfg.layers {
            let bc = cfg.block_config(seed, l, 1);
            if cfg.routed() && cfg.router_bias_init != 0.0 {
                // set before Block::init, which keeps it
                init_param(
                    vm,
                    &format!("blocks.{l}.mix.router.c"),
                    Tensor::full(cfg.router_bias_init as f32, cfg.heads, device)?,
                )?;
            }
            Block::init(&bc, vm, &format!("blocks.{l}.mix"), device)?;
            init_param(vm, &format!("blocks.{l}.norm1"), ones(dm)?)?;
            if cfg.short_conv > 0 {
                // identity at lag 0 plus small random taps: the block starts as without the
                // convolution, and the shift a key-value binding needs is one tap away
                let k = cfg.short_conv;
                let mut conv_rng =
                    XorShift64Star::new(stream_seed(seed, Stream::ShortConv, l as u64));
                let mut w = conv_rng.normals(k * dm, 0.3);
                for x in &mut w[..dm] {
                    *x += 1.0;
                }
                let w = Tensor::from_vec(w, (k, dm), device)?.to_dtype(DType::F32)?;
                init_param(vm, &format!("blocks.{l}.conv"), w)?;
            }
            if cfg.mlp_mult > 0 {
                let hid = cfg.mlp_mult * dm;
                init_param(vm, &format!("blocks.{l}.norm2"), ones(dm)?)?;
                let s1 = (1.0 / dm as f64).sqrt();
                init_param(vm, &format!("blocks.{l}.mlp.w1"), mat(dm, hid, s1)?)?;
                let s2 = (1.0 / hid as f64).sqrt() / (cfg.layers as f64).sqrt();
                init_param(vm, &format!("blocks.{l}.mlp.w2"), mat(hid, dm, s2)?)?;
            }
        }
        init_param(vm, "norm_f", ones(dm)?)?;
        init_param(vm, "head", mat(dm, vocab, (1.0 / dm as f64).sqrt())?)?;
        Ok(())
    }

    /// [`Model::init`] into `vm`, then [`Model::new`] from it: a freshly seeded model whose
    /// parameters are the `Var`s of `vm` (what a trainer optimises).
    ///
    /// # Errors
    /// As [`Model::init`] and [`Model::new`].
    pub fn seeded(
        cfg: &ModelConfig,
        vocab: usize,
        seq_len: usize,
        seed: u64,
        vm: &VarMap,
        device: &Device,
    ) -> Result<Model, ModelError> {
        Model::init(cfg, vocab, seed, vm, device)?;
        let vb = VarBuilder::from_varmap(vm, DType::F32, device);
        Model::new(cfg, vocab, seq_len, seed, vb)
    }

    /// Builds the model for a vocabulary of `vocab` tokens and sequences of `seq_len` (the
    /// node tables' horizon when `cfg.horizon` is 0) from the parameters in `vb`: a `VarMap`
    /// filled by [`Model::init`], or any candle source such as
    /// `VarBuilder::from_mmaped_safetensors` over a `vort export` file's `param/` tensors.
    /// `seed` is the run's: it seeds the random features, which are not parameters.
    ///
    /// # Errors
    /// Invalid sizes, an SOE that cannot be certified, a parameter missing or misshapen.
    pub fn new(
        cfg: &ModelConfig,
        vocab: usize,
        seq_len: usize,
        seed: u64,
        vb: VarBuilder,
    ) -> Result<Model, ModelError> {
        cfg.validate()?;
        let dm = cfg.d_model;
        let get = |shape: &[usize], name: &str| get_param(&vb, shape, name);
        let emb = get(&[vocab, dm], "emb")?;
        let prev_emb = if cfg.token_shift {
            Some(get(&[vocab, dm], "prev_emb")?)
        } else {
            None
        };
        let bigram = if cfg.uses_entropy() {
            Some(get(&[vocab, vocab], Self::BIGRAM_PARAM)?)
        } else {
            None
        };
        let ones = Tensor::ones(dm, DType::F32, vb.device())?;
        let (mut blocks, mut convs) = (Vec::new(), Vec::new());
        let (mut norms1, mut norms2, mut mlps) = (Vec::new(), Vec::new(), Vec::new());
        for l in 0..cfg.layers {
            let bc = cfg.block_config(seed, l, seq_len);
            blocks.push(Block::new(bc, vb.pp(format!("blocks.{l}.mix")))?);
            norms1.push(get(&[dm], &format!("blocks.{l}.norm1"))?);
            convs.push(if cfg.short_conv > 0 {
                Some(get(&[cfg.short_conv, dm], &format!("blocks.{l}.conv"))?)
            } else {
                None
            });
            if cfg.mlp_mult > 0 {
                let hid = cfg.mlp_mult * dm;
                norms2.push(get(&[dm], &format!("blocks.{l}.norm2"))?);
                let w1 = get(&[dm, hid], &format!("blocks.{l}.mlp.w1"))?;
                let w2 = get(&[hid, dm], &format!("blocks.{l}.mlp.w2"))?;
                mlps.push(Some(Mlp { w1, w2 }));
            } else {
                norms2.push(ones.clone());
                mlps.push(None);
            }
        }
        let norm_f = get(&[dm], "norm_f")?;
        let head = get(&[dm, vocab], "head")?;
        Ok(Model {
            cfg: cfg.clone(),
            vocab,
            emb,
            prev_emb,
            bigram,
            blocks,
            norms1,
            convs,
            norms2,
            mlps,
            norm_f,
            head,
        })
    }

    /// The device the parameters live on.
    pub fn device(&self) -> &Device {
        self.emb.device()
    }

    /// The blocks (for inspection: node tables, configs).
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// Forward over tokens [B, T] (u32).
    ///
    /// # Errors
    /// Shape errors; tokens outside the vocabulary.
    pub fn forward(&self, tokens: &Tensor) -> Result<ModelOutput, ModelError> {
        self.run(tokens, None, false)
    }

    /// Streaming forward: tokens [B, T] continuing the stream in `state` (which is updated).
    /// Feeding a sequence in pieces gives the same hidden states as one [`Model::forward`]
    /// pass, up to the rounding of the two retention forms (tested); memory stays
    /// [`ModelState::bytes`], flat in the stream length for the retention memories.
    ///
    /// # Errors
    /// Shape errors; tokens outside the vocabulary; a state from another batch size.
    pub fn forward_with_state(
        &self,
        tokens: &Tensor,
        state: &mut ModelState,
    ) -> Result<ModelOutput, ModelError> {
        self.run(tokens, Some(state), false)
    }

    fn run(
        &self,
        tokens: &Tensor,
        mut state: Option<&mut ModelState>,
        decode: bool,
    ) -> Result<ModelOutput, ModelError> {
        let (b, t) = tokens.dims2()?;
        let flat = tokens.flatten_all()?;
        let mut x = self.emb.index_select(&flat, 0)?.reshape((b, t, ()))?;
        if let Some(pe) = &self.prev_emb {
            let prev = pe.index_select(&flat, 0)?.reshape((b, t, ()))?;
            // shift right by one along T: the first row is the previous piece's last token
            // when streaming, zeros at the start of a sequence
            let first = match state.as_ref().and_then(|s| s.last_token.as_ref()) {
                Some(last) => pe.index_select(last, 0)?.reshape((b, 1, ()))?,
                None => Tensor::zeros((b, 1, self.cfg.d_model), DType::F32, tokens.device())?,
            };
            let shifted = if t > 1 {
                Tensor::cat(&[&first, &prev.narrow(1, 0, t - 1)?], 1)?
            } else {
                first
            };
            x = (x + shifted)?;
        }
        x = (x * (1.0 / (2.0f64).sqrt()))?;
        let (bigram_logits, entropy) = match &self.bigram {
            Some(bg) => {
                let logits = bg.index_select(&flat, 0)?.reshape((b, t, self.vocab))?;
                let lp = candle_nn::ops::log_softmax(&logits.detach(), D::Minus1)?;
                // entropy in units of ln V, i.e. in [0, 1] whatever the vocabulary: in nats
                // (≈ ln V at start) the router's -b·H term saturates σ and every token starts
                // at α ≈ δ with almost no gradient (measured: α stuck at 0.12 on every token)
                let ent = ((lp.exp()? * &lp)?.sum(D::Minus1)?.neg()? / (self.vocab as f64).ln())?;
                (Some(logits), Some(ent.detach()))
            }
            None => (None, None),
        };
        let mut alphas = Vec::new();
        let mut entity_logits = Vec::new();
        for (l, blk) in self.blocks.iter().enumerate() {
            let mut xn = rms_norm(&x, &self.norms1[l])?;
            if let Some(w) = &self.convs[l] {
                let prev = state.as_ref().and_then(|s| s.conv[l].as_ref());
                let (y, tail) = short_conv(&xn, w, prev)?;
                if let Some(st) = state.as_deref_mut() {
                    st.conv[l] = Some(tail);
                }
                xn = y;
            }
            let out = match state.as_deref_mut() {
                Some(st) => {
                    let o = if decode {
                        blk.step(&xn, entropy.as_ref(), st.blocks[l].as_ref())?
                    } else {
                        blk.forward_with_state(&xn, entropy.as_ref(), st.blocks[l].as_ref())?
                    };
                    st.blocks[l] = o.state.clone();
                    o
                }
                None => blk.forward(&xn, entropy.as_ref())?,
            };
            x = (x + out.y)?;
            if let Some(a) = out.alpha {
                alphas.push(a);
            }
            if let Some(e) = out.entity_logit {
                entity_logits.push(e);
            }
            if let Some(mlp) = &self.mlps[l] {
                // the fused parallel GELU: candle's backward is ~10 single-threaded passes
                let h = crate::ops::gelu(&linear(&rms_norm(&x, &self.norms2[l])?, &mlp.w1)?)?;
                x = (x + linear(&h, &mlp.w2)?)?;
            }
        }
        if let Some(st) = state {
            st.last_token = Some(tokens.narrow(1, t - 1, 1)?.flatten_all()?);
        }
        let hidden = rms_norm(&x, &self.norm_f)?;
        Ok(ModelOutput {
            hidden,
            bigram_logits,
            alphas,
            entity_logits,
        })
    }

    /// The certified horizon of the model's memory (the smallest over its blocks; None for
    /// memories without node tables: exponentials, softmax).
    pub fn horizon(&self) -> Option<u64> {
        self.blocks.iter().filter_map(Block::horizon).min()
    }

    /// Rebuilds every block's node tables for `horizon` (e.g. `crate::nodes::STREAM_HORIZON`
    /// before streaming a model trained at 8K). Parameters are untouched; start new streams
    /// afterwards (the state size changes with the node count).
    ///
    /// # Errors
    /// A horizon the SOE builder refuses, or no certificate.
    pub fn set_horizon(&mut self, horizon: u64) -> Result<(), ModelError> {
        for blk in &mut self.blocks {
            blk.set_horizon(horizon)?;
        }
        Ok(())
    }

    /// Decodes one token: feeds `token` (batch 1) after the stream in `state` and returns the
    /// next-token logits `[V]`, through each block's recurrent form ([`Block::step`]; inference,
    /// no gradient). O(1) memory for the retention memories (the state is the same
    /// [`ModelState`] that [`Model::forward_with_state`] carries, so a prompt can be prefilled
    /// in pieces and continued token by token).
    ///
    /// # Errors
    /// A token outside the vocabulary, a state of another batch size, a stream past the
    /// memory's certified horizon.
    pub fn step(&self, token: u32, state: &mut ModelState) -> Result<Tensor, ModelError> {
        if token as usize >= self.vocab {
            return Err(ModelError::Invalid(format!(
                "token {token} is outside the vocabulary of {}",
                self.vocab
            )));
        }
        let tokens = Tensor::from_vec(vec![token], (1, 1), self.device())?;
        let out = self.run(&tokens, Some(state), true)?;
        Ok(self.logits_at(&out.hidden, &[0])?.squeeze(0)?)
    }

    /// An empty streaming state for this model.
    pub fn new_state(&self) -> ModelState {
        ModelState {
            blocks: vec![None; self.blocks.len()],
            conv: vec![None; self.blocks.len()],
            last_token: None,
        }
    }

    /// Logits at selected flat positions of `hidden` [B, T, D]: positions index B·T -> [P, V].
    ///
    /// # Errors
    /// Out-of-range positions.
    pub fn logits_at(&self, hidden: &Tensor, positions: &[usize]) -> Result<Tensor, ModelError> {
        let (b, t, d) = hidden.dims3()?;
        let idx: Vec<u32> = positions.iter().map(|&p| p as u32).collect();
        let idx = Tensor::from_vec(idx, positions.len(), hidden.device())?;
        let h = hidden.reshape((b * t, d))?.index_select(&idx, 0)?;
        Ok(h.matmul(&self.head)?)
    }
}
