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

mod layer;
mod state;

pub use layer::{LayerState, ResidualBlock, RmsNorm, ShortConv};
pub use state::ModelState;

use crate::block::{Block, BlockConfig, BlockState, Pass, PastHorizon};
use crate::features::FeatureMap;
use crate::mixer::Mixer;
use candle_core::{DType, Device, Module, Tensor, Var, D};
use candle_nn::{Embedding, VarBuilder, VarMap};
use layer::{get_param, RouterInputs};
use serde::{Deserialize, Serialize};
use vort_math::rng::{stream_seed, Stream, XorShift64Star};

/// Why a model could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The mixer is not one of vort|power-law|exponential|retnet|mixture|softmax.
    #[error("unknown mixer `{0}` (expected vort|power-law|exponential|retnet|mixture|softmax)")]
    UnknownMixer(String),
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

/// Model configuration (the `[model]` table of a run config; the mixer is `[model.mixer]`).
/// Missing fields take their defaults. (The lab reads the older flat form of run configs,
/// `memory = "vort"`, `vort_mode`, ..., into this value, in `vort-lab/src/train/model_table.rs`.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
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
    /// Initial q/k scale (|q̂| = |k̂| = scale).
    pub qk_scale_init: f64,
    /// eps_den of the normalised retention.
    pub eps_den: f64,
    /// The mixer of every block (a node horizon of 0: the task's sequence length).
    pub mixer: Mixer,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
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
            qk_scale_init: 2.0,
            eps_den: 1e-6,
            mixer: Mixer::default(),
        }
    }
}

/// Everything [`Model::new`] needs besides the tensors: the vocabulary, the longest sequence
/// the model is built for (the node tables' horizon where the mixer's is 0) and the model
/// with its mixer. A run config holds the same (`[task]` gives the vocabulary and the
/// length, `[model]` the rest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// The longest sequence, in tokens (node tables certified to this lag when the mixer's
    /// horizon is 0; [`Model::set_horizon`] changes it later).
    pub max_len: usize,
    /// The model and its mixer.
    pub model: ModelConfig,
}

impl Config {
    /// The config of `model` over a vocabulary of `vocab_size` tokens and sequences of at most
    /// `max_len`.
    pub fn new(model: ModelConfig, vocab_size: usize, max_len: usize) -> Config {
        Config {
            vocab_size,
            max_len,
            model,
        }
    }

    /// Checks the sizes, the model and its mixer.
    ///
    /// # Errors
    /// [`ModelError::Invalid`] naming the field.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.vocab_size == 0 || self.max_len == 0 {
            return Err(ModelError::Invalid(format!(
                "vocab_size = {} and max_len = {} must be >= 1",
                self.vocab_size, self.max_len
            )));
        }
        self.model.validate()
    }
}

impl ModelConfig {
    /// The block configuration of layer `layer` (seeded from `seed`), for sequences of
    /// `seq_len` (the node horizon where the config says 0).
    fn block(&self, seed: u64, layer: usize, seq_len: usize) -> BlockConfig {
        BlockConfig {
            d_model: self.d_model,
            heads: self.heads,
            head_dim: self.head_dim,
            features: self.features,
            feature_map: self.feature_map,
            mixer: self.mixer.resolved(seq_len),
            chunk: self.chunk,
            eps_den: self.eps_den,
            qk_scale_init: self.qk_scale_init,
            seed: stream_seed(seed, Stream::Block, layer as u64),
            fused: true,
        }
    }

