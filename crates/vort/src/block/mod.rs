//! The VORT block (docs/DESIGN.md §2): projections, q/k L2 normalisation with a learned scale, a
//! positive feature map, the router for per-token orders α, the retention (VORT or a baseline,
//! all in the same code path) and the output projection.
//!
//! Router (docs/DESIGN.md §2, `router.rs`): α_i = δ + (1-δ) σ(a·e_i - b·H_i + g·h_i + c), per
//! head, with e_i = σ(p·h_i) the entity probe (its logit is returned for an auxiliary loss) and
//! H_i the entropy of a shallow next-token predictor, supplied by the caller and treated as a
//! constant (stop-gradient).
//!
//! The mixer ([`Mixer`]) chooses VORT or a baseline; every kind shares the projections, the
//! normalisation and (except softmax) the feature map. Each kind is one struct behind a small
//! trait (`kinds.rs`) that holds its own parameters and tables; the block holds one of them.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{Module, VarBuilder, VarMap};
use serde::{Deserialize, Serialize};

use crate::attention::{causal_softmax, sliding_softmax};
use crate::error::{Result, VortError};
use crate::features::{seeded_projection, FeatureMap, Features};
use crate::mixer::{Mixer, Routing};
use crate::nodes::{NodeMode, NodeSpec, NodeTable};
use crate::retention::{
    chunk as chunk_form, fused_chunk, naive_recurrent, normalise, with_ones, Inputs, Rates, State,
};

mod kinds;
mod router;

use kinds::MixerOps;
use vort_math::rng::{self, stream_seed, XorShift64Star};

/// Configuration of one block. Every field is saved with each run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockConfig {
    /// Model width d_model.
    pub d_model: usize,
    /// Heads H.
    pub heads: usize,
    /// Head dim (queries, keys and values).
    pub head_dim: usize,
    /// Random features per head for FAVOR+ (ignored for ELU+1, which has head_dim).
    pub features: usize,
    /// Feature map.
    pub feature_map: FeatureMap,
    /// The mixer (VORT or a baseline) with its own settings; node horizons resolved (>= 1).
    pub mixer: Mixer,
    /// Chunk length of the chunked form.
    pub chunk: usize,
    /// eps_den in y = num / (den + eps_den).
    pub eps_den: f64,
    /// Initial value of the learned q/k scale (|q̂| = |k̂| = scale).
    pub qk_scale_init: f64,
    /// Seed of the initialisation and of the random features.
    pub seed: u64,
    /// Use the fused op (hand-written backward, rate gradient included) in
    /// [`Block::forward_with_entropy`] and streams for every linear memory (on the CPU:
    /// [`crate::ops::fused_on`]); false: the plain candle chunked form (its twin).
    #[serde(default = "default_true")]
    pub fused: bool,
}

fn default_true() -> bool {
    true
}

/// Name of the FAVOR+ projection ωᵀ [head_dim, features] under a block's prefix: a buffer,
/// stored beside the parameters so that weights carry the function they compute (the seed
/// only draws it at initialisation), and never trained.
pub const PROJECTION: &str = "features.omega_t";

/// Whether the tensor `name` (a full VarMap name) is a buffer ([`PROJECTION`]): stored and
/// loaded with the parameters, left out of the optimiser.
pub fn is_buffer(name: &str) -> bool {
    name == PROJECTION || name.ends_with(&format!(".{PROJECTION}"))
}

impl BlockConfig {
    /// Whether the block stores a FAVOR+ projection ([`PROJECTION`]): FAVOR+ features in a
    /// linear mixer (softmax applies no feature map).
    pub fn stores_projection(&self) -> bool {
        self.feature_map == FeatureMap::Favor && !matches!(self.mixer, Mixer::Softmax { .. })
    }
}

impl Default for BlockConfig {
    fn default() -> Self {
        BlockConfig {
            d_model: 64,
            heads: 4,
            head_dim: 16,
            features: 32,
            feature_map: FeatureMap::Favor,
            mixer: Mixer::Vort {
                nodes: NodeSpec {
                    mode: NodeMode::Shared,
                    banks: 4,
                    delta: 0.1,
                    horizon: 4096,
                    eps: 1e-3,
                },
                routing: Routing::Full,
                router_bias_init: 0.0,
            },
            chunk: 64,
            eps_den: 1e-6,
            qk_scale_init: 1.0,
            seed: 0,
            fused: true,
        }
    }
}

