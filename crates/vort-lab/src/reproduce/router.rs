//! The router's inputs on a routed VORT run (docs/DESIGN.md §2 "Routing"): α by token role
//! and what the router read to set it.
//!
//! VORT's router gives each token α = δ + (1-δ) σ(a·e - b·H + g·h + c), e = σ(p·h) an entity
//! probe and H the bigram entropy. For every run whose α varies (routings full, entity-only,
//! entropy-only, learned, oracle) this recomputes, from the run's weights over its own test
//! set ([`diagnose`]):
//! - α by role (MQAR: key, value, query, filler; books: entity, function word, other): the
//!   mean and a histogram, pooled over blocks and heads, and per block;
//! - the probe's precision and recall on the memorable tokens (logit > 0 counted as
//!   "entity"), per block and pooled, with counts (routings that read the probe);
//! - the Pearson correlation of α with σ(probe logit) and with H (routings that read them);
//! - the router's weights a (probe) and b (entropy) per block and head.
//!
//! The result is cached as `router.json` in the run directory ([`RunDir::router_path`]): it is
//! computed once and reused while the run's evaluation (its step and scored sequences) is
//! the same. [`separation`] then says whether α separates the memorable roles from the rest,
//! and if not, which input failed.

use candle_core::{Tensor, D};
use serde::{Deserialize, Serialize};

use crate::tasks::{Batch, Source, Stream};
use crate::train::eval;
use crate::train::{checkpoint, marks_tensor, tokens_tensor, RunConfig, RunDir, TrainError};
use vort::{Mixer, Routing};

/// Version of the `router.json` layout (a cache of another version is recomputed).
pub const FORMAT: u32 = 1;

/// Bins of the α histograms, of equal width on [0, 1].
pub const BINS: usize = 40;

/// The smallest gap in mean α between a memorable role and the rest that counts as
/// separating them (the paper's classes are 0.45 apart: 0.80 against 0.35).
pub const MIN_GAP: f64 = 0.1;

/// Below this recall on a memorable role the probe "does not find" it.
pub const MIN_RECALL: f64 = 0.5;

/// Below this difference between the share of a memorable role's tokens the probe calls
/// entity and the share of the closest other role's, the probe does not tell them apart.
/// (Precision is reported but not used here: with 61 filler tokens per key on MQAR, it is low
/// even for a probe that separates the roles.)
pub const MIN_CALL_GAP: f64 = 0.1;

/// Below this |r| α "does not follow" an input.
pub const MIN_CORRELATION: f64 = 0.2;

/// Below this difference in mean H (units of ln V) between a role and the rest, the entropy
/// "does not differ by role".
pub const MIN_ENTROPY_GAP: f64 = 0.05;

/// The routing of `mixer` when its α varies from token to token or from head to head (VORT
/// routed by the probe, the entropy or both, one learned order per head, or the oracle); None
/// for a fixed order and for the other memories.
pub fn varying(mixer: &Mixer) -> Option<Routing> {
    mixer
        .routing()
        .filter(|r| !matches!(r, Routing::Fixed { .. }))
}

/// A routing in words ("entity-only", "oracle 0.80 / 0.35", ...).
pub fn routing_label(r: Routing) -> String {
    match r {
        Routing::Full => "full".into(),
        Routing::EntityOnly => "entity-only".into(),
        Routing::EntropyOnly => "entropy-only".into(),
        Routing::Learned => "learned".into(),
        Routing::Fixed { alpha } => format!("fixed {alpha:.2}"),
        Routing::Oracle { entity, other } => format!("oracle {entity:.2} / {other:.2}"),
    }
}

use crate::tasks::roles::role_of;
pub use crate::tasks::roles::roles;

/// Pearson's correlation of pairs (x, y), accumulated in one pass (Welford's updates of the
/// means and co-moments, stable for millions of pairs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pearson {
    n: u64,
    mean_x: f64,
    mean_y: f64,
    m2_x: f64,
    m2_y: f64,
    c_xy: f64,
}

impl Pearson {
    /// Adds the pair (x, y).
    pub fn add(&mut self, x: f64, y: f64) {
        self.n += 1;
        let n = self.n as f64;
        let dx = x - self.mean_x;
        self.mean_x += dx / n;
        let dy = y - self.mean_y;
        self.mean_y += dy / n;
        self.m2_x += dx * (x - self.mean_x);
        self.m2_y += dy * (y - self.mean_y);
        self.c_xy += dx * (y - self.mean_y);
    }

    /// Pairs added.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// r = cov(x, y) / (sd(x) sd(y)); None below 2 pairs or when either variable is constant
    /// (r is undefined then, not 0).
    pub fn r(&self) -> Option<f64> {
        let d = (self.m2_x * self.m2_y).sqrt();
        (self.n >= 2 && d > 0.0 && d.is_finite()).then(|| (self.c_xy / d).clamp(-1.0, 1.0))
    }
}

/// The probe's calls against the memorable marks: a token is called "entity" when its probe
/// logit is > 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeCounts {
    /// Memorable tokens called entity.
    pub tp: u64,
    /// Other tokens called entity.
    pub fp: u64,
    /// Memorable tokens not called entity.
    #[serde(rename = "fn")]
    pub fn_: u64,
    /// Other tokens not called entity.
    pub tn: u64,
}

impl ProbeCounts {
    /// Counts one token: whether the probe called it entity, whether it is memorable.
    pub fn add(&mut self, called: bool, memorable: bool) {
        match (called, memorable) {
            (true, true) => self.tp += 1,
            (true, false) => self.fp += 1,
            (false, true) => self.fn_ += 1,
            (false, false) => self.tn += 1,
        }
    }

