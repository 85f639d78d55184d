//! Proposition 4.2: exponential mixtures whose rates are all >= Λ cannot follow a power law;
//! their best l2 error and its growth exponent against T (`lower_bound.png`).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use vort_math::theory::lower_bound::{self, GrowthResult};
use vort_math::MathError;

use super::{Grids, ReportError, TheoryResults, FIGURES, LOWER_BOUND_LAMBDA};
use crate::plot::{self, Panel, Series};

/// Errors of the best Λ-limited mixtures against T for one order.
#[derive(Debug, Serialize)]
pub struct LowerBoundCurve {
    /// Order a.
    pub alpha: f64,
    /// Smallest rate Λ.
    pub lambda: f64,
    /// (T, E_{M=1}, E_NNLS, tail norm).
    pub points: Vec<(u64, f64, f64, f64)>,
}

/// Per order: the growth exponents between the two largest horizons, and the errors of the
/// best single exponential and the best nonnegative mixture, and the tail norm, at every
/// horizon.
pub(super) fn measure(g: &Grids) -> Result<(Vec<GrowthResult>, Vec<LowerBoundCurve>), MathError> {
    let mut lower = Vec::new();
    let mut curves = Vec::new();
    for &a in &g.lb_alphas {
        let mut points = Vec::new();
        for &t in &g.lb_horizons {
            let single = lower_bound::best_single_exponential(a, LOWER_BOUND_LAMBDA, t)?;
            let nnls = lower_bound::nnls_mixture(
                a,
                LOWER_BOUND_LAMBDA,
                t,
                lower_bound::DEFAULT_NNLS_RATES,
            )?;
            let tail = lower_bound::tail_norm(a, LOWER_BOUND_LAMBDA, t)?;
            points.push((t, single.error, nnls.error, tail));
        }
        let n = g.lb_horizons.len();
        lower.push(lower_bound::growth_exponent(
            a,
            LOWER_BOUND_LAMBDA,
            g.lb_horizons[n - 2],
            g.lb_horizons[n - 1],
        )?);
        curves.push(LowerBoundCurve {
            alpha: a,
            lambda: LOWER_BOUND_LAMBDA,
            points,
        });
    }
    Ok((lower, curves))
}

/// The lower-bound section: the errors at every horizon, the growth exponents beside
/// a - 1/2, the verdict, and the errors and exponents drawn.
pub(super) fn section(out: &Path, r: &TheoryResults, _g: &Grids) -> Result<String, ReportError> {
    figure(out, r)?;
    let mut md = String::new();
    let w = &mut md;
    let _ = writeln!(
        w,
        "## Proposition 4.2: exponentials with a minimum rate cannot follow a power law\n\n\
         **Claim.** Any mixture of exponentials whose rates are all >= Λ has l2([1, T]) error growing \
         like T^(a-1/2) for a > 1/2 (and bounded for a < 1/2).\n\n\
         **Measured** (Λ = {LOWER_BOUND_LAMBDA}): best single exponential, best nonnegative mixture over \
         {} rates in [Λ, {}] (NNLS, any number of terms), and the tail norm of w over j > 1/Λ.\n\n\
         | a | T | E (M = 1) | E (NNLS) | tail norm |\n|---|---|---|---|---|",
        lower_bound::DEFAULT_NNLS_RATES,
        lower_bound::U_MAX
    );
    for c in &r.lower_bound_curves {
        for p in &c.points {
            let _ = writeln!(
                w,
                "| {} | {:e} | {:.3e} | {:.3e} | {:.3e} |",
                c.alpha, p.0 as f64, p.1, p.2, p.3
            );
        }
    }
    let _ = writeln!(
        w,
        "\nGrowth exponents d ln E / d ln T between the two largest horizons:\n\n\
         | a | a - 1/2 | M = 1 | NNLS | tail |\n|---|---|---|---|---|"
    );
    for l in &r.lower_bound {
        let _ = writeln!(
            w,
            "| {} | {:+.2} | {:.3} | {:.3} | {:.3} |",
            l.alpha, l.target_exponent, l.single_slope, l.nnls_slope, l.tail_slope
        );
    }
    let _ = writeln!(
        w,
        "\n**Verdict.** For a > 1/2 the measured exponent approaches a - 1/2 from above as T grows (the \
         convergence is slow for a near 1/2); for a < 1/2 the growth slows towards zero, as it must: Σ w_j² converges for a < 1/2, so \
         ||w||_2 bounds the error. Any exponential memory \
         with a floor on its decay rate therefore loses a growing amount of a high-order power-law \
         kernel, which is the paper's argument for power-law memory.\n\n![lower bound](lower_bound.png)\n"
    );
    Ok(md)
}

/// Best Λ-limited error against T, and the fitted exponent against a - 1/2.
fn figure(out: &Path, r: &TheoryResults) -> Result<(), ReportError> {
    let series = r
        .lower_bound_curves
        .iter()
        .enumerate()
        .flat_map(|(i, c)| {
            [
                Series::line(
                    format!("a = {} NNLS", c.alpha),
                    c.points.iter().map(|p| (p.0 as f64, p.2)).collect(),
                )
                .with_color(i),
                Series::dashed(
                    format!("a = {} tail j > 1/Λ", c.alpha),
                    // The tail over (1/Λ, T] is empty while T <= 1/Λ: nothing to draw there.
                    c.points
                        .iter()
                        .filter(|p| p.0 as f64 > 1.0 / c.lambda && p.3 > 0.0)
                        .map(|p| (p.0 as f64, p.3))
                        .collect(),
                )
                .with_color(i),
            ]
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    plot::two_panel_plot(
        &out.join(FIGURES[3]),
        &Panel {
            title: format!("Best l2([1,T]) error, every rate >= Λ = {LOWER_BOUND_LAMBDA}"),
            x_label: "horizon T".into(),
            y_label: "l2 error".into(),
            log_x: true,
            log_y: true,
            series,
        },
        &slopes_panel(r),
    )?;
    Ok(())
}

/// The growth exponents of the NNLS mixture and of one exponential against a, with a - 1/2
/// and 0.
fn slopes_panel(r: &TheoryResults) -> Panel {
    Panel {
        title: "Growth exponent of the error against a - 1/2".into(),
        x_label: "order a".into(),
        y_label: "d ln E / d ln T".into(),
        log_x: false,
        log_y: false,
        series: vec![
            Series::points(
                "NNLS mixture",
                r.lower_bound
                    .iter()
                    .map(|l| (l.alpha, l.nnls_slope))
                    .collect(),
            )
            .with_color(0),
            Series::points(
                "one exponential",
                r.lower_bound
                    .iter()
                    .map(|l| (l.alpha, l.single_slope))
                    .collect(),
            )
            .with_color(1),
            Series::dashed("a - 1/2 (Proposition 4.2)", vec![(0.5, 0.0), (1.0, 0.5)]).with_color(2),
            Series::dashed("0 (bounded)", vec![(0.0, 0.0), (0.5, 0.0)]).with_color(3),
        ],
    }
}
