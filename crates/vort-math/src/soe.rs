//! Certified sums of exponentials (SOE) for the GL kernel, recipe R1 (`SOE_RECIPE.md`).
//!
//! For 0 < a < 1 the weights have the Laplace form (docs/DESIGN.md §1)
//!
//! ```text
//! w_j = (sin πa / π) ∫_0^∞ e^(-j u) (e^u - 1)^(-a) du,      u = e^x:
//! w_j = ∫_R e^(-j e^x) G(x) dx,   G(x) = (sin πa / π) e^x expm1(e^x)^(-a)
//! ```
//!
//! The integrand is analytic in |Im x| < π/2, so the trapezoid rule x_k = k h converges like
//! e^(-π²/h). Each node is one exponential: u_k = e^(x_k), c_k = h G(x_k), and
//! w_j ≈ ŵ_j = Σ_s c_s e^(-u_s j). R1 keeps the nodes k_bot <= k <= k_top, drops the fast top
//! nodes whose total is below a·eps/4, and compresses every slow node k < k_bot into a 2-point
//! Gauss rule of their discrete measure (this is what makes S logarithmic in T).
//!
//! The result carries a [`Certificate`]: the maximum of |ŵ_j / w_j - 1| over every integer
//! lag 1 <= j <= T (exhaustive up to [`EXHAUSTIVE_MAX`], dense logarithmic sampling beyond).

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{check_order, MathError};
use crate::gl;

pub use crate::limits::{MAX_EPS, MAX_HORIZON, MIN_EPS};
/// The certificate checks every lag up to this horizon; beyond it, a dense log-spaced sample.
pub const EXHAUSTIVE_MAX: u64 = 10_000_000;
/// Points per e-fold of lag in the sampled part of a certificate above [`EXHAUSTIVE_MAX`].
pub const CERTIFICATE_SAMPLES_PER_EFOLD: usize = 4000;

/// One exponential of the sum: weight `c` and rate `u` (λ = e^(-u)).
///
/// The rate is stored, not λ: for the slowest terms u ~ 0.02/T and an f32 (even f64) λ loses
/// the digits of 1 - λ (docs/DESIGN.md §1). Use [`SoeTerm::mu`] = 1 - λ = -expm1(-u) in updates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SoeTerm {
    /// Weight c_s.
    pub c: f64,
    /// Rate u_s >= 0; u = 0 is the non-decaying mode (λ = 1).
    pub u: f64,
}

impl SoeTerm {
    /// Decay per step λ = e^(-u).
    pub fn lambda(&self) -> f64 {
        (-self.u).exp()
    }
    /// μ = 1 - λ = -expm1(-u), exact even when λ rounds to 1.
    pub fn mu(&self) -> f64 {
        -(-self.u).exp_m1()
    }
}

/// What was checked and the worst relative error found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Certificate {
    /// max |ŵ_j / w_j - 1| over the checked lags (0 for the exact cases a = 0 and a = 1).
    pub max_rel_error: f64,
    /// A lag at which the maximum is reached.
    pub argmax_lag: u64,
    /// Every lag in [1, exhaustive_up_to] was checked.
    pub exhaustive_up_to: u64,
    /// Number of sampled lags checked above `exhaustive_up_to` (0 if none).
    pub sampled_beyond: u64,
    /// Human-readable description of the checked set.
    pub checked: String,
}

/// A certified sum of exponentials for w_j(a), 1 <= j <= horizon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Soe {
    /// Order a.
    pub alpha: f64,
    /// Horizon T: the certificate covers 1 <= j <= T.
    pub horizon: u64,
    /// Requested relative tolerance.
    pub eps: f64,
    /// Trapezoid step h in x = ln u actually used (0 for the exact cases).
    pub step: f64,
    /// The terms, fastest first.
    pub terms: Vec<SoeTerm>,
    /// The certificate (max relative error over [1, T]); always <= eps for a built Soe.
    pub certificate: Certificate,
}

