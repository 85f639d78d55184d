//! Why a fixed exponential mixture cannot replace the power law (Proposition 4.2 of
//! arXiv 2605.08966).
//!
//! Let every rate of a mixture be at least Λ: f_j = Σ_m c_m e^(-u_m j), u_m >= Λ. Beyond lag
//! 1/Λ each term has decayed by e, while w_j ~ j^(a-1)/Γ(a) has not, so the l2([1, T]) error
//!
//! ```text
//! E(a, Λ, T) = min_f ( Σ_{j=1}^{T} (w_j(a) - f_j)² )^(1/2)
//! ```
//!
//! is at least of the order of the tail norm (Σ_{1/Λ < j <= T} w_j²)^(1/2), which grows like
//! T^(a-1/2) / (Γ(a) sqrt(2a-1)) for a > 1/2 and stays bounded for a < 1/2
//! (Σ j^(2a-2) converges). This module computes E for
//! (a) one exponential ([`best_single_exponential`], rate by golden section on ln u),
//! (b) a non-negative mixture over a dense grid of rates in [Λ, [`U_MAX`]] ([`nnls_mixture`],
//!     Lawson–Hanson [`nnls`] on the Gram matrix), and
//! (c) M free rates with signed least-squares weights ([`best_m_exponentials`], variable
//!     projection, Levenberg–Marquardt + Nelder–Mead from several starts),
//! plus the analytic [`tail_norm`] and the growth exponent d ln E / d ln T
//! ([`growth_exponent`]), to compare with a - 1/2. Reference: `lower_bound_table.txt`
//! (M = 1 and NNLS reproduced to < 0.5% at every entry, slopes to 0.001).
//!
//! What the numbers show: for T >> 1/Λ all three errors approach the tail norm and grow with
//! exponent 0.318 (a = 0.8) and 0.456 (a = 0.95) between T = 1e5 and 1e6, tending to a - 1/2;
//! for a < 1/2 they level off. Signs matter near T ~ 1/Λ: for a = 0.95, Λ = 1e-3 the best
//! *non-negative* mixture is a single exponential (NNLS = M=1 at every T), while five rates
//! with signed weights (near-coincident rates with alternating weights act like e^(-Λj)
//! times a polynomial) beat M=1 by 40x (a = 0.8) to 250x (a = 0.95) at T = 1e3.
//!
//! Every reported error is recomputed directly as sqrt(Σ_j (w_j - f_j)²) from the fitted terms
//! (never as ||w||² - bᵀc, which cancels), so it is the true error of the returned mixture.

use rayon::prelude::*;
use serde::Serialize;

use super::{check_lag_range, golden_section_min};
use crate::error::{check_order, MathError};
use crate::gl;
use crate::soe::SoeTerm;

/// Fastest rate considered (e^(-50) ≈ 2e-22: faster terms only touch w_1).
pub const U_MAX: f64 = 50.0;
/// Default number of log-spaced rates in [Λ, U_MAX] for [`nnls_mixture`].
pub const DEFAULT_NNLS_RATES: usize = 200;
/// Largest horizon of the fits (the weights are held in memory: 8 bytes per lag).
pub const MAX_FIT_HORIZON: u64 = 10_000_000;
/// Default evaluation budget of [`best_m_exponentials`].
pub const DEFAULT_VARPRO_EVALS: usize = 2000;
/// Power recursions e^(-u j) = e^(-u (j-1)) e^(-u) restart from exp() at multiples of this.
const BLOCK: usize = 1024;
/// Coarse log-grid points in [Λ, U_MAX] before the golden-section refinement.
const SINGLE_RATE_GRID: usize = 64;

/// A fitted mixture and its l2([1, T]) error.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixtureFit {
    /// Order a of the target w_j(a).
    pub alpha: f64,
    /// Smallest allowed rate Λ.
    pub lambda: f64,
    /// Horizon T: the fit is on lags 1..=T.
    pub horizon: u64,
    /// `"M=1"`, `"nnls"` or `"M=<m>"` (m free rates).
    pub method: String,
    /// sqrt(Σ_{j=1}^{T} (w_j - f_j)²), computed directly from `terms`.
    pub error: f64,
    /// sqrt(Σ_{j=1}^{T} w_j²), for relative errors.
    pub target_norm: f64,
    /// The fitted terms f_j = Σ c e^(-u j), slowest first (zero weights dropped).
    pub terms: Vec<SoeTerm>,
    /// [`tail_norm`](a, Λ, T), the part of w the rates >= Λ cannot follow.
    pub tail: f64,
}

