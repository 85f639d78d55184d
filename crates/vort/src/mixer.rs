//! The token mixer of a block: VORT or one of the baselines, each with its own settings
//! (docs/DESIGN.md §2). One type from the run config (`[model.mixer]`, `kind = "..."`) to the
//! kernel: [`crate::block::Block`] builds its kind's struct from it, and adding a mixer is one
//! variant here plus its struct in `block/kinds.rs`.
//!
//! ```toml
//! [model.mixer]
//! kind = "vort"              # vort | power-law | exponential | retnet | mixture | softmax
//! routing = "entity-only"    # full | entity-only | entropy-only | learned
//!                            # | { fixed = { alpha = 0.5 } }
//!                            # | { oracle = { entity = 0.8, other = 0.35 } }
//! nodes = { mode = "shared", banks = 4, delta = 0.1, horizon = 0, eps = 1e-3 }
//! ```
//!
//! A horizon of 0 in a run config means the task's sequence length; the model resolves it
//! ([`Mixer::resolved`]) before a block is built, and a block refuses 0.

use serde::{Deserialize, Serialize};

use crate::error::{Result, VortError};
use crate::nodes::{NodeMode, NodeSpec};

/// Which signals drive VORT's router: α = δ + (1-δ) σ(a·e - b·H + g·h + c) with some terms off.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Routing {
    /// a·e - b·H + g·h + c.
    #[default]
    Full,
    /// a·e + g·h + c (no entropy signal).
    EntityOnly,
    /// -b·H + g·h + c (no entity probe).
    EntropyOnly,
    /// A constant order for every token (no routing).
    Fixed {
        /// The order.
        alpha: f64,
    },
    /// One trainable order per head (and block), the same for every token:
    /// α_h = δ + (1-δ) σ(c_h), through the same node weights c_n(α). The ladder's "learned
    /// order" rung: the order is learned, but not per token.
    Learned,
    /// The paper's claimed assignment given by a rule, not learned: α = `entity` at the
    /// tokens the task marks memorable (MQAR's keys and values, books' entity bytes), `other`
    /// everywhere else. Needs those marks at every forward
    /// ([`crate::model::Model::forward_marked`]).
    Oracle {
        /// α of a marked token (the paper: 0.80 for entities).
        entity: f64,
        /// α of every other token (the paper: 0.35 for function words).
        other: f64,
    },
}

impl Routing {
    /// Whether the router reads the bigram entropy H (and the model keeps a bigram table).
    pub fn uses_entropy(self) -> bool {
        matches!(self, Routing::Full | Routing::EntropyOnly)
    }

    /// Whether there is a router with parameters (every routing but [`Routing::Fixed`] and
    /// [`Routing::Oracle`]).
    pub fn learned(self) -> bool {
        !matches!(self, Routing::Fixed { .. } | Routing::Oracle { .. })
    }

    /// Whether the router reads the entity probe (and returns its logits for the auxiliary
    /// loss).
    pub fn uses_probe(self) -> bool {
        matches!(self, Routing::Full | Routing::EntityOnly)
    }

    /// Whether α depends on the task's memorable marks ([`Routing::Oracle`]).
    pub fn needs_marks(self) -> bool {
        matches!(self, Routing::Oracle { .. })
    }

    /// The orders a rule fixes ([`Routing::Fixed`]: one; [`Routing::Oracle`]: two), to be
    /// checked against [δ, 1].
    pub fn rule_orders(self) -> Vec<(&'static str, f64)> {
        match self {
            Routing::Fixed { alpha } => vec![("fixed alpha", alpha)],
            Routing::Oracle { entity, other } => {
                vec![("oracle entity", entity), ("oracle other", other)]
            }
            _ => Vec::new(),
        }
    }
}

/// A mixer's kind without its settings: what results record beside a run
/// (`"vort"`, `"power-law"`, ... in JSON, as `kind` in a config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MixerKind {
    /// [`Mixer::Vort`].
    Vort,
    /// [`Mixer::PowerLaw`].
    PowerLaw,
    /// [`Mixer::Exponential`].
    Exponential,
    /// [`Mixer::Retnet`].
    Retnet,
    /// [`Mixer::Mixture`].
    Mixture,
    /// [`Mixer::Softmax`].
    Softmax,
}

impl MixerKind {
    /// Every kind, in [`Mixer::KINDS`]'s order.
    pub const ALL: [MixerKind; 6] = [
        MixerKind::Vort,
        MixerKind::PowerLaw,
        MixerKind::Exponential,
        MixerKind::Retnet,
        MixerKind::Mixture,
        MixerKind::Softmax,
    ];

    /// The name in configs, results and on the command line.
    pub fn name(self) -> &'static str {
        Mixer::KINDS[self as usize]
    }
}

