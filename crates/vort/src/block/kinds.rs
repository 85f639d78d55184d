//! The mixer kinds: one struct per [`Mixer`] variant, each holding its own parameters and
//! fixed tables behind the small [`MixerOps`] trait. A [`super::Block`] holds one of them
//! and shares the projections, the q/k normalisation and the feature map across all kinds.
//! Adding a mixer is a [`Mixer`] variant, a struct here, and its arms in [`init_params`] and
//! [`build`] (config to parameters; nothing else matches on the kind).

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;

use super::init_param;
use super::router::{oracle_orders, Router};
use crate::error::{Result, VortError};
use crate::mixer::{Mixer, Routing};
use crate::nodes::{NodeSpec, NodeTable};
use crate::retention::{node_weights, Rates};

/// What one mixer kind adds to the shared projections: its orders (if any), its node weights
/// and rates (the retention kinds) or its attention window (softmax).
pub(super) trait MixerOps: Send + Sync {
    /// Orders α [B, H, T] and entity logits [B, T] from x [B, T, Dm], the entropy [B, T] and
    /// the memorable marks [B, T]; (None, None) for kinds without per-token orders.
    fn route(
        &self,
        _x: &Tensor,
        _entropy: Option<&Tensor>,
        _marks: Option<&Tensor>,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((None, None))
    }

    /// Softmax attention's window (Some(0): full attention); None for a retention kind.
    fn attention_window(&self) -> Option<usize> {
        None
    }

    /// Per-token node weights cw [B, H, T, N] given the orders from [`MixerOps::route`].
    fn node_weights(
        &self,
        alpha: Option<&Tensor>,
        bht: (usize, usize, usize),
        device: &Device,
    ) -> Result<Tensor>;

    /// The rates of the nodes, as the kind defines them (None for softmax).
    fn rates(&self) -> Result<Option<Rates>>;

    /// The node tables of a power-law kind (one shared by all heads); empty otherwise.
    fn tables(&self) -> &[NodeTable] {
        &[]
    }

    /// The fixed rates of a kind without node tables whose rates are not learned.
    fn fixed_rates(&self) -> Option<&Rates> {
        None
    }

    /// Rebuilds the node tables for another horizon (a no-op without tables); on an error
    /// the kind is unchanged.
    fn set_horizon(&mut self, _horizon: u64) -> Result<()> {
        Ok(())
    }

    /// Memory nodes N of the retention state (0 for softmax).
    fn nodes(&self) -> usize;
}

/// softplus(x) = max(x, 0) + ln(1 + e^(−|x|)): finite for every finite x, where ln(1 + e^x)
/// overflows past x = 88 (f32).
fn softplus(x: &Tensor) -> Result<Tensor> {
    Ok((x.relu()? + (x.abs()?.neg()?.exp()? + 1.0)?.log()?)?)
}

/// Seeded initialisation of the kind's own parameters under the block prefix `p` (the shared
/// ones are the block's). `probe_init` and `g_init` are drawn by the block for every kind (the
/// draw order is part of every committed run's numbers), used by VORT's router only.
pub(super) fn init_params(
    mixer: &Mixer,
    h: usize,
    (vm, p): (&VarMap, &dyn Fn(&str) -> String),
    (probe_init, g_init): (Tensor, Tensor),
    device: &Device,
) -> Result<()> {
    let full = |v: f64, n: usize| -> Result<Tensor> { Ok(Tensor::full(v as f32, n, device)?) };
    match mixer {
        Mixer::Vort {
            routing,
            router_bias_init,
            ..
        } if routing.learned() => {
            if *routing != Routing::Learned {
                init_param(vm, &p("router.probe"), probe_init)?;
                init_param(vm, &p("router.g"), g_init)?;
                init_param(vm, &p("router.a"), full(1.0, h)?)?;
                init_param(vm, &p("router.b"), full(1.0, h)?)?;
            }
            init_param(vm, &p("router.c"), full(*router_bias_init, h)?)?;
        }
        Mixer::Exponential => {
            // RetNet-like spread of decays: γ_h = 1 - 2^(-5 - 3h/H)
            let rho: Vec<f32> = (0..h)
                .map(|i| {
                    let gamma = 1.0 - 2f64.powf(-5.0 - 3.0 * i as f64 / h as f64);
                    let u = -gamma.ln();
                    u.exp_m1().ln() as f32 // softplus⁻¹(u)
                })
                .collect();
            init_param(vm, &p("decay_rho"), Tensor::from_vec(rho, (h, 1), device)?)?;
        }
        Mixer::Mixture { m, .. } => {
            let logits = Tensor::zeros((h, *m), DType::F32, device)?;
            init_param(vm, &p("mix_logits"), logits)?;
        }
        _ => {}
    }
    Ok(())
}

