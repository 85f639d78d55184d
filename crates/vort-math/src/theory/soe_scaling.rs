//! How many exponentials an SOE needs (Theorem 3.1 of arXiv 2605.08966).
//!
//! Theorem 3.1 states that S = O(log(T/eps)) terms give max_{1<=j<=T} |ŵ_j/w_j - 1| <= eps.
//! Building SOEs with recipe R1 ([`Soe::build`]) over a grid of (a, T, eps) and fitting two laws
//!
//! ```text
//! (A) S ≈ c0 + c1 · ln T · ln(1/eps)        (docs/DESIGN.md §1's finding: c1 ≈ 1/π²)
//! (B) S ≈ c0 + c1 · ln(T/eps)               (the paper's form)
//! ```
//!
//! by least squares, with the residual RMS of each, lets a report say which one the data
//! follow. A third, four-parameter law (C) c0 + c1 ln T + c2 ln(1/eps) + c3 ln T ln(1/eps)
//! is fitted as a yardstick for (A) and (B). [`slopes_in_log_t`] gives dS/d ln T at fixed
//! (a, eps): under (B) it would not depend on eps, under (A) it grows like ln(1/eps)/π².
//!
//! On the reference tables (`SOE_TABLES.md`: smallest S by search, and recipe R1; a in
//! {0.05 … 0.95}, T in [1e3, 1e6], eps in [1e-6, 1e-2]) fitted per order, (A) has about half
//! the residual RMS of (B) (0.6-1.1 terms against 1.3-1.7), dS/d ln T at eps = 1e-6 is 2-4
//! times that at eps = 1e-2, and the ln T·ln(1/eps) coefficient of (C) is 0.094-0.122, i.e.
//! 1/π² ≈ 0.101. So the growth in T is steeper the smaller eps is, which no single
//! c·ln(T/eps) law captures; at fixed eps S is still O(log T), which is what the linear-time
//! recurrence needs.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::linear_fit;
use crate::error::MathError;
use crate::soe::Soe;

/// One built SOE: its size and certified error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    /// Order a.
    pub alpha: f64,
    /// Horizon T.
    #[serde(rename = "T")]
    pub horizon: u64,
    /// Requested relative tolerance eps.
    pub eps: f64,
    /// Number of terms S.
    #[serde(rename = "S")]
    pub terms: usize,
    /// Certified max_{1<=j<=T} |ŵ_j/w_j - 1| (<= eps).
    pub max_rel_error: f64,
}

/// Builds an SOE for every (a, T, eps) of the grid (in parallel), in the order
/// alphas × horizons × epss.
///
/// # Errors
/// Empty grids; any error of [`Soe::build`] (domain or [`MathError::NotCertified`]).
pub fn sweep(alphas: &[f64], horizons: &[u64], epss: &[f64]) -> Result<Vec<SweepRow>, MathError> {
    if alphas.is_empty() || horizons.is_empty() || epss.is_empty() {
        return Err(MathError::InvalidArgument(
            "sweep needs at least one order, horizon and tolerance".into(),
        ));
    }
    let grid: Vec<(f64, u64, f64)> = alphas
        .iter()
        .flat_map(|&a| {
            horizons
                .iter()
                .flat_map(move |&t| epss.iter().map(move |&e| (a, t, e)))
        })
        .collect();
    grid.par_iter()
        .map(|&(alpha, horizon, eps)| {
            Soe::build(alpha, horizon, eps).map(|soe| SweepRow {
                alpha,
                horizon,
                eps,
                terms: soe.len(),
                max_rel_error: soe.certificate.max_rel_error,
            })
        })
        .collect()
}

/// A least-squares fit of S to one law.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LawFit {
    /// Short name: "A", "B" or "C".
    pub law: String,
    /// The law with its fitted coefficients, readable.
    pub formula: String,
    /// c0, c1, ... in the order of the formula.
    pub coefficients: Vec<f64>,
    /// sqrt(mean residual²).
    pub rms_residual: f64,
    /// max |residual|.
    pub max_abs_residual: f64,
    /// Rows fitted.
    pub n_rows: usize,
}

