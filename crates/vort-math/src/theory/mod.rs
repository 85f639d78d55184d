//! Numerical checks of the theorems of VORT (arXiv 2605.08966).
//!
//! Each submodule computes, for one statement of the paper, the quantity the statement is
//! about and the bound it claims, so that a report can print them side by side. Results are
//! plain `Serialize` structs (dump them as JSON).
//!
//! - [`quantization`] (Theorem 4.1): the Lipschitz constant L(a, T) = sup_{1<=j<=T} |dw_j/da|
//!   and the measured error of snapping / linearly splitting orders onto K banks.
//! - [`lower_bound`] (Proposition 4.2): the best l2([1, T]) error of an exponential mixture whose
//!   rates are all >= Λ, which grows like T^(a-1/2) for a > 1/2.
//! - [`plasticity`] (Theorem 5.1): projected gradient descent on α converges linearly.
//! - [`soe_scaling`] (Theorem 3.1): how the number of SOE terms S grows with T and eps.
//!
//! Every function validates its arguments and returns [`MathError`] instead of panicking.

pub mod lower_bound;
pub mod plasticity;
pub mod quantization;
pub mod soe_scaling;

use crate::error::MathError;

/// Largest lag the theory helpers accept (every integer up to 2^53 is exact in f64).
pub const MAX_THEORY_LAG: u64 = crate::limits::MAX_LAG;

/// Checks 1 <= t <= max and names the argument in the error.
pub(crate) fn check_lag_range(name: &str, t: u64, max: u64) -> Result<u64, MathError> {
    if (1..=max).contains(&t) {
        Ok(t)
    } else {
        Err(MathError::InvalidArgument(format!(
            "{name} = {t} must be between 1 and {max}"
        )))
    }
}

/// Checks that x is finite and lo <= x <= hi.
pub(crate) fn check_in(name: &str, x: f64, lo: f64, hi: f64) -> Result<f64, MathError> {
    if x.is_finite() && x >= lo && x <= hi {
        Ok(x)
    } else {
        Err(MathError::InvalidArgument(format!(
            "{name} = {x} must be a finite number in [{lo}, {hi}]"
        )))
    }
}

/// Distinct integer lags lo = l_0 < l_1 < ... <= hi, about `per_efold` per e-fold of lag
/// (geometric spacing, rounded, duplicates removed); `lo` and `hi` are always included.
pub(crate) fn log_spaced_lags(lo: u64, hi: u64, per_efold: f64) -> Vec<u64> {
    debug_assert!(lo >= 1 && hi >= lo && per_efold > 0.0);
    let span = (hi as f64 / lo as f64).ln();
    let n = (span * per_efold).ceil().max(1.0) as usize;
    let mut out = Vec::with_capacity(n + 1);
    out.push(lo);
    for i in 1..n {
        let j = (lo as f64 * (span * i as f64 / n as f64).exp()).round() as u64;
        let j = j.clamp(lo, hi);
        if *out.last().unwrap_or(&0) < j {
            out.push(j);
        }
    }
    if *out.last().unwrap_or(&0) < hi {
        out.push(hi);
    }
    out
}

/// `n` distinct integer lags spread geometrically over [1, hi] (all of 1..=hi if hi <= n):
/// j_i = round(hi^(i/(n-1))), pushed up to j_{i-1} + 1 where rounding would repeat a lag.
pub(crate) fn log_spaced_count(hi: u64, n: usize) -> Vec<u64> {
    if n as u64 >= hi {
        return (1..=hi).collect();
    }
    if n <= 1 {
        return vec![1];
    }
    let mut out: Vec<u64> = Vec::with_capacity(n);
    for i in 0..n {
        let x = (hi as f64).ln() * i as f64 / (n - 1) as f64;
        let g = (x.exp().round() as u64).clamp(1, hi);
        let floor = out.last().map_or(1, |&p| p + 1);
        let ceiling = hi - (n - 1 - i) as u64;
        out.push(g.max(floor).min(ceiling));
    }
    out
}

/// Minimises a unimodal f on [lo, hi] by golden-section search; returns (x, f(x)).
pub(crate) fn golden_section_min(
    mut f: impl FnMut(f64) -> f64,
    lo: f64,
    hi: f64,
    tol: f64,
) -> (f64, f64) {
    const INV_PHI: f64 = 0.618_033_988_749_894_9;
    let (mut a, mut b) = (lo, hi);
    let mut c = b - INV_PHI * (b - a);
    let mut d = a + INV_PHI * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    for _ in 0..200 {
        if (b - a).abs() <= tol {
            break;
        }
        if fc <= fd {
            b = d;
            d = c;
            fd = fc;
            c = b - INV_PHI * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + INV_PHI * (b - a);
            fd = f(d);
        }
    }
    let (fa, fb) = (f(a), f(b));
    let mut best = (c, fc);
    for cand in [(d, fd), (a, fa), (b, fb)] {
        if cand.1 < best.1 {
            best = cand;
        }
    }
    best
}

/// Least-squares slope and intercept of y against x: y ≈ intercept + slope·x.
pub(crate) fn linear_fit(x: &[f64], y: &[f64]) -> Option<(f64, f64)> {
    let n = x.len();
    if n < 2 || y.len() != n {
        return None;
    }
    let mx = x.iter().sum::<f64>() / n as f64;
    let my = y.iter().sum::<f64>() / n as f64;
    let sxx: f64 = x.iter().map(|v| (v - mx) * (v - mx)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let slope = sxy / sxx;
    Some((slope, my - slope * mx))
}

pub use crate::rng::SplitMix64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_grids_are_sorted_distinct_and_cover_the_ends() {
        for (lo, hi) in [(1u64, 1u64), (1, 2), (1, 1000), (10_000, 1_000_000_000_000)] {
            let l = log_spaced_lags(lo, hi, 16.0);
            assert_eq!(l[0], lo);
            assert_eq!(*l.last().unwrap(), hi);
            assert!(l.windows(2).all(|w| w[0] < w[1]));
        }
        let c = log_spaced_count(10_000, 64);
        assert_eq!(c.len(), 64);
        assert_eq!(log_spaced_count(5, 64), vec![1, 2, 3, 4, 5]);
        assert_eq!(log_spaced_count(64, 64).len(), 64);
        assert_eq!(c[0], 1);
        assert_eq!(*c.last().unwrap(), 10_000);
        assert!(c.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn golden_section_finds_a_parabola_minimum() {
        let (x, fx) = golden_section_min(|x| (x - 0.3) * (x - 0.3) + 2.0, -1.0, 4.0, 1e-10);
        assert!(
            (x - 0.3).abs() < 1e-6 && (fx - 2.0).abs() < 1e-12,
            "{x} {fx}"
        );
    }
}