    /// tp / (tp + fp): of the tokens called entity, the memorable share (None: none called).
    pub fn precision(&self) -> Option<f64> {
        let d = self.tp + self.fp;
        (d > 0).then(|| self.tp as f64 / d as f64)
    }

    /// tp / (tp + fn): of the memorable tokens, the share called entity (None: none).
    pub fn recall(&self) -> Option<f64> {
        let d = self.tp + self.fn_;
        (d > 0).then(|| self.tp as f64 / d as f64)
    }

    /// The sum of two counts (blocks pooled).
    pub fn plus(self, o: ProbeCounts) -> ProbeCounts {
        ProbeCounts {
            tp: self.tp + o.tp,
            fp: self.fp + o.fp,
            fn_: self.fn_ + o.fn_,
            tn: self.tn + o.tn,
        }
    }
}

/// What one role's tokens got and read, in one block or pooled over blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoleStats {
    /// The role ([`roles`]).
    pub role: String,
    /// Whether the task marks it memorable.
    pub memorable: bool,
    /// Its tokens in the scored sequences.
    pub tokens: u64,
    /// Mean α over its tokens and every head (and block, pooled).
    pub alpha: f64,
    /// Share of its tokens the probe calls entity (logit > 0; pooled: over blocks too), for
    /// routings that read the probe.
    #[serde(default)]
    pub probe_called: Option<f64>,
    /// Mean σ(probe logit) over its tokens (and blocks), for routings that read the probe.
    #[serde(default)]
    pub probe_mean: Option<f64>,
    /// Mean entropy feature H (units of ln V) over its tokens, for routings that read it.
    #[serde(default)]
    pub entropy: Option<f64>,
    /// Counts of its α values (every head and block) in [`BINS`] equal bins on [0, 1]
    /// (pooled rows only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hist: Vec<u64>,
}

/// The router's inputs in one block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockInputs {
    /// Block index (among the blocks with orders α).
    pub block: usize,
    /// By role.
    pub roles: Vec<RoleStats>,
    /// Mean α of each head over every scored token.
    pub alpha_by_head: Vec<f64>,
    /// The probe's calls on the memorable tokens (routings that read the probe).
    #[serde(default)]
    pub probe: Option<ProbeCounts>,
    /// Pearson r of α (every head and token) with σ(probe logit) of the token.
    #[serde(default)]
    pub r_alpha_probe: Option<f64>,
    /// Pearson r of α (every head and token) with the token's H.
    #[serde(default)]
    pub r_alpha_entropy: Option<f64>,
    /// The router's probe weight a, per head (routings that read the probe).
    #[serde(default)]
    pub a: Option<Vec<f64>>,
    /// The router's entropy weight b, per head (routings that read the entropy).
    #[serde(default)]
    pub b: Option<Vec<f64>>,
}

/// The router's inputs of one run (`router.json`): see the module doc.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouterInputs {
    /// [`FORMAT`].
    pub format: u32,
    /// Training steps of the weights read.
    pub step: u64,
    /// Test sequences scored (the run's evaluation's).
    pub sequences: usize,
    /// The routing.
    pub routing: Routing,
    /// Whether the router reads the entity probe.
    pub uses_probe: bool,
    /// Whether the router reads the entropy H.
    pub uses_entropy: bool,
    /// By role, pooled over blocks (α over blocks and heads).
    pub roles: Vec<RoleStats>,
    /// The probe's calls pooled over blocks.
    #[serde(default)]
    pub probe: Option<ProbeCounts>,
    /// Pearson r of α with σ(probe logit), pooled over blocks and heads.
    #[serde(default)]
    pub r_alpha_probe: Option<f64>,
    /// Pearson r of α with H, pooled over blocks and heads.
    #[serde(default)]
    pub r_alpha_entropy: Option<f64>,
    /// Per block.
    pub blocks: Vec<BlockInputs>,
}

impl RouterInputs {
    /// The pooled row of `role`.
    pub fn role(&self, role: &str) -> Option<&RoleStats> {
        self.roles.iter().find(|r| r.role == role)
    }

    /// Mean of the router's probe weight a over blocks and heads.
    pub fn mean_a(&self) -> Option<f64> {
        mean_of(self.blocks.iter().filter_map(|b| b.a.as_ref()))
    }

    /// Mean of the router's entropy weight b over blocks and heads.
    pub fn mean_b(&self) -> Option<f64> {
        mean_of(self.blocks.iter().filter_map(|b| b.b.as_ref()))
    }
}

fn mean_of<'a>(v: impl Iterator<Item = &'a Vec<f64>>) -> Option<f64> {
    let all: Vec<f64> = v.flatten().copied().collect();
    (!all.is_empty()).then(|| all.iter().sum::<f64>() / all.len() as f64)
}

/// What [`diagnose`] found for a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Diagnosis {
    /// Measured now or read from the run's `router.json`.
    Measured(Box<RouterInputs>),
    /// Not measured, and why (e.g. "no weights": the run kept neither a checkpoint nor its
    /// released weights).
    Unavailable(String),
}

