//! `vort kernel weights | soe | shared`: the GL kernel and its certified sums of exponentials.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, Subcommand};
use serde::Serialize;
use vort_lab::plot::{self, Panel, Series};
use vort_math::shared::SharedSoe;
use vort_math::{gl, Certificate, Soe, SoeTerm};

use crate::args::{parse_count, parse_real};
use crate::error::CliError;
use crate::output::{emit, emit_json, sci, short};
use crate::progress::with_spinner;

/// Lags per decade sampled for the kernel plots.
const PLOT_LAGS_PER_DECADE: usize = 400;
/// Palette index of the grey used for the ±eps band.
const GRAY: usize = 7;

#[derive(Debug, Subcommand)]
pub enum KernelCommand {
    /// GL weights w_j(a) = Γ(j+a) / (Γ(a) Γ(j+1)) at the given lags.
    ///
    /// JSON: {"alpha", "weights": [{"lag", "w"}]}.
    Weights(WeightsArgs),
    /// A certified sum of exponentials ŵ_j = Σ c_s e^(-u_s j) for one order (recipe R1).
    ///
    /// JSON: {"alpha", "horizon", "eps", "S", "step", "terms": [{"c", "u", "lambda", "mu"}],
    /// "max_rel_error", "argmax_lag", "exhaustive_up_to", "sampled_beyond", "checked"}.
    /// max_rel_error = max |ŵ_j / w_j - 1| over the checked lags of [1, horizon].
    Soe(SoeArgs),
    /// One node set {u_s} for every order in [delta, 1], weights c_s(a) on an a-grid.
    ///
    /// JSON: {"delta", "horizon", "eps", "S", "step", "nodes": [{"u", "lambda", "mu"}],
    /// "grid": [{"alpha", "c": [..S], "single_order_S"}], "single_order_S_min",
    /// "single_order_S_max", "max_rel_error", "argmax_lag", "exhaustive_up_to",
    /// "sampled_beyond", "checked"}. The certificate covers every grid order and every
    /// midpoint, each with its own closed-form weights (c_s(a) is not interpolated from the
    /// grid; the layer evaluates it through a 4097-point cubic Hermite table, ~1e-13 from the
    /// closed form). Nodes are fastest first: the trapezoid nodes, then the slow tail nodes,
    /// then u = 0, the non-decaying node that carries all of a = 1 and the far tail's mass.
    /// Every weight is >= 0 (a positive mixture, like the GL kernel itself).
    Shared(SharedArgs),
}