/// The three fits side by side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LawComparison {
    /// (A) S ≈ c0 + c1 ln T ln(1/eps).
    pub product: LawFit,
    /// (B) S ≈ c0 + c1 ln(T/eps).
    pub log_ratio: LawFit,
    /// (C) S ≈ c0 + c1 ln T + c2 ln(1/eps) + c3 ln T ln(1/eps) (yardstick).
    pub full: LawFit,
    /// "A" or "B": the two-parameter law with the smaller residual RMS.
    pub better: String,
    /// 1/π² ≈ 0.1013, DESIGN's value of c1 in law (A), for comparison.
    pub one_over_pi_squared: f64,
}

/// Fits S against laws (A), (B) and (C) by least squares.
///
/// # Errors
/// Fewer than 4 rows, a row with T < 2 or eps outside (0, 1), or a degenerate design
/// (e.g. a single horizon or a single tolerance).
pub fn fit_laws(rows: &[SweepRow]) -> Result<LawComparison, MathError> {
    if rows.len() < 4 {
        return Err(MathError::InvalidArgument(format!(
            "fit_laws needs at least 4 rows, got {}",
            rows.len()
        )));
    }
    if rows
        .iter()
        .any(|r| r.horizon < 2 || !(r.eps > 0.0 && r.eps < 1.0))
    {
        return Err(MathError::InvalidArgument(
            "fit_laws needs T >= 2 and 0 < eps < 1 in every row".into(),
        ));
    }
    let logs: Vec<(f64, f64, f64)> = rows
        .iter()
        .map(|r| ((r.horizon as f64).ln(), -r.eps.ln(), r.terms as f64))
        .collect();
    let y: Vec<f64> = logs.iter().map(|l| l.2).collect();
    let fit = |law: &str, feats: &dyn Fn(f64, f64) -> Vec<f64>, names: &[&str]| {
        let x: Vec<Vec<f64>> = logs.iter().map(|&(lt, le, _)| feats(lt, le)).collect();
        let c = least_squares(&x, &y).ok_or_else(|| {
            MathError::InvalidArgument(format!("fit_laws: law {law} is degenerate on these rows"))
        })?;
        let res: Vec<f64> = x
            .iter()
            .zip(&y)
            .map(|(xi, yi)| yi - xi.iter().zip(&c).map(|(a, b)| a * b).sum::<f64>())
            .collect();
        let formula = std::iter::once(format!("S = {:.4}", c[0]))
            .chain(c[1..].iter().zip(names).map(|(ci, n)| {
                format!(" {} {:.4}·{n}", if *ci < 0.0 { '-' } else { '+' }, ci.abs())
            }))
            .collect::<String>();
        Ok::<_, MathError>(LawFit {
            law: law.into(),
            formula,
            coefficients: c,
            rms_residual: (res.iter().map(|r| r * r).sum::<f64>() / res.len() as f64).sqrt(),
            max_abs_residual: res.iter().fold(0.0f64, |m, r| m.max(r.abs())),
            n_rows: rows.len(),
        })
    };
    let product = fit("A", &|lt, le| vec![1.0, lt * le], &["lnT·ln(1/eps)"])?;
    let log_ratio = fit("B", &|lt, le| vec![1.0, lt + le], &["ln(T/eps)"])?;
    let full = fit(
        "C",
        &|lt, le| vec![1.0, lt, le, lt * le],
        &["lnT", "ln(1/eps)", "lnT·ln(1/eps)"],
    )?;
    let better = if product.rms_residual <= log_ratio.rms_residual {
        "A"
    } else {
        "B"
    };
    Ok(LawComparison {
        product,
        log_ratio,
        full,
        better: better.into(),
        one_over_pi_squared: 1.0 / (std::f64::consts::PI * std::f64::consts::PI),
    })
}