    /// Checks the sizes and the mixer's settings.
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
        for (name, x) in [
            ("qk_scale_init", self.qk_scale_init),
            ("eps_den", self.eps_den),
        ] {
            if !(x.is_finite() && x > 0.0) {
                return Err(ModelError::Invalid(format!(
                    "{name} = {x:?} must be finite and > 0"
                )));
            }
        }
        self.mixer
            .validate()
            .map_err(|e| ModelError::Invalid(format!("[model.mixer] ({}): {e}", self.mixer)))
    }

    /// Whether the blocks have a learned router (VORT).
    pub fn routed(&self) -> bool {
        self.mixer.routed()
    }
    /// Whether the router uses the bigram entropy.
    pub fn uses_entropy(&self) -> bool {
        self.mixer.uses_entropy()
    }

    /// The names of every parameter weight decay applies to (`decay_matrices_only`): the
    /// embeddings, the blocks' projections ([`Block::decayed_params`]), the MLPs and the head.
    pub fn decayed_params(&self) -> Vec<String> {
        let mut names = vec![
            "emb".to_string(),
            "prev_emb".to_string(),
            "head".to_string(),
        ];
        for l in 0..self.layers {
            names.extend(Block::decayed_params().map(|n| format!("blocks.{l}.mix.{n}")));
            names.push(format!("blocks.{l}.mlp.w1"));
            names.push(format!("blocks.{l}.mlp.w2"));
        }
        names
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

/// Where a block's retention-state normaliser sits ([`Model::normaliser_mass`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NormaliserMass {
    /// Σ over nodes and features of the normaliser column, mean over batch rows and heads.
    pub mass: f64,
    /// The share of `mass` held by nodes slower than the given number of tokens.
    pub slow_share: f64,
}

/// The model: its parameters come from a [`VarBuilder`] ([`Model::new`]), seeded ones from
/// [`Model::init`] / [`Model::seeded`].
pub struct Model {
    /// Its configuration.
    pub cfg: ModelConfig,
    /// Vocabulary size.
    pub vocab: usize,
    emb: Embedding,              // [V, d_model]
    prev_emb: Option<Embedding>, // [V, d_model]
    bigram: Option<Embedding>,   // [V, V]
    layers: Vec<ResidualBlock>,
    norm_f: RmsNorm,
    head: Tensor, // [d_model, V]
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

impl Model {
    /// Name of the bigram table in the VarMap (the trainer gives it its own learning rate).
    pub const BIGRAM_PARAM: &'static str = "bigram";

    /// Seeded initialisation: fills `vm` with every parameter of the model for a vocabulary of
    /// `vocab`, drawn from `seed` (parameters already present are kept). [`Model::new`] reads
    /// them back; [`Model::seeded`] does both.
    ///
    /// # Errors
    /// Invalid sizes.
    pub fn init(cfg: &Config, seed: u64, vm: &VarMap, device: &Device) -> Result<(), ModelError> {
        cfg.validate()?;
        let vocab = cfg.vocab_size;
        let cfg = &cfg.model;
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
            let bc = cfg.block(seed, l, 1);
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
        cfg: &Config,
        seed: u64,
        vm: &VarMap,
        device: &Device,
    ) -> Result<Model, ModelError> {
        Model::init(cfg, seed, vm, device)?;
        let vb = VarBuilder::from_varmap(vm, DType::F32, device);
        Model::new(cfg, vb)
    }

