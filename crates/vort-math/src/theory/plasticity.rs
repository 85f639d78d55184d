//! Learning the order α by projected gradient descent (Theorem 5.1 of arXiv 2605.08966).
//!
//! Given samples of a power-law kernel, y_j = w_j(α*) (+ noise), on lags j ∈ J ⊂ [1, T], the
//! loss
//!
//! ```text
//! L(α) = (1/|J|) Σ_{j∈J} (w_j(α) - y_j)² / N,      N = (1/|J|) Σ_{j∈J} w_j(α*)²,
//! ∇L(α) = (2/|J|) Σ_{j∈J} (w_j(α) - y_j) dw_j/da(α) / N,
//! α_{t+1} = clamp(α_t - η ∇L(α_t), δ, 1)
//! ```
//!
//! is smooth on [δ, 1]. Theorem 5.1 (linear convergence of projected gradient descent): if L
//! is μ-strongly convex and L_s-smooth on [δ, 1] and η <= 1/L_s, then
//! L(α_t) - L* <= (1 - η μ)^t (L(α_0) - L*). [`run`] estimates L'' by central differences of
//! the exact gradient on a grid of [δ, 1] (μ = min L'', L_s = max |L''|), takes η = 1/L_s by
//! default, runs the iteration and fits the observed rate ρ (gap_t ≈ C ρ^t). Near the
//! minimiser the gap contracts like (1 - η L''(α̂))², which is <= 1 - η μ: the fitted rate
//! should lie at or below the theorem's.
//!
//! What the numbers show: L is usually *not* convex on all of [δ, 1] (μ < 0 for α* = 0.75,
//! δ = 0.05), so the global hypothesis fails; the proof only needs strong convexity on the
//! interval the iterates and α̂ span, μ_path > 0, and with it the bound holds at every step.
//! L_s is set by orders near 1, where dw_j/da ~ ln j (the same growth as the quantisation
//! constant of Theorem 4.1), so η = 1/L_s is small and the rate 1 - μ_path/L_s is slow
//! (0.97-0.999 per step in the default cases).
//!
//! L* is the minimum over the projection set [δ, 1]: it is L(α*) = 0 when α* ∈ [δ, 1] and
//! there is no noise, and positive when α* < δ (the iterate stops at the boundary δ) or the
//! samples are noisy. The gap reported is L(α_t) - L*.

use serde::{Deserialize, Serialize};

use super::{check_in, check_lag_range, linear_fit, log_spaced_count, SplitMix64, MAX_THEORY_LAG};
use crate::error::{check_order, MathError};
use crate::gl;

/// Grid points on [δ, 1] for the curvature estimate and the search for the minimiser.
pub const CURVATURE_GRID: usize = 201;
/// Step of the central difference of the gradient.
pub const CURVATURE_STEP: f64 = 1e-5;
/// Largest number of iterations.
pub const MAX_STEPS: usize = 1_000_000;

/// The learning problem and the iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlasticityConfig {
    /// Target order α* in [0, 1] (may lie below δ, outside the projection set).
    pub alpha_star: f64,
    /// The projection set is [δ, 1].
    pub delta: f64,
    /// Starting order α_0 (clamped into [δ, 1]).
    pub alpha0: f64,
    /// Lags are spread geometrically over [1, T].
    pub horizon: u64,
    /// Number of lags requested (fewer if T is small: lags are distinct integers).
    pub n_lags: usize,
    /// Gaussian noise on each y_j, as a fraction of the rms of the clean target.
    pub noise_rel: f64,
    /// Seed of the noise (SplitMix64 + Box–Muller).
    pub seed: u64,
    /// Number of gradient steps.
    pub steps: usize,
    /// Step size η; None = 1/L_s (the theorem's choice).
    pub step_size: Option<f64>,
}

impl Default for PlasticityConfig {
    fn default() -> Self {
        Self {
            alpha_star: 0.75,
            delta: 0.05,
            alpha0: 0.95,
            horizon: 10_000,
            n_lags: 64,
            noise_rel: 0.0,
            seed: 0,
            steps: 1000,
            step_size: None,
        }
    }
}

