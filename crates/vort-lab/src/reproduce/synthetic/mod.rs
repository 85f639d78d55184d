//! `reproduce synthetic`: trains the mixers of the preset `configs/synthetic/<scale>.toml`
//! (softmax attention at the full scale only) on both synthetic tasks with several seeds and
//! writes a report beside the paper's numbers (docs/DESIGN.md §3).
//!
//! Output directory: `report.md` (tables: paper's number beside ours, mean ± sample standard
//! deviation over seeds, accuracy by lag bucket, throughput), `results.json` (every run's
//! evaluation without the raw α samples, plus the aggregate rows), `acc_vs_lag_<task>.png`,
//! `alpha_hist_<task>.png` (learned α of the VORT models, all layers, heads and tokens
//! sampled) and `alpha_by_class_<task>.png` (memorable vs other tokens), and `runs/` with
//! each run's directory (config, metrics, checkpoint, eval).
//!
//! Re-running with the same output directory reuses finished runs (their eval.json) and
//! resumes interrupted ones from their checkpoints, so a killed reproduce loses at most one
//! checkpoint interval.
//!
//! The report has one section per task, cut by claim: the lag claim (`lags.rs`: accuracy by
//! lag bucket, the verdicts, `acc_vs_lag_<task>.png`) and the learned orders (`alpha.rs`).

mod alpha;
mod lags;

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::preset::NamedRun;
use super::preset::Preset;
use super::runner::{self, DivergedRun};
use super::{mean_sd, train_named, Scale};
use crate::tasks::{TaskKind, BUCKETS};
use crate::train::eval::EvalResult;
use crate::train::{self, RunConfig, TrainError};
use vort::Mixer;

/// The paper's accuracy at lags > 1000 for a task and mixer (percent; [`super::paper`]).
pub fn paper_number(task: TaskKind, memory: &str) -> Option<f64> {
    super::paper::number(super::paper::Claim::of_task(task)?, memory)
}

/// Every run of a reproduction.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Name shown in the report ("quick", "full", ...).
    pub label: String,
    /// The run configs (task, memory and seed distinguish them).
    pub runs: Vec<RunConfig>,
}

/// The run config of (task, mixer, seed) in the synthetic preset of `scale`
/// (`configs/synthetic/<scale>.toml`).
///
/// # Errors
/// A task or mixer no preset has.
pub fn preset(
    scale: Scale,
    task: TaskKind,
    mixer: &str,
    seed: u64,
) -> Result<RunConfig, TrainError> {
    let p = Preset::embedded("synthetic", scale.name())?;
    let unknown = |what: String| TrainError::Config {
        path: format!("configs/synthetic/{}.toml", scale.name()),
        message: what,
    };
    let cell = p
        .cells
        .iter()
        .find(|c| c.name == task.name())
        .ok_or_else(|| unknown(format!("no task {task}")))?;
    let m = p
        .mixers
        .iter()
        .find(|m| m.name == mixer)
        .ok_or_else(|| unknown(format!("no mixer {mixer:?}")))?;
    p.run_config(cell, m, p.lrs_of(cell, m)[0], seed)
}

impl Plan {
    /// The runs, each named by its mixer's kind (their run directories
    /// `runs/<task>/<kind>/seed<k>` and report rows).
    pub fn named(&self) -> Vec<NamedRun> {
        self.runs.iter().cloned().map(NamedRun::by_kind).collect()
    }

    /// Every run of the synthetic preset of `scale`: both tasks × its mixers × its seeds
    /// (softmax at the full scale only: its O(T²) training does not fit the smaller budgets).
    ///
    /// # Errors
    /// None for the shipped presets (their tests read them).
    pub fn for_scale(scale: Scale) -> Result<Plan, TrainError> {
        let p = Preset::embedded("synthetic", scale.name())?;
        Ok(Plan {
            label: scale.name().into(),
            runs: p.unswept_runs()?,
        })
    }
}

/// One aggregate row: a task and memory kind over seeds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// Task.
    pub task: TaskKind,
    /// The mixer's kind (`memory` in older files).
    #[serde(alias = "memory")]
    pub mixer: String,
    /// Seeds aggregated.
    pub seeds: Vec<u64>,
    /// Paper's accuracy at lags > 1000 (%), if it reports one.
    pub paper_long: Option<f64>,
    /// Per bucket (label, mean %, sample sd %).
    pub buckets: Vec<(String, f64, f64)>,
    /// Mean overall accuracy (%).
    pub overall: f64,
    /// Mean training throughput (tokens/s).
    pub tokens_per_s: f64,
    /// Mean α on memorable / other tokens (VORT only).
    pub alpha_means: Option<(f64, f64)>,
}