/// Recurrent state of a block: the retention state, or the softmax key/value cache (all keys
/// for [`Mixer::Softmax`] with window 0, else the last `window`).
#[derive(Debug, Clone)]
pub enum BlockState {
    /// The retention state (G [B, H, N, F, D+1] and the tokens consumed, which the forms check
    /// against the certified horizon).
    Retention(State<f32>),
    /// Keys and values seen so far (the last `window` of them for a sliding window),
    /// [B, H, t, head_dim] each.
    Kv {
        /// Normalised keys.
        k: Tensor,
        /// Values.
        v: Tensor,
    },
}

/// What a forward pass returns.
#[derive(Debug, Clone)]
pub struct BlockOutput {
    /// Output [B, T, d_model].
    pub y: Tensor,
    /// Orders α [B, H, T] (None for baselines without orders).
    pub alpha: Option<Tensor>,
    /// Entity-probe logits p·h [B, T] (None without a router), for an auxiliary loss.
    pub entity_logit: Option<Tensor>,
}

/// Which pass [`Block::run`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Training forward from an empty state (no state returned).
    Train,
    /// Streaming pieces, state carried (fused or chunked form).
    Stream,
    /// One token through the recurrent form (inference).
    Decode,
}

/// What a memory with node tables does with a context past its tables' certified horizon.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum PastHorizon {
    /// Refuse it ([`VortError::BeyondHorizon`]): the SOE approximates the power law only on
    /// lags 1..=horizon. Rebuild the tables for the stream instead ([`Block::set_horizon`]).
    #[default]
    Refuse,
    /// Weigh those lags by the tables' own tail Σ_n c_n(α) e^(-u_n j): the power law up to the
    /// horizon, then an exponential fall-off at the slowest node's rate (a tempered power
    /// law). Its slowest nodes outlast the horizon (a near-flat kernel of α ≈ 1 needs them),
    /// so this does not bound a carried state's mass.
    SoeTail,
    /// Temper the whole kernel by e^(-j/τ), u_n → u_n + 1/τ on every node: K(j) e^(-j/τ) at
    /// every lag j, bounding the weight of lags far past τ. Changes the kernel within a
    /// window too (by a factor e^(-j/τ)), so it is another model than the one trained.
    Tempered {
        /// The e-folding lag τ > 0.
        tau: f64,
    },
}

/// One VORT (or baseline) block: its parameters come from a [`VarBuilder`] ([`Block::new`]),
/// seeded ones from [`Block::init`] / [`Block::seeded`].
pub struct Block {
    /// The configuration.
    pub cfg: BlockConfig,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    scale_q: Tensor, // [H]
    scale_k: Tensor, // [H]
    features: Features,
    kind: Box<dyn MixerOps>,
    past_horizon: PastHorizon,
}

/// Inserts `init` under `name` in `vm` unless a parameter of that name exists (which must have
/// the same shape): seeded initialisation that keeps what a caller pre-set.
pub(crate) fn init_param(vm: &VarMap, name: &str, init: Tensor) -> Result<()> {
    let mut data = vm
        .data()
        .lock()
        .map_err(|_| VortError::InvalidArgument("VarMap lock poisoned".into()))?;
    if let Some(v) = data.get(name) {
        if v.dims() != init.dims() {
            return Err(VortError::Shape {
                name: name.into(),
                got: v.dims().to_vec(),
                expected: format!("{:?}", init.dims()),
            });
        }
        return Ok(());
    }
    data.insert(name.into(), Var::from_tensor(&init)?);
    Ok(())
}

/// The parameter `name` of shape `shape` from `vb`: a missing one is an error naming it (a
/// `VarMap`-backed builder would otherwise create it silently, zero-initialised).
fn get_param(vb: &VarBuilder, shape: &[usize], name: &str) -> Result<Tensor> {
    if !vb.contains_tensor(name) {
        return Err(VortError::InvalidArgument(format!(
            "parameter `{}` is missing (a VarMap is filled by Block::init)",
            full_name(vb, name)
        )));
    }
    let t = vb.get(shape, name)?;
    if t.dims() != shape {
        return Err(VortError::Shape {
            name: full_name(vb, name),
            got: t.dims().to_vec(),
            expected: format!("{shape:?}"),
        });
    }
    Ok(t)
}