    /// Builds the model of `cfg` from the tensors in `vb`: a `VarMap` filled by
    /// [`Model::init`], or any candle source such as `VarBuilder::from_mmaped_safetensors`
    /// over a `vort export` file's `param/` tensors. Nothing else is needed: the FAVOR+
    /// projections are stored tensors (`blocks.<l>.mix.features.omega_t`, buffers that no
    /// optimiser trains), and the node tables follow from the config.
    ///
    /// # Errors
    /// Invalid sizes, an SOE that cannot be certified, a tensor missing or misshapen.
    pub fn new(cfg: &Config, vb: VarBuilder) -> Result<Model, ModelError> {
        cfg.validate()?;
        let (vocab, seq_len) = (cfg.vocab_size, cfg.max_len);
        let cfg = &cfg.model;
        let dm = cfg.d_model;
        let embedding = |width: usize, name: &str| -> Result<Embedding, ModelError> {
            Ok(Embedding::new(
                get_param(&vb, &[vocab, width], name)?,
                width,
            ))
        };
        let emb = embedding(dm, "emb")?;
        let prev_emb = match cfg.token_shift {
            true => Some(embedding(dm, "prev_emb")?),
            false => None,
        };
        let bigram = match cfg.uses_entropy() {
            true => Some(embedding(vocab, Self::BIGRAM_PARAM)?),
            false => None,
        };
        let layers_vb = vb.pp("blocks");
        let layers = (0..cfg.layers)
            .map(|l| {
                // the block seed draws parameters only (Block::init), never read here
                ResidualBlock::new(cfg, cfg.block(0, l, seq_len), &layers_vb.pp(l))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Model {
            cfg: cfg.clone(),
            vocab,
            emb,
            prev_emb,
            bigram,
            layers,
            norm_f: RmsNorm::new(dm, &vb, "norm_f")?,
            head: get_param(&vb, &[dm, vocab], "head")?,
        })
    }

    /// The name and shape of every tensor of the model of `cfg` (parameters and the FAVOR+
    /// buffers, [`crate::block::is_buffer`]), sorted by name: what [`Model::init`] fills and
    /// [`Model::new`] reads (tested for every mixer), so that a loader can check a file
    /// against the model before it builds one. Found by an init on a scratch map that is
    /// dropped (its draws thrown away); no node table is built.
    ///
    /// # Errors
    /// An invalid config.
    pub fn tensor_shapes(cfg: &Config) -> Result<TensorShapes, ModelError> {
        let vm = VarMap::new();
        Model::init(cfg, 0, &vm, &Device::Cpu)?;
        let data = vm
            .data()
            .lock()
            .map_err(|_| ModelError::Invalid("VarMap lock poisoned".into()))?;
        let mut shapes: TensorShapes = data
            .iter()
            .map(|(name, var)| (name.clone(), var.dims().to_vec()))
            .collect();
        shapes.sort();
        Ok(shapes)
    }

    /// The device the parameters live on.
    pub fn device(&self) -> &Device {
        self.head.device()
    }

    /// The residual layers (for inspection: [`ResidualBlock::mixer`] gives node tables and
    /// configs).
    pub fn layers(&self) -> &[ResidualBlock] {
        &self.layers
    }

    /// The mixers of the layers, in order.
    pub fn blocks(&self) -> impl ExactSizeIterator<Item = &Block> + '_ {
        self.layers.iter().map(ResidualBlock::mixer)
    }

    /// Forward over tokens [B, T] (u32).
    ///
    /// # Errors
    /// Shape errors; tokens outside the vocabulary.
    pub fn forward(&self, tokens: &Tensor) -> Result<ModelOutput, ModelError> {
        self.run(tokens, None, None, false)
    }

    /// Forward over tokens [B, T] with the task's memorable marks [B, T] (1 at a token to
    /// remember, 0 elsewhere; any dtype), which oracle routing ([`crate::Routing::Oracle`])
    /// reads and every other mixer ignores. With `state` it streams as
    /// [`Model::forward_with_state`], else it is the training pass of [`Model::forward`].
    ///
    /// # Errors
    /// As [`Model::forward`]; marks of another shape.
    pub fn forward_marked(
        &self,
        tokens: &Tensor,
        marks: Option<&Tensor>,
        state: Option<&mut ModelState>,
    ) -> Result<ModelOutput, ModelError> {
        self.run(tokens, marks, state, false)
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
        self.run(tokens, None, Some(state), false)
    }

