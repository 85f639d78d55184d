//! `vort theory`: the paper's numerical statements, measured, in one report.
//!
//! Writes `DIR/report.md`, one PNG per figure and `DIR/theory.json` (every number of the
//! report). Each section puts the paper's claim beside the measurement and says plainly where
//! the measurement corrects it. The claims are quoted as docs/DESIGN.md §1 summarises them.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;
use vort_math::theory::{lower_bound, plasticity, quantization, soe_scaling};
use vort_math::{MathError, Soe};

use crate::plot::{self, Panel, PlotError, Series};

/// How much to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Scale {
    /// Seconds: small grids (tests, smoke runs).
    Quick,
    /// The full grids (about a minute on 2 cores).
    Full,
}

/// Why the report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A computation refused its input or could not certify its output.
    #[error(transparent)]
    Math(#[from] MathError),
    /// A figure could not be drawn or saved.
    #[error(transparent)]
    Plot(#[from] PlotError),
    /// The report or its JSON could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Everything measured, as written to `theory.json`.
#[derive(Debug, Serialize)]
pub struct TheoryResults {
    /// Grid size used.
    pub scale: Scale,
    /// Theorem 3.1: SOE sizes over the sweep.
    pub soe_sweep: Vec<soe_scaling::SweepRow>,
    /// Theorem 3.1: the fitted laws.
    pub soe_laws: soe_scaling::LawComparison,
    /// Theorem 3.1: dS / d ln T per (a, eps).
    pub soe_slopes: Vec<soe_scaling::LogTSlope>,
    /// Theorem 4.1: L(a, T) on the grid.
    pub lipschitz: Vec<quantization::LipschitzResult>,
    /// Theorem 4.1: bank quantisation error for several K.
    pub banks: Vec<quantization::QuantisationResult>,
    /// Proposition 4.2: growth exponents per order.
    pub lower_bound: Vec<lower_bound::GrowthResult>,
    /// Proposition 4.2: M = 1, NNLS and tail norm at every horizon, per order.
    pub lower_bound_curves: Vec<LowerBoundCurve>,
    /// Theorem 5.1: the plasticity runs.
    pub plasticity: Vec<PlasticityCase>,
}

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

/// One plasticity run with its label.
#[derive(Debug, Serialize)]
pub struct PlasticityCase {
    /// What the case shows.
    pub label: String,
    /// The run.
    pub result: plasticity::PlasticityResult,
}

struct Grids {
    sweep_alphas: Vec<f64>,
    sweep_horizons: Vec<u64>,
    sweep_eps: Vec<f64>,
    lipschitz_alphas: Vec<f64>,
    lipschitz_horizons: Vec<u64>,
    bank_counts: Vec<usize>,
    bank_horizon: u64,
    lb_alphas: Vec<f64>,
    lb_horizons: Vec<u64>,
    plasticity_steps: usize,
}

impl Grids {
    fn new(scale: Scale) -> Grids {
        match scale {
            Scale::Quick => Grids {
                sweep_alphas: vec![0.35, 0.8],
                sweep_horizons: vec![1_000, 10_000, 100_000],
                sweep_eps: vec![1e-2, 1e-4, 1e-6],
                lipschitz_alphas: vec![0.35, 0.5, 0.8, 0.95, 1.0],
                lipschitz_horizons: vec![1_000, 100_000],
                bank_counts: vec![4, 8],
                bank_horizon: 10_000,
                lb_alphas: vec![0.35, 0.8],
                lb_horizons: vec![1_000, 10_000, 100_000],
                plasticity_steps: 1000,
            },
            Scale::Full => Grids {
                sweep_alphas: vec![0.05, 0.2, 0.35, 0.5, 0.8, 0.95],
                sweep_horizons: vec![1_000, 10_000, 100_000, 1_000_000],
                sweep_eps: vec![1e-2, 1e-3, 1e-4, 1e-6, 1e-8],
                lipschitz_alphas: vec![
                    0.05, 0.2, 0.35, 0.5, 0.6, 0.65, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0,
                ],
                lipschitz_horizons: vec![1_000, 100_000, 1_000_000, 1_000_000_000_000],
                bank_counts: vec![2, 4, 8, 16],
                bank_horizon: 100_000,
                lb_alphas: vec![0.2, 0.35, 0.5, 0.6, 0.8, 0.95],
                lb_horizons: vec![1_000, 10_000, 100_000, 1_000_000],
                plasticity_steps: 5000,
            },
        }
    }
}

/// Smallest rate Λ of the exponential mixtures in Proposition 4.2.
pub const LOWER_BOUND_LAMBDA: f64 = 1e-3;
/// Smallest order δ of the banks in the quantisation section.
pub const BANK_DELTA: f64 = 0.2;

/// Computes every section and writes `out/report.md`, the figures and `out/theory.json`.
/// `progress` is called with a short label before each stage.
pub fn run(
    out: &Path,
    scale: Scale,
    mut progress: impl FnMut(&str),
) -> Result<TheoryResults, ReportError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReportError::Io { path, source }
    };
    fs::create_dir_all(out).map_err(io(out))?;
    let g = Grids::new(scale);

    progress("Theorem 3.1: SOE sizes");
    let soe_sweep = soe_scaling::sweep(&g.sweep_alphas, &g.sweep_horizons, &g.sweep_eps)?;
    let soe_laws = soe_scaling::fit_laws(&soe_sweep)?;
    let soe_slopes = soe_scaling::slopes_in_log_t(&soe_sweep);

    progress("Theorem 4.1: quantisation constant");
    let mut lipschitz = Vec::new();
    for &a in &g.lipschitz_alphas {
        for &t in &g.lipschitz_horizons {
            lipschitz.push(quantization::lipschitz_constant(a, t)?);
        }
    }
    progress("Theorem 4.1: bank quantisation error");
    let banks = g
        .bank_counts
        .iter()
        .map(|&k| quantization::bank_quantisation_error(BANK_DELTA, k, g.bank_horizon))
        .collect::<Result<Vec<_>, _>>()?;

    progress("Proposition 4.2: Λ-limited exponential mixtures");
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

    progress("Theorem 5.1: plasticity");
    let base = plasticity::PlasticityConfig {
        steps: g.plasticity_steps,
        ..plasticity::PlasticityConfig::default()
    };
    let cases = [
        ("interior target α* = 0.75, noiseless", base.clone()),
        (
            "interior target α* = 0.35, noiseless",
            plasticity::PlasticityConfig {
                alpha_star: 0.35,
                ..base.clone()
            },
        ),
        (
            "target below δ (α* = 0.02, δ = 0.05): the projection binds",
            plasticity::PlasticityConfig {
                alpha_star: 0.02,
                ..base.clone()
            },
        ),
        (
            "α* = 0.75 with 5% noise on the samples",
            plasticity::PlasticityConfig {
                noise_rel: 0.05,
                seed: 7,
                ..base.clone()
            },
        ),
    ];
    let plasticity = cases
        .into_iter()
        .map(|(label, config)| {
            Ok(PlasticityCase {
                label: label.to_string(),
                result: plasticity::run(&config)?,
            })
        })
        .collect::<Result<Vec<_>, MathError>>()?;

    let results = TheoryResults {
        scale,
        soe_sweep,
        soe_laws,
        soe_slopes,
        lipschitz,
        banks,
        lower_bound: lower,
        lower_bound_curves: curves,
        plasticity,
    };

    progress("figures");
    draw_figures(out, &results, &g)?;
    progress("report");
    let md = render_markdown(&results, &g);
    let md_path = out.join("report.md");
    vort::fsio::write_atomic(&md_path, md.as_bytes()).map_err(io(&md_path))?;
    let json_path = out.join("theory.json");
    let json = serde_json::to_string_pretty(&thinned_json(&results)).expect("results serialise");
    vort::fsio::write_atomic(&json_path, json.as_bytes()).map_err(io(&json_path))?;
    Ok(results)
}