impl Soe {
    /// Builds a certified SOE: max_{1<=j<=T} |ŵ_j / w_j - 1| <= eps, with as few terms as
    /// recipe R1 can give when its error budgets are spent in full.
    ///
    /// R1 splits eps into a-priori budgets of eps/4 (trapezoid step, top cut, tail
    /// compression) and typically achieves 0.25-0.5 eps. This builder runs the same recipe with
    /// the budgets scaled by κ in [`BUDGET_SCALES`] (κ = 1 is R1 itself), keeps each candidate
    /// that the exhaustive certificate accepts at the *requested* eps, and returns the one with
    /// the fewest terms (the smallest κ on ties). One more candidate is a single
    /// non-decaying term, which wins for orders so close to 1 that the kernel is flat to
    /// within eps on [1, T]. The certificate, not the budget, is the guarantee. See
    /// [`Soe::build_r1`] for the recipe alone.
    ///
    /// a = 0 is exact with no terms (w_j = 0 for j >= 1, y_t = x_t); a = 1 is exact with one
    /// term c = 1, u = 0 (w_j = 1, a plain cumulative sum).
    ///
    /// # Errors
    /// Order, horizon or tolerance outside their domains; [`MathError::NotCertified`] if no
    /// candidate reaches eps (not seen on the grid of `SOE_TABLES.md`).
    pub fn build(alpha: f64, horizon: u64, eps: f64) -> Result<Soe, MathError> {
        Self::build_with_budgets(alpha, horizon, eps, &BUDGET_SCALES)
    }

    /// Recipe R1 exactly as in `SOE_RECIPE.md` (a-priori budgets eps/4; h *= 0.9 until the
    /// check passes). Reproduces the reference construction node for node.
    pub fn build_r1(alpha: f64, horizon: u64, eps: f64) -> Result<Soe, MathError> {
        Self::build_with_budgets(alpha, horizon, eps, &[1.0])
    }

    fn build_with_budgets(
        alpha: f64,
        horizon: u64,
        eps: f64,
        scales: &[f64],
    ) -> Result<Soe, MathError> {
        let alpha = check_order(alpha)?;
        check_horizon(horizon)?;
        check_eps(eps)?;
        let exact = |terms: Vec<SoeTerm>| Soe {
            alpha,
            horizon,
            eps,
            step: 0.0,
            terms,
            certificate: Certificate {
                max_rel_error: 0.0,
                argmax_lag: 1,
                exhaustive_up_to: horizon,
                sampled_beyond: 0,
                checked: "exact by construction".into(),
            },
        };
        if alpha == 0.0 {
            return Ok(exact(Vec::new()));
        }
        if alpha == 1.0 {
            return Ok(exact(vec![SoeTerm { c: 1.0, u: 0.0 }]));
        }
        // One candidate per budget scale: R1 step 5 refines h until the quick check passes.
        let mut candidates: Vec<(f64, Vec<SoeTerm>)> = Vec::new();
        // Near a = 1 the kernel is flat to within eps on [1, T] (w_T / w_1 ≈ T^(a-1)) and one
        // non-decaying term does it, while R1's tail sums lose digits to 1 - e^(-(1-a)h).
        // c = 2 w_1 w_T / (w_1 + w_T) balances the relative error at both ends.
        let (w1, wt) = (
            gl::gl_coefficient(alpha, 1),
            gl::gl_coefficient(alpha, horizon),
        );
        let flat = vec![SoeTerm {
            c: 2.0 * w1 * wt / (w1 + wt),
            u: 0.0,
        }];
        if scales.len() > 1 && quick_check(&flat, alpha, horizon) <= eps {
            candidates.push((0.0, flat));
        }
        for &kappa in scales {
            let budget = (kappa * eps).min(MAX_EPS);
            let mut h = r1_step(alpha, budget);
            for _ in 0..MAX_REFINEMENTS {
                let terms = r1_terms(alpha, horizon, budget, h);
                if quick_check(&terms, alpha, horizon) <= eps {
                    candidates.push((h, terms));
                    break;
                }
                h *= 0.9;
            }
        }
        // Fewest terms first (stable: smaller κ wins ties); the exhaustive certificate decides.
        candidates.sort_by_key(|(_, terms)| terms.len());
        let mut best = f64::INFINITY;
        for (h, terms) in candidates {
            crate::interrupt::check()?;
            let certificate = certify(&terms, alpha, horizon)?;
            if certificate.max_rel_error <= eps {
                return Ok(Soe {
                    alpha,
                    horizon,
                    eps,
                    step: h,
                    terms,
                    certificate,
                });
            }
            best = best.min(certificate.max_rel_error);
        }
        Err(MathError::NotCertified {
            alpha,
            horizon,
            eps,
            achieved: best,
        })
    }

