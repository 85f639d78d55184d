//! Shared SOE nodes: one set of rates {u_s} for every order a in [δ, 1] (docs/DESIGN.md §2,
//! beyond the paper).
//!
//! With shared rates only the weights depend on the order, ŵ_j(a) = Σ_s c_s(a) e^(-u_s j), so a
//! layer can fold c_s(α_i) into token i's key and run one recurrence for all orders, with
//! continuous α and no bank quantisation.
//!
//! Construction (R1 generalised over a):
//! - one trapezoid step h = min_a h_R1(a, eps) and the union of the R1 node ranges, so each
//!   order gets its own R1 trapezoid weights c_k(a) = h G_a(x_k) on a common grid;
//! - the slow tail {k < k_bot} of every order is split onto M fixed tail nodes (every gap-th
//!   trapezoid index below k_bot) and u = 0, the non-decaying mode that carries all of a = 1.
//!   Each slow node's weight goes to its two neighbouring tail nodes, keeping its mass and first
//!   moment (see `Layout::weights`). Every weight is therefore >= 0 for every a, like the GL
//!   kernel's own Laplace measure: the kernel is positive and decreasing at every lag, also
//!   past the horizon. (The earlier 4-moment fit on fixed nodes had negative weights, and its
//!   kernel turned negative at lags of ~11-18 T.) (k_bot, gap, M) are searched, fewest nodes
//!   first, until the certificate passes;
//! - c_s(a) is a closed form at every a (no interpolation error): the trapezoid weights are
//!   h G_a(x_k) and the tail weights are fixed positive combinations of them (plus the
//!   closed-form geometric remainder). It is tabulated on a uniform a-grid for reports, and
//!   certified at every grid order and every midpoint. (Linear interpolation of a table was
//!   tried first: c_k(a) ∝ e^((1-a) x_k) varies with rate |x_k| ~ 15 in a, so a table fine
//!   enough for eps = 1e-4 at T = 1e5 needs thousands of orders.)

use serde::{Deserialize, Serialize};

use crate::error::MathError;
use crate::soe::{self, Certificate, SoeTerm};

/// Index gaps between the positive tail nodes tried by [`SharedSoe::build`].
pub const TAIL_GAPS: [i64; 6] = [1, 2, 3, 4, 6, 8];
/// Most positive tail nodes tried.
pub const MAX_TAIL_NODES: usize = 12;
/// Most trapezoid nodes tried below single-order R1's lowest k_bot.
pub const MAX_EXTRA_TRAPEZOID: i64 = 40;
/// Orders in the table and the certificate (their midpoints are certified too).
pub const GRID_POINTS: usize = 33;

/// One node set for all orders in [δ, 1], with tabulated weights and a certificate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedSoe {
    /// Smallest order covered.
    pub delta: f64,
    /// Horizon T: the certificate covers 1 <= j <= T.
    pub horizon: u64,
    /// Requested relative tolerance.
    pub eps: f64,
    /// Trapezoid step h in x = ln u.
    pub step: f64,
    /// Shared rates u_s, fastest first; S = nodes_u.len().
    pub nodes_u: Vec<f64>,
    /// Trapezoid node indices k_bot..=k_top (x_k = k h).
    pub k_top: i64,
    /// Lowest trapezoid node; every slower node is split onto the tail nodes.
    pub k_bot: i64,
    /// The positive tail nodes sit at trapezoid indices k_bot - 1 - m·gap, m < tail_nodes.
    pub tail_gap: i64,
    /// Positive tail nodes M; the last node, u = 0, comes on top of them.
    pub tail_nodes: usize,
    /// Uniform a-grid on [δ, 1] where the weights are tabulated and certified.
    pub alpha_grid: Vec<f64>,
    /// c_s(a) at each grid point: `weights[i][s]` for a = `alpha_grid[i]` (exact values; use
    /// [`SharedSoe::weights_at`] between grid points).
    pub weights: Vec<Vec<f64>>,
    /// Worst relative error over every grid order and every midpoint.
    pub certificate: Certificate,
    /// S of the single-order R1 SOE (`Soe::build`) at each grid point, for comparison.
    pub single_order_s: Vec<usize>,
}