/// Zero sizes are refused before anything is drawn or read.
fn check_sizes(cfg: &BlockConfig) -> Result<()> {
    if cfg.d_model == 0 || cfg.heads == 0 || cfg.head_dim == 0 || cfg.chunk == 0 {
        return Err(VortError::InvalidArgument(format!(
            "block: d_model, heads, head_dim and chunk must be >= 1 ({cfg:?})"
        )));
    }
    Ok(())
}

fn full_name(vb: &VarBuilder, name: &str) -> String {
    let prefix = vb.prefix();
    if prefix.is_empty() {
        name.into()
    } else {
        format!("{prefix}.{name}")
    }
}

impl Block {
    /// Seeded initialisation: fills `vm` under `prefix` with the block's parameters, drawn from
    /// `cfg.seed` (parameters already present are kept, e.g. a router bias set by the caller).
    /// [`Block::new`] then reads them back through a [`VarBuilder`]; [`Block::seeded`] does both.
    ///
    /// # Errors
    /// Zero sizes; a parameter already present with another shape.
    pub fn init(cfg: &BlockConfig, vm: &VarMap, prefix: &str, device: &Device) -> Result<()> {
        check_sizes(cfg)?;
        let (dm, h, dh) = (cfg.d_model, cfg.heads, cfg.head_dim);
        let mut rng = XorShift64Star::new(cfg.seed);
        let mut mat = |rows: usize, cols: usize, std: f64| -> Result<Tensor> {
            Ok(
                Tensor::from_vec(rng.normals(rows * cols, std), (rows, cols), device)?
                    .to_dtype(DType::F32)?,
            )
        };
        let p = |n: &str| format!("{prefix}.{n}");
        let s_in = 1.0 / (dm as f64).sqrt();
        // the draw order is part of every committed run's numbers: wq, wk, wv, wo, then the
        // router's probe and g (drawn for every kind, used by VORT's router only)
        init_param(vm, &p("wq"), mat(dm, h * dh, s_in)?)?;
        init_param(vm, &p("wk"), mat(dm, h * dh, s_in)?)?;
        init_param(vm, &p("wv"), mat(dm, h * dh, s_in)?)?;
        let s_out = 1.0 / ((h * dh) as f64).sqrt();
        init_param(vm, &p("wo"), mat(h * dh, dm, s_out)?)?;
        let probe_init = mat(dm, 1, s_in)?;
        let g_init = mat(dm, h, 0.1 * s_in)?;
        let full = |v: f64, n: usize| -> Result<Tensor> { Ok(Tensor::full(v as f32, n, device)?) };
        init_param(vm, &p("scale_q"), full(cfg.qk_scale_init, h)?)?;
        init_param(vm, &p("scale_k"), full(cfg.qk_scale_init, h)?)?;
        kinds::init_params(&cfg.mixer, h, (vm, &p), (probe_init, g_init), device)?;
        // a buffer, from its own generator (no other draw moves): stored, never trained
        if cfg.stores_projection() {
            let seed = stream_seed(cfg.seed, rng::Stream::Features, 0);
            let omega_t = seeded_projection(dh, cfg.features, seed, device)?;
            init_param(vm, &p(PROJECTION), omega_t)?;
        }
        Ok(())
    }

    /// [`Block::init`] into `vm` under `prefix`, then [`Block::new`] from it: a freshly seeded
    /// block whose parameters are the `Var`s of `vm` (what a trainer optimises).
    ///
    /// # Errors
    /// As [`Block::init`] and [`Block::new`].
    pub fn seeded(cfg: BlockConfig, vm: &VarMap, prefix: &str, device: &Device) -> Result<Block> {
        Block::init(&cfg, vm, prefix, device)?;
        Block::new(
            cfg,
            VarBuilder::from_varmap(vm, DType::F32, device).pp(prefix),
        )
    }