/// Checks the common arguments and returns the target weights w_1..=w_T.
fn target(a: f64, lambda: f64, horizon: u64) -> Result<Vec<f64>, MathError> {
    check_order(a)?;
    check_lambda(lambda)?;
    check_lag_range("horizon T", horizon, MAX_FIT_HORIZON)?;
    let mut w = gl::weights_upto(a, horizon)?;
    w.remove(0);
    Ok(w)
}

fn check_lambda(lambda: f64) -> Result<f64, MathError> {
    if lambda.is_finite() && lambda > 0.0 && lambda < U_MAX {
        Ok(lambda)
    } else {
        Err(MathError::InvalidArgument(format!(
            "minimum rate Lambda = {lambda:?} must be in (0, {U_MAX})"
        )))
    }
}

/// Σ_{j=1}^{T} w_j e^(-u j) for w = (w_1..w_T): blockwise power recursion, stops at underflow.
fn laplace_sum(w: &[f64], u: f64) -> f64 {
    let q = (-u).exp();
    let mut total = 0.0;
    for (b, chunk) in w.chunks(BLOCK).enumerate() {
        let j0 = (b * BLOCK + 1) as f64;
        let mut p = (-u * j0).exp();
        if p < 1e-300 {
            break;
        }
        let mut s = 0.0;
        for &wj in chunk {
            s += wj * p;
            p *= q;
        }
        total += s;
    }
    total
}

/// Σ_{j=1}^{T} e^(-s j) = e^(-s) (1 - e^(-sT)) / (1 - e^(-s)), for s > 0.
fn geometric_sum(s: f64, t: u64) -> f64 {
    (-s).exp() * (-(-s * t as f64).exp_m1()) / (-(-s).exp_m1())
}

/// sqrt(Σ_{j=1}^{T} (w_j - Σ_m c_m e^(-u_m j))²), in parallel over blocks of lags.
fn residual_norm(w: &[f64], terms: &[SoeTerm]) -> f64 {
    w.par_chunks(BLOCK)
        .enumerate()
        .map(|(b, chunk)| {
            let j0 = (b * BLOCK + 1) as f64;
            let mut fit = [0.0f64; BLOCK];
            for t in terms {
                let mut p = t.c * (-t.u * j0).exp();
                if p == 0.0 {
                    continue;
                }
                let q = (-t.u).exp();
                for f in fit.iter_mut().take(chunk.len()) {
                    *f += p;
                    p *= q;
                }
            }
            chunk
                .iter()
                .zip(fit.iter())
                .map(|(wj, fj)| (wj - fj) * (wj - fj))
                .sum::<f64>()
        })
        .sum::<f64>()
        .sqrt()
}

fn norm(w: &[f64]) -> f64 {
    w.par_chunks(BLOCK)
        .map(|c| c.iter().map(|x| x * x).sum::<f64>())
        .sum::<f64>()
        .sqrt()
}

fn finish(
    a: f64,
    lambda: f64,
    horizon: u64,
    method: String,
    w: &[f64],
    mut terms: Vec<SoeTerm>,
) -> Result<MixtureFit, MathError> {
    terms.retain(|t| t.c != 0.0);
    terms.sort_by(|x, y| x.u.total_cmp(&y.u));
    Ok(MixtureFit {
        alpha: a,
        lambda,
        horizon,
        method,
        error: residual_norm(w, &terms),
        target_norm: norm(w),
        terms,
        tail: tail_norm(a, lambda, horizon)?,
    })
}

/// (a) The best single exponential c e^(-u j) with u >= Λ in l2([1, T]).
///
/// For fixed u the best weight is c = b(u)/g(u), b(u) = Σ w_j e^(-uj), g(u) = Σ e^(-2uj)
/// (closed form), and the error² is ||w||² - b²/g; b²/g is maximised over ln u in
/// [ln Λ, ln U_MAX] on a 64-point grid, then by golden section in the bracketing cell
/// (ln-u tolerance 1e-9). The returned error is recomputed directly.
///
/// # Errors
/// Order outside [0, 1]; Λ outside (0, U_MAX); T outside [1, [`MAX_FIT_HORIZON`]].
pub fn best_single_exponential(a: f64, lambda: f64, horizon: u64) -> Result<MixtureFit, MathError> {
    let w = target(a, lambda, horizon)?;
    let score = |x: f64| {
        let u = x.exp();
        let b = laplace_sum(&w, u);
        -(b * b) / geometric_sum(2.0 * u, horizon)
    };
    let (x_lo, x_hi) = (lambda.ln(), U_MAX.ln());
    let xs: Vec<f64> = (0..SINGLE_RATE_GRID)
        .map(|i| x_lo + (x_hi - x_lo) * i as f64 / (SINGLE_RATE_GRID - 1) as f64)
        .collect();
    let coarse: Vec<f64> = xs.par_iter().map(|&x| score(x)).collect();
    let i = (0..coarse.len())
        .min_by(|&p, &q| coarse[p].total_cmp(&coarse[q]))
        .unwrap_or(0);
    let lo = xs[i.saturating_sub(1)];
    let hi = xs[(i + 1).min(xs.len() - 1)];
    let (x, fx) = golden_section_min(score, lo, hi, 1e-9);
    let x = if coarse[i] < fx { xs[i] } else { x };
    let u = x.exp().clamp(lambda, U_MAX);
    let c = laplace_sum(&w, u) / geometric_sum(2.0 * u, horizon);
    finish(a, lambda, horizon, "M=1".into(), &w, vec![SoeTerm { c, u }])
}

