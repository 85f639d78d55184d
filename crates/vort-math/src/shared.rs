//! Shared SOE nodes: one set of rates {u_s} for every order a in [δ, 1] (DESIGN §2, beyond the
//! paper).
//!
//! With shared rates only the weights depend on the order, ŵ_j(a) = Σ_s c_s(a) e^(-u_s j), so a
//! layer can fold c_s(α_i) into token i's key and run one recurrence for all orders, with
//! continuous α and no bank quantisation.
//!
//! Construction (R1 generalised over a):
//! - one trapezoid step h = min_a h_R1(a, eps) and the union of the R1 node ranges, so each
//!   order gets its own R1 trapezoid weights c_k(a) = h G_a(x_k) on a common grid;
//! - the slow tail {k < k_bot} of every order is compressed onto [`TAIL_NODES_V`] fixed nodes
//!   (v = u / u_{k_bot-1}; v = 0 is the non-decaying mode, which carries all of a = 1) whose
//!   weights match the first four moments of that order's tail measure (exact for cubics, the
//!   same degree as R1's 2-point Gauss rule);
//! - c_s(a) is a closed form at every a (no interpolation error): the trapezoid weights are
//!   h G_a(x_k) and the tail weights solve a 4x4 moment system. It is tabulated on a uniform
//!   a-grid for reports, and certified at every grid order and every midpoint. (Linear
//!   interpolation of a table was tried first: c_k(a) ∝ e^((1-a) x_k) varies with rate |x_k| ~ 15
//!   in a, so a table fine enough for eps = 1e-4 at T = 1e5 needs thousands of orders.)

use serde::{Deserialize, Serialize};

use crate::error::{check_order, MathError};
use crate::soe::{self, Certificate, SoeTerm, TailMeasure};

/// Fixed tail nodes in the scaled variable v = u / u_{k_bot - 1}.
pub const TAIL_NODES_V: [f64; 4] = [0.0, 0.05, 0.3, 0.8];
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
    /// Lowest trapezoid node; every slower node is folded into the tail nodes.
    pub k_bot: i64,
    /// Uniform a-grid on [δ, 1] where the weights are tabulated and certified.
    pub alpha_grid: Vec<f64>,
    /// c_s(a) at each grid point: `weights[i][s]` for a = alpha_grid[i] (exact values; use
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
        let mut best = f64::INFINITY;
        // Fixed tail nodes are cruder than per-order Gauss nodes: lower k_bot (more trapezoid
        // nodes) until the quick check passes on the grid, then certify grid and midpoints.
        for k_bot in (r1_bot - 40..=r1_bot).rev() {
            let layout = Layout {
                h,
                k_top,
                k_bot,
                horizon,
            };
            let quick = grid
                .iter()
                .map(|&a| soe::quick_check(&layout.terms(a), a, horizon))
                .fold(0.0, f64::max);
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
                k_bot,
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

    /// Checks that `alpha` is a valid order inside [δ, 1].
    pub fn check_alpha(&self, alpha: f64) -> Result<f64, MathError> {
        let a = check_order(alpha)?;
        if a < self.delta {
            return Err(MathError::InvalidArgument(format!(
                "order {a} is below this node set's delta {}",
                self.delta
            )));
        }
        Ok(a)
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

/// The shared node layout: trapezoid nodes k_bot..=k_top (fastest first), then the tail nodes.
struct Layout {
    h: f64,
    k_top: i64,
    k_bot: i64,
    horizon: u64,
}

impl Layout {
    fn umax(&self) -> f64 {
        ((self.k_bot - 1) as f64 * self.h).exp()
    }

    fn nodes_u(&self) -> Vec<f64> {
        let mut u: Vec<f64> = (self.k_bot..=self.k_top)
            .rev()
            .map(|k| (k as f64 * self.h).exp())
            .collect();
        u.extend(TAIL_NODES_V.iter().map(|v| v * self.umax()));
        u
    }

    /// c_s(a): R1 trapezoid weights, then tail weights matching moments 0..=3 of the tail.
    fn weights(&self, a: f64) -> Vec<f64> {
        let n_trap = (self.k_top - self.k_bot + 1) as usize;
        if a >= 1.0 {
            // w_j = 1: all the mass sits on the non-decaying node v = 0.
            let mut c = vec![0.0; n_trap + TAIL_NODES_V.len()];
            c[n_trap] = 1.0;
            return c;
        }
        let mut c: Vec<f64> = (self.k_bot..=self.k_top)
            .rev()
            .map(|k| self.h * soe::laplace_density(a, k as f64 * self.h))
            .collect();
        let tail = TailMeasure::below(a, self.horizon, self.h, self.k_bot);
        let moments: Vec<f64> = (0..TAIL_NODES_V.len()).map(|p| tail.moment(p)).collect();
        c.extend(solve_vandermonde(&TAIL_NODES_V, &moments));
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

/// Solves Σ_i w_i v_i^p = m_p, p = 0..n-1 (distinct nodes), by Gaussian elimination with
/// partial pivoting (n = 4 here).
fn solve_vandermonde(v: &[f64], m: &[f64]) -> Vec<f64> {
    let n = v.len();
    let mut a: Vec<Vec<f64>> = (0..n)
        .map(|p| {
            let mut row: Vec<f64> = v.iter().map(|&x| x.powi(p as i32)).collect();
            row.push(m[p]);
            row
        })
        .collect();
    for col in 0..n {
        let piv = (col..n)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .unwrap_or(col);
        a.swap(col, piv);
        let pivot_row = a[col].clone();
        for row in a.iter_mut().skip(col + 1) {
            let f = row[col] / pivot_row[col];
            for (x, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                *x -= f * p;
            }
        }
    }
    let mut x = vec![0.0; n];
    for r in (0..n).rev() {
        let s: f64 = (r + 1..n).map(|k| a[r][k] * x[k]).sum();
        x[r] = (a[r][n] - s) / a[r][r];
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vandermonde_solve_is_exact_on_cubics() {
        let v = TAIL_NODES_V;
        let w_true = [0.3, -0.1, 0.5, 0.2];
        let m: Vec<f64> = (0..4)
            .map(|p| v.iter().zip(&w_true).map(|(x, w)| w * x.powi(p)).sum())
            .collect();
        let w = solve_vandermonde(&v, &m);
        for (a, b) in w.iter().zip(&w_true) {
            assert!((a - b).abs() < 1e-13);
        }
    }

    #[test]
    fn bad_delta_is_an_error() {
        for d in [0.0, 1.0, -0.5, f64::NAN] {
            assert!(SharedSoe::build(d, 1000, 1e-3).is_err());
        }
    }
}
