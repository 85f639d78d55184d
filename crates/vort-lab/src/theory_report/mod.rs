//! `vort theory`: the paper's numerical statements, measured, in one report.
//!
//! Writes `DIR/report.md`, one PNG per figure and `DIR/theory.json` (every number of the
//! report). Each section puts the paper's claim beside the measurement and says plainly where
//! the measurement corrects it. The claims are quoted as docs/DESIGN.md §1 summarises them.
//!
//! One file per section: `soe_scaling.rs` (Theorem 3.1), `quantisation.rs` (Theorem 4.1),
//! `lower_bound.rs` (Proposition 4.2) and `plasticity.rs` (Theorem 5.1). Each measures its
//! part of [`TheoryResults`], then draws its figures and writes its markdown from the results.

mod lower_bound;
mod plasticity;
mod quantisation;
mod soe_scaling;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;
use vort_math::theory as math;
use vort_math::MathError;

use crate::plot::{self, Panel, PlotError};
pub use lower_bound::LowerBoundCurve;
pub use plasticity::PlasticityCase;

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
    pub soe_sweep: Vec<math::soe_scaling::SweepRow>,
    /// Theorem 3.1: the fitted laws.
    pub soe_laws: math::soe_scaling::LawComparison,
    /// Theorem 3.1: dS / d ln T per (a, eps).
    pub soe_slopes: Vec<math::soe_scaling::LogTSlope>,
    /// Theorem 4.1: L(a, T) on the grid.
    pub lipschitz: Vec<math::quantization::LipschitzResult>,
    /// Theorem 4.1: bank quantisation error for several K.
    pub banks: Vec<math::quantization::QuantisationResult>,
    /// Proposition 4.2: growth exponents per order.
    pub lower_bound: Vec<math::lower_bound::GrowthResult>,
    /// Proposition 4.2: M = 1, NNLS and tail norm at every horizon, per order.
    pub lower_bound_curves: Vec<LowerBoundCurve>,
    /// Theorem 5.1: the plasticity runs.
    pub plasticity: Vec<PlasticityCase>,
}

/// The grids of every section at a scale.
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
    let (soe_sweep, soe_laws, soe_slopes) = soe_scaling::measure(&g)?;
    progress("Theorem 4.1: quantisation constant");
    let lipschitz = quantisation::lipschitz(&g)?;
    progress("Theorem 4.1: bank quantisation error");
    let banks = quantisation::banks(&g)?;
    progress("Proposition 4.2: Λ-limited exponential mixtures");
    let (lower, curves) = lower_bound::measure(&g)?;
    progress("Theorem 5.1: plasticity");
    let plasticity = plasticity::measure(&g)?;
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
    // every section draws its figures before the report is written
    let sections = [
        soe_scaling::section(out, &results, &g)?,
        quantisation::section(out, &results, &g)?,
        lower_bound::section(out, &results, &g)?,
        plasticity::section(out, &results, &g)?,
    ];
    progress("report");
    let md = heading(&results) + &sections.concat();
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

/// The report's title and how it was made.
fn heading(r: &TheoryResults) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# VORT theory report\n\nGenerated by `vort theory` ({:?} grids). Every number below is \
         recomputed by this run; `theory.json` holds all of them. Claims are the paper's \
         (arXiv 2605.08966) as summarised in the project's design notes.\n",
        r.scale
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

fn single_panel(path: &Path, panel: &Panel) -> Result<(), PlotError> {
    plot::panels_plot(path, std::slice::from_ref(panel))
}
