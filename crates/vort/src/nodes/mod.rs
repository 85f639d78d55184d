//! Memory modes as node tables: a set of rates {u_n} and per-order weights c_n(a).
//!
//! Both memory modes of docs/DESIGN.md §2 reduce to one kernel for token i queried at lag j:
//!
//! ```text
//! K_i(0) = 1,   K_i(j) = Σ_n c_n(α_i) e^(-u_n j)   (j >= 1)
//! ```
//!
//! with c_n(a) piecewise linear in a on a grid of orders, so that the node weights fold into
//! the key, G^(n) += c_n(α_i) φ(k_i) v_iᵀ, and the output is differentiable in α a.e.:
//!
//! - **banks** (the paper): K orders a_1 < … < a_K on [δ, 1], each with its own certified SOE
//!   (`Soe::build`); the nodes are the union of the banks' terms and c_n(a_k) is bank k's
//!   weight on its own nodes, 0 on the others. Linear interpolation between a_k and a_(k+1)
//!   is exactly the split of the token between the two bracketing banks with weights
//!   β = (a_(k+1) - α)/(a_(k+1) - a_k) and 1 - β (docs/DESIGN.md §2, "make routing
//!   differentiable").
//! - **shared** (beyond the paper): the rates of `vort_math::shared::SharedSoe`, one set for all
//!   orders; c_s(a) is its closed form at every a (`SharedSoe::weights_at`, certified at the
//!   grid orders and their midpoints) and dc_s/da its derivative (`dweights_da`), so the
//!   gradient in α is the tangent of the exact weights, not of an interpolant.
//! - **fixed**: a constant weight row (one order, no routing; or the baselines' exponentials).
//!
//! Orders outside [grid_0, grid_last] are clamped (zero derivative there), as the router keeps
//! α in [δ, 1].

use serde::{Deserialize, Serialize};
use vort_math::gl;
use vort_math::shared::SharedSoe;
use vort_math::Soe;

use crate::error::{Result, VortError};

pub mod cache;

/// How a VORT node table stores orders (docs/DESIGN.md §2): banks of fixed orders or shared nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum NodeMode {
    /// K banks of fixed orders on [δ, 1], token split between the two bracketing banks.
    Banks,
    /// One shared node set, weights c_s(α) folded into the key (continuous α).
    #[default]
    Shared,
}

impl std::str::FromStr for NodeMode {
    type Err = VortError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "banks" => Ok(NodeMode::Banks),
            "shared" => Ok(NodeMode::Shared),
            _ => Err(VortError::InvalidArgument(format!(
                "node mode `{s}` is not one of banks|shared"
            ))),
        }
    }
}

/// Horizon of the node tables that streams, prefill and decode use by default: 2^20 lags. A
/// model's learned parameters do not depend on its nodes, so a model trained at T = 8K streams
/// with a table built for 2^20 (a few more nodes: S = 21 against 16 at δ = 0.1, eps = 1e-3).
pub const STREAM_HORIZON: u64 = 1 << 20;

/// Most banks a node table may have (each is an SOE built and certified on its own; 1e9 of
/// them used to run until killed).
pub const MAX_BANKS: usize = 1024;

/// The recipe of a VORT node table: every table of a memory mode is built from one of these
/// (the model config, `vort retention` and the benches all go through it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// Banks (paper) or shared nodes.
    pub mode: NodeMode,
    /// Banks K >= 2 (banks mode only; ignored by shared nodes).
    pub banks: usize,
    /// Smallest order δ in (0, 1); orders below it are clamped to it.
    pub delta: f64,
    /// Horizon T >= 1: the kernel is certified on lags 1..=T, and every form refuses contexts
    /// longer than T ([`VortError::BeyondHorizon`]).
    pub horizon: u64,
    /// Certified relative tolerance of the kernel.
    pub eps: f64,
}