impl SharedSoe {
    /// Builds the shared node set for orders in [δ, 1] at horizon T and tolerance eps.
    ///
    /// # Errors
    /// δ outside (0, 1), horizon or eps outside their domains, or no certificate with up to
    /// 40 trapezoid nodes more than single-order R1 needs ([`MathError::NotCertified`]).
    pub fn build(delta: f64, horizon: u64, eps: f64) -> Result<SharedSoe, MathError> {
        if !(delta.is_finite() && delta > 0.0 && delta < 1.0) {
            return Err(MathError::InvalidArgument(format!(
                "delta = {delta} must be in (0, 1)"
            )));
        }
        soe::check_horizon(horizon)?;
        soe::check_eps(eps)?;
        let grid = uniform_grid(delta, GRID_POINTS);
        let open: Vec<f64> = grid.iter().copied().filter(|&a| a < 1.0).collect();
        let h = open
            .iter()
            .map(|&a| soe::r1_step(a, eps))
            .fold(f64::INFINITY, f64::min);
        let k_top = open
            .iter()
            .map(|&a| soe::r1_k_top(a, eps, h))
            .max()
            .unwrap_or(0);
        let r1_bot = open
            .iter()
            .map(|&a| soe::r1_k_bot(a, horizon, eps, h, k_top))
            .min()
            .unwrap_or(k_top);
        // Candidate layouts (k_bot, gap, M), fewest nodes first: the positive tail split is
        // cruder than R1's per-order Gauss rule, so the search may trade trapezoid nodes for
        // tail nodes either way. The quick check filters; the certificate decides.
        let mut layouts: Vec<Layout> = Vec::new();
        for k_bot in (r1_bot - MAX_EXTRA_TRAPEZOID)..=k_top {
            for gap in TAIL_GAPS {
                for tail in 1..=MAX_TAIL_NODES {
                    layouts.push(Layout {
                        h,
                        k_top,
                        k_bot,
                        gap,
                        tail,
                        horizon,
                    });
                }
            }
        }
        // Fewest nodes first; among equals, the most trapezoid nodes (the finer tail) first.
        layouts.sort_by_key(|l| (l.len(), std::cmp::Reverse(l.n_trap()), l.gap));
        let mut best = f64::INFINITY;
        for layout in layouts {
            crate::interrupt::check()?;
            let quick = quick_check_grid(&layout, &grid, eps);
            if quick > eps {
                best = best.min(quick);
                continue;
            }
            let candidate = SharedSoe {
                delta,
                horizon,
                eps,
                step: h,
                k_top,
                k_bot: layout.k_bot,
                tail_gap: layout.gap,
                tail_nodes: layout.tail,
                nodes_u: layout.nodes_u(),
                weights: grid.iter().map(|&a| layout.weights(a)).collect(),
                alpha_grid: grid.clone(),
                certificate: Certificate {
                    max_rel_error: f64::INFINITY,
                    argmax_lag: 0,
                    exhaustive_up_to: 0,
                    sampled_beyond: 0,
                    checked: String::new(),
                },
                single_order_s: Vec::new(),
            };
            let cert = candidate.certify_grid()?;
            if cert.max_rel_error <= eps {
                let single_order_s = grid
                    .iter()
                    .map(|&a| Ok(soe::Soe::build(a, horizon, eps)?.len()))
                    .collect::<Result<_, MathError>>()?;
                return Ok(SharedSoe {
                    certificate: cert,
                    single_order_s,
                    ..candidate
                });
            }
            best = best.min(cert.max_rel_error);
        }
        Err(MathError::NotCertified {
            alpha: delta,
            horizon,
            eps,
            achieved: best,
        })
    }

    /// Number of shared terms S.
    pub fn len(&self) -> usize {
        self.nodes_u.len()
    }

    /// True if there are no terms (never for a built node set).
    pub fn is_empty(&self) -> bool {
        self.nodes_u.is_empty()
    }