/// The kind of `mixer` with its parameters read by `get(shape, name)`, for a block of width
/// `dm` and `h` heads.
pub(super) fn build(
    mixer: &Mixer,
    (dm, h): (usize, usize),
    get: &dyn Fn(&[usize], &str) -> Result<Tensor>,
) -> Result<Box<dyn MixerOps>> {
    Ok(match mixer {
        Mixer::Vort { nodes, routing, .. } => Box::new(VortKind {
            spec: *nodes,
            routing: *routing,
            heads: h,
            tables: vec![nodes.build()?],
            router: Router::new(*routing, nodes.delta, (dm, h), get)?,
        }),
        Mixer::PowerLaw {
            alpha,
            horizon,
            eps,
        } => Box::new(PowerLawKind {
            alpha: *alpha,
            eps: *eps,
            tables: vec![NodeTable::banks_at(&[*alpha], *horizon, *eps)?],
        }),
        Mixer::Exponential => Box::new(ExponentialKind {
            decay_rho: get(&[h, 1], "decay_rho")?,
        }),
        Mixer::Mixture { m, min_rate } => Box::new(MixtureKind::new(*m, *min_rate, h, get)?),
        Mixer::Retnet => {
            // γ_h = 1 - 2^(-5-h): u_h = -ln γ_h, valid at every lag (no horizon)
            let u = (0..h)
                .map(|i| vec![-(-(2f64.powi(-5 - i as i32))).ln_1p()])
                .collect();
            Box::new(RetnetKind {
                rates: Rates::Fixed { u, horizon: None },
            })
        }
        Mixer::Softmax { window } => Box::new(SoftmaxKind { window: *window }),
    })
}

/// VORT: routed per-token orders over one shared node table (docs/DESIGN.md §2).
struct VortKind {
    spec: NodeSpec,
    routing: Routing,
    heads: usize,
    tables: Vec<NodeTable>,
    router: Option<Router>, // None for the rule-set orders (fixed, oracle)
}

impl MixerOps for VortKind {
    fn route(
        &self,
        x: &Tensor,
        entropy: Option<&Tensor>,
        marks: Option<&Tensor>,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (b, t, _) = x.dims3()?;
        let bht = (b, self.heads, t);
        match (self.routing, &self.router) {
            (Routing::Fixed { alpha }, _) => {
                Ok((Some(Tensor::full(alpha as f32, bht, x.device())?), None))
            }
            (Routing::Oracle { entity, other }, _) => {
                Ok((Some(oracle_orders(marks, bht, entity, other)?), None))
            }
            (_, Some(router)) => router.route(x, entropy),
            (_, None) => Ok((None, None)),
        }
    }

    fn node_weights(
        &self,
        alpha: Option<&Tensor>,
        _: (usize, usize, usize),
        _: &Device,
    ) -> Result<Tensor> {
        let a = alpha.ok_or_else(|| VortError::InvalidArgument("no orders".into()))?;
        node_weights(a, &self.tables)
    }

    fn rates(&self) -> Result<Option<Rates>> {
        Ok(Some(Rates::of_tables(&self.tables)?))
    }

    fn tables(&self) -> &[NodeTable] {
        &self.tables
    }

    fn set_horizon(&mut self, horizon: u64) -> Result<()> {
        let spec = self.spec.with_horizon(horizon);
        self.tables = vec![spec.build()?];
        self.spec = spec;
        Ok(())
    }

    fn nodes(&self) -> usize {
        self.tables[0].len()
    }
}

/// One fixed order for every token: the SOE of w_j(α).
struct PowerLawKind {
    alpha: f64,
    eps: f64,
    tables: Vec<NodeTable>,
}

impl MixerOps for PowerLawKind {
    fn node_weights(
        &self,
        _alpha: Option<&Tensor>,
        bht: (usize, usize, usize),
        device: &Device,
    ) -> Result<Tensor> {
        // the order is not an output (BlockOutput::alpha stays None): a constant
        let a = Tensor::full(self.alpha as f32, bht, device)?;
        node_weights(&a, &self.tables)
    }

    fn rates(&self) -> Result<Option<Rates>> {
        Ok(Some(Rates::of_tables(&self.tables)?))
    }

    fn tables(&self) -> &[NodeTable] {
        &self.tables
    }