impl std::fmt::Display for MixerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for MixerKind {
    type Err = VortError;
    fn from_str(s: &str) -> Result<MixerKind> {
        Mixer::of_kind(s).map(|m| m.kind())
    }
}

/// The token mixer of every block, with the settings of its kind only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Mixer {
    /// Power-law retention with routed per-token orders α ∈ [δ, 1] (VORT).
    Vort {
        /// The node table's recipe (mode, banks, δ, horizon, eps).
        #[serde(default = "default_nodes")]
        nodes: NodeSpec,
        /// Router signals.
        #[serde(default)]
        routing: Routing,
        /// Initial router bias c of every head (with the entropy signal near 1 at the start,
        /// c = 0 starts tokens at α ≈ δ + 0.3 (1 - δ)).
        #[serde(default)]
        router_bias_init: f64,
    },
    /// One fixed order for every token (SOE of w_j(α)), no routing.
    PowerLaw {
        /// The order α ∈ (0, 1].
        #[serde(default = "default_power_law_alpha")]
        alpha: f64,
        /// SOE horizon (0 in a run config: the sequence length).
        #[serde(default)]
        horizon: u64,
        /// SOE relative tolerance.
        #[serde(default = "default_eps")]
        eps: f64,
    },
    /// One exponential per head, K(j) = e^(-u_h j), u_h = softplus(ρ_h) learned.
    Exponential,
    /// RetNet's fixed multi-scale decays (Sun et al. 2023): head h keeps e^(-u_h j) with
    /// γ_h = e^(-u_h) = 1 - 2^(-5-h), nothing learned.
    Retnet,
    /// M fixed exponentials with rates >= Λ (log-spaced on [Λ, 1]), learned softmax weights
    /// per head.
    Mixture {
        /// M.
        #[serde(default = "default_mixture_m")]
        m: usize,
        /// Λ, the smallest rate.
        #[serde(default = "default_min_rate")]
        min_rate: f64,
    },
    /// Causal softmax attention on the normalised q, k (no feature map). `window` 0: full
    /// attention, O(T²) in training; w > 0: each query attends to exactly the last w keys,
    /// itself included (O(T·w); the streaming KV cache holds at most w), the softmax baseline
    /// that stays affordable at long T (8K-byte book sequences on CPU).
    Softmax {
        /// Keys attended by each query (0 = all).
        #[serde(default)]
        window: usize,
    },
}

fn default_nodes() -> NodeSpec {
    NodeSpec {
        mode: NodeMode::Shared,
        banks: 4,
        delta: 0.1,
        horizon: 0,
        eps: 1e-3,
    }
}
fn default_power_law_alpha() -> f64 {
    0.8
}
fn default_eps() -> f64 {
    1e-3
}
fn default_mixture_m() -> usize {
    5
}
fn default_min_rate() -> f64 {
    1e-3
}

impl Default for Mixer {
    fn default() -> Self {
        Mixer::of_kind("vort").expect("vort is a mixer kind")
    }
}

impl Mixer {
    /// The kind names, as in configs and on the command line.
    pub const KINDS: [&'static str; 6] = [
        "vort",
        "power-law",
        "exponential",
        "retnet",
        "mixture",
        "softmax",
    ];

    /// The mixer of kind `name` (or its snake_case spelling) with that kind's defaults.
    ///
    /// # Errors
    /// [`VortError::InvalidArgument`] for a name not in [`Mixer::KINDS`].
    pub fn of_kind(name: &str) -> Result<Mixer> {
        Ok(match name.replace('_', "-").as_str() {
            "vort" => Mixer::Vort {
                nodes: default_nodes(),
                routing: Routing::Full,
                router_bias_init: 0.0,
            },
            "power-law" => Mixer::PowerLaw {
                alpha: default_power_law_alpha(),
                horizon: 0,
                eps: default_eps(),
            },
            "exponential" => Mixer::Exponential,
            "retnet" => Mixer::Retnet,
            "mixture" => Mixer::Mixture {
                m: default_mixture_m(),
                min_rate: default_min_rate(),
            },
            "softmax" => Mixer::Softmax { window: 0 },
            _ => {
                return Err(VortError::InvalidArgument(format!(
                    "unknown mixer `{name}` (expected {})",
                    Mixer::KINDS.join("|")
                )))
            }
        })
    }

    /// The kind ([`MixerKind::name`] gives its name in [`Mixer::KINDS`]).
    pub fn kind(&self) -> MixerKind {
        match self {
            Mixer::Vort { .. } => MixerKind::Vort,
            Mixer::PowerLaw { .. } => MixerKind::PowerLaw,
            Mixer::Exponential => MixerKind::Exponential,
            Mixer::Retnet => MixerKind::Retnet,
            Mixer::Mixture { .. } => MixerKind::Mixture,
            Mixer::Softmax { .. } => MixerKind::Softmax,
        }
    }