    fn layout(&self) -> Layout {
        Layout {
            h: self.step,
            k_top: self.k_top,
            k_bot: self.k_bot,
            gap: self.tail_gap,
            tail: self.tail_nodes,
            horizon: self.horizon,
        }
    }

    /// c_s(a) for any a in [δ, 1], evaluated exactly (not interpolated): R1 trapezoid weights
    /// h G_a(x_k) and the tail weights from the moments of a's tail measure. Orders outside
    /// [δ, 1] (or NaN) are clamped to the interval (the layer's router keeps α inside it).
    pub fn weights_at(&self, alpha: f64) -> Vec<f64> {
        self.layout().weights(self.clamp(alpha))
    }

    /// dc_s/da at `alpha` by a second-order finite difference of [`Self::weights_at`] (the
    /// weights are analytic in a; step 1e-5, one-sided at the ends; error ~1e-9 relative).
    pub fn dweights_da(&self, alpha: f64) -> Vec<f64> {
        let a = self.clamp(alpha);
        let d = 1e-5;
        let layout = self.layout();
        let (lo, hi) = (a - d, a + d);
        let diff = |p: Vec<f64>, q: Vec<f64>, r: Vec<f64>, k: [f64; 3]| -> Vec<f64> {
            (0..p.len())
                .map(|s| (k[0] * p[s] + k[1] * q[s] + k[2] * r[s]) / (2.0 * d))
                .collect()
        };
        if lo < self.delta {
            // forward: (-3 f(a) + 4 f(a+d) - f(a+2d)) / 2d
            diff(
                layout.weights(a),
                layout.weights(a + d),
                layout.weights(a + 2.0 * d),
                [-3.0, 4.0, -1.0],
            )
        } else if hi > 1.0 {
            // backward: (3 f(a) - 4 f(a-d) + f(a-2d)) / 2d
            diff(
                layout.weights(a),
                layout.weights(a - d),
                layout.weights(a - 2.0 * d),
                [3.0, -4.0, 1.0],
            )
        } else {
            diff(
                layout.weights(hi),
                layout.weights(lo),
                vec![0.0; self.len()],
                [1.0, -1.0, 0.0],
            )
        }
    }

    /// The SOE terms of order `alpha` on the shared nodes.
    pub fn terms_at(&self, alpha: f64) -> Vec<SoeTerm> {
        self.nodes_u
            .iter()
            .zip(self.weights_at(alpha))
            .map(|(&u, c)| SoeTerm { c, u })
            .collect()
    }

    fn clamp(&self, alpha: f64) -> f64 {
        if alpha.is_nan() {
            self.delta
        } else {
            alpha.clamp(self.delta, 1.0)
        }
    }

    /// Certificate of the node set: the worst of [`soe::certify`] over every grid order and
    /// every midpoint between two grid orders.
    pub fn certify_grid(&self) -> Result<Certificate, MathError> {
        use rayon::prelude::*;
        let n = self.alpha_grid.len();
        let mut orders: Vec<f64> = self.alpha_grid.clone();
        orders.extend((0..n - 1).map(|i| 0.5 * (self.alpha_grid[i] + self.alpha_grid[i + 1])));
        let certs: Vec<(f64, Certificate)> = orders
            .par_iter()
            .map(|&a| Ok((a, soe::certify(&self.terms_at(a), a, self.horizon)?)))
            .collect::<Result<_, MathError>>()?;
        let (worst_a, worst) = certs
            .into_iter()
            .max_by(|x, y| x.1.max_rel_error.total_cmp(&y.1.max_rel_error))
            .expect("grid has points");
        Ok(Certificate {
            checked: format!(
                "{} orders ({} grid points of [{}, 1] and their midpoints); at each: {}; \
                 worst at a = {worst_a:.6}",
                2 * n - 1,
                n,
                self.delta,
                worst.checked
            ),
            ..worst
        })
    }
}

/// n >= 2 equally spaced orders on [δ, 1], the last exactly 1 (bank orders, a-grids).
pub fn uniform_grid(delta: f64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            if i + 1 == n {
                1.0
            } else {
                delta + (1.0 - delta) * i as f64 / (n - 1) as f64
            }
        })
        .collect()
}