/// The router's inputs of the finished run in `dir`: its cached `router.json` when that
/// belongs to the run's evaluation (same format, step and scored sequences), else measured
/// from its checkpoint or released weights over its test set and cached (written atomically).
/// [`Diagnosis::Unavailable`] when the run has no evaluation, no weights, or weights of
/// another step than the one evaluated.
///
/// # Errors
/// A corrupt checkpoint or config, the task's data missing, candle and I/O errors.
pub fn diagnose(dir: &RunDir, progress: bool) -> Result<Diagnosis, TrainError> {
    let Some(ev) = dir.eval() else {
        return Ok(Diagnosis::Unavailable("no evaluation".into()));
    };
    let cache = dir.router_path();
    if let Some(d) = std::fs::read_to_string(&cache)
        .ok()
        .and_then(|t| serde_json::from_str::<RouterInputs>(&t).ok())
        .filter(|d| d.format == FORMAT && d.step == ev.step && d.sequences == ev.sequences)
    {
        return Ok(Diagnosis::Measured(Box::new(d)));
    }
    if !dir.checkpoint_path().exists() && !dir.weights_path().exists() {
        return Ok(Diagnosis::Unavailable("no weights".into()));
    }
    let (cfg, model, vm, step) = eval::load_inference(dir.path())?;
    if step != ev.step {
        return Ok(Diagnosis::Unavailable(format!(
            "weights of step {step}, evaluated at step {}",
            ev.step
        )));
    }
    let Some(routing) = varying(&cfg.model.mixer) else {
        return Ok(Diagnosis::Unavailable(
            "α does not vary (not a routed VORT run)".into(),
        ));
    };
    if progress {
        eprintln!(
            "router inputs of {}: measuring over {} test sequences",
            dir.path().display(),
            ev.sequences
        );
    }
    let source = Source::open(&cfg.task)?;
    let d = measure(
        &model,
        &vm,
        &source,
        &cfg,
        (routing, step, ev.sequences),
        &crate::train::device(),
    )?;
    checkpoint::write_json(&cache, &d)?;
    Ok(Diagnosis::Measured(Box::new(d)))
}

/// Running sums of one role in one block.
#[derive(Debug, Clone, Default)]
struct RoleAcc {
    tokens: u64,
    alpha_sum: f64,
    alpha_n: u64,
    called: u64,
    probe_sum: f64,
    entropy_sum: f64,
}

/// Running sums of one block.
#[derive(Debug, Clone, Default)]
struct BlockAcc {
    roles: Vec<RoleAcc>,
    head_sum: Vec<f64>,
    head_n: Vec<u64>,
    probe: ProbeCounts,
    r_probe: Pearson,
    r_entropy: Pearson,
}

/// The router's inputs of `model` over the first `sequences` test sequences of `source`
/// (batches of `cfg.train.eval_batch()`, as [`eval::evaluate`] scores them, so that the α
/// means by role are the evaluation's); `routing`'s inputs only, `step` recorded.
///
/// # Errors
/// candle errors.
pub fn measure(
    model: &vort::model::Model,
    vm: &candle_nn::VarMap,
    source: &Source,
    cfg: &RunConfig,
    (routing, step, sequences): (Routing, u64, usize),
    device: &candle_core::Device,
) -> Result<RouterInputs, TrainError> {
    let kind = cfg.task.kind();
    let role_names = roles(kind);
    let pairs = cfg.task.mqar().map(|m| 2 * m.num_kv_pairs);
    let (uses_probe, uses_entropy) = (routing.uses_probe(), routing.uses_entropy());
    let bs = cfg.train.eval_batch();
    let mut sums = Sums::new(role_names.len());
    let mut done = 0;
    while done < sequences {
        let b = bs.min(sequences - done);
        let samples: Vec<_> = (0..b)
            .map(|i| source.sample(cfg.seed, Stream::Eval, (done + i) as u64))
            .collect();
        let batch = Batch::from_samples(&samples);
        let tokens = tokens_tensor(&batch, device)?;
        let marks = marks_tensor(&batch, device)?;
        let out = model.forward_marked(&tokens, Some(&marks), None)?;
        let t = batch.t;
        let role: Vec<usize> = (0..b * t)
            .map(|f| role_of(&batch, kind, pairs, f / t, f % t))
            .collect();
        sums.add_output(&out, &batch, &role, (uses_probe, uses_entropy))?;
        done += b;
    }
    // the blocks with orders are every block of the model (one mixer for all): block l's
    // router weights are blocks.<l>
    let homogeneous = sums.blocks.len() == cfg.model.layers;
    let mut block_rows = Vec::new();
    for (l, acc) in sums.blocks.iter().enumerate() {
        let read = |name: &str, used: bool| {
            if used && homogeneous {
                router_weights(vm, l, name)
            } else {
                Ok(None)
            }
        };
        block_rows.push(BlockInputs {
            a: read("a", uses_probe)?,
            b: read("b", uses_entropy)?,
            ..acc.inputs(l, &role_names, uses_probe, uses_entropy)
        });
    }
    Ok(RouterInputs {
        format: FORMAT,
        step,
        sequences,
        routing,
        uses_probe,
        uses_entropy,
        roles: sums.pooled_roles(&role_names, uses_probe, uses_entropy),
        probe: uses_probe.then(|| {
            sums.blocks
                .iter()
                .fold(ProbeCounts::default(), |s, b| s.plus(b.probe))
        }),
        r_alpha_probe: sums.r_probe.r(),
        r_alpha_entropy: sums.r_entropy.r(),
        blocks: block_rows,
    })
}

/// Block `l`'s router weight `name` per head, when the VarMap has it.
fn router_weights(
    vm: &candle_nn::VarMap,
    l: usize,
    name: &str,
) -> Result<Option<Vec<f64>>, TrainError> {
    let data = vm.data().lock().expect("VarMap lock");
    Ok(match data.get(&format!("blocks.{l}.mix.router.{name}")) {
        Some(v) => Some(
            v.as_tensor()
                .flatten_all()?
                .to_vec1::<f32>()?
                .into_iter()
                .map(f64::from)
                .collect(),
        ),
        None => None,
    })
}