/// (b) The best non-negative mixture over `n_rates` log-spaced rates in [Λ, U_MAX].
///
/// Gram entries G_ik = Σ_{j<=T} e^(-(u_i+u_k) j) in closed form, right-hand side
/// b_i = Σ_j w_j e^(-u_i j) (O(T) each, in parallel), columns scaled to unit norm, then
/// Lawson–Hanson [`nnls`]. This is the best mixture with non-negative weights on the grid
/// (the completely monotone class the SOE of the kernel belongs to); signed weights can do
/// better at small T (see [`best_m_exponentials`]). Error recomputed directly.
///
/// # Errors
/// As [`best_single_exponential`], and `n_rates` outside [2, 2000].
pub fn nnls_mixture(
    a: f64,
    lambda: f64,
    horizon: u64,
    n_rates: usize,
) -> Result<MixtureFit, MathError> {
    if !(2..=2000).contains(&n_rates) {
        return Err(MathError::InvalidArgument(format!(
            "n_rates = {n_rates} must be between 2 and 2000"
        )));
    }
    let w = target(a, lambda, horizon)?;
    let ratio = (U_MAX / lambda).ln();
    let rates: Vec<f64> = (0..n_rates)
        .map(|i| {
            if i == 0 {
                lambda
            } else {
                lambda * (ratio * i as f64 / (n_rates - 1) as f64).exp()
            }
        })
        .collect();
    let b: Vec<f64> = rates.par_iter().map(|&u| laplace_sum(&w, u)).collect();
    let scale: Vec<f64> = rates
        .iter()
        .map(|&u| 1.0 / geometric_sum(2.0 * u, horizon).sqrt())
        .collect();
    let n = n_rates;
    let mut g = vec![0.0; n * n];
    for i in 0..n {
        for k in 0..=i {
            let v = scale[i] * scale[k] * geometric_sum(rates[i] + rates[k], horizon);
            g[i * n + k] = v;
            g[k * n + i] = v;
        }
    }
    let bs: Vec<f64> = b.iter().zip(&scale).map(|(bi, si)| bi * si).collect();
    let sol = nnls(&g, &bs)?;
    let terms = sol
        .x
        .iter()
        .zip(&scale)
        .zip(&rates)
        .filter(|((x, _), _)| **x > 0.0)
        .map(|((x, s), &u)| SoeTerm { c: x * s, u })
        .collect();
    finish(a, lambda, horizon, "nnls".into(), &w, terms)
}

/// Result of [`nnls`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NnlsSolution {
    /// The minimiser x >= 0.
    pub x: Vec<f64>,
    /// Outer iterations (variables added).
    pub iterations: usize,
    /// The KKT test passed (every free gradient <= tolerance) before the iteration cap.
    pub converged: bool,
}