    /// Builds the block from the parameters in `vb` (names relative to its prefix: `wq`, `wk`,
    /// `wv` [d_model, H·dh], `wo` [H·dh, d_model], `scale_q`, `scale_k` \[H\], and the kind's own:
    /// `router.{probe [d_model, 1], g [d_model, H], a, b, c [H]}`, `decay_rho` [H, 1] or
    /// `mix_logits` [H, M]), and the FAVOR+ projection `features.omega_t` [head_dim, features]
    /// (a buffer: [`BlockConfig::stores_projection`]). Any candle source works: a `VarMap`
    /// filled by [`Block::init`], `VarBuilder::from_mmaped_safetensors`, ... The node tables
    /// are not parameters: they come from `cfg` (its node recipe).
    ///
    /// # Errors
    /// Zero sizes, an invalid memory configuration, an SOE that cannot be certified, a
    /// parameter missing from `vb` or of the wrong shape.
    pub fn new(cfg: BlockConfig, vb: VarBuilder) -> Result<Block> {
        check_sizes(&cfg)?;
        let (dm, h, dh) = (cfg.d_model, cfg.heads, cfg.head_dim);
        let device = vb.device().clone();
        let get = |shape: &[usize], name: &str| get_param(&vb, shape, name);
        let wq = get(&[dm, h * dh], "wq")?;
        let wk = get(&[dm, h * dh], "wk")?;
        let wv = get(&[dm, h * dh], "wv")?;
        let wo = get(&[h * dh, dm], "wo")?;
        let scale_q = get(&[h], "scale_q")?;
        let scale_k = get(&[h], "scale_k")?;
        let features = if cfg.stores_projection() {
            Features::favor(get(&[dh, cfg.features], PROJECTION)?)?
        } else {
            // ELU+1 and Taylor are deterministic; softmax applies no feature map (its unused
            // FAVOR+ projection is drawn from the seed, as before it was stored)
            Features::new(
                cfg.feature_map,
                dh,
                cfg.features,
                stream_seed(cfg.seed, rng::Stream::Features, 0),
                &device,
            )?
        };
        let kind = kinds::build(&cfg.mixer, (dm, h), &get)?;
        Ok(Block {
            cfg,
            wq,
            wk,
            wv,
            wo,
            scale_q,
            scale_k,
            features,
            kind,
            past_horizon: PastHorizon::Refuse,
        })
    }

    /// The node tables of a power-law mixer (VORT, the fixed power law; empty for the others):
    /// one shared by all heads.
    pub fn tables(&self) -> &[NodeTable] {
        self.kind.tables()
    }

    /// The feature map with its random projection (seeded from the block's seed).
    pub fn features(&self) -> &Features {
        &self.features
    }

    /// The fixed rates of the memories without node tables whose rates are not learned
    /// (RetNet: one row per head; the mixture: one row for all heads), None for the others.
    pub fn fixed_rates(&self) -> Option<&Rates> {
        self.kind.fixed_rates()
    }

    /// The names (relative to the block's prefix) of the parameters that weight decay
    /// applies to: the four projection matrices. The router, the decays, the mixture's logits
    /// and the q/k scales are not decayed.
    pub fn decayed_params() -> [&'static str; 4] {
        ["wq", "wk", "wv", "wo"]
    }

    /// The decay rates u_n of the memory's nodes on the host (a token's weight on node n
    /// decays as exp(-u_n · lag)), one row per head or one for all heads; None for softmax.
    ///
    /// # Errors
    /// candle errors reading a learned rate.
    pub fn decay_rates(&self) -> Result<Option<Vec<Vec<f64>>>> {
        self.rates()?.map(|r| r.host_rows()).transpose()
    }

    /// The rates of the memory's nodes (None for softmax): the tables' for the power-law
    /// kinds, softplus(ρ) for the learned exponential, the fixed ones otherwise.
    fn rates(&self) -> Result<Option<Rates>> {
        let Some(rates) = self.kind.rates()? else {
            return Ok(None);
        };
        if self.kind.tables().is_empty() {
            // the exponentials: no certified kernel, so no policy past its horizon
            return Ok(Some(rates));
        }
        Ok(Some(match (self.past_horizon, rates) {
            // the same rates, with no horizon for the forms to refuse
            (PastHorizon::SoeTail, Rates::Fixed { u, .. }) => Rates::Fixed { u, horizon: None },
            // Σ_n c_n e^(-(u_n + 1/τ) j) = e^(-j/τ) Σ_n c_n e^(-u_n j)
            (PastHorizon::Tempered { tau }, Rates::Fixed { u, .. }) => Rates::Fixed {
                u: u.iter()
                    .map(|row| row.iter().map(|&x| x + 1.0 / tau).collect())
                    .collect(),
                horizon: None,
            },
            (_, rates) => rates,
        }))
    }