/// One iterate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PlasticityStep {
    /// Iteration t.
    pub t: usize,
    /// α_t.
    pub alpha: f64,
    /// L(α_t).
    pub loss: f64,
    /// L(α_t) - L*, L* = min over [δ, 1].
    pub gap: f64,
}

/// The trajectory with the measured and the theoretical rates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlasticityResult {
    /// The configuration run.
    pub config: PlasticityConfig,
    /// The lags J.
    pub lags: Vec<u64>,
    /// The normaliser N = mean_j w_j(α*)² (1 if that is 0).
    pub normaliser: f64,
    /// L(α*): 0 without noise.
    pub loss_at_target: f64,
    /// The minimiser α̂ of L over [δ, 1] (= α* when α* ∈ [δ, 1] and no noise, up to rounding).
    pub alpha_min: f64,
    /// L* = L(α̂).
    pub loss_min: f64,
    /// L_s = max |L''| over [δ, 1].
    pub l_smooth: f64,
    /// μ = min L'' over [δ, 1] (may be <= 0: L need not be convex on all of [δ, 1]).
    pub mu: f64,
    /// min L'' over the hull of the trajectory and α̂: the strong convexity the proof of the
    /// rate actually uses (every step stays in this interval).
    pub mu_path: f64,
    /// L''(α̂) (one-sided at the ends).
    pub mu_local: f64,
    /// (α, L''(α)) on the [`CURVATURE_GRID`] grid of [δ, 1].
    pub curvature: Vec<(f64, f64)>,
    /// The step size η used.
    pub step_size: f64,
    /// Theorem 5.1's contraction 1 - η μ_path of the gap per step (None when μ_path <= 0):
    /// gap_t <= (1 - η μ_path)^t gap_0.
    pub theoretical_rate: Option<f64>,
    /// The same with the global μ over [δ, 1] (None when μ <= 0, the usual case for α*
    /// well inside (δ, 1): the loss is not convex far from α*).
    pub theoretical_rate_global: Option<f64>,
    /// The asymptotic rate of the gap near an interior minimiser, (1 - η L''(α̂))².
    pub local_rate: f64,
    /// ρ from a least-squares fit of ln gap_t on t over the iterates with a resolvable gap
    /// (None if fewer than 3, e.g. when the boundary is reached in a step or two).
    pub fitted_rate: Option<f64>,
    /// The same fit over the second half of those iterates (the asymptotic regime).
    pub fitted_rate_tail: Option<f64>,
    /// How many iterates entered the fit.
    pub fitted_points: usize,
    /// (t, α_t, L(α_t), gap_t), t = 0..=steps.
    pub trajectory: Vec<PlasticityStep>,
}

struct Problem {
    lags: Vec<u64>,
    y: Vec<f64>,
    norm: f64,
}

impl Problem {
    fn loss(&self, a: f64) -> Result<f64, MathError> {
        let mut s = 0.0;
        for (&j, &y) in self.lags.iter().zip(&self.y) {
            let r = gl::weight(a, j)? - y;
            s += r * r;
        }
        Ok(s / (self.lags.len() as f64 * self.norm))
    }

    fn gradient(&self, a: f64) -> Result<f64, MathError> {
        let mut s = 0.0;
        for (&j, &y) in self.lags.iter().zip(&self.y) {
            s += (gl::weight(a, j)? - y) * gl::weight_derivative(a, j)?;
        }
        Ok(2.0 * s / (self.lags.len() as f64 * self.norm))
    }

    /// L'' by a central difference of the gradient, one-sided at 0 and 1.
    fn curvature(&self, a: f64) -> Result<f64, MathError> {
        let lo = (a - CURVATURE_STEP).max(0.0);
        let hi = (a + CURVATURE_STEP).min(1.0);
        Ok((self.gradient(hi)? - self.gradient(lo)?) / (hi - lo))
    }
}