/// Lawson–Hanson non-negative least squares in normal-equation form:
/// min_{x >= 0} xᵀ G x - 2 bᵀx for a symmetric positive semi-definite `gram` (n×n, row-major)
/// and `rhs` b (Lawson & Hanson 1974, ch. 23; the Gram form is Bro & De Jong's "fast NNLS").
///
/// Passive-set subproblems are solved by Cholesky; a variable whose column is numerically
/// dependent on the passive set (pivot below 1e-13 of its diagonal) is not admitted. Stops
/// when every gradient component b - Gx of an active-set variable is <= 1e-10 · max|b|, or
/// after 3n + 10 outer iterations.
///
/// # Errors
/// `gram` not n×n for n = rhs.len() >= 1, or non-finite entries.
pub fn nnls(gram: &[f64], rhs: &[f64]) -> Result<NnlsSolution, MathError> {
    let n = rhs.len();
    if n == 0 || gram.len() != n * n {
        return Err(MathError::InvalidArgument(format!(
            "nnls: gram has {} entries, expected {n}² with n = rhs.len() >= 1",
            gram.len()
        )));
    }
    if !gram.iter().chain(rhs).all(|v| v.is_finite()) {
        return Err(MathError::InvalidArgument(
            "nnls: non-finite entries".into(),
        ));
    }
    let bmax = rhs.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let tol = 1e-10 * bmax;
    let mut x = vec![0.0; n];
    let mut passive = vec![false; n];
    let mut blocked = vec![false; n];
    let max_outer = 3 * n + 10;
    let mut iterations = 0;
    let mut converged = false;
    let grad = |x: &[f64]| -> Vec<f64> {
        (0..n)
            .map(|i| rhs[i] - (0..n).map(|k| gram[i * n + k] * x[k]).sum::<f64>())
            .collect()
    };
    while iterations < max_outer {
        let gr = grad(&x);
        let cand = (0..n)
            .filter(|&i| !passive[i] && !blocked[i])
            .max_by(|&p, &q| gr[p].total_cmp(&gr[q]));
        let t = match cand {
            Some(t) if gr[t] > tol => t,
            _ => {
                converged = true;
                break;
            }
        };
        iterations += 1;
        passive[t] = true;
        let mut admitted = false;
        for _ in 0..=n {
            let p: Vec<usize> = (0..n).filter(|&i| passive[i]).collect();
            let s = match solve_subset(gram, n, rhs, &p) {
                Some(s) => s,
                None => {
                    passive[t] = false;
                    x[t] = 0.0;
                    break;
                }
            };
            if s.iter().all(|&v| v > 0.0) {
                for (&i, &v) in p.iter().zip(&s) {
                    x[i] = v;
                }
                admitted = passive[t];
                break;
            }
            // Step from x towards s until the first passive variable hits zero.
            let mut step = 1.0f64;
            for (&i, &v) in p.iter().zip(&s) {
                if v <= 0.0 {
                    let d = x[i] - v;
                    if d > 0.0 {
                        step = step.min(x[i] / d);
                    } else {
                        step = 0.0;
                    }
                }
            }
            for (&i, &v) in p.iter().zip(&s) {
                x[i] += step * (v - x[i]);
            }
            for &i in &p {
                if x[i] <= 0.0 || (i == t && step == 0.0) {
                    x[i] = 0.0;
                    passive[i] = false;
                }
            }
            if passive.iter().all(|&q| !q) {
                break;
            }
        }
        if admitted {
            blocked.iter_mut().for_each(|b| *b = false);
        } else {
            blocked[t] = true;
        }
    }
    Ok(NnlsSolution {
        x,
        iterations,
        converged,
    })
}

/// Solves G_PP s = b_P by Cholesky; None if a pivot falls below 1e-13 of its diagonal.
fn solve_subset(gram: &[f64], n: usize, rhs: &[f64], p: &[usize]) -> Option<Vec<f64>> {
    let m = p.len();
    let mut l = vec![0.0; m * m];
    for (r, &i) in p.iter().enumerate() {
        for (c, &k) in p.iter().enumerate().take(r + 1) {
            l[r * m + c] = gram[i * n + k];
        }
    }
    let b: Vec<f64> = p.iter().map(|&i| rhs[i]).collect();
    cholesky_solve(&mut l, m, b, 1e-13)
}

/// In-place Cholesky of the lower triangle of `l` (m×m) and solve; None on a small pivot.
fn cholesky_solve(l: &mut [f64], m: usize, mut b: Vec<f64>, rel_pivot: f64) -> Option<Vec<f64>> {
    for r in 0..m {
        let diag = l[r * m + r];
        for c in 0..=r {
            let mut s = l[r * m + c];
            for k in 0..c {
                s -= l[r * m + k] * l[c * m + k];
            }
            if c == r {
                if s.is_nan() || s <= rel_pivot * diag.abs() || !s.is_finite() {
                    return None;
                }
                l[r * m + r] = s.sqrt();
            } else {
                l[r * m + c] = s / l[c * m + c];
            }
        }
    }
    for r in 0..m {
        let mut s = b[r];
        for k in 0..r {
            s -= l[r * m + k] * b[k];
        }
        b[r] = s / l[r * m + r];
    }
    for r in (0..m).rev() {
        let mut s = b[r];
        for k in r + 1..m {
            s -= l[k * m + r] * b[k];
        }
        b[r] = s / l[r * m + r];
    }
    Some(b)
}