    /// The certified horizon of the memory's node tables (None for memories without a
    /// certified kernel: the exponentials and softmax).
    pub fn horizon(&self) -> Option<u64> {
        self.tables().iter().map(|t| t.horizon).min()
    }

    /// The longest context the block accepts: its tables' horizon, unless it weighs lags past
    /// it by the tables' tail or tempers its kernel ([`PastHorizon`]); None for no limit.
    pub fn context_limit(&self) -> Option<u64> {
        match self.past_horizon {
            PastHorizon::Refuse => self.horizon(),
            PastHorizon::SoeTail | PastHorizon::Tempered { .. } => None,
        }
    }

    /// Sets what the block does with a context past its tables' horizon (default
    /// [`PastHorizon::Refuse`]); no effect on memories without node tables.
    ///
    /// # Errors
    /// [`VortError::InvalidArgument`] for a τ that is not finite and > 0.
    pub fn set_past_horizon(&mut self, past: PastHorizon) -> Result<()> {
        if let PastHorizon::Tempered { tau } = past {
            if !(tau.is_finite() && tau > 0.0) {
                return Err(VortError::InvalidArgument(format!(
                    "tempering lag τ = {tau}: must be finite and > 0"
                )));
            }
        }
        self.past_horizon = past;
        Ok(())
    }

    /// Rebuilds the node tables for another horizon, e.g. [`crate::nodes::STREAM_HORIZON`] to
    /// stream a model trained at 8K past 8K. The learned parameters do not depend on the
    /// nodes, so the block computes the same kernel, now certified on lags 1..=horizon. A no-op
    /// for memories without node tables. States made with the old tables (another N) no longer
    /// fit: start streams after the change.
    ///
    /// # Errors
    /// A horizon the SOE builder refuses (0, or above its limit), or no certificate.
    pub fn set_horizon(&mut self, horizon: u64) -> Result<()> {
        self.kind.set_horizon(horizon)?;
        self.cfg.mixer = self.cfg.mixer.with_horizon(horizon);
        Ok(())
    }

    /// Memory nodes N of the retention state (0 for softmax).
    pub fn nodes(&self) -> usize {
        self.kind.nodes()
    }

    /// Splits heads: [B, T, H·dh] -> [B, H, T, dh].
    fn heads(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        Ok(x.reshape((b, t, self.cfg.heads, self.cfg.head_dim))?
            .transpose(1, 2)?
            .contiguous()?)
    }

    /// L2-normalised rows times a per-head scale: z [B, H, T, dh], scale [H] (fused:
    /// [`crate::ops::qk_norm`]; its plain twin is `ops::reference::qk_norm`).
    fn normalise_qk(z: &Tensor, scale: &Tensor) -> Result<Tensor> {
        crate::ops::qk_norm(z, scale)
    }

    /// Training forward over T tokens from an empty state (the fused op when `cfg.fused`), with
    /// the router's entropy input and everything it computes: x: [B, T, d_model]; entropy:
    /// [B, T] (stop-gradient; None = 0); returns y [B, T, d_model], α [B, H, T], entity logits
    /// [B, T]; `state` is None. `Module::forward` (`block.forward(&x)`) is this with no entropy,
    /// returning y.
    ///
    /// # Errors
    /// Shape mismatches.
    pub fn forward_with_entropy(
        &self,
        x: &Tensor,
        entropy: Option<&Tensor>,
    ) -> Result<BlockOutput> {
        self.run(x, entropy, None, &mut None, Pass::Train)
    }

    /// Streaming forward over T tokens continuing the stream in `state` (None: a new stream),
    /// which it updates to the state after the last token: the fused op with a carried state
    /// when `cfg.fused`, else the plain candle form, or the KV cache for softmax. Feeding a
    /// sequence in pieces of any sizes gives the same y as one pass (tested). The state is
    /// detached: gradients do not flow from one piece into the previous one (truncated
    /// backpropagation), and memory stays flat however long the stream. The same `&mut` state
    /// style as [`crate::Model::forward_with_state`] and [`crate::Model::decode`].
    ///
    /// # Errors
    /// Shape mismatches, a state of the wrong kind (the state is then unchanged).
    pub fn forward_with_state(
        &self,
        x: &Tensor,
        entropy: Option<&Tensor>,
        state: &mut Option<BlockState>,
    ) -> Result<BlockOutput> {
        self.run(x, entropy, None, state, Pass::Stream)
    }

