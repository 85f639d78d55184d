//! The orders α of the routed VORT runs on books (any routing whose α varies): means on
//! entity, function-word and other bytes beside the paper's, the router's inputs measured
//! from the weights where a run kept them ([`crate::reproduce::router`]), and the densities
//! by class (`alpha_by_class_books.png`, one panel per routed mixer).

use std::path::Path;

use super::BooksReport;
use crate::plot::{panels_plot, Panel, Series};
use crate::reproduce::router::{self, Diagnosis, RoutedRun};
use crate::reproduce::{density, run_path, with_paper_alpha};
use crate::train::eval::{AlphaSample, EvalResult};
use crate::train::{RunConfig, RunDir, TrainError};

/// A routed books run: its evaluation (with its α samples) and the router's inputs.
#[derive(Debug, Clone)]
pub(super) struct Routed {
    /// The run as the router section lists it.
    pub run: RoutedRun,
    /// Its α samples by class (from its evaluation).
    pub alpha: Option<AlphaSample>,
}

impl Routed {
    /// The mixer of the run: its kind and routing ("vort full"), which groups its seeds.
    fn mixer(&self) -> String {
        format!(
            "{} {}",
            self.run.name,
            router::routing_label(self.run.routing)
        )
    }
}

/// The routed runs among the finished `configs` (aligned with their `results`), with the
/// router's inputs measured from their weights or read from their `router.json` (in their
/// run directories under `out_dir`).
pub(super) fn measure(
    configs: &[RunConfig],
    results: &[EvalResult],
    out_dir: &Path,
    progress: bool,
) -> Vec<Routed> {
    let routed: Vec<(&RunConfig, &EvalResult, vort::Routing)> = configs
        .iter()
        .zip(results)
        .filter_map(|(c, e)| Some((c, e, router::varying(&c.model.mixer)?)))
        .collect();
    let runs = router::routed_runs(
        routed
            .iter()
            .map(|(c, e, routing)| router::RunToMeasure {
                name: e.label().to_string(),
                seed: c.seed,
                routing: *routing,
                dir: RunDir::new(out_dir.join(run_path(e.label(), c))),
                means: means(e.alpha.as_ref()),
            })
            .collect(),
        progress,
    );
    runs.into_iter()
        .zip(routed)
        .map(|(run, (_, e, _))| Routed {
            run,
            alpha: e.alpha.clone(),
        })
        .collect()
}

/// The evaluation's mean α by class ((class, memorable, mean)).
fn means(a: Option<&AlphaSample>) -> Vec<(String, bool, f64)> {
    a.map_or(Vec::new(), |a| {
        let mut v = vec![("entity".to_string(), true, a.mean_memorable)];
        if let Some(f) = a.mean_function {
            v.push(("function word".into(), false, f));
        }
        v.push(("other".into(), false, a.mean_other));
        v
    })
}

/// The α section: the mean α by byte class of each memory kind with α samples (over seeds),
/// then every routed run's, its router's inputs, and the figure.
pub(super) fn markdown(rep: &BooksReport, routed: &[Routed]) -> String {
    let mut s = String::new();
    for r in &rep.rows {
        if let Some((e, f, o)) = r.alpha_means {
            // the oracle's α is its rule's, not learned
            let ruled = routed.iter().any(|x| {
                x.run.name == r.mixer && matches!(x.run.routing, vort::Routing::Oracle { .. })
            });
            s += &format!(
                "{} α ({}): mean {e:.3} on entity bytes, {} on function-word bytes, \
                 {o:.3} on the rest (paper: entities ≈ 0.80, function words ≈ 0.35).\n\n",
                if ruled { "Rule-set" } else { "Learned" },
                r.mixer,
                f.map_or("n/a".into(), |f| format!("{f:.3}"))
            );
        }
    }
    if !routed.is_empty() {
        s += "**α by byte class, every routed run** (test windows, mean over layers and heads; \
              from each run's evaluation). The memorable bytes are the lexicon's entity \
              bytes.\n\n\
              | memory | routing | seed | entity | function word | other | router inputs |\n\
              |---|---|---|---|---|---|---|\n";
        for r in routed {
            let f = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
            let a = r.alpha.as_ref();
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                r.run.name,
                router::routing_label(r.run.routing),
                r.run.seed,
                f(a.map(|a| a.mean_memorable)),
                f(a.and_then(|a| a.mean_function)),
                f(a.map(|a| a.mean_other)),
                match &r.run.diagnosis {
                    Diagnosis::Measured(_) => "measured (`router.json`)".to_string(),
                    Diagnosis::Unavailable(why) => why.clone(),
                }
            );
        }
        s += "\n";
        let runs: Vec<RoutedRun> = routed.iter().map(|r| r.run.clone()).collect();
        s += &router::markdown(&runs);
    }
    s += "![α by class](alpha_by_class_books.png)\n\n";
    s
}

/// `alpha_by_class_books.png`: densities of α on entity, function-word and other bytes beside
/// the paper's orders, one panel per routed mixer (its seeds pooled; the evaluations' α
/// samples); nothing without a routed run with α samples.
pub(super) fn figure(routed: &[Routed], out: &Path) -> Result<(), TrainError> {
    let mut mixers: Vec<String> = Vec::new();
    for r in routed {
        if r.alpha.is_some() && !mixers.contains(&r.mixer()) {
            mixers.push(r.mixer());
        }
    }
    let panels: Vec<Panel> = mixers
        .iter()
        .map(|m| {
            let samples: Vec<&AlphaSample> = routed
                .iter()
                .filter(|r| &r.mixer() == m)
                .filter_map(|r| r.alpha.as_ref())
                .collect();
            let pick = |f: &dyn Fn(&AlphaSample) -> &Vec<f32>| -> Vec<f64> {
                samples
                    .iter()
                    .flat_map(|a| f(a).iter().map(|&x| f64::from(x)))
                    .collect()
            };
            Panel {
                title: format!("books: α by byte class ({m}; all layers, heads and seeds)"),
                x_label: "α".into(),
                y_label: "fraction of bytes".into(),
                log_x: false,
                log_y: false,
                series: with_paper_alpha(
                    vec![
                        Series::line("entity words", density(&pick(&|a| &a.memorable)))
                            .with_color(0),
                        Series::line("function words", density(&pick(&|a| &a.function)))
                            .with_color(1),
                        Series::line("other", density(&pick(&|a| &a.other))).with_color(2),
                    ],
                    0,
                    1,
                ),
            }
        })
        .collect();
    if !panels.is_empty() {
        panels_plot(&out.join("alpha_by_class_books.png"), &panels)?;
    }
    Ok(())
}