/// File names of the figures, relative to the report.
pub const FIGURES: [&str; 5] = [
    "soe_kernel.png",
    "soe_terms.png",
    "quantisation_lipschitz.png",
    "lower_bound.png",
    "plasticity.png",
];

fn draw_figures(out: &Path, r: &TheoryResults, g: &Grids) -> Result<(), ReportError> {
    // Theorem 3.1, an example: exact vs SOE kernel and the relative error against lag.
    let soe = Soe::build(0.35, 100_000, 1e-4)?;
    let lags = plot::log_lags(100_000, 40);
    let exact: Vec<(f64, f64)> = lags
        .iter()
        .map(|&j| Ok((j as f64, vort_math::gl::weight(0.35, j)?)))
        .collect::<Result<_, MathError>>()?;
    let approx: Vec<(f64, f64)> = lags.iter().map(|&j| (j as f64, soe.kernel(j))).collect();
    let rel: Vec<(f64, f64)> = exact
        .iter()
        .zip(&approx)
        .map(|(&(j, w), &(_, s))| (j, (s / w - 1.0).abs().max(1e-17)))
        .collect();
    plot::two_panel_plot(
        &out.join(FIGURES[0]),
        &Panel {
            title: format!("w_j(0.35), exact and SOE (S = {})", soe.len()),
            x_label: "lag j".into(),
            y_label: "w_j".into(),
            log_x: true,
            log_y: true,
            series: vec![
                Series::line("exact (GL)", exact),
                Series::dashed("SOE, eps = 1e-4, T = 1e5", approx),
            ],
        },
        &Panel {
            title: "relative error |ŵ_j / w_j - 1|".into(),
            x_label: "lag j".into(),
            y_label: "relative error".into(),
            log_x: true,
            log_y: true,
            series: vec![
                Series::line("SOE", rel),
                Series::dashed("eps", vec![(1.0, 1e-4), (1e5, 1e-4)]),
            ],
        },
    )?;

    // Theorem 3.1: S against T for each eps (first sweep order) with law (A).
    let a0 = g.sweep_alphas[0];
    let law = &r.soe_laws.product.coefficients;
    let mut series = Vec::new();
    for (i, &eps) in g.sweep_eps.iter().enumerate() {
        let pts: Vec<(f64, f64)> = r
            .soe_sweep
            .iter()
            .filter(|row| row.alpha == a0 && row.eps == eps)
            .map(|row| (row.horizon as f64, row.terms as f64))
            .collect();
        series.push(Series::points(format!("S, eps = {eps:e}"), pts).with_color(i));
        let fit: Vec<(f64, f64)> = g
            .sweep_horizons
            .iter()
            .map(|&t| {
                let (lt, le) = ((t as f64).ln(), (1.0 / eps).ln());
                (t as f64, law[0] + law[1] * lt * le)
            })
            .collect();
        series.push(Series::dashed(format!("law A, eps = {eps:e}"), fit).with_color(i));
    }
    single_panel(
        &out.join(FIGURES[1]),
        &Panel {
            title: format!("SOE terms S against horizon T (a = {a0}), fitted law A"),
            x_label: "horizon T".into(),
            y_label: "S".into(),
            log_x: true,
            log_y: false,
            series,
        },
    )?;

    // Theorem 4.1: L(a, T) against a for each T.
    let series = g
        .lipschitz_horizons
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let pts = r
                .lipschitz
                .iter()
                .filter(|l| l.horizon == t)
                .map(|l| (l.alpha, l.value))
                .collect();
            Series::line(format!("T = {t:e}"), pts).with_color(i)
        })
        .collect();
    single_panel(
        &out.join(FIGURES[2]),
        &Panel {
            title: "Quantisation constant L(a, T) = sup_j |dw_j/da|".into(),
            x_label: "order a".into(),
            y_label: "L(a, T)".into(),
            log_x: false,
            log_y: true,
            series,
        },
    )?;

    // Proposition 4.2: best Λ-limited error against T, and fitted exponent against a - 1/2.
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
    let slopes = Panel {
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
    };
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
        &slopes,
    )?;

    // Theorem 5.1: loss gap against iteration.
    let series = r
        .plasticity
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let pts = c
                .result
                .trajectory
                .iter()
                .filter(|s| s.gap > 0.0)
                .map(|s| (s.t as f64, s.gap))
                .collect();
            Series::line(c.label.clone(), pts).with_color(i)
        })
        .filter(|s: &Series| !s.points.is_empty())
        .collect();
    single_panel(
        &out.join(FIGURES[4]),
        &Panel {
            title: "Projected gradient on α: loss gap L(α_t) - L*".into(),
            x_label: "step t".into(),
            y_label: "gap".into(),
            log_x: false,
            log_y: true,
            series,
        },
    )?;
    Ok(())
}