    /// Decodes one step: like [`Block::forward_with_state`] on x [B, 1, d_model], through the
    /// recurrent form on the CPU (O(N F D) per head, no chunk machinery), and through the chunk
    /// form on any other device, where the state stays. For inference: the output carries no
    /// gradient to the retention's inputs.
    ///
    /// # Errors
    /// As [`Block::forward_with_state`]; T != 1.
    pub fn step(
        &self,
        x: &Tensor,
        entropy: Option<&Tensor>,
        state: &mut Option<BlockState>,
    ) -> Result<BlockOutput> {
        if x.dims().get(1) != Some(&1) {
            return Err(VortError::Shape {
                name: "x".into(),
                got: x.dims().to_vec(),
                expected: "[B, 1, d_model] (one token)".into(),
            });
        }
        self.run(x, entropy, None, state, Pass::Decode)
    }

    /// The pass `pass` over x [B, T, d_model] with the router's inputs (entropy [B, T] and the
    /// memorable marks [B, T] of oracle routing). A stream or decode pass continues `state`
    /// and replaces it by the state after the last token; training ignores it.
    pub(crate) fn run(
        &self,
        x: &Tensor,
        entropy: Option<&Tensor>,
        marks: Option<&Tensor>,
        state: &mut Option<BlockState>,
        pass: Pass,
    ) -> Result<BlockOutput> {
        let want_state = pass != Pass::Train;
        let carried = if want_state { state.as_ref() } else { None };
        let (b, t, dm) = x.dims3().map_err(|_| VortError::Shape {
            name: "x".into(),
            got: x.dims().to_vec(),
            expected: "[B, T, d_model]".into(),
        })?;
        if dm != self.cfg.d_model {
            return Err(VortError::Shape {
                name: "x".into(),
                got: x.dims().to_vec(),
                expected: format!("[B, T, {}]", self.cfg.d_model),
            });
        }
        let (h, dh) = (self.cfg.heads, self.cfg.head_dim);
        let x2 = x.reshape((b * t, dm))?;
        let proj =
            |w: &Tensor| -> Result<Tensor> { self.heads(&x2.matmul(w)?.reshape((b, t, h * dh))?) };
        let q = Self::normalise_qk(&proj(&self.wq)?, &self.scale_q)?;
        let k = Self::normalise_qk(&proj(&self.wk)?, &self.scale_k)?;
        let v = proj(&self.wv)?;
        let (alpha, entity_logit) = self.kind.route(x, entropy, marks)?;
        let (y, new_state) = match self.kind.attention_window() {
            Some(window) => softmax_with_cache(&q, &k, &v, window, carried)?,
            None => self.retain((&q, &k, &v), alpha.as_ref(), carried, pass)?,
        };
        let y = y
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b * t, h * dh))?
            .matmul(&self.wo)?
            .reshape((b, t, dm))?;
        if want_state {
            *state = new_state;
        }
        Ok(BlockOutput {
            y,
            alpha,
            entity_logit,
        })
    }

    /// The retention of q, k, v [B, H, T, dh] under the orders α [B, H, T] (None for kinds
    /// without orders), continuing `carried` for a stream or decode pass: y [B, H, T, dh] and
    /// the state after the last token (None in training).
    fn retain(
        &self,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        alpha: Option<&Tensor>,
        carried: Option<&BlockState>,
        pass: Pass,
    ) -> Result<(Tensor, Option<BlockState>)> {
        let want_state = pass != Pass::Train;
        let (b, _, t, _) = q.dims4()?;
        let initial = match carried {
            None => None,
            Some(BlockState::Retention(s)) => Some(s),
            Some(BlockState::Kv { .. }) => {
                return Err(VortError::InvalidArgument(
                    "a softmax KV cache was given to a retention block".into(),
                ))
            }
        };
        // the forms refuse contexts past the rates' certified horizon (node tables)
        let (cw, rates) = self.node_weights(alpha, b, t, q.device())?;
        let fq = self.features.apply(q)?;
        let fk = self.features.apply(k)?;
        let vp = with_ones(v)?;
        let inputs = Inputs {
            q: &fq,
            k: &fk,
            vp: &vp,
            cw: &cw,
        };
        // the fused op (training, and streams: its final state comes without a gradient,
        // which a stream state does not keep anyway). Stream states live on the host, outside
        // the autodiff graph, so a stream's memory stays flat (a state that kept its graph
        // held every earlier piece's activations: ~430 KB per decoded byte for the books
        // model, and an out-of-memory kill on a whole book).
        // Decode: the recurrent form on the host, where the CPU holds the state anyway; on
        // any other device the chunk form at T = 1, so the state never leaves the device.
        let chunk = self.cfg.chunk;
        let fused_here = crate::ops::fused_on(q.device());
        let (o, g) = if pass == Pass::Decode && fused_here {
            naive_recurrent(&inputs, &rates, chunk, initial, true)?
        } else if self.cfg.fused && fused_here && pass != Pass::Decode {
            fused_chunk(&inputs, &rates, chunk, initial, want_state)?
        } else {
            chunk_form(&inputs, &rates, chunk, initial, want_state)?
        };
        Ok((
            normalise(&o, self.cfg.eps_den)?,
            g.map(BlockState::Retention),
        ))
    }

    /// Per-token node weights cw [B, H, T, N] and the rates of the memory.
    fn node_weights(
        &self,
        alpha: Option<&Tensor>,
        b: usize,
        t: usize,
        device: &Device,
    ) -> Result<(Tensor, Rates)> {
        let cw = self
            .kind
            .node_weights(alpha, (b, self.cfg.heads, t), device)?;
        let rates = self.rates()?.ok_or_else(|| {
            VortError::InvalidArgument(format!("{} has no node weights", self.cfg.mixer))
        })?;
        Ok((cw, rates))
    }
}