impl NodeSpec {
    /// Checks every field before anything is built.
    ///
    /// # Errors
    /// [`VortError::InvalidArgument`] naming the field: δ outside (0, 1), horizon 0 or above
    /// the SOE builder's limit, eps outside the certifiable range, banks < 2 in banks mode
    /// (one bank would give every token the single order δ: use `Memory::PowerLaw` for that).
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(VortError::InvalidArgument(m));
        if !(self.delta.is_finite() && self.delta > 0.0 && self.delta < 1.0) {
            return bad(format!("delta = {} must be in (0, 1)", self.delta));
        }
        if self.horizon == 0 || self.horizon > vort_math::limits::MAX_HORIZON {
            return bad(format!(
                "horizon = {} must be in [1, {}]",
                self.horizon,
                vort_math::limits::MAX_HORIZON
            ));
        }
        if !(self.eps.is_finite()
            && (vort_math::limits::MIN_EPS..=vort_math::limits::MAX_EPS).contains(&self.eps))
        {
            return bad(format!(
                "eps = {} must be in [{:e}, {}]",
                self.eps,
                vort_math::limits::MIN_EPS,
                vort_math::limits::MAX_EPS
            ));
        }
        if self.mode == NodeMode::Banks && self.banks > MAX_BANKS {
            return bad(format!(
                "banks = {} must be <= {MAX_BANKS} (each bank is a certified SOE of its own)",
                self.banks
            ));
        }
        if self.mode == NodeMode::Banks && self.banks < 2 {
            return bad(format!(
                "banks = {} must be >= 2 (one bank is a fixed order δ)",
                self.banks
            ));
        }
        Ok(())
    }

    /// The same recipe at another horizon (streaming: [`STREAM_HORIZON`]).
    pub fn with_horizon(self, horizon: u64) -> NodeSpec {
        NodeSpec { horizon, ..self }
    }

    /// Builds the table.
    ///
    /// # Errors
    /// As [`NodeSpec::validate`], or an SOE that cannot be certified.
    pub fn build(&self) -> Result<NodeTable> {
        self.validate()?;
        match self.mode {
            NodeMode::Banks => NodeTable::banks(self.banks, self.delta, self.horizon, self.eps),
            NodeMode::Shared => NodeTable::shared(self.delta, self.horizon, self.eps),
        }
    }
}

/// How the table was built (kept for the exact-kernel reference and for reports).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum TableKind {
    /// Bank orders a_1..a_K.
    Banks { orders: Vec<f64> },
    /// Shared nodes for orders in [δ, 1]: the node set and a fine cubic-Hermite tabulation of
    /// its closed-form c_s(a) and dc_s/da (the closed form costs ~4 µs per token; the table
    /// agrees with it to ~1e-12, see [`HermiteTable`]).
    Shared {
        soe: Box<SharedSoe>,
        table: HermiteTable,
    },
    /// A fixed weight row (no dependence on α).
    Fixed,
}

/// Rates u_n and weights c_n(a) tabulated on an increasing grid of orders (see module doc).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeTable {
    /// How the table was built.
    pub kind: TableKind,
    /// Rates u_n >= 0 (λ_n = e^(-u_n)), N of them.
    pub u: Vec<f64>,
    /// Increasing grid of orders (one point for a fixed table).
    pub grid: Vec<f64>,
    /// `weights[g][n] = c_n(grid[g])`.
    pub weights: Vec<Vec<f64>>,
    /// Horizon T the SOEs are certified for (u64::MAX for a fixed table).
    pub horizon: u64,
    /// Worst certified relative kernel error max_j |K(j)/w_j - 1| over the grid (0 if exact).
    pub max_rel_error: f64,
}

impl NodeTable {
    /// Banks: K >= 1 orders evenly spaced on [δ, 1] (K = 1 gives the single order δ), each
    /// with its own SOE certified to `eps` on [1, horizon].
    ///
    /// # Errors
    /// δ outside (0, 1], K = 0, or an SOE that cannot be certified.
    pub fn banks(k: usize, delta: f64, horizon: u64, eps: f64) -> Result<NodeTable> {
        if k == 0 {
            return Err(VortError::InvalidArgument("banks: K must be >= 1".into()));
        }
        if !(delta.is_finite() && delta > 0.0 && delta <= 1.0) {
            return Err(VortError::InvalidArgument(format!(
                "banks: delta = {delta} must be in (0, 1]"
            )));
        }
        let orders: Vec<f64> = if k == 1 {
            vec![delta]
        } else {
            vort_math::shared::uniform_grid(delta, k)
        };
        Self::banks_at(&orders, horizon, eps)
    }