/// The quick check of a layout over the grid orders, stopping at the first order above eps.
fn quick_check_grid(layout: &Layout, grid: &[f64], eps: f64) -> f64 {
    let mut worst: f64 = 0.0;
    // the ends of the grid are the hardest orders: check them first
    let n = grid.len();
    let order = [0, n - 2, n / 2].into_iter().chain(0..n);
    for i in order {
        let a = grid[i];
        let e = soe::quick_check(&layout.terms(a), a, layout.horizon);
        worst = worst.max(if e.is_nan() { f64::INFINITY } else { e });
        if worst > eps {
            break;
        }
    }
    worst
}

/// The shared node layout: trapezoid nodes k_bot..=k_top, then the tail nodes u_{k_bot-1},
/// u_{k_bot-1-g}, …, u_{k_bot-1-(M-1)g} and u = 0; fastest first throughout.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Layout {
    h: f64,
    k_top: i64,
    k_bot: i64,
    /// Tail nodes sit on every `gap`-th trapezoid index below k_bot.
    gap: i64,
    /// Positive tail nodes M (the u = 0 node comes on top).
    tail: usize,
    horizon: u64,
}

impl Layout {
    fn n_trap(&self) -> usize {
        (self.k_top - self.k_bot + 1) as usize
    }

    fn len(&self) -> usize {
        self.n_trap() + self.tail + 1
    }