    fn run(
        &self,
        tokens: &Tensor,
        marks: Option<&Tensor>,
        mut state: Option<&mut ModelState>,
        decode: bool,
    ) -> Result<ModelOutput, ModelError> {
        let (b, t) = tokens.dims2()?;
        if let Some(st) = state.as_deref() {
            self.check_state(st, b)?;
            self.check_room(st, t)?;
        }
        let mut x = self.emb.forward(tokens)?;
        if let Some(pe) = &self.prev_emb {
            x = (x + Self::shifted(pe, tokens, state.as_deref())?)?;
        }
        x = (x * (1.0 / (2.0f64).sqrt()))?;
        let (bigram_logits, entropy) = match &self.bigram {
            Some(bg) => {
                let logits = bg.forward(tokens)?;
                let lp = candle_nn::ops::log_softmax(&logits.detach(), D::Minus1)?;
                // entropy in units of ln V, i.e. in [0, 1] whatever the vocabulary: in nats
                // (≈ ln V at start) the router's -b·H term saturates σ and every token starts
                // at α ≈ δ with almost no gradient (measured: α stuck at 0.12 on every token)
                let ent = ((lp.exp()? * &lp)?.sum(D::Minus1)?.neg()? / (self.vocab as f64).ln())?;
                (Some(logits), Some(ent.detach()))
            }
            None => (None, None),
        };
        let inputs = RouterInputs {
            entropy: entropy.as_ref(),
            marks,
        };
        let pass = match (&state, decode) {
            (None, _) => Pass::Train,
            (Some(_), false) => Pass::Stream,
            (Some(_), true) => Pass::Decode,
        };
        let mut scratch = LayerState::default();
        let (mut alphas, mut entity_logits) = (Vec::new(), Vec::new());
        for (l, layer) in self.layers.iter().enumerate() {
            let st = match state.as_deref_mut() {
                Some(st) => &mut st.layers[l],
                None => &mut scratch,
            };
            let out = layer.run(&x, inputs, st, pass)?;
            x = out.x;
            alphas.extend(out.alpha);
            entity_logits.extend(out.entity_logit);
        }
        if let Some(st) = state {
            st.consumed(&tokens.narrow(1, t - 1, 1)?.flatten_all()?, b, t);
        }
        let hidden = self.norm_f.forward(&x)?;
        Ok(ModelOutput {
            hidden,
            bigram_logits,
            alphas,
            entity_logits,
        })
    }

    /// The previous-token embeddings of `tokens` [B, T]: `pe` of each token shifted right by
    /// one along T, the first row the previous piece's last token when streaming, zeros at the
    /// start of a sequence (or of a row reset since its last token, ModelState::reset_rows).
    fn shifted(
        pe: &Embedding,
        tokens: &Tensor,
        state: Option<&ModelState>,
    ) -> Result<Tensor, ModelError> {
        let (b, t) = tokens.dims2()?;
        let prev = pe.forward(tokens)?;
        let first = match state.and_then(|s| s.last_token.as_ref()) {
            Some(last) => {
                let e = pe.forward(last)?.reshape((b, 1, ()))?;
                match state.and_then(|s| s.shift_keep.as_ref()) {
                    Some(keep) => e.broadcast_mul(keep)?,
                    None => e,
                }
            }
            None => Tensor::zeros((b, 1, pe.hidden_size()), DType::F32, tokens.device())?,
        };
        Ok(if t > 1 {
            Tensor::cat(&[&first, &prev.narrow(1, 0, t - 1)?], 1)?
        } else {
            first
        })
    }

    /// Refuses a piece of `t` tokens that would carry `state` past the certified horizon,
    /// before any layer's state moves (the blocks check it too, one by one).
    fn check_room(&self, state: &ModelState, t: usize) -> Result<(), ModelError> {
        if let (Some(h), Some(pos)) = (self.context_limit(), state.position()) {
            let context = pos + t as u64;
            if context > h {
                return Err(crate::VortError::BeyondHorizon {
                    context,
                    horizon: h,
                }
                .into());
            }
        }
        Ok(())
    }

    /// The certified horizon of the model's memory (the smallest over its blocks; None for
    /// memories without node tables: exponentials, softmax).
    pub fn horizon(&self) -> Option<u64> {
        self.blocks().filter_map(Block::horizon).min()
    }

    /// The longest context the model accepts (the least of its blocks'
    /// [`Block::context_limit`]); None for no limit.
    pub fn context_limit(&self) -> Option<u64> {
        self.blocks().filter_map(Block::context_limit).min()
    }