/// Causal softmax attention with a KV cache: q, k (normalised), v [B, H, T, dh]; `window` > 0
/// attends to the last `window` keys (sliding), 0 to all.
fn softmax_with_cache(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    window: usize,
    state: Option<&BlockState>,
) -> Result<(Tensor, Option<BlockState>)> {
    let (kk, vv) = match state {
        None => (k.clone(), v.clone()),
        Some(BlockState::Kv { k: kc, v: vc }) => {
            (Tensor::cat(&[kc, k], 2)?, Tensor::cat(&[vc, v], 2)?)
        }
        Some(BlockState::Retention { .. }) => {
            return Err(VortError::InvalidArgument(
                "a retention state was given to a softmax block".into(),
            ))
        }
    };
    if window == 0 {
        let y = causal_softmax(q, &kk, &vv)?;
        let cache = BlockState::Kv {
            k: kk.detach(),
            v: vv.detach(),
        };
        return Ok((y, Some(cache)));
    }
    let y = sliding_softmax(q, &kk, &vv, window)?;
    // A later query at position p needs keys p-window+1 ..= p, of which only the last
    // window-1 are already seen; one more is kept so that the cache is never a zero-length
    // tensor (window = 1). It is masked out, so pieces = one pass.
    let s = kk.dim(2)?;
    let keep = window.min(s);
    let cache = BlockState::Kv {
        k: kk.narrow(2, s - keep, keep)?.detach(),
        v: vv.narrow(2, s - keep, keep)?.detach(),
    };
    Ok((y, Some(cache)))
}

/// candle's layer interface: x [B, T, d_model] -> y [B, T, d_model], the training forward
/// without the entropy signal (H = 0) and without the orders; [`Block::forward_with_entropy`]
/// returns those.
impl Module for Block {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_with_entropy(x, None)
            .map(|out| out.y)
            .map_err(VortError::into_candle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RetNet's decays: head h keeps γ_h = 1 - 2^(-5-h) per step, fixed, at every lag.
    #[test]
    fn retnet_rates_are_retnets() {
        let cfg = BlockConfig {
            heads: 3,
            mixer: Mixer::Retnet,
            ..BlockConfig::default()
        };
        let blk = Block::seeded(cfg, &VarMap::new(), "b", &Device::Cpu).unwrap();
        let Some(Rates::Fixed { u, horizon }) = blk.fixed_rates() else {
            panic!("RetNet has fixed rates");
        };
        assert_eq!(*horizon, None);
        assert_eq!(u.len(), 3);
        for (h, row) in u.iter().enumerate() {
            let gamma = 1.0 - 2f64.powi(-5 - h as i32);
            assert_eq!(row.len(), 1);
            assert!(
                ((-row[0]).exp() - gamma).abs() < 1e-15,
                "head {h}: {}",
                row[0]
            );
        }
        assert!(blk.tables().is_empty());
    }
}