    /// Banks at explicit increasing orders in [0, 1] (each order's SOE from [`cache`] when it
    /// was built before).
    ///
    /// # Errors
    /// Orders not strictly increasing or outside [0, 1], or an SOE that cannot be certified.
    pub fn banks_at(orders: &[f64], horizon: u64, eps: f64) -> Result<NodeTable> {
        if orders.is_empty() || orders.windows(2).any(|w| w[0] >= w[1]) {
            return Err(VortError::InvalidArgument(format!(
                "banks: orders {orders:?} must be non-empty and strictly increasing"
            )));
        }
        let soes: Vec<Soe> = orders
            .iter()
            .map(|&a| cache::order_soe(a, horizon, eps))
            .collect::<Result<_>>()?;
        let n: usize = soes.iter().map(|s| s.len()).sum();
        let mut u = Vec::with_capacity(n);
        let mut weights = vec![vec![0.0; n]; orders.len()];
        let mut max_rel_error: f64 = 0.0;
        for (g, soe) in soes.iter().enumerate() {
            for term in &soe.terms {
                weights[g][u.len()] = term.c;
                u.push(term.u);
            }
            max_rel_error = max_rel_error.max(soe.certificate.max_rel_error);
        }
        Ok(NodeTable {
            kind: TableKind::Banks {
                orders: orders.to_vec(),
            },
            u,
            grid: orders.to_vec(),
            weights,
            horizon,
            max_rel_error,
        })
    }

    /// Shared nodes for orders in [δ, 1] (`SharedSoe::build`), built once per (δ, horizon,
    /// eps) in the process and on disk where [`cache::use_disk`] names a directory.
    ///
    /// # Errors
    /// δ outside (0, 1) or a node set that cannot be certified.
    pub fn shared(delta: f64, horizon: u64, eps: f64) -> Result<NodeTable> {
        cache::shared_table(delta, horizon, eps)
    }

    /// Wraps an already built [`SharedSoe`].
    pub fn from_shared(s: &SharedSoe) -> NodeTable {
        NodeTable {
            kind: TableKind::Shared {
                soe: Box::new(s.clone()),
                table: HermiteTable::build(s, HERMITE_POINTS),
            },
            u: s.nodes_u.clone(),
            grid: s.alpha_grid.clone(),
            weights: s.weights.clone(),
            horizon: s.horizon,
            max_rel_error: s.certificate.max_rel_error,
        }
    }

    /// A fixed mixture K(j) = Σ_n c_n e^(-u_n j), independent of α (baselines).
    ///
    /// # Errors
    /// Length mismatch, negative or non-finite rates.
    pub fn fixed(u: Vec<f64>, c: Vec<f64>) -> Result<NodeTable> {
        if u.len() != c.len() || u.iter().any(|x| !(x.is_finite() && *x >= 0.0)) {
            return Err(VortError::InvalidArgument(format!(
                "fixed table: rates {u:?} must be finite, >= 0 and as many as weights {c:?}"
            )));
        }
        Ok(NodeTable {
            kind: TableKind::Fixed,
            u,
            grid: vec![0.0],
            weights: vec![c],
            horizon: u64::MAX,
            max_rel_error: 0.0,
        })
    }

    fn shared_eval(&self, alpha: f64) -> (Vec<f64>, Vec<f64>) {
        match &self.kind {
            TableKind::Shared { table, .. } => table.eval(alpha),
            _ => (self.weights_at(alpha), self.dweights_da(alpha)),
        }
    }

    /// True when lags up to `context` are inside the certified horizon. Beyond it the kernel
    /// is not certified: it stays positive and decreasing (every weight is >= 0), but it is no
    /// longer the GL kernel to eps (a 4096-horizon shared table over-weights lag 1e6 by 2-4x).
    pub fn covers(&self, context: u64) -> bool {
        context <= self.horizon
    }

    /// Number of nodes N.
    pub fn len(&self) -> usize {
        self.u.len()
    }

    /// True with no nodes (order 0: y_t = v_t).
    pub fn is_empty(&self) -> bool {
        self.u.is_empty()
    }

