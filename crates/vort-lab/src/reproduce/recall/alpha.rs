//! The orders α of the routed VORT runs (any routing whose α varies: full, entity-only,
//! entropy-only, learned, oracle): by token role, with the router's inputs measured from the
//! weights where a run kept them ([`crate::reproduce::router`]; `alpha_by_role.png`), and the
//! pair tokens against the rest over every cell (`alpha_hist.png`, `alpha_hist_other.png`).

use std::path::Path;

use super::{CellResult, RecallReport, RunResult};
use crate::plot::histogram;
use crate::reproduce::router;
use crate::reproduce::runner::run_path;
use crate::tasks::TaskKind;
use crate::train::eval::AlphaSample;
use crate::train::{RunDir, TrainError};
use vort::Routing;

/// The α section: the mean α of each role of every routed run (every seed at the chosen
/// rate; test set), the router's inputs of those that kept their weights, whether α
/// separates the roles and which input failed, and the histograms; nothing without routed
/// runs.
pub(super) fn section(rep: &RecallReport, out: &Path) -> Result<String, TrainError> {
    histograms(rep, out)?;
    let routed = routed(rep)?;
    if routed.is_empty() {
        return Ok(String::new());
    }
    let runs = router::routed_runs(
        routed
            .iter()
            .map(|(c, r, routing)| router::RunToMeasure {
                name: format!("{} {}", c.cell, c.mixer),
                seed: r.seed,
                routing: *routing,
                dir: RunDir::new(out.join(run_path(&c.cell, &c.mixer, Some(r.lr), r.seed))),
                means: means(r.alpha.as_ref(), rep.task_kind()),
            })
            .collect(),
        false,
    );
    let by_role = router::figure(&runs, &out.join("alpha_by_role.png"))?;
    let mut s = role_table(rep, &routed, &runs);
    s.push_str(&router::markdown(&runs));
    s.push_str(&format!(
        "Histograms: {}`alpha_hist.png` (pair tokens of every VORT run), \
         `alpha_hist_other.png` (the rest).\n\n",
        if by_role {
            "`alpha_by_role.png` (α by role, one panel per run whose router inputs were \
             measured), "
        } else {
            ""
        }
    ));
    Ok(s)
}

/// The table of mean α by role of every routed run, with the roles of the report's task
/// (MQAR: key, value, query, filler; label copy: entity, label, query, filler).
fn role_table(
    rep: &RecallReport,
    routed: &[(&CellResult, &RunResult, Routing)],
    runs: &[router::RoutedRun],
) -> String {
    let kind = rep.task_kind();
    let roles: Vec<&str> = router::roles(kind).iter().map(|&(n, _)| n).collect();
    let (memorable, rest_words) = match kind {
        TaskKind::LabelCopy => (
            "entity, label",
            "the entities and their labels where they are introduced, the query is the entity \
             where it reappears, the filler is everything else (the label echoed after its \
             query included). The paper's learned orders: entities ≈ 0.80, function tokens \
             ≈ 0.35 (here the nearest are the entity and filler columns)",
        ),
        _ => (
            "pairs (key, value)",
            "the pairs' keys and values, the query is the repeated key, the filler is \
             everything else",
        ),
    };
    let mut s = format!(
        "## Orders α by role (routed VORT runs, test set, mean over layers and heads)\n\n\
         The paper's router gives what must be remembered a high α (slow power-law decay) \
         and the rest a low one. Here the memorable tokens are {rest_words}. Every seed of \
         every routed (cell, mixer) at its chosen rate; the means come from each run's \
         evaluation.\n\n\
         | cell | mixer | routing | seed | {} | {memorable} | the rest | router inputs |\n\
         |---|---|---|---|{}---|---|---|\n",
        roles.join(" | "),
        "---|".repeat(roles.len()),
    );
    for ((c, r, routing), run) in routed.iter().zip(runs) {
        let role = |name: &str| {
            r.alpha
                .as_ref()
                .and_then(|a| a.mean_by_role.iter().find(|(n, _)| n == name))
                .map_or("-".to_string(), |(_, x)| format!("{x:.3}"))
        };
        let (pairs, rest) = r.alpha.as_ref().map_or(("-".into(), "-".into()), |a| {
            (
                format!("{:.3}", a.mean_memorable),
                format!("{:.3}", a.mean_other),
            )
        });
        let by_role: Vec<String> = roles.iter().map(|n| role(n)).collect();
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {pairs} | {rest} | {} |\n",
            c.cell,
            c.mixer,
            router::routing_label(*routing),
            r.seed,
            by_role.join(" | "),
            match &run.diagnosis {
                router::Diagnosis::Measured(_) => "measured (`router.json`)".to_string(),
                router::Diagnosis::Unavailable(why) => why.clone(),
            }
        ));
    }
    s.push('\n');
    s
}

/// Every routed run of the report (the chosen rate's seeds of every (cell, mixer) whose
/// VORT routing varies α; diverged seeds left out), with its routing.
fn routed(rep: &RecallReport) -> Result<Vec<(&CellResult, &RunResult, Routing)>, TrainError> {
    let mut v = Vec::new();
    for c in &rep.cells {
        let spec = rep.preset.cells.iter().find(|s| s.name == c.cell);
        let mixer = spec.and_then(|s| rep.preset.mixers_of(s).find(|m| m.name == c.mixer));
        let (Some(spec), Some(mixer)) = (spec, mixer) else {
            continue;
        };
        for r in c.seeds.iter().filter(|r| r.diverged_at.is_none()) {
            let cfg = rep.preset.run_config(spec, mixer, r.lr, r.seed)?;
            if let Some(routing) = router::varying(&cfg.model.mixer) {
                v.push((c, r, routing));
            }
        }
    }
    Ok(v)
}

/// The evaluation's mean α by role of `kind`'s tokens ((role, memorable, mean)).
fn means(a: Option<&AlphaSample>, kind: TaskKind) -> Vec<(String, bool, f64)> {
    let memorable: Vec<(&str, bool)> = router::roles(kind);
    a.map_or(Vec::new(), |a| {
        a.mean_by_role
            .iter()
            .map(|(n, x)| {
                let m = memorable.iter().any(|(r, mem)| r == n && *mem);
                (n.clone(), m, *x)
            })
            .collect()
    })
}

/// `alpha_hist.png` and `alpha_hist_other.png`: the learned α of every seed of every cell
/// whose model routes orders, on the key-value pair tokens and on the rest.
fn histograms(rep: &RecallReport, out: &Path) -> Result<(), TrainError> {
    let mut pair = Vec::new();
    let mut rest = Vec::new();
    for c in &rep.cells {
        for r in &c.seeds {
            if let Some(a) = &r.alpha {
                pair.extend(a.memorable.iter().map(|&x| f64::from(x)));
                rest.extend(a.other.iter().map(|&x| f64::from(x)));
            }
        }
    }
    if !pair.is_empty() {
        histogram(
            &out.join("alpha_hist.png"),
            "VORT: learned orders α (all cells, layers, heads), key-value pair tokens",
            "α",
            &pair,
            40,
        )?;
    }
    if !rest.is_empty() {
        histogram(
            &out.join("alpha_hist_other.png"),
            "VORT: learned orders α (all cells, layers, heads), queries and filler",
            "α",
            &rest,
            40,
        )?;
    }
    Ok(())
}