/// What [`run`] returns (and writes as results.json).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Plan label.
    pub label: String,
    /// Aggregate rows.
    pub rows: Vec<Row>,
    /// Every run's evaluation (α samples stripped).
    pub runs: Vec<EvalResult>,
    /// Every run's throughput (tokens/s), aligned with `runs`.
    pub tokens_per_s: Vec<f64>,
    /// Runs reused from an earlier call (finished, same config) rather than trained.
    #[serde(default)]
    pub reused: usize,
    /// Training seconds summed over the runs (from their metrics, whichever call trained them).
    #[serde(default)]
    pub train_s: f64,
    /// Runs that diverged (left out of the rows and figures).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diverged: Vec<DivergedRun>,
    /// Runs not finished, left out (`--report-only`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
    /// Wall time of this call (s).
    pub wall_s: f64,
}

/// Runs the reproduction of `scale` into `out_dir` (see the module doc).
///
/// # Errors
/// Training errors of any run (a mismatched or corrupt checkpoint in `out_dir/runs` stops it
/// without overwriting), plot and I/O errors.
pub fn run(scale: Scale, out_dir: &Path) -> Result<Report, TrainError> {
    run_plan(&Plan::for_scale(scale)?, out_dir, runner::Mode::train(true))
}

/// Runs `plan` into `out_dir`.
///
/// # Errors
/// As [`run`].
pub fn run_plan(plan: &Plan, out_dir: &Path, mode: runner::Mode) -> Result<Report, TrainError> {
    let t0 = std::time::Instant::now();
    std::fs::create_dir_all(out_dir).map_err(|e| train::checkpoint::io(out_dir, e))?;
    let trained = train_named(&plan.named(), out_dir, mode)?;
    let (results, tps) = (trained.results, trained.tokens_per_s);
    let rows = rows(&results, &tps);
    let chance = plan
        .runs
        .first()
        .and_then(|c| c.task.planted())
        .map_or(f64::NAN, |p| 100.0 / p.n_values as f64);
    for task in TaskKind::SYNTHETIC {
        let of_task: Vec<&EvalResult> = results.iter().filter(|r| r.task == task).collect();
        if of_task.is_empty() {
            continue;
        }
        lags::figure(task, &of_task, chance, out_dir)?;
        alpha::figures(task, &of_task, out_dir)?;
    }
    let stripped: Vec<EvalResult> = results
        .into_iter()
        .map(EvalResult::without_alpha_samples)
        .collect();
    let report = Report {
        label: plan.label.clone(),
        rows,
        runs: stripped,
        tokens_per_s: tps,
        reused: trained.reused,
        train_s: trained.train_s.iter().sum(),
        diverged: trained.diverged,
        pending: trained.pending,
        wall_s: t0.elapsed().as_secs_f64(),
    };
    runner::write_report(out_dir, &report, &markdown(&report, plan))?;
    Ok(report)
}

/// One aggregate row per (task, memory kind) that has runs: mean ± sd over seeds by lag
/// bucket, overall, throughput, and VORT's α means.
fn rows(results: &[EvalResult], tps: &[f64]) -> Vec<Row> {
    let mut rows = Vec::new();
    for task in TaskKind::SYNTHETIC {
        for memory in crate::reproduce::KINDS {
            let idx: Vec<usize> = (0..results.len())
                .filter(|&i| results[i].task == task && results[i].label() == memory)
                .collect();
            if idx.is_empty() {
                continue;
            }
            let buckets = (0..BUCKETS.len())
                .map(|b| {
                    let v: Vec<f64> = idx
                        .iter()
                        .map(|&i| 100.0 * results[i].buckets[b].accuracy)
                        .collect();
                    let (m, sd) = mean_sd(&v);
                    (BUCKETS[b].0.to_string(), m, sd)
                })
                .collect();
            let overall = mean_sd(
                &idx.iter()
                    .map(|&i| 100.0 * results[i].accuracy)
                    .collect::<Vec<_>>(),
            )
            .0;
            let alphas: Vec<(f64, f64)> = idx
                .iter()
                .filter_map(|&i| results[i].alpha.as_ref())
                .map(|a| (a.mean_memorable, a.mean_other))
                .collect();
            rows.push(Row {
                task,
                mixer: memory.to_string(),
                seeds: idx.iter().map(|&i| results[i].seed).collect(),
                paper_long: paper_number(task, memory),
                buckets,
                overall,
                tokens_per_s: mean_sd(&idx.iter().map(|&i| tps[i]).collect::<Vec<_>>()).0,
                alpha_means: if alphas.is_empty() {
                    None
                } else {
                    let n = alphas.len() as f64;
                    Some((
                        alphas.iter().map(|a| a.0).sum::<f64>() / n,
                        alphas.iter().map(|a| a.1).sum::<f64>() / n,
                    ))
                },
            });
        }
    }
    rows
}