fn fmt_opt(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".to_string(), |v| format!("{v:.4}"))
}

fn render_markdown(r: &TheoryResults, g: &Grids) -> String {
    let mut md = String::new();
    let w = &mut md;
    let _ = writeln!(
        w,
        "# VORT theory report\n\nGenerated by `vort theory` ({:?} grids). Every number below is \
         recomputed by this run; `theory.json` holds all of them. Claims are the paper's \
         (arXiv 2605.08966) as summarised in the project's design notes.\n",
        r.scale
    );

    // Theorem 3.1
    let laws = &r.soe_laws;
    let _ = writeln!(
        w,
        "## Theorem 3.1: sums of exponentials\n\n\
         **Claim.** The GL kernel is approximated to relative error eps on [1, T] by S = O(log(T/eps)) \
         exponentials.\n\n\
         **Measured.** {} certified SOEs (every lag checked up to 1e7), a in {:?}, T in {:?}, eps in {:?}. \
         Least-squares fits of S:\n\n\
         | law | formula | rms residual | max residual |\n|---|---|---|---|\n\
         | A | {} | {:.2} | {:.2} |\n| B | {} | {:.2} | {:.2} |\n| C | {} | {:.2} | {:.2} |\n",
        r.soe_sweep.len(),
        g.sweep_alphas,
        g.sweep_horizons,
        g.sweep_eps,
        laws.product.formula,
        laws.product.rms_residual,
        laws.product.max_abs_residual,
        laws.log_ratio.formula,
        laws.log_ratio.rms_residual,
        laws.log_ratio.max_abs_residual,
        laws.full.formula,
        laws.full.rms_residual,
        laws.full.max_abs_residual,
    );
    // Law B, S = c0 + c1 ln(T/eps), predicts the same slope dS/d ln T at every eps; the product
    // structure predicts a slope growing linearly in ln(1/eps). The slopes decide.
    let slope_range = |eps: f64| {
        let v: Vec<f64> = r
            .soe_slopes
            .iter()
            .filter(|s| s.eps == eps)
            .map(|s| s.slope)
            .collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    };
    let (eps_hi, eps_lo) = (g.sweep_eps[0], g.sweep_eps[g.sweep_eps.len() - 1]);
    let (s_hi, s_lo) = (slope_range(eps_hi), slope_range(eps_lo));
    let c3 = laws.full.coefficients.get(3).copied().unwrap_or(f64::NAN);
    let _ = writeln!(
        w,
        "**Verdict.** At fixed eps, S is O(log T) as claimed (every slope below is finite and S \
         fits a line in ln T). But the claimed log(T/eps) form is not the right shape: it predicts \
         the same slope dS/d ln T at every eps, while the measured slope grows with ln(1/eps), \
         from {:.2}-{:.2} at eps = {eps_hi:e} to {:.2}-{:.2} at eps = {eps_lo:e}. The four-term \
         law C isolates the interaction: its ln T·ln(1/eps) coefficient is {c3:.4}, next to \
         1/π² = {:.4} (the trapezoid step h ~ π²/ln(1/eps) and the node count ~ ln T / h). So S \
         grows like ln T · ln(1/eps) / π², and log(T/eps) understates it at small eps and long \
         horizons. Of the two-parameter laws, law {} fits better (rms {:.2} against {:.2} terms). \
         Slopes dS/d ln T at fixed (a, eps):\n",
        s_hi.0,
        s_hi.1,
        s_lo.0,
        s_lo.1,
        laws.one_over_pi_squared,
        laws.better,
        laws.product.rms_residual.min(laws.log_ratio.rms_residual),
        laws.product.rms_residual.max(laws.log_ratio.rms_residual),
    );
    let _ = writeln!(w, "| a | eps | dS/d ln T |\n|---|---|---|");
    for s in &r.soe_slopes {
        let _ = writeln!(w, "| {} | {:e} | {:.3} |", s.alpha, s.eps, s.slope);
    }
    let _ = writeln!(
        w,
        "\n![exact vs SOE kernel](soe_kernel.png)\n\n![S against T](soe_terms.png)\n"
    );

    // Theorem 4.1
    let _ = writeln!(
        w,
        "## Theorem 4.1: quantising α onto banks\n\n\
         **Claim.** Snapping a token's order to the nearest of K banks changes its kernel by at \
         most L·Δ/2, Δ the bank spacing, with L a constant.\n\n\
         **Measured.** L(a, T) = sup_(1<=j<=T) |dw_j/da|:\n"
    );
    let _ = write!(w, "| a |");
    for t in &g.lipschitz_horizons {
        let _ = write!(w, " T = {t:e} |");
    }
    let _ = writeln!(w, "\n|---|{}", "---|".repeat(g.lipschitz_horizons.len()));
    for &a in &g.lipschitz_alphas {
        let _ = write!(w, "| {a} |");
        for &t in &g.lipschitz_horizons {
            if let Some(l) = r.lipschitz.iter().find(|l| l.alpha == a && l.horizon == t) {
                let _ = write!(w, " {:.3} (j = {}) |", l.value, l.argmax_lag);
            }
        }
        let _ = writeln!(w);
    }
    let _ = writeln!(
        w,
        "\nBank error, δ = {BANK_DELTA}, T = {:e}: measured sup over orders and lags, next to the bounds.\n\n\
         | K | Δ | snap: measured | snap: L·Δ/2 | linear split: measured | split: Δ²/8·sup w'' |\n\
         |---|---|---|---|---|---|",
        g.bank_horizon
    );
    for b in &r.banks {
        let _ = writeln!(
            w,
            "| {} | {:.4} | {:.3e} | {:.3e} | {:.3e} | {:.3e} |",
            b.k_banks, b.spacing, b.snap.measured, b.snap.bound, b.split.measured, b.split.bound
        );
    }
    let _ = writeln!(
        w,
        "\n**Verdict.** The bound holds with the measured L, but L is not a constant: it is exactly 1 \
         for a <= 1/2 (the sup is at j = 1) and grows like ln T as a -> 1 (see the table), so near \
         a = 1 the quantisation error of K banks grows with the horizon. {}\n\n\
         ![L(a,T)](quantisation_lipschitz.png)\n",
        split_verdict(&r.banks)
    );

    // Proposition 4.2
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

    // Theorem 5.1
    let _ = writeln!(
        w,
        "## Theorem 5.1: learning α converges linearly\n\n\
         **Claim.** Projected gradient descent on the order, fitted to samples of a power-law kernel, \
         converges linearly: the loss gap shrinks by a constant factor per step.\n\n\
         **Measured** ({} steps, η = 1/L_s, lags log-spaced on [1, 1e4]):\n\n\
         | case | α̂ | final α | fitted ρ | fitted ρ (second half) | 1 - η μ_path | local (1 - η L''(α̂))² |\n\
         |---|---|---|---|---|---|---|",
        g.plasticity_steps
    );
    for c in &r.plasticity {
        let res = &c.result;
        let last = res.trajectory.last().map_or(f64::NAN, |s| s.alpha);
        let _ = writeln!(
            w,
            "| {} | {:.4} | {:.4} | {} | {} | {} | {:.4} |",
            c.label,
            res.alpha_min,
            last,
            fmt_opt(res.fitted_rate),
            fmt_opt(res.fitted_rate_tail),
            fmt_opt(res.theoretical_rate),
            res.local_rate
        );
    }
    let _ = writeln!(
        w,
        "\n**Verdict.** Convergence is linear wherever the loss is strongly convex along the path \
         (fitted ρ < 1, at or below the theorem's 1 - η μ). The global strong convexity the theorem \
         assumes does not hold on all of [δ, 1]: min L'' over [δ, 1] is {}; the rate the proof \
         delivers uses the curvature along the path. With noise the iterates converge linearly to the \
         noisy minimiser α̂, not to α*. {} Where L'' at the minimiser is small next to L_s \
         (α* = 0.35), η = 1/L_s makes the contraction weak and convergence, though linear, slow.\
         \n\n![plasticity](plasticity.png)",
        r.plasticity
            .first()
            .map_or("n/a".into(), |c| format!("{:.3e}", c.result.mu)),
        boundary_verdict(&r.plasticity)
    );
    md
}