    /// Sets what every block does with a context past its node tables' horizon: refuse it (the
    /// default), weigh it by the tables' exponential tail ([`PastHorizon::SoeTail`], to
    /// stream a model with the tables it was trained with), or temper every kernel by
    /// e^(-j/τ) ([`PastHorizon::Tempered`]).
    ///
    /// # Errors
    /// A τ that is not finite and > 0 (no block is changed).
    pub fn set_past_horizon(&mut self, past: PastHorizon) -> Result<(), ModelError> {
        for layer in &mut self.layers {
            layer.mixer_mut().set_past_horizon(past)?;
        }
        Ok(())
    }

    /// Rebuilds every block's node tables for `horizon` (e.g. `crate::nodes::STREAM_HORIZON`
    /// before streaming a model trained at 8K). Parameters are untouched; start new streams
    /// afterwards (the state size changes with the node count).
    ///
    /// # Errors
    /// A horizon the SOE builder refuses, or no certificate.
    pub fn set_horizon(&mut self, horizon: u64) -> Result<(), ModelError> {
        for layer in &mut self.layers {
            layer.mixer_mut().set_horizon(horizon)?;
        }
        Ok(())
    }

    /// Decodes one token: feeds `token` after the stream in `state` (batch 1) and returns the
    /// next-token logits `[V]`: [`Model::decode`] of one row.
    ///
    /// # Errors
    /// As [`Model::decode`].
    pub fn step(&self, token: u32, state: &mut ModelState) -> Result<Tensor, ModelError> {
        let tokens = Tensor::from_vec(vec![token], 1, self.device())?;
        Ok(self.decode(&tokens, state)?.squeeze(0)?)
    }

    /// Decodes one token per stream: feeds tokens `[B]` (u32) after the B streams in `state` and
    /// returns the next-token logits [B, V], through each block's recurrent form
    /// ([`Block::step`]; inference, no gradient). O(1) memory for the retention memories: the
    /// state is the same [`ModelState`] that [`Model::forward_with_state`] carries, so prompts
    /// are prefilled in pieces and continued token by token, each row its own stream.
    ///
    /// # Errors
    /// Tokens that are not `[B]` u32, a token outside the vocabulary, a state of another batch
    /// size, a stream past the memory's certified horizon.
    pub fn decode(&self, tokens: &Tensor, state: &mut ModelState) -> Result<Tensor, ModelError> {
        let ids: Vec<u32> = match (tokens.rank(), tokens.dtype()) {
            (1, DType::U32) => tokens.to_vec1()?,
            _ => {
                return Err(ModelError::Invalid(format!(
                    "decode takes one u32 token per stream, [B]; got {:?} {:?}",
                    tokens.dims(),
                    tokens.dtype()
                )))
            }
        };
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= self.vocab) {
            return Err(ModelError::Invalid(format!(
                "token {bad} is outside the vocabulary of {}",
                self.vocab
            )));
        }
        let b = ids.len();
        let out = self.run(&tokens.reshape((b, 1))?, None, Some(state), true)?;
        let rows: Vec<usize> = (0..b).collect();
        self.logits_at(&out.hidden, &rows)
    }