    /// Number of terms S.
    pub fn len(&self) -> usize {
        self.terms.len()
    }

    /// True when the kernel needs no state (a = 0).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The approximation ŵ_j = Σ_s c_s e^(-u_s j) for j >= 1 (ŵ_0 = 1 is applied exactly).
    pub fn kernel(&self, j: u64) -> f64 {
        if j == 0 {
            1.0
        } else {
            eval_sum(&self.terms, j)
        }
    }
}

const MAX_REFINEMENTS: usize = 40;

/// Scales κ of R1's error budgets tried by [`Soe::build`] (κ = 1 is R1 as published).
pub const BUDGET_SCALES: [f64; 6] = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0];

pub(crate) fn check_horizon(t: u64) -> Result<(), MathError> {
    if (1..=MAX_HORIZON).contains(&t) {
        Ok(())
    } else {
        Err(MathError::HorizonOutOfRange(t))
    }
}

pub(crate) fn check_eps(eps: f64) -> Result<(), MathError> {
    if eps.is_finite() && (MIN_EPS..=MAX_EPS).contains(&eps) {
        Ok(())
    } else {
        Err(MathError::ToleranceOutOfRange(eps))
    }
}

pub(crate) fn eval_sum(terms: &[SoeTerm], j: u64) -> f64 {
    let j = j as f64;
    terms.iter().map(|t| t.c * (-t.u * j).exp()).sum()
}

/// G(x) = (sin πa/π) exp((1-a) x - a L(x)), L(x) = ln(expm1(e^x) / e^x): the Laplace density in
/// x = ln u (R1). For e^x > 700, L(x) = e^x - x to double precision.
pub(crate) fn laplace_density(a: f64, x: f64) -> f64 {
    let s = (std::f64::consts::PI * a).sin() / std::f64::consts::PI;
    let u = x.exp();
    let l = if u > 700.0 {
        u - x
    } else if u < 1e-8 {
        // ln(expm1(u)/u) = u/2 + u²/24 - ...; the quotient is 0/0 once u underflows.
        0.5 * u
    } else {
        (u.exp_m1() / u).ln()
    };
    s * ((1.0 - a) * x - a * l).exp()
}