/// Runs projected gradient descent on α and measures its convergence (Theorem 5.1).
///
/// # Errors
/// α*, α_0 outside [0, 1]; δ outside [0, 1); T outside [1, 2^53]; n_lags < 2; steps outside
/// [1, [`MAX_STEPS`]]; negative or non-finite noise; non-positive or non-finite step size.
pub fn run(config: &PlasticityConfig) -> Result<PlasticityResult, MathError> {
    let alpha_star = check_order(config.alpha_star)?;
    let delta = check_in("delta", config.delta, 0.0, 1.0)?;
    if delta >= 1.0 {
        return Err(MathError::InvalidArgument("delta must be < 1".into()));
    }
    let alpha0 = check_order(config.alpha0)?.clamp(delta, 1.0);
    let t_max = check_lag_range("horizon T", config.horizon, MAX_THEORY_LAG)?;
    if config.n_lags < 2 {
        return Err(MathError::InvalidArgument("n_lags must be >= 2".into()));
    }
    if !(1..=MAX_STEPS).contains(&config.steps) {
        return Err(MathError::InvalidArgument(format!(
            "steps = {} must be between 1 and {MAX_STEPS}",
            config.steps
        )));
    }
    let noise = check_in("noise_rel", config.noise_rel, 0.0, f64::MAX)?;
    if let Some(eta) = config.step_size {
        if !(eta.is_finite() && eta > 0.0) {
            return Err(MathError::InvalidArgument(format!(
                "step size {eta} must be a positive number"
            )));
        }
    }

    let lags = log_spaced_count(t_max, config.n_lags);
    let clean = lags
        .iter()
        .map(|&j| gl::weight(alpha_star, j))
        .collect::<Result<Vec<_>, _>>()?;
    let mean_sq = clean.iter().map(|v| v * v).sum::<f64>() / clean.len() as f64;
    let norm = if mean_sq > 0.0 { mean_sq } else { 1.0 };
    let mut rng = SplitMix64::new(config.seed);
    let sigma = noise * mean_sq.sqrt();
    let y: Vec<f64> = clean
        .iter()
        .map(|&v| {
            if sigma > 0.0 {
                v + sigma * rng.normal()
            } else {
                v
            }
        })
        .collect();
    let p = Problem { lags, y, norm };

    // Curvature on a grid of [δ, 1]; the grid point with the least loss brackets α̂.
    let grid: Vec<f64> = (0..CURVATURE_GRID)
        .map(|i| (delta + (1.0 - delta) * i as f64 / (CURVATURE_GRID - 1) as f64).min(1.0))
        .collect();
    let mut l_smooth = 0.0f64;
    let mut mu = f64::INFINITY;
    let mut best = (0usize, f64::INFINITY);
    let mut curvatures = Vec::with_capacity(grid.len());
    for (i, &a) in grid.iter().enumerate() {
        let c = p.curvature(a)?;
        curvatures.push(c);
        l_smooth = l_smooth.max(c.abs());
        mu = mu.min(c);
        let l = p.loss(a)?;
        if l < best.1 {
            best = (i, l);
        }
    }
    let alpha_min = minimiser(&p, &grid, best.0)?;
    let eta = config
        .step_size
        .unwrap_or(1.0 / l_smooth.max(f64::MIN_POSITIVE));
    let mu_local = p.curvature(alpha_min)?;

    let mut alphas = Vec::with_capacity(config.steps + 1);
    let mut losses = Vec::with_capacity(config.steps + 1);
    let mut a = alpha0;
    for t in 0..=config.steps {
        alphas.push(a);
        losses.push(p.loss(a)?);
        if t < config.steps {
            a = (a - eta * p.gradient(a)?).clamp(delta, 1.0);
        }
    }
    let hull_lo = alphas.iter().copied().fold(alpha_min, f64::min);
    let hull_hi = alphas.iter().copied().fold(alpha_min, f64::max);
    let mut mu_path = p.curvature(hull_lo)?.min(p.curvature(hull_hi)?);
    for (&a, &c) in grid.iter().zip(&curvatures) {
        if a >= hull_lo && a <= hull_hi {
            mu_path = mu_path.min(c);
        }
    }
    let loss_min = losses.iter().copied().fold(p.loss(alpha_min)?, f64::min);
    let trajectory: Vec<PlasticityStep> = alphas
        .iter()
        .zip(&losses)
        .enumerate()
        .map(|(t, (&alpha, &loss))| PlasticityStep {
            t,
            alpha,
            loss,
            gap: loss - loss_min,
        })
        .collect();

    // Fit ln gap_t = ln C + t ln ρ over the leading run of resolvable gaps.
    let gap0 = trajectory[0].gap;
    let floor = (1e-12 * loss_min + 1e-24 * gap0).max(f64::MIN_POSITIVE);
    let valid: Vec<&PlasticityStep> = trajectory.iter().take_while(|s| s.gap > floor).collect();
    let fit = |pts: &[&PlasticityStep]| -> Option<f64> {
        if pts.len() < 3 {
            return None;
        }
        let x: Vec<f64> = pts.iter().map(|s| s.t as f64).collect();
        let y: Vec<f64> = pts.iter().map(|s| s.gap.ln()).collect();
        linear_fit(&x, &y).map(|(slope, _)| slope.exp())
    };
    let fitted_rate = fit(&valid);
    let fitted_rate_tail = fit(&valid[valid.len() / 2..]);

    Ok(PlasticityResult {
        config: config.clone(),
        lags: p.lags.clone(),
        normaliser: norm,
        loss_at_target: p.loss(alpha_star)?,
        alpha_min,
        loss_min,
        l_smooth,
        mu,
        mu_path,
        mu_local,
        curvature: grid
            .iter()
            .copied()
            .zip(curvatures.iter().copied())
            .collect(),
        step_size: eta,
        theoretical_rate: (mu_path > 0.0).then_some(1.0 - eta * mu_path),
        theoretical_rate_global: (mu > 0.0).then_some(1.0 - eta * mu),
        local_rate: (1.0 - eta * mu_local).powi(2),
        fitted_rate,
        fitted_rate_tail,
        fitted_points: valid.len(),
        trajectory,
    })
}