    /// Trapezoid indices of the positive tail nodes, fastest first.
    fn tail_indices(&self) -> impl Iterator<Item = i64> + '_ {
        (0..self.tail as i64).map(move |m| self.k_bot - 1 - m * self.gap)
    }

    fn nodes_u(&self) -> Vec<f64> {
        let mut u: Vec<f64> = (self.k_bot..=self.k_top)
            .rev()
            .map(|k| (k as f64 * self.h).exp())
            .collect();
        u.extend(self.tail_indices().map(|k| (k as f64 * self.h).exp()));
        u.push(0.0);
        u
    }

    /// c_s(a) >= 0: the R1 trapezoid weights h G_a(x_k) on k_bot..=k_top, then the slow tail
    /// {k < k_bot} split onto the tail nodes.
    ///
    /// Each slow node u_k lying between two neighbouring tail nodes v_lo < u_k <= v_hi gives
    /// them θ c_k and (1 - θ) c_k with θ v_lo + (1 - θ) v_hi = u_k: a positive split that keeps
    /// the mass and the first moment of the tail measure exactly, for every a. Since
    /// u -> e^(-u j) is convex, the split over-weights each slow node by at most
    /// j² (v_hi - v_lo)² / 8 relative, which the builder's search over (k_bot, gap, M) keeps
    /// below eps on [1, T]. Below the explicit nodes the geometric remainder (moments in closed
    /// form, as in R1) goes to u = 0 and the slowest positive tail node the same way.
    ///
    /// This replaces the earlier 4-moment fit on fixed nodes, whose weights went negative and
    /// turned the kernel negative at lags beyond ~11 T. The weights are positive, so the kernel
    /// is completely monotone at every lag, inside the horizon or not.
    fn weights(&self, a: f64) -> Vec<f64> {
        let n_trap = self.n_trap();
        let mut c = vec![0.0; self.len()];
        if a >= 1.0 {
            // w_j = 1: all the mass sits on the non-decaying node u = 0.
            c[self.len() - 1] = 1.0;
            return c;
        }
        for (slot, k) in (self.k_bot..=self.k_top).rev().enumerate() {
            c[slot] = self.h * soe::laplace_density(a, k as f64 * self.h);
        }
        // Tail nodes in index space: positive ones at k_m, then u = 0 (index -inf).
        let tail_k: Vec<i64> = self.tail_indices().collect();
        let k_min = *tail_k.last().expect("at least one tail node");
        // Explicit slow nodes down to u <= 1e-12 / T (e^(-ju) = 1 to 1e-12 for j <= T) and at
        // least one index below the slowest positive tail node.
        let k_lo = (((1e-12 / self.horizon as f64).ln() / self.h).floor() as i64).min(k_min - 1);
        let u_of = |k: i64| (k as f64 * self.h).exp();
        let mut m = 0; // tail interval: between tail_k[m] (above) and tail_k[m+1] or 0
        for k in (k_lo..self.k_bot).rev() {
            let ck = self.h * soe::laplace_density(a, k as f64 * self.h);
            while m + 1 < tail_k.len() && k <= tail_k[m + 1] {
                m += 1;
            }
            let hi = tail_k[m];
            if k >= hi {
                // k == hi: the node is a tail node (k > hi cannot happen: tail_k[0] = k_bot-1)
                c[n_trap + m] += ck;
                continue;
            }
            let (u_hi, u_k) = (u_of(hi), u_of(k));
            let u_lo = if m + 1 < tail_k.len() {
                u_of(tail_k[m + 1])
            } else {
                0.0
            };
            let theta_hi = (u_k - u_lo) / (u_hi - u_lo);
            c[n_trap + m] += theta_hi * ck;
            c[n_trap + m + 1] += (1.0 - theta_hi) * ck;
        }
        // Geometric remainder below k_lo: c_{k_lo-i} ≈ c_{k_lo} q^i, q = e^(-(1-a)h) (exact as
        // u -> 0, where G(x) -> (sin πa/π) e^((1-a)x)); mass m0 and first moment m1 in closed
        // form, split between the slowest positive node and u = 0 (m1 <= m0 u_min).
        let c_lo = self.h * soe::laplace_density(a, k_lo as f64 * self.h);
        let q = (-(1.0 - a) * self.h).exp();
        let m0 = c_lo * q / (1.0 - q);
        let q1 = q * (-self.h).exp();
        let m1 = c_lo * u_of(k_lo) * q1 / (1.0 - q1);
        let to_min = m1 / u_of(k_min);
        c[self.len() - 2] += to_min;
        c[self.len() - 1] += m0 - to_min;
        c
    }

    fn terms(&self, a: f64) -> Vec<SoeTerm> {
        self.nodes_u()
            .into_iter()
            .zip(self.weights(a))
            .map(|(u, c)| SoeTerm { c, u })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The split keeps the tail's mass: Σ_s c_s(a) equals the trapezoid sum of the Laplace
    /// density over every index (w_0 = 1 up to the trapezoid error), and every weight is >= 0.
    #[test]
    fn tail_split_is_positive_and_keeps_the_mass() {
        let h = 0.5;
        let layout = Layout {
            h,
            k_top: 8,
            k_bot: -6,
            gap: 3,
            tail: 4,
            horizon: 10_000,
        };
        for a in [0.05, 0.3, 0.5, 0.9, 0.999] {
            let c = layout.weights(a);
            assert_eq!(c.len(), layout.len());
            assert!(c.iter().all(|&x| x >= 0.0), "a = {a}: {c:?}");
            // Σ_k h G_a(kh) over all k (q^200000 < e^-100 at a = 0.999).
            let full: f64 = (-200_000..=8)
                .map(|k| h * soe::laplace_density(a, k as f64 * h))
                .sum();
            let total: f64 = c.iter().sum();
            assert!(
                (total / full - 1.0).abs() < 1e-9,
                "a = {a}: {total} vs {full}"
            );
            // First moment Σ c_s u_s as well (exact split of each slow node).
            let u = layout.nodes_u();
            let m1: f64 = c.iter().zip(&u).map(|(c, u)| c * u).sum();
            let full1: f64 = (-200_000..=8)
                .map(|k| {
                    let x = k as f64 * h;
                    h * soe::laplace_density(a, x) * x.exp()
                })
                .sum();
            assert!((m1 / full1 - 1.0).abs() < 1e-9, "a = {a}: {m1} vs {full1}");
        }
        assert_eq!(*layout.weights(1.0).last().unwrap(), 1.0);
    }

    #[test]
    fn bad_delta_is_an_error() {
        for d in [0.0, 1.0, -0.5, f64::NAN] {
            assert!(SharedSoe::build(d, 1000, 1e-3).is_err());
        }
    }
}