/// R1 step 1: h solving E(h) = eps/4 with the Poisson estimate of the trapezoid error
/// E(h) = 2√(2π) (2π/h)^(1/2-a) e^(-π²/h) / Γ(1-a), by bisection on [0.02, 5].
pub(crate) fn r1_step(a: f64, eps: f64) -> f64 {
    use std::f64::consts::PI;
    let g = libm::tgamma(1.0 - a);
    let err =
        |h: f64| 2.0 * (2.0 * PI).sqrt() * (2.0 * PI / h).powf(0.5 - a) * (-PI * PI / h).exp() / g;
    let (mut lo, mut hi) = (0.02_f64, 5.0_f64);
    let target = eps / 4.0;
    if err(hi) <= target {
        return hi;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if err(mid) > target {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    lo
}

/// Lowest node index searched: u_k = e^(kh) >= 1e-280, far below any 1/T but clear of
/// underflow (every node below it acts as u = 0 on lags j <= 1e12).
fn floor_index(h: f64) -> i64 {
    (1e-280_f64.ln() / h).ceil() as i64
}

/// Largest node index whose term e^(-u) can matter: u_k = e^(kh) <= 745.
fn top_index(h: f64) -> i64 {
    (745.0_f64.ln() / h).floor() as i64
}

/// R1 steps 2-4 at a fixed step h: trapezoid nodes k_bot..=k_top and the 2 Gauss nodes of the
/// compressed slow tail. Terms are returned fastest first.
pub(crate) fn r1_terms(a: f64, t: u64, eps: f64, h: f64) -> Vec<SoeTerm> {
    let c_at = |k: i64| h * laplace_density(a, k as f64 * h);
    let k_top = r1_k_top(a, eps, h);
    let k_bot = r1_k_bot(a, t, eps, h, k_top);
    let mut terms: Vec<SoeTerm> = (k_bot..=k_top)
        .rev()
        .map(|k| SoeTerm {
            c: c_at(k),
            u: (k as f64 * h).exp(),
        })
        .collect();
    terms.extend(TailMeasure::below(a, t, h, k_bot).gauss2());
    terms
}

/// R1 step 3: k_top = min k with Σ_{k'>k} c_k' e^(-u_k') <= a·eps/4 (the worst lag is j = 1).
pub(crate) fn r1_k_top(a: f64, eps: f64, h: f64) -> i64 {
    let threshold = a * eps / 4.0;
    let mut tail = 0.0;
    let mut k = top_index(h);
    // Orders near 1 (s = sin πa/π -> 0) keep almost all mass at u -> 0; stop at the floor.
    while k > floor_index(h) {
        let term = h * laplace_density(a, k as f64 * h) * (-(k as f64 * h).exp()).exp();
        if tail + term > threshold {
            return k;
        }
        tail += term;
        k -= 1;
    }
    k
}

/// R1 step 4: the largest k_bot <= k_top whose 2-point Gauss compression of {k < k_bot} has
/// the rigorous bound T^4 ||π_2||²_μ / (4! w_T) <= eps/4.
pub(crate) fn r1_k_bot(a: f64, t: u64, eps: f64, h: f64, k_top: i64) -> i64 {
    let w_t = gl::gl_coefficient(a, t);
    let tf = t as f64;
    let mut k_bot = k_top;
    while k_bot > floor_index(h) {
        let m = TailMeasure::below(a, t, h, k_bot);
        // ||π_2||² in u = umax^4 ||π_2||² in v = u / umax.
        let bound = tf.powi(4) * m.umax.powi(4) * m.pi2_norm_sq() / (24.0 * w_t);
        if bound <= eps / 4.0 {
            return k_bot;
        }
        k_bot -= 1;
    }
    // The a-posteriori check decides whether the floor is good enough.
    k_bot
}

/// The discrete measure μ = Σ_{k<k_bot} c_k δ(u_k) in the scaled variable v = u / umax,
/// umax = u_{k_bot-1}: explicit nodes down to u ~ 1e-12 / T, and below them the geometric
/// series c_{k0-m} ≈ c_{k0} q^m, q = e^(-(1-a)h), summed in closed form for each moment
/// (exact as u -> 0, where G(x) -> (sin πa/π) e^((1-a)x)).
pub(crate) struct TailMeasure {
    /// u of the largest node of the measure.
    pub umax: f64,
    /// (v, c) of the explicit nodes.
    nodes: Vec<(f64, f64)>,
    /// Moments Σ c v^p of the geometric remainder, p = 0..=5.
    remainder: [f64; 6],
}

impl TailMeasure {
    pub(crate) fn below(a: f64, t: u64, h: f64, k_bot: i64) -> TailMeasure {
        let k_hi = k_bot - 1;
        let umax = (k_hi as f64 * h).exp();
        // Explicit nodes down to u <= 1e-12 / T; below that e^(-ju) = 1 to 1e-12 for j <= T.
        let k_lo = ((1e-12 / t as f64).ln() / h).floor().min(k_hi as f64) as i64;
        let nodes: Vec<(f64, f64)> = (k_lo..=k_hi)
            .map(|k| {
                let x = k as f64 * h;
                ((x.exp()) / umax, h * laplace_density(a, x))
            })
            .collect();
        let (v0, c0) = nodes[0];
        let q = (-(1.0 - a) * h).exp();
        let mut remainder = [0.0; 6];
        for (p, r) in remainder.iter_mut().enumerate() {
            let ratio = q * (-(p as f64) * h).exp();
            *r = c0 * v0.powi(p as i32) * ratio / (1.0 - ratio);
        }
        TailMeasure {
            umax,
            nodes,
            remainder,
        }
    }

    /// ∫ P(v) dμ for a polynomial given by its coefficients (degree <= 5).
    fn integrate(&self, poly: &[f64]) -> f64 {
        let eval = |v: f64| poly.iter().rev().fold(0.0, |acc, &c| acc * v + c);
        let explicit: f64 = self.nodes.iter().map(|&(v, c)| c * eval(v)).sum();
        let rest: f64 = poly.iter().zip(&self.remainder).map(|(p, m)| p * m).sum();
        explicit + rest
    }

    /// Stieltjes recurrence for the monic orthogonal polynomials π_0, π_1, π_2 of μ:
    /// returns (α_0, α_1, β_1, ||π_0||², ||π_2||²).
    fn recurrence(&self) -> (f64, f64, f64, f64, f64) {
        let m0 = self.integrate(&[1.0]);
        let alpha0 = self.integrate(&[0.0, 1.0]) / m0;
        // π_1 = v - α0
        let p1 = [-alpha0, 1.0];
        let n1 = self.integrate(&poly_mul(&p1, &p1));
        let alpha1 = self.integrate(&poly_mul(&[0.0, 1.0], &poly_mul(&p1, &p1))) / n1;
        let beta1 = n1 / m0;
        // π_2 = (v - α1) π_1 - β1 π_0
        let mut p2 = poly_mul(&[-alpha1, 1.0], &p1);
        p2[0] -= beta1;
        let n2 = self.integrate(&poly_mul(&p2, &p2));
        (alpha0, alpha1, beta1, m0, n2)
    }

    /// ||π_2||²_μ in the v variable.
    pub(crate) fn pi2_norm_sq(&self) -> f64 {
        self.recurrence().4
    }

    /// The 2-point Gauss rule of μ (Golub–Welsch on the 2x2 Jacobi matrix), as SOE terms.
    pub(crate) fn gauss2(&self) -> Vec<SoeTerm> {
        let (a0, a1, b1, m0, _) = self.recurrence();
        let mean = 0.5 * (a0 + a1);
        let half_gap = (0.25 * (a0 - a1).powi(2) + b1).sqrt();
        [mean + half_gap, mean - half_gap]
            .into_iter()
            .map(|node| {
                // Eigenvector (√β1, node - α0): weight = m0 · first component².
                let d = node - a0;
                SoeTerm {
                    c: m0 * b1 / (b1 + d * d),
                    u: node.max(0.0) * self.umax,
                }
            })
            .collect()
    }
}

fn poly_mul(p: &[f64], q: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; p.len() + q.len() - 1];
    for (i, a) in p.iter().enumerate() {
        for (j, b) in q.iter().enumerate() {
            out[i + j] += a * b;
        }
    }
    out
}

/// R1 step 5: the a-posteriori check on J = {1..min(300,T)} ∪ {60 log-spaced lags per e-fold}
/// ∪ {T}. Returns the largest relative error seen.
pub(crate) fn quick_check(terms: &[SoeTerm], a: f64, t: u64) -> f64 {
    check_lags(t, 300, 60)
        .into_iter()
        .map(|j| (eval_sum(terms, j) / gl::gl_coefficient(a, j) - 1.0).abs())
        .fold(0.0, f64::max)
}

/// {1..=min(dense,T)} ∪ {`per_efold` log-spaced lags per e-fold of [dense, T]} ∪ {T}, sorted.
pub fn check_lags(t: u64, dense: u64, per_efold: usize) -> Vec<u64> {
    let mut lags: Vec<u64> = (1..=dense.min(t)).collect();
    if t > dense {
        let (lo, hi) = ((dense as f64).ln(), (t as f64).ln());
        let n = ((hi - lo) * per_efold as f64).ceil() as usize;
        for i in 1..=n {
            lags.push((lo + (hi - lo) * i as f64 / n as f64).exp().round() as u64);
        }
        lags.push(t);
    }
    lags.sort_unstable();
    lags.dedup();
    lags.retain(|&j| (1..=t).contains(&j));
    lags
}

/// The certificate of any SOE for w(a): max_j |ŵ_j / w_j - 1| over every lag 1 <= j <= T when
/// T <= [`EXHAUSTIVE_MAX`]; above, every lag up to EXHAUSTIVE_MAX and
/// [`CERTIFICATE_SAMPLES_PER_EFOLD`] log-spaced lags per e-fold up to T.
///
/// Independent of the builder: ŵ_j by the product e^(-u j) = e^(-u (j-1)) e^(-u), re-seeded with
/// exp() at every block of [`gl::RESTART_EVERY`] lags, and w_j by the GL recursion re-seeded
/// from the closed form at the same points, so neither drifts by more than ~1e-13.
pub fn certify(terms: &[SoeTerm], a: f64, t: u64) -> Result<Certificate, MathError> {
    let a = check_order(a)?;
    check_horizon(t)?;
    if a == 0.0 {
        // w_j = 0 for j >= 1: only the empty sum is exact; report absolute error otherwise.
        let worst = (1..=t.min(1000))
            .map(|j| eval_sum(terms, j).abs())
            .fold(0.0, f64::max);
        return Ok(Certificate {
            max_rel_error: if worst == 0.0 { 0.0 } else { f64::INFINITY },
            argmax_lag: 1,
            exhaustive_up_to: t,
            sampled_beyond: 0,
            checked: "a = 0: w_j = 0 for j >= 1".into(),
        });
    }
    let exhaustive = t.min(EXHAUSTIVE_MAX);
    let block = gl::RESTART_EVERY;
    let n_blocks = exhaustive.div_ceil(block);
    let (mut worst, mut argmax) = (0..n_blocks)
        .into_par_iter()
        .map(|b| {
            let start = b * block + 1;
            if crate::interrupt::requested() {
                return (0.0, start); // never reported: the check below returns the error
            }
            let end = ((b + 1) * block).min(exhaustive);
            let mut pow: Vec<f64> = terms.iter().map(|s| (-s.u * start as f64).exp()).collect();
            let lam: Vec<f64> = terms.iter().map(SoeTerm::lambda).collect();
            let mut w = gl::gl_coefficient(a, start);
            let mut worst = (0.0_f64, start);
            for j in start..=end {
                if j > start {
                    w *= ((j - 1) as f64 + a) / j as f64;
                    for (p, l) in pow.iter_mut().zip(&lam) {
                        *p *= l;
                    }
                }
                let approx: f64 = terms.iter().zip(&pow).map(|(s, p)| s.c * p).sum();
                let err = (approx / w - 1.0).abs();
                if err > worst.0 || err.is_nan() {
                    worst = (if err.is_nan() { f64::INFINITY } else { err }, j);
                }
            }
            worst
        })
        .reduce(|| (0.0, 1), |x, y| if y.0 > x.0 { y } else { x });
    crate::interrupt::check()?;
    let mut sampled = 0;
    if t > exhaustive {
        let lags = check_lags(t, exhaustive, CERTIFICATE_SAMPLES_PER_EFOLD);
        let beyond: Vec<u64> = lags.into_iter().filter(|&j| j > exhaustive).collect();
        sampled = beyond.len() as u64;
        for j in beyond {
            let err = (eval_sum(terms, j) / gl::gl_coefficient(a, j) - 1.0).abs();
            if err > worst || err.is_nan() {
                worst = if err.is_nan() { f64::INFINITY } else { err };
                argmax = j;
            }
        }
    }
    let checked = if sampled == 0 {
        format!("every lag j in [1, {t}]")
    } else {
        format!(
            "every lag j in [1, {exhaustive}], then {sampled} log-spaced lags in ({exhaustive}, {t}] \
             ({CERTIFICATE_SAMPLES_PER_EFOLD} per e-fold, T included)"
        )
    };
    Ok(Certificate {
        max_rel_error: worst,
        argmax_lag: argmax,
        exhaustive_up_to: exhaustive,
        sampled_beyond: sampled,
        checked,
    })
}