/// The minimiser of L over [δ, 1] near grid point i: an end point if the gradient points out
/// of the set there, else the root of ∇L in the bracketing cells (bisection to rounding).
fn minimiser(p: &Problem, grid: &[f64], i: usize) -> Result<f64, MathError> {
    let last = grid.len() - 1;
    if i == 0 && p.gradient(grid[0])? >= 0.0 {
        return Ok(grid[0]);
    }
    if i == last && p.gradient(grid[last])? <= 0.0 {
        return Ok(grid[last]);
    }
    let (mut lo, mut hi) = (grid[i.saturating_sub(1)], grid[(i + 1).min(last)]);
    if p.gradient(lo)? > 0.0 || p.gradient(hi)? < 0.0 {
        return Ok(grid[i]);
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if p.gradient(mid)? < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let (llo, lhi) = (p.loss(lo)?, p.loss(hi)?);
    Ok(if llo <= lhi { lo } else { hi })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradient_matches_finite_difference_of_loss() {
        let cfg = PlasticityConfig::default();
        let r = run(&PlasticityConfig {
            steps: 1,
            ..cfg.clone()
        })
        .unwrap();
        let p = Problem {
            lags: r.lags.clone(),
            y: r.lags
                .iter()
                .map(|&j| gl::weight(cfg.alpha_star, j).unwrap())
                .collect(),
            norm: r.normaliser,
        };
        for a in [0.2, 0.5, 0.9] {
            let h = 1e-6;
            let fd = (p.loss(a + h).unwrap() - p.loss(a - h).unwrap()) / (2.0 * h);
            let g = p.gradient(a).unwrap();
            assert!(
                (fd - g).abs() < 1e-6 * g.abs().max(1e-3),
                "a={a}: {fd} vs {g}"
            );
        }
    }

    #[test]
    fn noiseless_minimiser_is_the_target() {
        let r = run(&PlasticityConfig {
            steps: 1,
            ..Default::default()
        })
        .unwrap();
        assert!((r.alpha_min - 0.75).abs() < 1e-9, "{}", r.alpha_min);
        assert!(r.loss_at_target == 0.0 && r.loss_min <= 1e-20);
    }
}