    /// Grid cell and position: (i, θ, slope_scale) with a = grid[i] + θ (grid[i+1] - grid[i]).
    /// For a single-point grid returns (0, 0, 0).
    fn locate(&self, alpha: f64) -> (usize, f64, f64) {
        let g = self.grid.len();
        if g == 1 {
            return (0, 0.0, 0.0);
        }
        let lo = self.grid[0];
        let hi = self.grid[g - 1];
        let clamped = !(alpha > lo && alpha < hi);
        let a = if alpha.is_nan() {
            lo
        } else {
            alpha.clamp(lo, hi)
        };
        // binary search for the cell (grids may be non-uniform)
        let i = match self.grid.partition_point(|&x| x <= a) {
            0 => 0,
            p => (p - 1).min(g - 2),
        };
        let da = self.grid[i + 1] - self.grid[i];
        let theta = (a - self.grid[i]) / da;
        let inv = if clamped && (alpha < lo || alpha > hi || alpha.is_nan()) {
            0.0
        } else {
            1.0 / da
        };
        (i, theta, inv)
    }

    /// Weights c_n(α) (clamped to the grid): interpolated for banks, the closed form of the
    /// shared node set.
    pub fn weights_at(&self, alpha: f64) -> Vec<f64> {
        if let TableKind::Shared { table, .. } = &self.kind {
            return table.eval(alpha).0;
        }
        let (i, theta, _) = self.locate(alpha);
        if self.grid.len() == 1 {
            return self.weights[0].clone();
        }
        self.weights[i]
            .iter()
            .zip(&self.weights[i + 1])
            .map(|(l, r)| l + theta * (r - l))
            .collect()
    }

    /// dc_n/dα of the interpolant (0 outside the grid and for a fixed table).
    pub fn dweights_da(&self, alpha: f64) -> Vec<f64> {
        if let TableKind::Shared { table, .. } = &self.kind {
            return table.eval(alpha).1;
        }
        let (i, _, inv) = self.locate(alpha);
        if self.grid.len() == 1 {
            return vec![0.0; self.len()];
        }
        self.weights[i]
            .iter()
            .zip(&self.weights[i + 1])
            .map(|(l, r)| (r - l) * inv)
            .collect()
    }

    /// The row pieces that make c(α) = base + (α - a0) * slope on α's cell, with `a0` the cell's
    /// left order; used by the candle forms so that α keeps its gradient.
    pub fn affine_at(&self, alpha: f64) -> (Vec<f64>, Vec<f64>, f64) {
        if let TableKind::Shared { .. } = &self.kind {
            // tangent at α itself: value c(α), slope dc/da(α)
            let a0 = if alpha.is_nan() { 0.0 } else { alpha };
            let (c, dc) = self.shared_eval(alpha);
            return (c, dc, a0);
        }
        if self.grid.len() == 1 {
            return (self.weights[0].clone(), vec![0.0; self.len()], 0.0);
        }
        let (i, _, inv) = self.locate(alpha);
        let slope: Vec<f64> = self.weights[i]
            .iter()
            .zip(&self.weights[i + 1])
            .map(|(l, r)| (r - l) * inv)
            .collect();
        if inv == 0.0 {
            // clamped: constant row at the clamped value, anchored at α itself
            return (
                self.weights_at(alpha),
                slope,
                if alpha.is_nan() { 0.0 } else { alpha },
            );
        }
        (self.weights[i].clone(), slope, self.grid[i])
    }

    /// The SOE kernel K(j) of an order α (K(0) = 1).
    pub fn kernel(&self, alpha: f64, j: u64) -> f64 {
        if j == 0 {
            return 1.0;
        }
        let jf = j as f64;
        self.weights_at(alpha)
            .iter()
            .zip(&self.u)
            .map(|(c, u)| c * (-u * jf).exp())
            .sum()
    }

    /// The exact GL kernel this table approximates, for order α at lag j (the naive reference):
    /// banks: β w_j(a_k) + (1-β) w_j(a_(k+1)); shared: w_j(clamp(α)); fixed: the table itself.
    ///
    /// # Errors
    /// Never for a table built by this module (orders stay in [0, 1]).
    pub fn exact_kernel(&self, alpha: f64, j: u64) -> Result<f64> {
        match &self.kind {
            TableKind::Fixed => Ok(self.kernel(alpha, j)),
            TableKind::Shared { soe, .. } => {
                let a = if alpha.is_nan() {
                    soe.delta
                } else {
                    alpha.clamp(soe.delta, 1.0)
                };
                Ok(gl::weight(a, j)?)
            }
            TableKind::Banks { orders } => {
                if orders.len() == 1 {
                    return Ok(gl::weight(orders[0], j)?);
                }
                let (i, theta, _) = self.locate(alpha);
                Ok((1.0 - theta) * gl::weight(orders[i], j)?
                    + theta * gl::weight(orders[i + 1], j)?)
            }
        }
    }
}