    fn set_horizon(&mut self, horizon: u64) -> Result<()> {
        self.tables = vec![NodeTable::banks_at(&[self.alpha], horizon, self.eps)?];
        Ok(())
    }

    fn nodes(&self) -> usize {
        self.tables[0].len()
    }
}

/// Weight 1 on the single node of a one-exponential kind: cw [B, H, T, 1].
fn one_node(bht: (usize, usize, usize), device: &Device) -> Result<Tensor> {
    let (b, h, t) = bht;
    Ok(Tensor::ones((b, h, t, 1), DType::F32, device)?)
}

/// One learned exponential per head: u_h = softplus(ρ_h).
struct ExponentialKind {
    decay_rho: Tensor, // [H, 1]
}

impl MixerOps for ExponentialKind {
    fn node_weights(
        &self,
        _: Option<&Tensor>,
        bht: (usize, usize, usize),
        device: &Device,
    ) -> Result<Tensor> {
        one_node(bht, device)
    }

    fn rates(&self) -> Result<Option<Rates>> {
        Ok(Some(Rates::Learned(softplus(&self.decay_rho)?)))
    }

    fn nodes(&self) -> usize {
        1
    }
}

/// RetNet's fixed decays: H rows of one rate each.
struct RetnetKind {
    rates: Rates,
}

impl MixerOps for RetnetKind {
    fn node_weights(
        &self,
        _: Option<&Tensor>,
        bht: (usize, usize, usize),
        device: &Device,
    ) -> Result<Tensor> {
        one_node(bht, device)
    }

    fn rates(&self) -> Result<Option<Rates>> {
        Ok(Some(self.rates.clone()))
    }

    fn fixed_rates(&self) -> Option<&Rates> {
        Some(&self.rates)
    }

    fn nodes(&self) -> usize {
        1
    }
}

/// M fixed exponentials (one row for all heads) with learned softmax weights per head.
struct MixtureKind {
    logits: Tensor, // [H, M]
    rates: Rates,
}

impl MixtureKind {
    /// M rates log-spaced on [Λ, 1], the logits read by `get`.
    fn new(
        m: usize,
        min_rate: f64,
        h: usize,
        get: &dyn Fn(&[usize], &str) -> Result<Tensor>,
    ) -> Result<MixtureKind> {
        if m == 0 || !(min_rate > 0.0 && min_rate <= 1.0) {
            return Err(VortError::InvalidArgument(format!(
                "exp mixture: M = {m} must be >= 1 and Λ = {min_rate} in (0, 1]"
            )));
        }
        let u: Vec<f64> = (0..m)
            .map(|i| {
                if m == 1 {
                    min_rate
                } else {
                    min_rate * (1.0 / min_rate).powf(i as f64 / (m - 1) as f64)
                }
            })
            .collect();
        // fixed exponentials: valid at every lag, no certified horizon
        Ok(MixtureKind {
            logits: get(&[h, m], "mix_logits")?,
            rates: Rates::Fixed {
                u: vec![u],
                horizon: None,
            },
        })
    }
}

impl MixerOps for MixtureKind {
    fn node_weights(
        &self,
        _: Option<&Tensor>,
        bht: (usize, usize, usize),
        _: &Device,
    ) -> Result<Tensor> {
        let (b, h, t) = bht;
        let m = self.logits.dim(1)?;
        let w = candle_nn::ops::softmax(&self.logits, 1)?;
        Ok(w.reshape((1, h, 1, m))?
            .broadcast_as((b, h, t, m))?
            .contiguous()?)
    }

    fn rates(&self) -> Result<Option<Rates>> {
        Ok(Some(self.rates.clone()))
    }

    fn fixed_rates(&self) -> Option<&Rates> {
        Some(&self.rates)
    }

    fn nodes(&self) -> usize {
        self.logits.dims().last().copied().unwrap_or(0)
    }
}

/// Causal softmax attention: nothing beyond the shared projections.
struct SoftmaxKind {
    window: usize,
}

impl MixerOps for SoftmaxKind {
    fn attention_window(&self) -> Option<usize> {
        Some(self.window)
    }

    fn node_weights(
        &self,
        _: Option<&Tensor>,
        _: (usize, usize, usize),
        _: &Device,
    ) -> Result<Tensor> {
        Err(VortError::InvalidArgument(
            "softmax has no node weights".into(),
        ))
    }

    fn rates(&self) -> Result<Option<Rates>> {
        Ok(None)
    }

    fn nodes(&self) -> usize {
        0
    }
}