    /// The routing of a VORT mixer (None for the others, which have no router).
    pub fn routing(&self) -> Option<Routing> {
        match self {
            Mixer::Vort { routing, .. } => Some(*routing),
            _ => None,
        }
    }

    /// Whether the blocks have a learned router (VORT with a routing other than fixed).
    pub fn routed(&self) -> bool {
        self.routing().is_some_and(Routing::learned)
    }

    /// Whether the router reads the bigram entropy (and the model keeps a bigram table).
    pub fn uses_entropy(&self) -> bool {
        self.routing().is_some_and(Routing::uses_entropy)
    }

    /// Whether every forward needs the task's memorable marks (oracle routing).
    pub fn needs_marks(&self) -> bool {
        self.routing().is_some_and(Routing::needs_marks)
    }

    /// The SOE horizon of a power-law mixer's node table (None for the others).
    pub fn horizon(&self) -> Option<u64> {
        match self {
            Mixer::Vort { nodes, .. } => Some(nodes.horizon),
            Mixer::PowerLaw { horizon, .. } => Some(*horizon),
            _ => None,
        }
    }

    /// The same mixer with a horizon of 0 (a run config's "the sequence length") replaced by
    /// `seq_len`.
    pub fn resolved(&self, seq_len: usize) -> Mixer {
        match self.horizon() {
            Some(0) => self.with_horizon(seq_len as u64),
            _ => self.clone(),
        }
    }

    /// The same mixer with its node tables' horizon set to `horizon` (no change for the
    /// kinds without node tables).
    pub fn with_horizon(&self, horizon: u64) -> Mixer {
        match self.clone() {
            Mixer::Vort {
                nodes,
                routing,
                router_bias_init,
            } => Mixer::Vort {
                nodes: nodes.with_horizon(horizon),
                routing,
                router_bias_init,
            },
            Mixer::PowerLaw { alpha, eps, .. } => Mixer::PowerLaw {
                alpha,
                horizon,
                eps,
            },
            other => other,
        }
    }

    /// Checks the kind's own settings (a horizon of 0 is allowed: the sequence length).
    ///
    /// # Errors
    /// [`VortError::InvalidArgument`] naming the field and its domain.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(VortError::InvalidArgument(m));
        let (lo, hi) = (vort_math::limits::MIN_EPS, vort_math::limits::MAX_EPS);
        match self {
            Mixer::Vort {
                nodes,
                routing,
                router_bias_init,
            } => {
                // NodeSpec's own checks, at a horizon standing in for "the sequence length"
                nodes.with_horizon(nodes.horizon.max(1)).validate()?;
                if !router_bias_init.is_finite() {
                    return bad(format!(
                        "router_bias_init = {router_bias_init:?} must be finite"
                    ));
                }
                for (name, alpha) in routing.rule_orders() {
                    if !(alpha > 0.0 && alpha <= 1.0) {
                        return bad(format!("routing's {name} = {alpha:?} must be in (0, 1]"));
                    }
                }
            }
            Mixer::PowerLaw {
                alpha,
                horizon,
                eps,
            } => {
                if !(*alpha > 0.0 && *alpha <= 1.0) {
                    return bad(format!("power-law alpha = {alpha:?} must be in (0, 1]"));
                }
                if *horizon > vort_math::limits::MAX_HORIZON {
                    return bad(format!(
                        "horizon = {horizon} must be <= {} (0 = the sequence length)",
                        vort_math::limits::MAX_HORIZON
                    ));
                }
                if !(eps.is_finite() && (lo..=hi).contains(eps)) {
                    return bad(format!("eps = {eps:?} must be in [{lo:e}, {hi}]"));
                }
            }
            Mixer::Mixture { m, min_rate } => {
                if *m == 0 {
                    return bad("mixture m must be >= 1".into());
                }
                if !(min_rate.is_finite() && *min_rate > 0.0 && *min_rate <= 1.0) {
                    return bad(format!("mixture min_rate = {min_rate:?} must be in (0, 1]"));
                }
            }
            Mixer::Exponential | Mixer::Retnet | Mixer::Softmax { .. } => {}
        }
        Ok(())
    }
}

impl std::fmt::Display for Mixer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind().name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind's name is its config name, and the kind of each kind's default mixer.
    #[test]
    fn mixer_kinds_name_their_mixers() {
        for (kind, name) in MixerKind::ALL.iter().zip(Mixer::KINDS) {
            assert_eq!(kind.name(), name);
            assert_eq!(Mixer::of_kind(name).unwrap().kind(), *kind);
            assert_eq!(name.parse::<MixerKind>().unwrap(), *kind);
            let json = serde_json::to_string(kind).unwrap();
            assert_eq!(json, format!("\"{name}\""));
        }
        assert_eq!(
            "power_law".parse::<MixerKind>().unwrap(),
            MixerKind::PowerLaw
        );
        assert!("attention".parse::<MixerKind>().is_err());
    }
}