    /// Per block, where the retention state's normaliser mass sits (None for a block with no
    /// retention state yet, or a KV cache). The mass is Σ over nodes and features of G's last
    /// column, G_n = Σ_s exp(-u_n (t-s)) c_n(α_s) φ(k_s) [v_s, 1]ᵀ: the denominator of every
    /// readout y = φ(q)ᵀ G[..D] / φ(q)ᵀ G[D] is φ(q) against it. The slow share is the part
    /// held by nodes whose time constant 1/u_n exceeds `slow_after` tokens (e.g. the training
    /// length: the part of the past a model trained at that length never weighed).
    ///
    /// # Errors
    /// candle errors reading the state or a learned rate.
    pub fn normaliser_mass(
        &self,
        state: &ModelState,
        slow_after: f64,
    ) -> Result<Vec<Option<NormaliserMass>>, ModelError> {
        let mut out = Vec::with_capacity(self.layers.len());
        for (block, st) in self.blocks().zip(&state.layers) {
            let (Some(BlockState::Retention(st)), Some(rates)) = (&st.mix, block.decay_rates()?)
            else {
                out.push(None);
                continue;
            };
            let g = st.host()?; // [B, H, N, F, D+1]
            let (d1, mut total, mut slow) = (st.d + 1, 0.0f64, 0.0f64);
            for b in 0..st.b {
                for h in 0..st.h {
                    let u = &rates[h.min(rates.len() - 1)];
                    for (n, &un) in u.iter().enumerate().take(st.n) {
                        let base = ((b * st.h + h) * st.n + n) * st.f * d1;
                        let m: f64 = (0..st.f).map(|f| f64::from(g[base + f * d1 + st.d])).sum();
                        total += m;
                        if un * slow_after < 1.0 {
                            slow += m;
                        }
                    }
                }
            }
            let heads = (st.b * st.h).max(1) as f64;
            out.push(Some(NormaliserMass {
                mass: total / heads,
                slow_share: if total > 0.0 { slow / total } else { 0.0 },
            }));
        }
        Ok(out)
    }

    /// Refuses a state of another model or batch (a typed error, where it indexed out of
    /// bounds): its block count, its last token (batch B, inside the vocabulary), each short
    /// convolution's window [B, k-1, d_model], each retention state's (B, heads, nodes,
    /// features, head_dim).
    fn check_state(&self, state: &ModelState, b: usize) -> Result<(), ModelError> {
        let bad = |why: String| {
            Err(ModelError::Invalid(format!(
                "the state does not match this model: {why} (start one with new_state)"
            )))
        };
        let n = self.layers.len();
        if state.layers.len() != n {
            return bad(format!("{} blocks, the model has {n}", state.layers.len()));
        }
        if let Some(last) = &state.last_token {
            let v: Vec<u32> = last.to_vec1()?;
            if v.len() != b {
                return bad(format!("batch {}, the tokens' is {b}", v.len()));
            }
            if v.iter().any(|&x| x as usize >= self.vocab) {
                return bad(format!(
                    "its last token is outside the vocabulary of {}",
                    self.vocab
                ));
            }
        }
        for (l, (layer, st)) in self.layers.iter().zip(&state.layers).enumerate() {
            let want = layer.conv().map(|c| [b, c.kernel() - 1, self.cfg.d_model]);
            if let Some(t) = &st.conv {
                if want.is_none_or(|want| t.dims() != want) {
                    return bad(format!(
                        "block {l}'s convolution window is {:?}, expected {want:?}",
                        t.dims()
                    ));
                }
            }
        }
        for (l, (blk, st)) in self.blocks().zip(&state.layers).enumerate() {
            if let Some(BlockState::Retention(s)) = &st.mix {
                let c = &blk.cfg;
                let want = (b, c.heads, blk.nodes(), blk.features().m, c.head_dim);
                if (s.b, s.h, s.n, s.f, s.d) != want {
                    return bad(format!(
                        "block {l}'s retention state is (B, H, N, F, D) = {:?}, expected {want:?}",
                        (s.b, s.h, s.n, s.f, s.d)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Logits [B, T, V] of the final hidden states `hidden` [B, T, D] ([`ModelOutput::hidden`]):
    /// the same products as [`Model::logits_at`] at every position.
    ///
    /// # Errors
    /// A `hidden` that is not [B, T, d_model].
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor, ModelError> {
        let (b, t, d) = hidden.dims3()?;
        let v = self.head.dim(1)?;
        Ok(hidden
            .reshape((b * t, d))?
            .matmul(&self.head)?
            .reshape((b, t, v))?)
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

/// Tensor names with their shapes.
pub type TensorShapes = Vec<(String, Vec<usize>)>;