/// s / n, NaN for no samples.
fn div(s: f64, n: u64) -> f64 {
    if n == 0 {
        f64::NAN
    } else {
        s / n as f64
    }
}

/// One batch's per-token inputs, flat over [B·T]: role, memorable mark, the probe's logit
/// of one block and H.
struct TokenInputs<'a> {
    role: &'a [usize],
    memorable: &'a [bool],
    /// Sequence length T of the batch.
    t: usize,
    logits: Option<&'a [f32]>,
    entropy: Option<&'a [f32]>,
}

/// The running sums of [`measure`]: per block, and pooled over blocks in the evaluation's
/// order (its α means by role are these sums).
struct Sums {
    blocks: Vec<BlockAcc>,
    /// (Σα, n) by role.
    pooled_alpha: Vec<(f64, u64)>,
    pooled_hist: Vec<Vec<u64>>,
    pooled_tokens: Vec<u64>,
    pooled_entropy: Vec<f64>,
    r_probe: Pearson,
    r_entropy: Pearson,
}

impl Sums {
    fn new(roles: usize) -> Sums {
        Sums {
            blocks: Vec::new(),
            pooled_alpha: vec![(0.0, 0); roles],
            pooled_hist: vec![vec![0; BINS]; roles],
            pooled_tokens: vec![0; roles],
            pooled_entropy: vec![0.0; roles],
            r_probe: Pearson::default(),
            r_entropy: Pearson::default(),
        }
    }

    /// The model's output `out` over `batch` (its tokens' roles `role`, flat over [B·T]):
    /// the inputs `uses` = (probe, entropy) reads.
    fn add_output(
        &mut self,
        out: &vort::model::ModelOutput,
        batch: &Batch,
        role: &[usize],
        (uses_probe, uses_entropy): (bool, bool),
    ) -> Result<(), TrainError> {
        let entropy: Option<Vec<f32>> = match (&out.bigram_logits, uses_entropy) {
            (Some(l), true) => Some(entropy_feature(l)?),
            _ => None,
        };
        self.add_tokens(role, entropy.as_deref());
        if self.blocks.is_empty() {
            self.blocks = vec![BlockAcc::default(); out.alphas.len()];
        }
        for (l, a) in out.alphas.iter().enumerate() {
            let logits: Option<Vec<f32>> = match (out.entity_logits.get(l), uses_probe) {
                (Some(e), true) => Some(e.flatten_all()?.to_vec1()?),
                _ => None,
            };
            let token = TokenInputs {
                role,
                memorable: &batch.memorable,
                t: batch.t,
                logits: logits.as_deref(),
                entropy: entropy.as_deref(),
            };
            self.add_block(l, a, &token)?;
        }
        Ok(())
    }

    /// A batch's tokens by role, and their H.
    fn add_tokens(&mut self, role: &[usize], entropy: Option<&[f32]>) {
        if let Some(h) = entropy {
            for (f, &x) in h.iter().enumerate() {
                self.pooled_entropy[role[f]] += f64::from(x);
            }
        }
        for &r in role {
            self.pooled_tokens[r] += 1;
        }
    }

    /// Block `l`'s orders α [B, H, T] over a batch.
    fn add_block(&mut self, l: usize, alphas: &Tensor, x: &TokenInputs) -> Result<(), TrainError> {
        let (ab, h, tt) = alphas.dims3()?;
        let v: Vec<f32> = alphas.flatten_all()?.to_vec1()?;
        let nr = self.pooled_tokens.len();
        let acc = &mut self.blocks[l];
        if acc.roles.is_empty() {
            acc.roles = vec![RoleAcc::default(); nr];
            acc.head_sum = vec![0.0; h];
            acc.head_n = vec![0; h];
        }
        // per token of the block: the probe's call and σ(logit), H
        for i in 0..ab {
            for j in 0..tt {
                let f = i * x.t + j;
                let ra = &mut acc.roles[x.role[f]];
                ra.tokens += 1;
                if let Some(lg) = x.logits {
                    let z = lg[f];
                    ra.called += u64::from(z > 0.0);
                    ra.probe_sum += sigmoid(f64::from(z));
                    acc.probe.add(z > 0.0, x.memorable[f]);
                }
                if let Some(hh) = x.entropy {
                    ra.entropy_sum += f64::from(hh[f]);
                }
            }
        }
        // per (head, token): α, in the evaluation's order
        for i in 0..ab {
            for hh in 0..h {
                for j in 0..tt {
                    let xf = f64::from(v[(i * h + hh) * tt + j]);
                    let f = i * x.t + j;
                    let r = x.role[f];
                    self.pooled_alpha[r].0 += xf;
                    self.pooled_alpha[r].1 += 1;
                    self.pooled_hist[r][bin(xf)] += 1;
                    let ra = &mut acc.roles[r];
                    ra.alpha_sum += xf;
                    ra.alpha_n += 1;
                    acc.head_sum[hh] += xf;
                    acc.head_n[hh] += 1;
                    if let Some(lg) = x.logits {
                        let e = sigmoid(f64::from(lg[f]));
                        acc.r_probe.add(xf, e);
                        self.r_probe.add(xf, e);
                    }
                    if let Some(hv) = x.entropy {
                        let e = f64::from(hv[f]);
                        acc.r_entropy.add(xf, e);
                        self.r_entropy.add(xf, e);
                    }
                }
            }
        }
        Ok(())
    }