/// Least-squares weights (signed) for fixed rates, by Cholesky of the unit-scaled Gram matrix
/// (a ridge of 1e-12 is added if it is numerically singular), and the resulting terms.
fn ls_terms(w: &[f64], rates: &[f64], horizon: u64) -> Vec<SoeTerm> {
    let m = rates.len();
    let scale: Vec<f64> = rates
        .iter()
        .map(|&u| 1.0 / geometric_sum(2.0 * u, horizon).sqrt())
        .collect();
    let b: Vec<f64> = rates
        .iter()
        .zip(&scale)
        .map(|(&u, s)| s * laplace_sum(w, u))
        .collect();
    let mut g = vec![0.0; m * m];
    for i in 0..m {
        for k in 0..m {
            g[i * m + k] = scale[i] * scale[k] * geometric_sum(rates[i] + rates[k], horizon);
        }
    }
    let mut sol = None;
    for ridge in [0.0, 1e-12, 1e-9, 1e-6] {
        let mut l = g.clone();
        for i in 0..m {
            l[i * m + i] += ridge;
        }
        sol = cholesky_solve(&mut l, m, b.clone(), 1e-15);
        if sol.is_some() {
            break;
        }
    }
    let x = sol.unwrap_or_else(|| vec![0.0; m]);
    rates
        .iter()
        .zip(x.iter().zip(&scale))
        .map(|(&u, (xi, s))| SoeTerm { c: xi * s, u })
        .collect()
}

/// (c) The best mixture of `m` exponentials with free rates u >= Λ and signed weights.
///
/// Variable projection (Golub–Pereyra): for given rates the weights are the least-squares
/// solution, so only the rates are searched, as θ_i = ln(u_i - Λ) (u_i -> Λ as θ_i -> -∞),
/// by Levenberg–Marquardt on the projected residual vector (Jacobian by forward
/// differences) followed by a Nelder–Mead polish. Several starts are tried and the best kept: the
/// `m` heaviest terms of an NNLS fit, rates spread geometrically over [Λ, 1], and rates clustered
/// above Λ at three spreads (where the signed optimum puts them when the tail dominates:
/// near-coincident rates with alternating weights act like e^(-Λj) times a polynomial in j). Each
/// residual evaluation is O(m T); the search costs up to `max_evals` of them (about 0.5 s at
/// T = 1e4, m = 5, `max_evals` = [`DEFAULT_VARPRO_EVALS`]). A local optimum: an upper bound on
/// the best M-term error.
///
/// # Errors
/// As [`best_single_exponential`]; m outside [1, 12]; max_evals < 10.
pub fn best_m_exponentials(
    a: f64,
    lambda: f64,
    horizon: u64,
    m: usize,
    max_evals: usize,
) -> Result<MixtureFit, MathError> {
    if !(1..=12).contains(&m) || max_evals < 10 {
        return Err(MathError::InvalidArgument(format!(
            "m = {m} must be in [1, 12] and max_evals = {max_evals} >= 10"
        )));
    }
    let w = target(a, lambda, horizon)?;
    let theta_max = (U_MAX - lambda).ln();
    let theta_min = (lambda * 1e-9).ln();
    let to_theta = |u: f64| ((u - lambda).max(lambda * 1e-9)).ln().min(theta_max);
    let rates_of = |th: &[f64]| -> Vec<f64> {
        th.iter()
            .map(|t| lambda + t.clamp(theta_min, theta_max).exp())
            .collect()
    };

    // Starts.
    let mut starts: Vec<Vec<f64>> = Vec::new();
    let seed_fit = nnls_mixture(a, lambda, horizon, 100)?;
    let mut heavy: Vec<(f64, f64)> = seed_fit
        .terms
        .iter()
        .map(|t| (t.c * geometric_sum(2.0 * t.u, horizon).sqrt(), t.u))
        .collect();
    heavy.sort_by(|p, q| q.0.total_cmp(&p.0));
    let mut s0: Vec<f64> = heavy.iter().take(m).map(|h| h.1).collect();
    while s0.len() < m {
        s0.push(lambda * 3f64.powi(s0.len() as i32 + 1));
    }
    starts.push(s0);
    let top = 1.0f64.max(2.0 * lambda).min(U_MAX);
    starts.push(
        (0..m)
            .map(|k| lambda * 1.01 * (top / lambda).powf(k as f64 / m.max(2) as f64))
            .collect(),
    );
    for spread in [0.03, 0.5, 5.0] {
        starts.push(
            (0..m)
                .map(|k| lambda * (1.0 + spread * ((k + 1) * (k + 1)) as f64))
                .collect(),
        );
    }
    let budget = max_evals / starts.len();
    let objective = |th: &[f64]| sq(&projected_residual(&w, horizon, &rates_of(th)));
    let mut best: Option<(f64, Vec<f64>)> = None;
    for st in &starts {
        let th0: Vec<f64> = st.iter().map(|&u| to_theta(u)).collect();
        let (th, _) = levenberg_marquardt(&w, horizon, &th0, &rates_of, budget / 2);
        let (th, f) = nelder_mead(&objective, &th, 0.3, budget - budget / 2);
        if best.as_ref().is_none_or(|b| f < b.0) {
            best = Some((f, th));
        }
    }
    let th = best.map(|b| b.1).unwrap_or_default();
    let terms = ls_terms(&w, &rates_of(&th), horizon);
    finish(a, lambda, horizon, format!("M={m}"), &w, terms)
}