/// The report: what was run and in which setting, then a section per task (the lag claim and
/// the learned orders), then how to read it.
fn markdown(rep: &Report, plan: &Plan) -> String {
    let mut s = intro(rep, plan);
    for task in TaskKind::SYNTHETIC {
        let rows: Vec<&Row> = rep.rows.iter().filter(|r| r.task == task).collect();
        if rows.is_empty() {
            continue;
        }
        let chance = plan
            .runs
            .iter()
            .find(|c| c.task.kind() == task)
            .and_then(|c| c.task.planted())
            .map_or(f64::NAN, |p| 1.0 / p.n_values as f64);
        s.push_str(&format!("## {}\n\n", task.name()));
        s.push_str(&lags::markdown(rep, task, &rows, chance));
        s.push_str(&alpha::markdown(rep, task));
        s.push_str(&format!(
            "![accuracy against lag](acc_vs_lag_{0}.png)\n\n![α histogram](alpha_hist_{0}.png)\n\n![α by class](alpha_by_class_{0}.png)\n\n",
            task.name()
        ));
    }
    s.push_str(
        "Reading: a result that does not match the paper is reported as measured; the quick \
         scale trains tiny models for a few minutes each, so absolute accuracies are far below \
         the paper's and only the ordering across lag buckets and memory kinds is informative.\n",
    );
    s
}

/// The title, what was run (and what not), and the setting.
fn intro(rep: &Report, plan: &Plan) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "# VORT synthetic experiments: `{}` reproduction\n\n",
        rep.label
    ));
    s.push_str(&format!(
        "{} runs ({} reused from an earlier call), wall time of this call {:.0} s, training \
         time summed over the runs {:.0} s. Accuracy in percent on held-out sequences. The \
         paper's numbers are at lags > 1000 (docs/DESIGN.md §3); \
         its \"power law\" row is shown beside both VORT (routed orders) and the fixed-order \
         power law, since it does not separate them.\n\n",
        plan.runs.len(),
        rep.reused,
        rep.wall_s,
        rep.train_s
    ));
    s += &runner::pending_markdown(&rep.pending);
    s += &runner::diverged_markdown(&rep.diverged);
    let kinds: Vec<String> = crate::reproduce::KINDS
        .iter()
        .filter(|k| !plan.runs.iter().any(|r| r.model.mixer.kind().name() == **k))
        .map(|k| k.to_string())
        .collect();
    if !kinds.is_empty() {
        s.push_str(&format!(
            "Not run in this plan: {} (softmax attention trains at 2-3.5k tokens/s at T = 2048 \
             on 2 cores, 6-20 minutes per run at these scales; the full scale includes it).\n\n",
            kinds.join(", ")
        ));
    }
    if let Some(c) = plan.runs.first() {
        let p = c.task.planted().cloned().unwrap_or_default();
        s.push_str(&format!(
            "Setting: T = {}, L_max = {}, {} queries per sequence, {} values (chance {:.1}%), \
             model d_model = {}, {} layer(s), {} heads × {}, {} features, {} steps × {} \
             sequences. VORT's router: orders on [δ = {}, 1], entity probe trained on the \
             task's memorable tokens (key and value, entity and label) with weight {}, bigram \
             entropy in units of ln V. Full configs: \
             `runs/<task>/<memory>/seed<k>/config.toml`.\n\n",
            c.task.seq_len,
            p.max_lag,
            p.queries,
            p.n_values,
            100.0 / p.n_values as f64,
            c.model.d_model,
            c.model.layers,
            c.model.heads,
            c.model.head_dim,
            c.model.features,
            c.train.steps,
            c.train.batch_size,
            match &c.model.mixer {
                Mixer::Vort { nodes, .. } => nodes.delta,
                _ => 0.1,
            },
            c.train.entity_aux_weight
        ));
    }
    s
}
