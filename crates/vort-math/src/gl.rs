//! Grünwald–Letnikov fractional-sum weights (docs/DESIGN.md §1).
//!
//! For an order a in [0, 1]:
//!
//! ```text
//! w_0 = 1,   w_j = w_{j-1} (j - 1 + a) / j  =  Γ(j + a) / (Γ(a) Γ(j + 1))  ~  j^(a-1) / Γ(a)
//! ```
//!
//! a = 1 gives w_j = 1 (nothing is forgotten); a -> 0 gives w_j ≈ a / j (the kernel vanishes).
//! The step response S_t = Σ_{j<=t} w_j(a) is the coefficient of the same family at order
//! a + 1: S_t(a) = Γ(t + 1 + a) / (Γ(1 + a) Γ(t + 1)), so both go through one
//! function of (b, j), `gl_coefficient`.
//!
//! Accuracy: the product form is used for j < [`PRODUCT_FORM_MAX_LAG`] (at most ~2j roundings,
//! < 1e-14 relative) and the Stirling-series difference ln Γ(j+b) - ln Γ(j+1) beyond, written
//! so that no two large logarithms cancel. Measured against 50-digit reference values the
//! relative error stays below `tol::GL_WEIGHT_REL` for every j up to 1e6 (the test data) and
//! the method keeps it there up to j = 2^53.

use crate::error::{check_order, MathError};

pub use crate::limits::MAX_LAG;

/// Below this lag the exact product Π (i - 1 + b) / i is used; above it the Stirling difference.
pub const PRODUCT_FORM_MAX_LAG: u64 = 32;

/// GL weight w_j(a) = Γ(j + a) / (Γ(a) Γ(j + 1)) for a in [0, 1].
///
/// # Errors
/// [`MathError::OrderOutOfRange`] for a outside [0, 1] or NaN; [`MathError::LagTooLarge`] for
/// j > [`MAX_LAG`].
pub fn weight(a: f64, j: u64) -> Result<f64, MathError> {
    let a = check_order(a)?;
    check_lag(j)?;
    Ok(gl_coefficient(a, j))
}

/// Step response S_t(a) = Σ_{j=0}^{t} w_j(a) = Γ(t + 1 + a) / (Γ(1 + a) Γ(t + 1)).
pub fn step_response(a: f64, t: u64) -> Result<f64, MathError> {
    let a = check_order(a)?;
    check_lag(t)?;
    Ok(gl_coefficient(a + 1.0, t))
}

/// dw_j/da = w_j (ψ(j + a) - ψ(a)), finite on all of [0, 1] (at a = 0 it equals 1/j).
///
/// Written as w_j (ψ(j+a) - ψ(1+a)) + w_j / a with w_j / a = Γ(j+a) / (Γ(1+a) Γ(j+1)), so the
/// a -> 0 limit needs no special case. Source: differentiate ln w_j = ln Γ(j+a) - ln Γ(a) - ln j!.
pub fn weight_derivative(a: f64, j: u64) -> Result<f64, MathError> {
    let a = check_order(a)?;
    check_lag(j)?;
    if j == 0 {
        return Ok(0.0);
    }
    let w_over_a = gl_coefficient_over_order(a, j);
    let w = a * w_over_a;
    Ok(w * digamma_difference(a, j) + w_over_a)
}

/// w_0 ..= w_n for one order: the recursion w_j = w_{j-1} (j - 1 + a) / j, restarted from the
/// accurate closed form every [`RESTART_EVERY`] lags so rounding cannot accumulate past ~1e-13.
pub fn weights_upto(a: f64, n: u64) -> Result<Vec<f64>, MathError> {
    let a = check_order(a)?;
    check_lag(n)?;
    let mut out = Vec::with_capacity(n as usize + 1);
    let mut w = 1.0;
    out.push(w);
    for j in 1..=n {
        w = if j % RESTART_EVERY == 0 {
            gl_coefficient(a, j)
        } else {
            w * ((j - 1) as f64 + a) / j as f64
        };
        out.push(w);
    }
    Ok(out)
}

/// How often [`weights_upto`] and the certificate re-seed a recursion from the closed form.
pub const RESTART_EVERY: u64 = 1024;

fn check_lag(j: u64) -> Result<(), MathError> {
    if j > MAX_LAG {
        Err(MathError::LagTooLarge(j))
    } else {
        Ok(())
    }
}

/// g_j(b) = Γ(j + b) / (Γ(b) Γ(j + 1)) for b in [0, 2]: w_j(a) = g_j(a) and S_t(a) = g_t(a + 1).
/// No validation: callers have checked b and j.
pub(crate) fn gl_coefficient(b: f64, j: u64) -> f64 {
    if j == 0 {
        return 1.0;
    }
    if b == 0.0 {
        return 0.0;
    }
    b * gl_coefficient_over_order(b, j)
}

/// g_j(b) / b = Γ(j + b) / (Γ(1 + b) Γ(j + 1)) for j >= 1, smooth and positive at b = 0.
pub(crate) fn gl_coefficient_over_order(b: f64, j: u64) -> f64 {
    debug_assert!(j >= 1);
    if j < PRODUCT_FORM_MAX_LAG {
        // g_j / b = Π_{i=2}^{j} (i - 1 + b) / i   (the i = 1 factor b / 1 is the b taken out).
        let mut p = 1.0;
        for i in 2..=j {
            p *= ((i - 1) as f64 + b) / i as f64;
        }
        p
    } else {
        ln_gamma_ratio(j as f64, b).exp() / libm::tgamma(1.0 + b)
    }
}