/// w - Σ c_m e^(-u_m j) with least-squares c for the given rates (the VARPRO residual).
fn projected_residual(w: &[f64], horizon: u64, rates: &[f64]) -> Vec<f64> {
    let terms = ls_terms(w, rates, horizon);
    let mut r = w.to_vec();
    for t in &terms {
        let q = (-t.u).exp();
        for (b, chunk) in r.chunks_mut(BLOCK).enumerate() {
            let mut p = t.c * (-t.u * (b * BLOCK + 1) as f64).exp();
            if p == 0.0 {
                break;
            }
            for x in chunk.iter_mut() {
                *x -= p;
                p *= q;
            }
        }
    }
    r
}

fn sq(r: &[f64]) -> f64 {
    r.iter().map(|x| x * x).sum()
}

/// Levenberg–Marquardt on θ for min ||r(θ)||², forward-difference Jacobian; returns the best
/// θ and ||r||² within `max_evals` residual evaluations.
fn levenberg_marquardt(
    w: &[f64],
    horizon: u64,
    th0: &[f64],
    rates_of: &dyn Fn(&[f64]) -> Vec<f64>,
    max_evals: usize,
) -> (Vec<f64>, f64) {
    let m = th0.len();
    let mut th = th0.to_vec();
    let mut r = projected_residual(w, horizon, &rates_of(&th));
    let mut f = sq(&r);
    let mut evals = 1;
    let mut mu = 1e-3;
    while evals + m < max_evals {
        // Jacobian columns.
        let mut jac: Vec<Vec<f64>> = Vec::with_capacity(m);
        for k in 0..m {
            let h = 1e-6 * th[k].abs().max(1.0);
            let mut tp = th.clone();
            tp[k] += h;
            let rp = projected_residual(w, horizon, &rates_of(&tp));
            evals += 1;
            jac.push(rp.iter().zip(&r).map(|(a, b)| (a - b) / h).collect());
        }
        let mut jtj = vec![0.0; m * m];
        let mut jtr = vec![0.0; m];
        for i in 0..m {
            jtr[i] = jac[i].iter().zip(&r).map(|(a, b)| a * b).sum();
            for k in 0..=i {
                let v: f64 = jac[i].iter().zip(&jac[k]).map(|(a, b)| a * b).sum();
                jtj[i * m + k] = v;
                jtj[k * m + i] = v;
            }
        }
        let mut improved = false;
        while evals < max_evals && mu < 1e12 {
            let mut l = jtj.clone();
            for i in 0..m {
                l[i * m + i] += mu * jtj[i * m + i].max(1e-300);
            }
            let step = match cholesky_solve(&mut l, m, jtr.iter().map(|v| -v).collect(), 0.0) {
                Some(s) => s,
                None => {
                    mu *= 4.0;
                    continue;
                }
            };
            let cand: Vec<f64> = th.iter().zip(&step).map(|(t, s)| t + s).collect();
            let rc = projected_residual(w, horizon, &rates_of(&cand));
            evals += 1;
            let fc = sq(&rc);
            if fc.is_finite() && fc < f {
                let rel = (f - fc) / f.max(1e-300);
                th = cand;
                r = rc;
                f = fc;
                mu = (mu / 3.0).max(1e-12);
                improved = rel > 1e-12;
                break;
            }
            mu *= 4.0;
        }
        if !improved {
            break;
        }
    }
    (th, f)
}