/// dS/d ln T at fixed (a, eps).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogTSlope {
    /// Order a.
    pub alpha: f64,
    /// Tolerance eps.
    pub eps: f64,
    /// Least-squares slope of S against ln T.
    pub slope: f64,
    /// Its intercept (S at T = 1).
    pub intercept: f64,
    /// Horizons used.
    pub n_rows: usize,
}

/// For every (a, eps) group with at least two horizons: the least-squares slope of S in ln T.
/// Groups appear in order of first occurrence.
pub fn slopes_in_log_t(rows: &[SweepRow]) -> Vec<LogTSlope> {
    let mut keys: Vec<(f64, f64)> = Vec::new();
    for r in rows {
        if !keys.contains(&(r.alpha, r.eps)) {
            keys.push((r.alpha, r.eps));
        }
    }
    keys.into_iter()
        .filter_map(|(alpha, eps)| {
            let g: Vec<&SweepRow> = rows
                .iter()
                .filter(|r| r.alpha == alpha && r.eps == eps)
                .collect();
            let x: Vec<f64> = g.iter().map(|r| (r.horizon as f64).ln()).collect();
            let y: Vec<f64> = g.iter().map(|r| r.terms as f64).collect();
            linear_fit(&x, &y).map(|(slope, intercept)| LogTSlope {
                alpha,
                eps,
                slope,
                intercept,
                n_rows: g.len(),
            })
        })
        .collect()
}

/// Least squares min ||X c - y|| by the normal equations and Gaussian elimination with partial
/// pivoting (p <= 4 columns of moderate conditioning here). None if singular.
fn least_squares(x: &[Vec<f64>], y: &[f64]) -> Option<Vec<f64>> {
    let p = x.first()?.len();
    let mut a = vec![vec![0.0; p + 1]; p];
    for (xi, yi) in x.iter().zip(y) {
        for r in 0..p {
            for c in 0..p {
                a[r][c] += xi[r] * xi[c];
            }
            a[r][p] += xi[r] * yi;
        }
    }
    let scale = a
        .iter()
        .map(|row| row[..p].iter().fold(0.0f64, |m, v| m.max(v.abs())))
        .fold(0.0f64, f64::max);
    for col in 0..p {
        let piv = (col..p).max_by(|&i, &k| a[i][col].abs().total_cmp(&a[k][col].abs()))?;
        if a[piv][col].abs() <= 1e-12 * scale {
            return None;
        }
        a.swap(col, piv);
        let (top, bottom) = a.split_at_mut(col + 1);
        let pivot_row = &top[col];
        for row in bottom {
            let f = row[col] / pivot_row[col];
            for (x, y) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                *x -= f * y;
            }
        }
    }
    let mut c = vec![0.0; p];
    for r in (0..p).rev() {
        let s: f64 = (r + 1..p).map(|k| a[r][k] * c[k]).sum();
        c[r] = (a[r][p] - s) / a[r][r];
    }
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t: u64, eps: f64, s: usize) -> SweepRow {
        SweepRow {
            alpha: 0.5,
            horizon: t,
            eps,
            terms: s,
            max_rel_error: 0.0,
        }
    }

    #[test]
    fn recovers_an_exact_product_law() {
        let mut rows = Vec::new();
        for t in [100u64, 10_000, 1_000_000] {
            for eps in [1e-2f64, 1e-4, 1e-8] {
                let s = 3.0 + 0.5 * (t as f64).ln() * (-eps.ln());
                rows.push(row(t, eps, s.round() as usize));
            }
        }
        let c = fit_laws(&rows).unwrap();
        assert_eq!(c.better, "A");
        assert!((c.product.coefficients[1] - 0.5).abs() < 0.01);
        assert!(c.product.rms_residual < 0.5);
    }

    #[test]
    fn degenerate_designs_are_errors() {
        let rows: Vec<SweepRow> = (0..5).map(|_| row(1000, 1e-3, 10)).collect();
        assert!(fit_laws(&rows).is_err());
        assert!(fit_laws(&rows[..2]).is_err());
        assert!(sweep(&[], &[10], &[1e-3]).is_err());
    }
}