/// The results as JSON with each plasticity trajectory thinned to at most
/// [`MAX_JSON_TRAJECTORY`] evenly spaced iterates (first and last kept): the full trajectories
/// are in the figure, and 5000 steps x 4 cases would make the JSON megabytes long.
fn thinned_json(results: &TheoryResults) -> serde_json::Value {
    let mut v = serde_json::to_value(results).expect("results serialise");
    if let Some(cases) = v["plasticity"].as_array_mut() {
        for case in cases {
            if let Some(traj) = case["result"]["trajectory"].as_array_mut() {
                let n = traj.len();
                if n > MAX_JSON_TRAJECTORY {
                    let stride = n.div_ceil(MAX_JSON_TRAJECTORY);
                    let last = traj[n - 1].clone();
                    let mut kept: Vec<_> = traj.iter().step_by(stride).cloned().collect();
                    if (n - 1) % stride != 0 {
                        kept.push(last);
                    }
                    *traj = kept;
                }
            }
        }
    }
    v
}

/// Most iterates per plasticity trajectory written to `theory.json`.
pub const MAX_JSON_TRAJECTORY: usize = 500;

/// What the bank table shows about the linear split against snapping.
fn split_verdict(banks: &[quantization::QuantisationResult]) -> String {
    let n = banks.len();
    if n < 2 {
        return String::new();
    }
    let (a, b) = (&banks[n - 2], &banks[n - 1]);
    let spacing = b.spacing / a.spacing;
    format!(
        "The linear split the layer uses is smaller than snapping at every K and shrinks faster: \
         from K = {} to K = {} (Δ x{spacing:.2}) the split error falls x{:.2} (Δ² gives x{:.2}), \
         snapping x{:.2} (Δ gives x{spacing:.2}).",
        a.k_banks,
        b.k_banks,
        b.split.measured / a.split.measured,
        spacing * spacing,
        b.snap.measured / a.snap.measured,
    )
}

/// Whether the runs whose target lies below δ reached the boundary, and when.
fn boundary_verdict(cases: &[PlasticityCase]) -> String {
    cases
        .iter()
        .filter(|c| c.result.config.alpha_star < c.result.config.delta)
        .map(|c| {
            let delta = c.result.config.delta;
            match c.result.trajectory.iter().find(|s| s.alpha <= delta) {
                Some(s) => format!(
                    "With α* below δ the projection binds: α reaches δ = {delta} exactly at step {} \
                     and stays there.",
                    s.t
                ),
                None => format!(
                    "With α* below δ the iterates approach δ = {delta} but had not reached it after \
                     {} steps (final α = {:.4}).",
                    c.result.trajectory.len() - 1,
                    c.result.trajectory.last().map_or(f64::NAN, |s| s.alpha)
                ),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn single_panel(path: &Path, panel: &Panel) -> Result<(), PlotError> {
    plot::panels_plot(path, std::slice::from_ref(panel))
}