/// Plain Nelder–Mead (reflection 1, expansion 2, contraction 1/2, shrink 1/2).
fn nelder_mead(
    f: &dyn Fn(&[f64]) -> f64,
    x0: &[f64],
    step: f64,
    max_evals: usize,
) -> (Vec<f64>, f64) {
    let d = x0.len();
    let mut simplex: Vec<(Vec<f64>, f64)> = vec![(x0.to_vec(), f(x0))];
    for i in 0..d {
        let mut x = x0.to_vec();
        x[i] += step;
        let v = f(&x);
        simplex.push((x, v));
    }
    let mut evals = d + 1;
    while evals + 2 <= max_evals {
        simplex.sort_by(|p, q| p.1.total_cmp(&q.1));
        if (simplex[d].1 - simplex[0].1).abs() <= 1e-13 * simplex[0].1.abs().max(1e-300) {
            break;
        }
        let centroid: Vec<f64> = (0..d)
            .map(|k| simplex[..d].iter().map(|s| s.0[k]).sum::<f64>() / d as f64)
            .collect();
        let worst = simplex[d].0.clone();
        let along = |t: f64| -> Vec<f64> {
            centroid
                .iter()
                .zip(&worst)
                .map(|(c, w)| c + t * (w - c))
                .collect()
        };
        let xr = along(-1.0);
        let fr = f(&xr);
        evals += 1;
        if fr < simplex[0].1 {
            let xe = along(-2.0);
            let fe = f(&xe);
            evals += 1;
            simplex[d] = if fe < fr { (xe, fe) } else { (xr, fr) };
        } else if fr < simplex[d - 1].1 {
            simplex[d] = (xr, fr);
        } else {
            let xc = along(if fr < simplex[d].1 { -0.5 } else { 0.5 });
            let fc = f(&xc);
            evals += 1;
            if fc < simplex[d].1.min(fr) {
                simplex[d] = (xc, fc);
            } else {
                let best = simplex[0].0.clone();
                for s in simplex.iter_mut().skip(1) {
                    for (v, b) in s.0.iter_mut().zip(&best) {
                        *v = b + 0.5 * (*v - b);
                    }
                    s.1 = f(&s.0);
                    evals += 1;
                }
            }
        }
    }
    simplex.sort_by(|p, q| p.1.total_cmp(&q.1));
    simplex.swap_remove(0)
}

/// The tail norm (Σ_{1/Λ < j <= T} w_j(a)²)^(1/2): the part of the kernel beyond the slowest
/// allowed time scale 1/Λ.
///
/// Exact sum (recursion re-seeded from `gl::weight`) over the first 1e7 lags of the range;
/// beyond, ∫ w(x)² dx over [J - 1/2, T + 1/2] with w(x)² = x^(2a-2)/Γ(a)² (1 + a(a-1)/x +
/// O(x^-2)) integrated in closed form (relative error < 1e-13 there). For a > 1/2 this grows
/// like T^(a-1/2)/(Γ(a) sqrt(2a-1)), Proposition 4.2's rate; for a < 1/2 it converges.
///
/// # Errors
/// Order outside [0, 1]; Λ <= 0 or non-finite; T outside [1, 2^53].
pub fn tail_norm(a: f64, lambda: f64, horizon: u64) -> Result<f64, MathError> {
    let a = check_order(a)?;
    if !(lambda.is_finite() && lambda > 0.0) {
        return Err(MathError::InvalidArgument(format!(
            "minimum rate Lambda = {lambda} must be a positive number"
        )));
    }
    let t = check_lag_range("horizon T", horizon, super::MAX_THEORY_LAG)?;
    let cut = (1.0 / lambda).floor();
    if cut >= t as f64 || a == 0.0 {
        return Ok(0.0);
    }
    let first = cut as u64 + 1;
    if a == 1.0 {
        return Ok(((t - first + 1) as f64).sqrt());
    }
    const EXACT: u64 = 10_000_000;
    let last_exact = t.min(first.saturating_add(EXACT - 1));
    let mut sum = 0.0;
    let mut block = 0.0;
    let mut wj = gl::weight(a, first)?;
    let mut since_seed = 0usize;
    for j in first..=last_exact {
        if j > first {
            since_seed += 1;
            wj = if since_seed == BLOCK {
                since_seed = 0;
                sum += block;
                block = 0.0;
                gl::weight(a, j)?
            } else {
                wj * ((j - 1) as f64 + a) / j as f64
            };
        }
        block += wj * wj;
    }
    sum += block;
    if t > last_exact {
        let (x0, x1) = (last_exact as f64 + 0.5, t as f64 + 0.5);
        let p = 2.0 * a - 2.0;
        let g = libm::tgamma(a);
        let lead = if (p + 1.0).abs() < 1e-12 {
            (x1 / x0).ln()
        } else {
            (x1.powf(p + 1.0) - x0.powf(p + 1.0)) / (p + 1.0)
        };
        let corr = a * (a - 1.0) * (x1.powf(p) - x0.powf(p)) / p;
        sum += (lead + corr) / (g * g);
    }
    Ok(sum.sqrt())
}

/// Local growth exponent of the lower-bound error, d ln E / d ln T between two horizons.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GrowthResult {
    /// Order a.
    pub alpha: f64,
    /// Smallest rate Λ.
    pub lambda: f64,
    /// The two horizons.
    pub t_lo: u64,
    /// The two horizons.
    pub t_hi: u64,
    /// Proposition 4.2's exponent a - 1/2 (meaningful for a > 1/2; below, E stays bounded).
    pub target_exponent: f64,
    /// ln(E(t_hi)/E(t_lo)) / ln(t_hi/t_lo) for the single exponential.
    pub single_slope: f64,
    /// The same for the NNLS mixture ([`DEFAULT_NNLS_RATES`] rates).
    pub nnls_slope: f64,
    /// The same for the tail norm.
    pub tail_slope: f64,
    /// (T, E_M=1, E_nnls, tail) at t_lo and t_hi.
    pub errors: Vec<(u64, f64, f64, f64)>,
}