/// ln Γ(z + b) - ln Γ(z + 1) for z >= 32, b in [0, 2], without cancellation.
///
/// Stirling: ln Γ(x) = (x - 1/2) ln x - x + ln √(2π) + Σ_k B_2k / (2k (2k-1) x^(2k-1)). With
/// ln(z + b) = ln z + ln1p(b/z) the difference is
/// (b - 1) ln z + (z + b - 1/2) ln1p(b/z) - (z + 1/2) ln1p(1/z) - (b - 1) + Δseries,
/// every term of size O(1); 7 series terms leave < 1e-20 at z = 32.
fn ln_gamma_ratio(z: f64, b: f64) -> f64 {
    const STIRLING: [f64; 7] = [
        1.0 / 12.0,
        -1.0 / 360.0,
        1.0 / 1260.0,
        -1.0 / 1680.0,
        1.0 / 1188.0,
        -691.0 / 360360.0,
        1.0 / 156.0,
    ];
    let series = |x: f64| {
        let inv = 1.0 / x;
        let inv2 = inv * inv;
        let mut pow = inv;
        let mut s = 0.0;
        for c in STIRLING {
            s += c * pow;
            pow *= inv2;
        }
        s
    };
    (b - 1.0) * z.ln() + (z + b - 0.5) * (b / z).ln_1p() - (z + 0.5) * (1.0 / z).ln_1p() - (b - 1.0)
        + (series(z + b) - series(z + 1.0))
}

/// ψ(j + a) - ψ(1 + a) = Σ_{i=1}^{j-1} 1 / (i + a), by the sum for small j and by the
/// asymptotic digamma series for large j.
fn digamma_difference(a: f64, j: u64) -> f64 {
    if j < 64 {
        (1..j).map(|i| 1.0 / (i as f64 + a)).sum()
    } else {
        digamma(j as f64 + a) - digamma(1.0 + a)
    }
}

/// Digamma ψ(x) for x > 0: upward recurrence to x >= 10, then the asymptotic series
/// ψ(x) = ln x - 1/(2x) - Σ B_2k / (2k x^2k) (error < 1e-16 at x = 10 with 6 terms).
pub(crate) fn digamma(mut x: f64) -> f64 {
    let mut acc = 0.0;
    while x < 10.0 {
        acc -= 1.0 / x;
        x += 1.0;
    }
    let inv2 = 1.0 / (x * x);
    let series = inv2
        * (1.0 / 12.0
            - inv2
                * (1.0 / 120.0
                    - inv2 * (1.0 / 252.0 - inv2 * (1.0 / 240.0 - inv2 * (1.0 / 132.0)))));
    acc + x.ln() - 0.5 / x - series
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_special_orders() {
        for j in [0u64, 1, 7, 1000, 1 << 40] {
            assert_eq!(weight(1.0, j).unwrap(), 1.0);
            assert_eq!(weight(0.0, j).unwrap(), if j == 0 { 1.0 } else { 0.0 });
        }
    }

    #[test]
    fn forms_agree_at_the_switch() {
        // The product form is exact to rounding; the Stirling form must continue it.
        for a in [1e-6, 0.05, 0.35, 0.5, 0.8, 0.999] {
            let by_product: f64 = (1..=PRODUCT_FORM_MAX_LAG)
                .map(|i| ((i - 1) as f64 + a) / i as f64)
                .product();
            let closed = gl_coefficient(a, PRODUCT_FORM_MAX_LAG);
            assert!((closed / by_product - 1.0).abs() < 1e-14, "a={a}");
        }
    }

    #[test]
    fn invalid_inputs_are_errors() {
        assert!(matches!(weight(1.5, 3), Err(MathError::OrderOutOfRange(_))));
        assert!(matches!(
            weight(-0.1, 3),
            Err(MathError::OrderOutOfRange(_))
        ));
        assert!(matches!(
            weight(f64::NAN, 3),
            Err(MathError::OrderOutOfRange(_))
        ));
        assert!(matches!(
            weight(0.5, MAX_LAG + 1),
            Err(MathError::LagTooLarge(_))
        ));
    }

    #[test]
    fn derivative_matches_finite_difference() {
        for a in [0.1, 0.35, 0.5, 0.8, 0.95] {
            for j in [1u64, 2, 10, 63, 64, 1000, 100_000] {
                let h = 1e-6;
                let fd = (weight(a + h, j).unwrap() - weight(a - h, j).unwrap()) / (2.0 * h);
                let d = weight_derivative(a, j).unwrap();
                assert!(
                    (d - fd).abs() <= 1e-7 * d.abs().max(1e-3),
                    "a={a} j={j}: {d} vs {fd}"
                );
            }
        }
        // a = 0: dw_j/da = 1/j.
        assert!((weight_derivative(0.0, 4).unwrap() - 0.25).abs() < 1e-15);
    }
}