#[derive(Debug, Args)]
pub struct WeightsArgs {
    /// Order a in [0, 1].
    #[arg(long, value_name = "A", value_parser = parse_real, allow_negative_numbers = true)]
    alpha: f64,
    /// Comma-separated lags j >= 0 (1e9 and 1_000 forms accepted).
    #[arg(long, value_name = "J,J,...", value_delimiter = ',', required = true, value_parser = parse_count)]
    lags: Vec<u64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct SoeArgs {
    /// Order a in [0, 1].
    #[arg(long, value_name = "A", value_parser = parse_real, allow_negative_numbers = true)]
    alpha: f64,
    /// Horizon T >= 1: the certificate covers lags 1..=T (100000, 1e5 and 1_000_000 forms).
    #[arg(long, value_name = "T", value_parser = parse_count)]
    horizon: u64,
    /// Relative tolerance eps: max |ŵ_j / w_j - 1| <= eps on [1, T].
    #[arg(long, value_name = "E", value_parser = parse_real, allow_negative_numbers = true)]
    eps: f64,
    /// Write a PNG: exact vs SOE kernel (log-log) and relative error (log lag).
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct SharedArgs {
    /// Smallest order covered, 0 < delta < 1.
    #[arg(long, value_name = "D", value_parser = parse_real, allow_negative_numbers = true)]
    delta: f64,
    /// Horizon T >= 1 (100000, 1e5 and 1_000_000 forms).
    #[arg(long, value_name = "T", value_parser = parse_count)]
    horizon: u64,
    /// Relative tolerance eps, certified at every grid order and midpoint.
    #[arg(long, value_name = "E", value_parser = parse_real, allow_negative_numbers = true)]
    eps: f64,
    /// Write a PNG: exact vs shared-node kernel for five orders and their relative errors.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
    /// Also print the weights c_s(A) at order A (closed form, as the layer uses them) and
    /// that order's own certificate (JSON: "at_alpha").
    #[arg(long, value_name = "A", value_parser = parse_real, allow_negative_numbers = true)]
    alpha: Option<f64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// The weights of one order on the shared nodes, with that order's certificate.
#[derive(Serialize)]
struct AtAlphaJson {
    alpha: f64,
    c: Vec<f64>,
    max_rel_error: f64,
    argmax_lag: u64,
}

pub fn run(cmd: KernelCommand) -> Result<(), CliError> {
    match cmd {
        KernelCommand::Weights(a) => weights(a),
        KernelCommand::Soe(a) => soe(a),
        KernelCommand::Shared(a) => shared(a),
    }
}

#[derive(Serialize)]
struct WeightsJson {
    alpha: f64,
    weights: Vec<LagWeight>,
}

#[derive(Serialize)]
struct LagWeight {
    lag: u64,
    w: f64,
}

fn weights(args: WeightsArgs) -> Result<(), CliError> {
    let weights = args
        .lags
        .iter()
        .map(|&lag| {
            Ok(LagWeight {
                lag,
                w: gl::weight(args.alpha, lag)?,
            })
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    if args.json {
        return emit_json(&WeightsJson {
            alpha: args.alpha,
            weights,
        });
    }
    let mut s = format!("GL weights w_j(a), a = {}\n", args.alpha);
    s += &format!("{:>20}  {:>24}\n", "lag j", "w_j");
    for w in &weights {
        s += &format!("{:>20}  {:>24}\n", w.lag, sci(w.w));
    }
    emit(&s)
}

/// One SOE term as printed: λ and μ = 1 - λ are derived from u.
#[derive(Serialize)]
struct TermJson {
    c: f64,
    u: f64,
    lambda: f64,
    mu: f64,
}

impl From<&SoeTerm> for TermJson {
    fn from(t: &SoeTerm) -> Self {
        TermJson {
            c: t.c,
            u: t.u,
            lambda: t.lambda(),
            mu: t.mu(),
        }
    }
}

#[derive(Serialize)]
struct SoeJson {
    alpha: f64,
    horizon: u64,
    eps: f64,
    #[serde(rename = "S")]
    s: usize,
    step: f64,
    terms: Vec<TermJson>,
    max_rel_error: f64,
    argmax_lag: u64,
    exhaustive_up_to: u64,
    sampled_beyond: u64,
    checked: String,
}

fn soe(args: SoeArgs) -> Result<(), CliError> {
    if let Some(path) = &args.plot {
        plot::check_path(path)?;
    }
    let start = Instant::now();
    let soe = with_spinner("building and certifying the SOE", || {
        Soe::build(args.alpha, args.horizon, args.eps)
    })?;
    let seconds = start.elapsed().as_secs_f64();
    if let Some(path) = &args.plot {
        with_spinner("plotting", || plot_soe(&soe, path))?;
    }
    let c = &soe.certificate;
    if args.json {
        return emit_json(&SoeJson {
            alpha: soe.alpha,
            horizon: soe.horizon,
            eps: soe.eps,
            s: soe.len(),
            step: soe.step,
            terms: soe.terms.iter().map(TermJson::from).collect(),
            max_rel_error: c.max_rel_error,
            argmax_lag: c.argmax_lag,
            exhaustive_up_to: c.exhaustive_up_to,
            sampled_beyond: c.sampled_beyond,
            checked: c.checked.clone(),
        });
    }
    let mut s = format!(
        "SOE of the GL kernel: a = {}, T = {}, eps = {}: S = {} terms (trapezoid step h = {:.6})\n",
        soe.alpha,
        soe.horizon,
        short(soe.eps),
        soe.len(),
        soe.step
    );
    s += &terms_table(&soe.terms);
    s += &certificate_lines(c, soe.eps);
    s += &format!("built and certified in {seconds:.2} s\n");
    if let Some(path) = &args.plot {
        s += &format!("plot: {}\n", path.display());
    }
    emit(&s)
}

fn terms_table(terms: &[SoeTerm]) -> String {
    let mut s = format!(
        "{:>4}  {:>24}  {:>24}  {:>24}\n",
        "s", "c_s", "u_s", "mu_s = 1 - e^(-u_s)"
    );
    for (i, t) in terms.iter().enumerate() {
        s += &format!(
            "{:>4}  {:>24}  {:>24}  {:>24}\n",
            i + 1,
            sci(t.c),
            sci(t.u),
            sci(t.mu())
        );
    }
    s
}

fn certificate_lines(c: &Certificate, eps: f64) -> String {
    format!(
        "certificate: max |ŵ_j / w_j - 1| = {} (eps = {}), worst at lag j = {}\nchecked: {}\n",
        short(c.max_rel_error),
        short(eps),
        c.argmax_lag,
        c.checked
    )
}

/// Exact and approximate kernels at log-spaced lags, and their relative errors, as (lag, value).
struct KernelCurves {
    exact: Vec<(f64, f64)>,
    fit: Vec<(f64, f64)>,
    rel: Vec<(f64, f64)>,
}

fn kernel_curves(
    alpha: f64,
    horizon: u64,
    approx: impl Fn(u64) -> f64,
) -> Result<KernelCurves, CliError> {
    let lags = plot::log_lags(horizon, PLOT_LAGS_PER_DECADE);
    let mut c = KernelCurves {
        exact: Vec::with_capacity(lags.len()),
        fit: Vec::with_capacity(lags.len()),
        rel: Vec::with_capacity(lags.len()),
    };
    for j in lags {
        let w = gl::weight(alpha, j)?;
        let v = approx(j);
        let x = j as f64;
        c.exact.push((x, w));
        c.fit.push((x, v));
        c.rel.push((x, v / w - 1.0));
    }
    Ok(c)
}

fn eps_band(horizon: u64, eps: f64) -> [Series; 2] {
    let ends = |y: f64| vec![(1.0, y), (horizon as f64, y)];
    [
        Series::dashed(format!("±eps = ±{}", short(eps)), ends(eps)).with_color(GRAY),
        Series::dashed("", ends(-eps)).with_color(GRAY),
    ]
}

fn plot_soe(soe: &Soe, path: &std::path::Path) -> Result<(), CliError> {
    let KernelCurves { exact, fit, rel } =
        kernel_curves(soe.alpha, soe.horizon, |j| soe.kernel(j))?;
    let top = Panel {
        title: format!(
            "GL kernel a = {}: exact vs SOE (S = {}, T = {})",
            soe.alpha,
            soe.len(),
            soe.horizon
        ),
        x_label: "lag j".into(),
        y_label: "w_j".into(),
        log_x: true,
        log_y: true,
        series: vec![
            Series::line("exact w_j", exact),
            Series::dashed(format!("SOE ŵ_j, S = {}", soe.len()), fit).with_color(3),
        ],
    };
    let [hi, lo] = eps_band(soe.horizon, soe.eps);
    let bottom = Panel {
        title: format!(
            "relative error ŵ_j / w_j - 1 (certified max {} on [1, {}])",
            short(soe.certificate.max_rel_error),
            soe.horizon
        ),
        x_label: "lag j".into(),
        y_label: "relative error".into(),
        log_x: true,
        log_y: false,
        series: vec![Series::line("ŵ_j / w_j - 1", rel), hi, lo],
    };
    plot::two_panel_plot(path, &top, &bottom)?;
    Ok(())
}

#[derive(Serialize)]
struct NodeJson {
    u: f64,
    lambda: f64,
    mu: f64,
}

#[derive(Serialize)]
struct GridJson {
    alpha: f64,
    c: Vec<f64>,
    #[serde(rename = "single_order_S")]
    single_order_s: Option<usize>,
}

#[derive(Serialize)]
struct SharedJson {
    delta: f64,
    horizon: u64,
    eps: f64,
    #[serde(rename = "S")]
    s: usize,
    step: f64,
    nodes: Vec<NodeJson>,
    grid: Vec<GridJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    at_alpha: Option<AtAlphaJson>,
    #[serde(rename = "single_order_S_min")]
    single_order_s_min: Option<usize>,
    #[serde(rename = "single_order_S_max")]
    single_order_s_max: Option<usize>,
    max_rel_error: f64,
    argmax_lag: u64,
    exhaustive_up_to: u64,
    sampled_beyond: u64,
    checked: String,
}

fn shared(args: SharedArgs) -> Result<(), CliError> {
    if let Some(path) = &args.plot {
        plot::check_path(path)?;
    }
    if let Some(a) = args.alpha {
        if !(a.is_finite() && a >= args.delta && a <= 1.0) {
            return Err(CliError::Usage(format!(
                "--alpha {a:?} must be in [delta = {:?}, 1]",
                args.delta
            )));
        }
    }
    let start = Instant::now();
    let shared = with_spinner("building and certifying the shared node set", || {
        SharedSoe::build(args.delta, args.horizon, args.eps)
    })?;
    let seconds = start.elapsed().as_secs_f64();
    if let Some(path) = &args.plot {
        with_spinner("plotting", || plot_shared(&shared, path))?;
    }
    let at_alpha = match args.alpha {
        Some(a) => {
            let terms = shared.terms_at(a);
            let cert = vort_math::soe::certify(&terms, a, shared.horizon)?;
            Some(AtAlphaJson {
                alpha: a,
                c: terms.iter().map(|t| t.c).collect(),
                max_rel_error: cert.max_rel_error,
                argmax_lag: cert.argmax_lag,
            })
        }
        None => None,
    };
    let c = &shared.certificate;
    let s_min = shared.single_order_s.iter().copied().min();
    let s_max = shared.single_order_s.iter().copied().max();
    if args.json {
        return emit_json(&SharedJson {
            delta: shared.delta,
            horizon: shared.horizon,
            eps: shared.eps,
            s: shared.len(),
            step: shared.step,
            nodes: shared
                .nodes_u
                .iter()
                .map(|&u| {
                    let t = SoeTerm { c: 0.0, u };
                    NodeJson {
                        u,
                        lambda: t.lambda(),
                        mu: t.mu(),
                    }
                })
                .collect(),
            grid: shared
                .alpha_grid
                .iter()
                .zip(&shared.weights)
                .enumerate()
                .map(|(i, (&alpha, c))| GridJson {
                    alpha,
                    c: c.clone(),
                    single_order_s: shared.single_order_s.get(i).copied(),
                })
                .collect(),
            at_alpha,
            single_order_s_min: s_min,
            single_order_s_max: s_max,
            max_rel_error: c.max_rel_error,
            argmax_lag: c.argmax_lag,
            exhaustive_up_to: c.exhaustive_up_to,
            sampled_beyond: c.sampled_beyond,
            checked: c.checked.clone(),
        });
    }
    let range = match (s_min, s_max) {
        (Some(lo), Some(hi)) if lo == hi => format!("{lo}"),
        (Some(lo), Some(hi)) => format!("{lo}..{hi}"),
        _ => "n/a".into(),
    };
    let mut s = format!(
        "shared SOE nodes for a in [{}, 1], T = {}, eps = {}: S = {} shared terms \
         (a single-order SOE needs S = {range} on the same grid); trapezoid step h = {:.6}\n",
        shared.delta,
        shared.horizon,
        short(shared.eps),
        shared.len(),
        shared.step
    );
    s += &format!("{:>4}  {:>24}  {:>24}\n", "s", "u_s", "mu_s = 1 - e^(-u_s)");
    for (i, &u) in shared.nodes_u.iter().enumerate() {
        s += &format!(
            "{:>4}  {:>24}  {:>24}\n",
            i + 1,
            sci(u),
            sci(SoeTerm { c: 0.0, u }.mu())
        );
    }
    let n = shared.alpha_grid.len();
    s += &format!(
        "a-grid: {n} orders, uniform on [{}, 1] (weights c_s(a) for every order: --json)\n",
        shared.delta
    );
    s += &format!(
        "{:>10}  {:>14}  {:>10}\n",
        "a", "single-order S", "shared S"
    );
    for i in sample_indices(n, 9) {
        s += &format!(
            "{:>10.6}  {:>14}  {:>10}\n",
            shared.alpha_grid[i],
            shared
                .single_order_s
                .get(i)
                .map_or("n/a".into(), |v| v.to_string()),
            shared.len()
        );
    }
    if let Some(at) = &at_alpha {
        s += &format!(
            "weights at a = {} (closed form; this order alone certified to {:.2e}, worst at lag \
             {}):\n{:>4}  {:>24}  {:>24}\n",
            at.alpha, at.max_rel_error, at.argmax_lag, "s", "u_s", "c_s(a)"
        );
        for (i, (&u, &cs)) in shared.nodes_u.iter().zip(&at.c).enumerate() {
            s += &format!("{:>4}  {:>24}  {:>24}\n", i + 1, sci(u), sci(cs));
        }
    }
    s += &certificate_lines(c, shared.eps);
    s += &format!("built and certified in {seconds:.2} s\n");
    if let Some(path) = &args.plot {
        s += &format!("plot: {}\n", path.display());
    }
    emit(&s)
}

/// At most `k` indices of 0..n, evenly spread, first and last included.
fn sample_indices(n: usize, k: usize) -> Vec<usize> {
    if n <= k {
        return (0..n).collect();
    }
    let mut v: Vec<usize> = (0..k).map(|i| i * (n - 1) / (k - 1)).collect();
    v.dedup();
    v
}

fn plot_shared(shared: &SharedSoe, path: &std::path::Path) -> Result<(), CliError> {
    let orders: Vec<f64> = (0..5)
        .map(|k| shared.delta + (1.0 - shared.delta) * k as f64 / 5.0)
        .collect();
    let (mut top, mut bottom) = (Vec::new(), Vec::new());
    for (k, &a) in orders.iter().enumerate() {
        let terms = shared.terms_at(a);
        let approx = |j: u64| {
            terms
                .iter()
                .map(|t| t.c * (-t.u * j as f64).exp())
                .sum::<f64>()
        };
        let KernelCurves { exact, fit, rel } = kernel_curves(a, shared.horizon, approx)?;
        top.push(Series::line(format!("a = {a:.3}"), exact).with_color(k));
        top.push(Series::dashed("", fit).with_color(k));
        bottom.push(Series::line(format!("a = {a:.3}"), rel).with_color(k));
    }
    let top = Panel {
        title: format!(
            "exact w_j (solid) vs shared-node SOE (dashed), S = {}, T = {}",
            shared.len(),
            shared.horizon
        ),
        x_label: "lag j".into(),
        y_label: "w_j".into(),
        log_x: true,
        log_y: true,
        series: top,
    };
    let [hi, lo] = eps_band(shared.horizon, shared.eps);
    bottom.push(hi);
    bottom.push(lo);
    let bottom = Panel {
        title: format!(
            "relative error ŵ_j / w_j - 1 (certified max {} over the a-grid)",
            short(shared.certificate.max_rel_error)
        ),
        x_label: "lag j".into(),
        y_label: "relative error".into(),
        log_x: true,
        log_y: false,
        series: bottom,
    };
    plot::two_panel_plot(path, &top, &bottom)?;
    Ok(())
}