/// Slope of ln E against ln T between t_lo and t_hi, for M = 1, NNLS and the tail norm.
///
/// Proposition 4.2: for a > 1/2 the slope tends to a - 1/2 as T grows (the reference table has
/// 0.318 and 0.456 for a = 0.8, 0.95 at Λ = 1e-3, T = 1e5 -> 1e6); for a < 1/2 it tends to 0.
///
/// # Errors
/// As [`best_single_exponential`]; t_lo >= t_hi.
pub fn growth_exponent(
    a: f64,
    lambda: f64,
    t_lo: u64,
    t_hi: u64,
) -> Result<GrowthResult, MathError> {
    if t_lo >= t_hi {
        return Err(MathError::InvalidArgument(format!(
            "growth_exponent needs t_lo < t_hi (got {t_lo}, {t_hi})"
        )));
    }
    let mut errors = Vec::with_capacity(2);
    for t in [t_lo, t_hi] {
        let e1 = best_single_exponential(a, lambda, t)?;
        let en = nnls_mixture(a, lambda, t, DEFAULT_NNLS_RATES)?;
        errors.push((t, e1.error, en.error, e1.tail));
    }
    let dl = (t_hi as f64 / t_lo as f64).ln();
    let slope = |lo: f64, hi: f64| {
        if lo > 0.0 && hi > 0.0 {
            (hi / lo).ln() / dl
        } else {
            0.0
        }
    };
    Ok(GrowthResult {
        alpha: a,
        lambda,
        t_lo,
        t_hi,
        target_exponent: a - 0.5,
        single_slope: slope(errors[0].1, errors[1].1),
        nnls_slope: slope(errors[0].2, errors[1].2),
        tail_slope: slope(errors[0].3, errors[1].3),
        errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometric_sum_matches_loop() {
        for (s, t) in [(1e-4, 1000u64), (0.3, 57), (40.0, 10)] {
            let direct: f64 = (1..=t).map(|j| (-s * j as f64).exp()).sum();
            assert!((geometric_sum(s, t) / direct - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn laplace_sum_and_residual_match_loops() {
        let w: Vec<f64> = (1..=5000).map(|j| 1.0 / (j as f64).sqrt()).collect();
        let u = 0.0007;
        let direct: f64 = w
            .iter()
            .enumerate()
            .map(|(i, x)| x * (-u * (i + 1) as f64).exp())
            .sum();
        assert!((laplace_sum(&w, u) / direct - 1.0).abs() < 1e-12);
        let terms = [SoeTerm { c: 0.7, u }, SoeTerm { c: -0.1, u: 0.3 }];
        let r: f64 = w
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let j = (i + 1) as f64;
                let f = 0.7 * (-u * j).exp() - 0.1 * (-0.3 * j).exp();
                (x - f) * (x - f)
            })
            .sum::<f64>()
            .sqrt();
        assert!((residual_norm(&w, &terms) / r - 1.0).abs() < 1e-12);
    }

    #[test]
    fn nnls_small_problems() {
        // min ||Ax - b||, A = I: x = max(b, 0).
        let g = [1.0, 0.0, 0.0, 1.0];
        let s = nnls(&g, &[2.0, -1.0]).unwrap();
        assert!(s.converged);
        assert_eq!(s.x, vec![2.0, 0.0]);
        // G = [[1, 1], [1, 2]], b = [1, 0]: unconstrained x = (2, -1); NNLS x = (1, 0).
        let s = nnls(&[1.0, 1.0, 1.0, 2.0], &[1.0, 0.0]).unwrap();
        assert!((s.x[0] - 1.0).abs() < 1e-14 && s.x[1] == 0.0);
        assert!(nnls(&[1.0], &[1.0, 2.0]).is_err());
    }

    #[test]
    fn tail_norm_exact_and_asymptotic_parts_agree() {
        // The asymptotic integral (used beyond 1e7 lags) against the exact sum over (1e3, 2e7].
        let a = 0.8;
        let exact = tail_norm(a, 1e-3, 20_000_000).unwrap();
        let direct: f64 = {
            let mut s = 0.0;
            let mut w = gl::weight(a, 1001).unwrap();
            for j in 1001..=20_000_000u64 {
                if j > 1001 {
                    w *= ((j - 1) as f64 + a) / j as f64;
                }
                s += w * w;
            }
            s.sqrt()
        };
        assert!((exact / direct - 1.0).abs() < 1e-9, "{exact} {direct}");
    }
}