/// Points of the Hermite tabulation of a shared node set's weights on [δ, 1].
pub const HERMITE_POINTS: usize = 4097;

/// c_s(a) and dc_s/da of a [`SharedSoe`] tabulated on a uniform grid of [δ, 1] and evaluated
/// by cubic Hermite interpolation (value and slope at both ends of each cell), so that the
/// value is C¹ in a and its derivative is the derivative of the interpolant. Error bound
/// h⁴/384 · max|∂⁴c/∂a⁴|: with c ∝ e^((1-a) x), |x| <~ 15 and h = (1-δ)/4096 this is ~1e-13
/// relative, far below any certifiable eps (measured in the tests).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HermiteTable {
    /// First grid order δ.
    pub a0: f64,
    /// Grid step.
    pub h: f64,
    /// Points P.
    pub points: usize,
    /// Nodes N.
    pub n: usize,
    /// c_s at the grid points, [P, N].
    pub c: Vec<f64>,
    /// dc_s/da at the grid points, [P, N].
    pub dc: Vec<f64>,
}

impl HermiteTable {
    /// Tabulates `s` at `points` (>= 2) uniform orders of [δ, 1].
    pub fn build(s: &SharedSoe, points: usize) -> HermiteTable {
        use rayon::prelude::*;
        let points = points.max(2);
        let h = (1.0 - s.delta) / (points - 1) as f64;
        let rows: Vec<(Vec<f64>, Vec<f64>)> = (0..points)
            .into_par_iter()
            .map(|i| {
                let a = if i + 1 == points {
                    1.0
                } else {
                    s.delta + h * i as f64
                };
                (s.weights_at(a), s.dweights_da(a))
            })
            .collect();
        let n = s.nodes_u.len();
        let mut c = Vec::with_capacity(points * n);
        let mut dc = Vec::with_capacity(points * n);
        for (v, d) in rows {
            c.extend(v);
            dc.extend(d);
        }
        HermiteTable {
            a0: s.delta,
            h,
            points,
            n,
            c,
            dc,
        }
    }

    /// (c(α), dc/dα(α)); orders outside [δ, 1] are clamped with zero derivative.
    pub fn eval(&self, alpha: f64) -> (Vec<f64>, Vec<f64>) {
        let hi = self.a0 + self.h * (self.points - 1) as f64;
        let inside = alpha >= self.a0 && alpha <= hi;
        let a = if alpha.is_nan() {
            self.a0
        } else {
            alpha.clamp(self.a0, hi)
        };
        let pos = (a - self.a0) / self.h;
        let i = (pos.floor() as usize).min(self.points - 2);
        let s = pos - i as f64;
        let (s2, s3) = (s * s, s * s * s);
        let (h00, h10) = (2.0 * s3 - 3.0 * s2 + 1.0, s3 - 2.0 * s2 + s);
        let (h01, h11) = (-2.0 * s3 + 3.0 * s2, s3 - s2);
        let (d00, d10) = (6.0 * s2 - 6.0 * s, 3.0 * s2 - 4.0 * s + 1.0);
        let (d01, d11) = (-6.0 * s2 + 6.0 * s, 3.0 * s2 - 2.0 * s);
        let n = self.n;
        let (c0, c1) = (
            &self.c[i * n..(i + 1) * n],
            &self.c[(i + 1) * n..(i + 2) * n],
        );
        let (g0, g1) = (
            &self.dc[i * n..(i + 1) * n],
            &self.dc[(i + 1) * n..(i + 2) * n],
        );
        let mut v = Vec::with_capacity(n);
        let mut d = Vec::with_capacity(n);
        for k in 0..n {
            // The weights are >= 0 at every order (a positive mixture); the cubic can undershoot
            // a weight that vanishes at a = 1 by ~1e-16, so the table keeps the sign exactly.
            let c = h00 * c0[k] + h10 * self.h * g0[k] + h01 * c1[k] + h11 * self.h * g1[k];
            v.push(c.max(0.0));
            d.push(if inside {
                (d00 * c0[k] + d01 * c1[k]) / self.h + d10 * g0[k] + d11 * g1[k]
            } else {
                0.0
            });
        }
        (v, d)
    }
}