    /// The roles pooled over blocks.
    fn pooled_roles(
        &self,
        role_names: &[(&str, bool)],
        uses_probe: bool,
        uses_entropy: bool,
    ) -> Vec<RoleStats> {
        let nb = self.blocks.len() as u64;
        role_names
            .iter()
            .enumerate()
            .map(|(k, &(name, memorable))| {
                let over_blocks = |f: &dyn Fn(&RoleAcc) -> f64| {
                    div(
                        self.blocks.iter().map(|b| f(&b.roles[k])).sum::<f64>(),
                        self.pooled_tokens[k] * nb,
                    )
                };
                RoleStats {
                    role: name.into(),
                    memorable,
                    tokens: self.pooled_tokens[k],
                    alpha: div(self.pooled_alpha[k].0, self.pooled_alpha[k].1),
                    probe_called: uses_probe.then(|| over_blocks(&|r| r.called as f64)),
                    probe_mean: uses_probe.then(|| over_blocks(&|r| r.probe_sum)),
                    entropy: uses_entropy
                        .then(|| div(self.pooled_entropy[k], self.pooled_tokens[k])),
                    hist: self.pooled_hist[k].clone(),
                }
            })
            .collect()
    }
}

impl BlockAcc {
    /// Block `l`'s row, without the router's weights.
    fn inputs(
        &self,
        l: usize,
        role_names: &[(&str, bool)],
        uses_probe: bool,
        uses_entropy: bool,
    ) -> BlockInputs {
        let roles = role_names
            .iter()
            .zip(&self.roles)
            .map(|(&(name, memorable), r)| RoleStats {
                role: name.into(),
                memorable,
                tokens: r.tokens,
                alpha: div(r.alpha_sum, r.alpha_n),
                probe_called: uses_probe.then(|| div(r.called as f64, r.tokens)),
                probe_mean: uses_probe.then(|| div(r.probe_sum, r.tokens)),
                entropy: uses_entropy.then(|| div(r.entropy_sum, r.tokens)),
                hist: Vec::new(),
            })
            .collect();
        BlockInputs {
            block: l,
            roles,
            alpha_by_head: self
                .head_sum
                .iter()
                .zip(&self.head_n)
                .map(|(&s, &n)| div(s, n))
                .collect(),
            probe: uses_probe.then_some(self.probe),
            r_alpha_probe: self.r_probe.r(),
            r_alpha_entropy: self.r_entropy.r(),
            a: None,
            b: None,
        }
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The histogram bin of α on [0, 1] ([`BINS`] bins; the last one holds 1).
fn bin(x: f64) -> usize {
    ((x * BINS as f64).max(0.0) as usize).min(BINS - 1)
}

/// The router's entropy feature H [B·T] from the bigram logits [B, T, V]: the entropy of the
/// bigram's next-token distribution in units of ln V, as the model computes it.
fn entropy_feature(logits: &Tensor) -> Result<Vec<f32>, TrainError> {
    let v = logits.dim(D::Minus1)?;
    let lp = candle_nn::ops::log_softmax(&logits.detach(), D::Minus1)?;
    let ent = ((lp.exp()? * &lp)?.sum(D::Minus1)?.neg()? / (v as f64).ln())?;
    Ok(ent.flatten_all()?.to_vec1()?)
}

/// One memorable role against the closest role of the rest.
#[derive(Debug, Clone, PartialEq)]
pub struct Gap {
    /// The memorable role.
    pub role: String,
    /// The role not marked memorable with the highest mean α.
    pub against: String,
    /// Mean α of `role` minus that of `against`.
    pub gap: f64,
}

/// For each memorable role of `means` ((role, memorable, mean α)), its mean α minus the
/// highest mean α of a role not marked memorable: α separates a role when this is at least
/// [`MIN_GAP`] (above every other role). Roles without a finite mean are left out.
pub fn gaps(means: &[(String, bool, f64)]) -> Vec<Gap> {
    let closest = means
        .iter()
        .filter(|m| !m.1 && m.2.is_finite())
        .max_by(|a, b| a.2.total_cmp(&b.2));
    let Some(c) = closest else {
        return Vec::new();
    };
    means
        .iter()
        .filter(|m| m.1 && m.2.is_finite())
        .map(|m| Gap {
            role: m.0.clone(),
            against: c.0.clone(),
            gap: m.2 - c.2,
        })
        .collect()
}

/// Whether α separates the roles: every gap of [`gaps`] at least [`MIN_GAP`] (and one at
/// least).
pub fn separated(gaps: &[Gap]) -> bool {
    !gaps.is_empty() && gaps.iter().all(|g| g.gap >= MIN_GAP)
}

/// Whether α separates the memorable roles from the rest, and if not, which input failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Separation {
    /// Each memorable role against the closest of the rest ([`gaps`]).
    pub gaps: Vec<Gap>,
    /// [`separated`].
    pub separated: bool,
    /// For each memorable role below [`MIN_GAP`], what failed (one clause per input).
    pub failures: Vec<String>,
}

/// Which input of `d`'s router failed to separate the roles, by the thresholds of this module:
/// per memorable role less than [`MIN_GAP`] above the closest other role ([`gaps`]),
/// - a learned order per head cannot separate tokens; an oracle that does not has lost its
///   marks;
/// - the probe (routings that read it): it does not find the role (its recall there <
///   [`MIN_RECALL`]), it calls the closest other role entity about as often (by less than
///   [`MIN_CALL_GAP`] fewer), or α does not follow it (|r(α, σ(probe))| <
///   [`MIN_CORRELATION`]; the mean weight a beside);
/// - the entropy (routings that read it): it does not differ between the role and the closest
///   other role (by less than [`MIN_ENTROPY_GAP`]), or α does not follow it (|r(α, H)| <
///   [`MIN_CORRELATION`]; the mean weight b beside);
/// - an input that passes every test is said to pass, and when none failed the rest of the
///   router (g·h + c) is named.
pub fn separation(d: &RouterInputs) -> Separation {
    let means: Vec<(String, bool, f64)> = d
        .roles
        .iter()
        .map(|r| (r.role.clone(), r.memorable, r.alpha))
        .collect();
    let gaps = gaps(&means);
    let mut failures = Vec::new();
    for g in gaps.iter().filter(|g| g.gap < MIN_GAP) {
        let (role, against) = (&g.role, &g.against);
        let (Some(r), Some(s)) = (d.role(role), d.role(against)) else {
            continue;
        };
        let mut why = Vec::new();
        if d.routing == Routing::Learned {
            why.push(
                "one learned order per head, the same at every token: it cannot tell roles \
                 apart (by construction)"
                    .to_string(),
            );
        } else if matches!(d.routing, Routing::Oracle { .. }) {
            why.push(
                "the oracle's rule sets α by the memorable marks: a gap this small means the \
                 marks did not reach the model"
                    .to_string(),
            );
        }
        if d.uses_probe {
            why.push(probe_clause(d, (role, r), (against, s)));
        }
        if d.uses_entropy {
            why.push(entropy_clause(d, (role, r), (against, s)));
        }
        if why.iter().all(|w| w.contains(" passes ")) {
            why.push(
                "no input failed these tests: the rest of the router (g·h + c) offsets them".into(),
            );
        }
        failures.push(format!("{role}: {}", why.join("; ")));
    }
    Separation {
        separated: separated(&gaps),
        gaps,
        failures,
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{:.1}%", 100.0 * x))
}

fn num(x: Option<f64>) -> String {
    x.map_or("undefined".into(), |x| format!("{x:.2}"))
}

/// [`separation`]'s clause on the probe, for the memorable `role` (stats `r`) against the
/// closest other role (stats `s`).
fn probe_clause(
    d: &RouterInputs,
    (role, r): (&str, &RoleStats),
    (against, s): (&str, &RoleStats),
) -> String {
    let (recall, other) = (r.probe_called, s.probe_called);
    let apart = recall.zip(other).map(|(a, b)| a - b);
    let follow = d.r_alpha_probe;
    let context = format!(
        "r(α, σ(probe)) = {}, mean a = {}",
        num(follow),
        num(d.mean_a())
    );
    if recall.is_none_or(|x| x < MIN_RECALL) {
        format!(
            "the probe does not find the {role} tokens: it calls {} of them entity, {} \
             of the {against} tokens ({context})",
            pct(recall),
            pct(other)
        )
    } else if apart.is_none_or(|x| x < MIN_CALL_GAP) {
        format!(
            "the probe finds the {role} tokens (calls {} of them entity) but calls the \
             {against} tokens entity as often ({}): it does not tell them apart \
             ({context})",
            pct(recall),
            pct(other)
        )
    } else if follow.is_none_or(|x| x.abs() < MIN_CORRELATION) {
        format!(
            "the probe finds the {role} tokens (calls {} of them entity, {} of the \
             {against} tokens) but α does not follow it ({context})",
            pct(recall),
            pct(other)
        )
    } else {
        format!(
            "the probe passes (calls {} of the {role} tokens entity, {} of the {against} \
             tokens; {context})",
            pct(recall),
            pct(other)
        )
    }
}

/// [`separation`]'s clause on the entropy, for the memorable `role` (stats `r`) against the
/// closest other role (stats `s`).
fn entropy_clause(
    d: &RouterInputs,
    (role, r): (&str, &RoleStats),
    (against, s): (&str, &RoleStats),
) -> String {
    let (h_role, h_other) = (r.entropy, s.entropy);
    let dh = h_role.zip(h_other).map(|(a, b)| a - b);
    let follow = d.r_alpha_entropy;
    let context = format!("r(α, H) = {}, mean b = {}", num(follow), num(d.mean_b()));
    if dh.is_none_or(|x| x.abs() < MIN_ENTROPY_GAP) {
        format!(
            "the entropy does not differ by role: H = {} on {role} tokens, {} on \
             {against} ({context})",
            num(h_role),
            num(h_other)
        )
    } else if follow.is_none_or(|x| x.abs() < MIN_CORRELATION) {
        format!(
            "H differs by role ({} on {role} tokens, {} on {against}) but α does not \
             follow it ({context})",
            num(h_role),
            num(h_other)
        )
    } else {
        format!(
            "the entropy passes (H {} on {role} tokens, {} on {against}; {context})",
            num(h_role),
            num(h_other)
        )
    }
}

/// A routed run as a report lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutedRun {
    /// What the report calls it (cell and mixer; books: the mixer).
    pub name: String,
    /// Its seed.
    pub seed: u64,
    /// Its routing.
    pub routing: Routing,
    /// Its evaluation's mean α by role ((role, memorable, mean); empty without one).
    pub means: Vec<(String, bool, f64)>,
    /// Its router's inputs, or why they were not measured.
    pub diagnosis: Diagnosis,
}

impl RoutedRun {
    /// The router's inputs, when measured.
    pub fn measured(&self) -> Option<&RouterInputs> {
        match &self.diagnosis {
            Diagnosis::Measured(d) => Some(d),
            Diagnosis::Unavailable(_) => None,
        }
    }

    /// `"name s<seed>"`.
    pub fn label(&self) -> String {
        format!("{} s{}", self.name, self.seed)
    }
}

/// A routed run to measure ([`routed_runs`]).
#[derive(Debug, Clone)]
pub struct RunToMeasure {
    /// What the report calls it.
    pub name: String,
    /// Its seed.
    pub seed: u64,
    /// Its routing.
    pub routing: Routing,
    /// Its run directory.
    pub dir: RunDir,
    /// Its evaluation's mean α by role ((role, memorable, mean)).
    pub means: Vec<(String, bool, f64)>,
}

/// The router's inputs of every routed run of a report, measured or read from its cache
/// ([`diagnose`]). A run whose inputs cannot be measured is kept, with the reason (an error
/// included: the report lists it instead of failing). `progress`: a line per run measured.
pub fn routed_runs(runs: Vec<RunToMeasure>, progress: bool) -> Vec<RoutedRun> {
    runs.into_iter()
        .map(|r| RoutedRun {
            diagnosis: diagnose(&r.dir, progress)
                .unwrap_or_else(|e| Diagnosis::Unavailable(format!("not measured: {e}"))),
            name: r.name,
            seed: r.seed,
            routing: r.routing,
            means: r.means,
        })
        .collect()
}

fn pct_of(k: u64, n: u64) -> String {
    if n == 0 {
        "- (0)".into()
    } else {
        format!("{:.1}% ({k} / {n})", 100.0 * k as f64 / n as f64)
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "-".into(),
    }
}

fn list(v: Option<&Vec<f64>>) -> String {
    v.map_or("-".into(), |v| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// The report's account of the router's inputs on `runs`: the measured runs by role and by
/// block (probe precision and recall with counts, correlations, router weights), whether α
/// separates the roles in each routed run and which input failed, and the runs not measured
/// (with why: "no weights", ...). Empty without routed runs.
pub fn markdown(runs: &[RoutedRun]) -> String {
    if runs.is_empty() {
        return String::new();
    }
    let measured: Vec<(&RoutedRun, &RouterInputs)> = runs
        .iter()
        .filter_map(|r| Some((r, r.measured()?)))
        .collect();
    let mut s = String::new();
    if !measured.is_empty() {
        s += &roles_table(&measured);
        s += &blocks_table(&measured);
        s.push('\n');
        s += &agreement(&measured);
    }
    s += &format!(
        "**Does α separate the roles?** A memorable role is separated when its mean α is at \
         least {MIN_GAP} above that of every other role (the gap is to the closest; the paper's \
         classes are 0.45 apart). Where it is not, the input that failed is named: the probe \
         does not find the role (calls < {:.0}% of its tokens entity), calls the closest other \
         role entity about as often (< {:.0} points fewer), or α does not follow it (|r| < \
         {MIN_CORRELATION}); the entropy does not differ by role (by < {MIN_ENTROPY_GAP}) or α \
         does not follow it.\n\n",
        100.0 * MIN_RECALL,
        100.0 * MIN_CALL_GAP
    );
    for r in runs {
        s += &separation_line(r);
    }
    let missing: Vec<String> = runs
        .iter()
        .filter_map(|r| match &r.diagnosis {
            Diagnosis::Unavailable(why) => Some(format!("`{}` ({why})", r.label())),
            Diagnosis::Measured(_) => None,
        })
        .collect();
    if !missing.is_empty() {
        s += &format!(
            "\nRouter inputs not measured (only α means from the evaluation): {}.\n",
            missing.join(", ")
        );
    }
    s.push('\n');
    s
}

/// [`markdown`]'s table of the roles: α, the probe's calls and H per run and role.
fn roles_table(measured: &[(&RoutedRun, &RouterInputs)]) -> String {
    let mut s = String::new();
    s += "**The router's inputs by role** (recomputed from each run's weights over its test \
          set, cached as `router.json` in its run directory; pooled over blocks and heads). \
          The probe calls a token entity when its logit is > 0; \"called entity\" is the \
          share of the role's tokens it calls so over the blocks; H is the bigram entropy \
          in units of ln V. Columns a routing does not read are \"-\".\n\n\
          | run | routing | role | tokens | mean α | called entity | mean σ(probe) | mean H |\n\
          |---|---|---|---|---|---|---|---|\n";
    for (r, d) in measured {
        for x in &d.roles {
            s += &format!(
                "| {} | {} | {}{} | {} | {:.3} | {} | {} | {} |\n",
                r.label(),
                routing_label(d.routing),
                x.role,
                if x.memorable { " (memorable)" } else { "" },
                x.tokens,
                x.alpha,
                x.probe_called
                    .map_or("-".into(), |p| format!("{:.1}%", 100.0 * p)),
                opt(x.probe_mean, 3),
                opt(x.entropy, 3)
            );
        }
    }
    s
}

/// [`markdown`]'s table of the blocks: the probe's precision and recall, the correlations
/// and the router's weights per run and block.
fn blocks_table(measured: &[(&RoutedRun, &RouterInputs)]) -> String {
    let mut s = String::new();
    s += "\n**The probe and the correlations by block** (precision: memorable tokens among \
          those called entity; recall: memorable tokens called entity; r: Pearson \
          correlation over every (head, token) of the block's α with the token's σ(probe \
          logit) or H; a and b: the router's weights per head on e and H; \"all\": the \
          blocks pooled).\n\n\
          | run | block | probe precision | probe recall | r(α, σ(probe)) | r(α, H) | a | b | \
          mean α by head |\n|---|---|---|---|---|---|---|---|---|\n";
    for (r, d) in measured {
        let row = |block: String,
                   probe: Option<ProbeCounts>,
                   rp: Option<f64>,
                   re: Option<f64>,
                   (a, b, heads): (String, String, String)| {
            format!(
                "| {} | {block} | {} | {} | {} | {} | {a} | {b} | {heads} |\n",
                r.label(),
                probe.map_or("-".into(), |p| pct_of(p.tp, p.tp + p.fp)),
                probe.map_or("-".into(), |p| pct_of(p.tp, p.tp + p.fn_)),
                opt(rp, 3),
                opt(re, 3)
            )
        };
        for b in &d.blocks {
            s += &row(
                b.block.to_string(),
                b.probe,
                b.r_alpha_probe,
                b.r_alpha_entropy,
                (
                    list(b.a.as_ref()),
                    list(b.b.as_ref()),
                    list(Some(&b.alpha_by_head)),
                ),
            );
        }
        if d.blocks.len() > 1 {
            s += &row(
                "all".into(),
                d.probe,
                d.r_alpha_probe,
                d.r_alpha_entropy,
                (opt(d.mean_a(), 2), opt(d.mean_b(), 2), "-".into()),
            );
        }
    }
    s
}

/// The check that the α means recomputed from the weights are the evaluation's.
fn agreement(measured: &[(&RoutedRun, &RouterInputs)]) -> String {
    let mut worst: f64 = 0.0;
    let mut compared = 0;
    for (r, d) in measured {
        for (role, _, m) in &r.means {
            if let Some(x) = d.role(role) {
                if m.is_finite() && x.alpha.is_finite() {
                    worst = worst.max((x.alpha - m).abs());
                    compared += 1;
                }
            }
        }
    }
    if compared == 0 {
        return String::new();
    }
    format!(
        "The α means by role recomputed from the weights and those of each run's evaluation \
         (eval.json) {} ({compared} means compared).\n\n",
        if worst == 0.0 {
            "are equal".to_string()
        } else {
            format!("differ by at most {worst:.1e}")
        }
    )
}

/// One bullet: the gaps of `r` and, for the roles α does not separate, which input failed.
fn separation_line(r: &RoutedRun) -> String {
    let (gaps, failures) = match r.measured() {
        Some(d) => {
            let sep = separation(d);
            (sep.gaps, sep.failures)
        }
        None => (gaps(&r.means), Vec::new()),
    };
    if gaps.is_empty() {
        return format!(
            "- {} ({}): no α means by role.\n",
            r.label(),
            routing_label(r.routing)
        );
    }
    let shown: Vec<String> = gaps
        .iter()
        .map(|g| {
            format!(
                "{} {:+.3} over {} ({})",
                g.role,
                g.gap,
                g.against,
                if g.gap >= MIN_GAP {
                    "separated"
                } else {
                    "not separated"
                }
            )
        })
        .collect();
    let mut line = format!(
        "- {} ({}): {}",
        r.label(),
        routing_label(r.routing),
        shown.join(", ")
    );
    if separated(&gaps) {
        line += ".";
    } else if let Diagnosis::Unavailable(why) = &r.diagnosis {
        line += &format!(". Which input failed is not measured ({why}).");
    } else {
        line += &format!(". {}.", failures.join(". "));
    }
    line + "\n"
}

/// The histogram of each role of `d` as a density: (bin centre, share of the role's α
/// values).
pub fn densities(d: &RouterInputs) -> Vec<(String, Vec<(f64, f64)>)> {
    d.roles
        .iter()
        .map(|r| {
            let n = r.hist.iter().sum::<u64>().max(1) as f64;
            let pts = r
                .hist
                .iter()
                .enumerate()
                .map(|(i, &k)| ((i as f64 + 0.5) / r.hist.len() as f64, k as f64 / n))
                .collect();
            (r.role.clone(), pts)
        })
        .collect()
}

/// `path`: one panel per measured run of `runs`, a line per role (the share of the role's α
/// values, every block and head, in [`BINS`] bins); nothing (false) without a measured run.
///
/// # Errors
/// Plot errors.
pub fn figure(runs: &[RoutedRun], path: &std::path::Path) -> Result<bool, TrainError> {
    use crate::plot::{panels_plot, Panel, Series};
    let panels: Vec<Panel> = runs
        .iter()
        .filter_map(|r| Some((r, r.measured()?)))
        .map(|(r, d)| Panel {
            title: format!(
                "{} ({}): α by role, every block and head",
                r.label(),
                routing_label(d.routing)
            ),
            x_label: "α".into(),
            y_label: "share of the role's α values".into(),
            log_x: false,
            log_y: false,
            series: densities(d)
                .into_iter()
                .enumerate()
                .map(|(k, (role, pts))| Series::line(role, pts).with_color(k))
                .collect(),
        })
        .collect();
    if panels.is_empty() {
        return Ok(false);
    }
    panels_plot(path, &panels)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_cover_the_unit_interval() {
        assert_eq!(bin(0.0), 0);
        assert_eq!(bin(0.999), BINS - 1);
        assert_eq!(bin(1.0), BINS - 1);
        assert_eq!(bin(0.5), BINS / 2);
        assert_eq!(bin(-0.1), 0);
    }

    #[test]
    fn routing_labels() {
        assert_eq!(routing_label(Routing::EntityOnly), "entity-only");
        assert_eq!(
            routing_label(Routing::Oracle {
                entity: 0.8,
                other: 0.35
            }),
            "oracle 0.80 / 0.35"
        );
        let mut m = Mixer::of_kind("vort").unwrap();
        assert_eq!(varying(&m), Some(Routing::Full));
        if let Mixer::Vort { routing, .. } = &mut m {
            *routing = Routing::Fixed { alpha: 0.5 };
        }
        assert_eq!(varying(&m), None);
        assert_eq!(varying(&Mixer::Exponential), None);
    }
}
