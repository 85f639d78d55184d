//! `vort reproduce ruler`: RULER's offline tasks, byte-level (issue #41, item 2; the tasks are
//! [`crate::tasks::ruler`]). Every (mixer, seed) of the preset trains on the mixture of the
//! tasks at the preset's length, then each trained model is scored on each task at every
//! length of `ruler_lengths` (RULER's `string_match_all`, [`crate::train::ruler_eval`]),
//! streamed in pieces of the training length with the state carried past it. The report:
//! the softmax gate at the trained length, RULER's table (task × length) per mixer, accuracy
//! by needle depth (`ruler_depth.png`: a heat map of depth by length per mixer), the scores
//! against length (`ruler_by_length.png`), and what holds past the trained length.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::preset::{NamedRun, Preset};
use super::runner::Mode;
use crate::plot::{heat_maps, panels_plot, HeatPanel, Panel, Series};
use crate::tasks::ruler::RulerKind;
use crate::train::ruler_eval::{self, RulerScore, DEPTH_BINS};
use crate::train::{checkpoint, RunConfig, RunDir, TrainError};

/// One trained model's scores.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RulerRun {
    /// The mixer's name in the preset.
    pub mixer: String,
    /// The mixer's kind.
    pub kind: vort::MixerKind,
    /// Run seed.
    pub seed: u64,
    /// The length it trained at (bytes).
    pub train_len: usize,
    /// Every (task, length) score.
    pub scores: Vec<RulerScore>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RulerReport {
    /// The preset.
    pub preset: Preset,
    /// Every finished run.
    pub runs: Vec<RulerRun>,
    /// Runs not finished (report-only).
    pub pending: Vec<String>,
    /// Wall time of this call (s).
    pub wall_s: f64,
}

/// The RULER tasks a run trained on (its mixture).
fn tasks_of(c: &RunConfig) -> Vec<RulerKind> {
    match &c.task.spec {
        crate::tasks::TaskSpec::Ruler(r) => r.tasks.clone(),
        _ => Vec::new(),
    }
}

/// The score of the model in `dir` on `task` at `len` bytes, from its cache or computed.
fn scored(
    dir: &RunDir,
    c: &RunConfig,
    task: RulerKind,
    len: usize,
    samples: usize,
) -> Result<RulerScore, TrainError> {
    let cache = dir.ruler_path(task.name(), len);
    if let Some(s) = std::fs::read_to_string(&cache)
        .ok()
        .and_then(|t| serde_json::from_str::<RulerScore>(&t).ok())
        .filter(|s| s.samples == samples)
    {
        return Ok(s);
    }
    let cx = super::recall::at_length(c, len);
    let (model, _vm) = crate::train::eval::load_params_as(dir.path(), &cx)?;
    let piece = (len > c.task.seq_len).then_some(c.task.seq_len);
    let device = crate::train::device();
    let s = ruler_eval::score(&model, &cx, (task, len, samples), piece, &device)?;
    checkpoint::write_json(&cache, &s)?;
    Ok(s)
}

/// Trains (or reuses) the preset's runs, scores each finished one, and writes the report;
/// returns how many runs it reports.
///
/// # Errors
/// A run that cannot be trained, loaded or scored; the report cannot be written.
pub fn run(preset: &Preset, out: &Path, mode: Mode) -> Result<usize, TrainError> {
    let start = std::time::Instant::now();
    if preset.ruler_lengths.is_empty() || preset.ruler_samples == 0 {
        return Err(TrainError::Flag(
            "a RULER preset names ruler_lengths (bytes) and ruler_samples (per task and length)"
                .into(),
        ));
    }
    let named: Vec<NamedRun> = preset.named_runs()?;
    let trained = super::train_named(&named, out, mode)?;
    let mut runs = Vec::new();
    for (c, &i) in trained.configs.iter().zip(&trained.finished) {
        let dir = RunDir::new(out.join(super::run_path(&named[i].name, c)));
        let mut scores = Vec::new();
        for &len in &preset.ruler_lengths {
            for task in tasks_of(c) {
                let s = scored(&dir, c, task, len, preset.ruler_samples)?;
                eprintln!(
                    "{} seed {}: {} at {len} bytes: {:.1}% ({}/{} items)",
                    named[i].name,
                    c.seed,
                    task.name(),
                    s.score,
                    s.found,
                    s.items
                );
                scores.push(s);
            }
        }
        runs.push(RulerRun {
            mixer: named[i].name.clone(),
            kind: c.model.mixer.kind(),
            seed: c.seed,
            train_len: c.task.seq_len,
            scores,
        });
    }
    let rep = RulerReport {
        preset: preset.clone(),
        runs,
        pending: trained.pending,
        wall_s: start.elapsed().as_secs_f64(),
    };
    figure(&rep, &out.join("ruler_by_length.png"))?;
    depth_figure(&rep, &out.join("ruler_depth.png"))?;
    super::runner::write_report(out, &rep, &markdown(&rep))?;
    Ok(rep.runs.len())
}

/// The mixers of the report, in preset order.
fn mixers(rep: &RulerReport) -> Vec<&str> {
    let mut m: Vec<&str> = Vec::new();
    for r in &rep.runs {
        if !m.contains(&r.mixer.as_str()) {
            m.push(&r.mixer);
        }
    }
    m
}

/// Every seed's score of `mixer` on `task` (None: all tasks, their mean) at `len`:
/// (per-seed scores, items found, items).
fn cell(
    rep: &RulerReport,
    mixer: &str,
    task: Option<RulerKind>,
    len: usize,
) -> (Vec<f64>, usize, usize) {
    let mut per_seed = Vec::new();
    let (mut found, mut items) = (0, 0);
    for r in rep.runs.iter().filter(|r| r.mixer == mixer) {
        let s: Vec<&RulerScore> = r
            .scores
            .iter()
            .filter(|s| s.seq_len == len && task.is_none_or(|t| s.task == t))
            .collect();
        if s.is_empty() {
            continue;
        }
        per_seed.push(s.iter().map(|x| x.score).sum::<f64>() / s.len() as f64);
        found += s.iter().map(|x| x.found).sum::<usize>();
        items += s.iter().map(|x| x.items).sum::<usize>();
    }
    (per_seed, found, items)
}

fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len().max(1) as f64
}

/// "87.5 ± 2.1 (35/40)": mean over seeds ± sample sd, items found / items pooled.
fn cell_text((per_seed, found, items): (Vec<f64>, usize, usize)) -> String {
    if per_seed.is_empty() {
        return "-".into();
    }
    let (m, sd) = crate::reproduce::mean_sd(&per_seed);
    let sd = if per_seed.len() > 1 {
        format!(" ± {sd:.1}")
    } else {
        String::new()
    };
    format!("{m:.1}{sd} ({found}/{items})")
}

fn markdown(rep: &RulerReport) -> String {
    let p = &rep.preset;
    let train_len = rep.runs.first().map_or(0, |r| r.train_len);
    let lens = &p.ruler_lengths;
    let mut s = format!(
        "# RULER's offline tasks, byte-level ({})\n\nGenerated by `vort reproduce ruler`. {}\n\n\
         Every model trains on the mixture of niah_single_1, niah_multikey_2, niah_multikey_3, \
         vt and fwe (RULER's templates and haystacks, byte-level: one byte a token; \
         `crates/vort-lab/src/tasks/ruler.rs` says what differs from RULER) at {train_len} \
         bytes, then is scored on each task at every length, {} samples each, streamed in \
         pieces of {train_len} bytes with the state carried past it (softmax: a window of \
         {train_len}). The metric is RULER's string_match_all, %: per sample, the share of \
         its answer items whose every byte is the model's most likely next byte (what greedy \
         decoding writes), averaged over samples; ± is the sd over seeds, (found/items) pools \
         the seeds. Lengths marked * are past the trained length.\n\n",
        p.name, p.description, p.ruler_samples
    );
    s += &gate(rep, train_len);
    if !rep.pending.is_empty() {
        s += &format!(
            "**Partial report** (`--report-only`): not finished: {}.\n\n",
            rep.pending.join("; ")
        );
    }
    let head: Vec<String> = lens
        .iter()
        .map(|&l| format!("{l}{}", if l > train_len { "*" } else { "" }))
        .collect();
    s += &format!(
        "## RULER's table\n\n| mixer | task | {} |\n|---|---|{}\n",
        head.join(" | "),
        "---|".repeat(lens.len())
    );
    for m in mixers(rep) {
        for task in RulerKind::ALL.map(Some).into_iter().chain([None]) {
            let cells: Vec<String> = lens
                .iter()
                .map(|&l| cell_text(cell(rep, m, task, l)))
                .collect();
            if cells.iter().all(|c| c == "-") {
                continue;
            }
            let name = task.map_or("**average**", RulerKind::name);
            s += &format!("| {m} | {name} | {} |\n", cells.join(" | "));
        }
    }
    s += "\n";
    s += &depth_table(rep);
    s += &past_training(rep, train_len);
    s += &format!(
        "Plot: `ruler_by_length.png`. Wall time of this call: {:.0} s. Every run's config, \
         metrics, evaluation and cached scores (`ruler-<task>-L<len>.json`): `runs/`.\n",
        rep.wall_s
    );
    s
}

/// The sanity gate: softmax attention's average at the trained length or below.
fn gate(rep: &RulerReport, train_len: usize) -> String {
    let soft: Vec<f64> = rep
        .preset
        .ruler_lengths
        .iter()
        .filter(|&&l| l <= train_len)
        .flat_map(|&l| cell(rep, "softmax", None, l).0)
        .collect();
    if soft.is_empty() {
        return "**Gate**: no softmax run scored at the trained length or below.\n\n".into();
    }
    let m = mean(&soft);
    format!(
        "**Gate** (softmax attention >= 90% on average over the tasks at lengths <= {train_len}): \
         {} ({m:.1}%).{}\n\n",
        if m >= 90.0 { "passed" } else { "FAILED" },
        if m >= 90.0 {
            ""
        } else {
            " The setting does not yet separate memories: read the table as a finding about it."
        }
    )
}

/// Score by tenth of needle depth, the niah tasks and vt pooled, seeds pooled.
fn depth_table(rep: &RulerReport) -> String {
    let lens = &rep.preset.ruler_lengths;
    let mut s = format!(
        "## By needle depth\n\nstring_match_all %, niah tasks and vt pooled over seeds, by \
         where the (first) needle sits in the context (0 = start):\n\n| mixer | length | {} |\n\
         |---|---|{}\n",
        (0..DEPTH_BINS)
            .map(|d| format!("{}-{}%", 10 * d, 10 * (d + 1)))
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(DEPTH_BINS)
    );
    for m in mixers(rep) {
        for &len in lens {
            let cells: Vec<String> = depth_bins(rep, m, len)
                .iter()
                .map(|&(k, score)| {
                    if k == 0 {
                        "-".into()
                    } else {
                        format!("{score:.0} ({k})")
                    }
                })
                .collect();
            s += &format!("| {m} | {len} | {} |\n", cells.join(" | "));
        }
    }
    s + "Heat map: `ruler_depth.png` (one panel per mixer).\n\n"
}

/// (samples, mean score %) by depth tenth of `mixer` at `len`, its tasks with a needle and
/// its seeds pooled.
fn depth_bins(rep: &RulerReport, mixer: &str, len: usize) -> [(usize, f64); DEPTH_BINS] {
    let mut bins = [(0usize, 0.0f64); DEPTH_BINS];
    for r in rep.runs.iter().filter(|r| r.mixer == mixer) {
        for x in r.scores.iter().filter(|x| x.seq_len == len) {
            for (b, &(k, score)) in bins.iter_mut().zip(&x.by_depth) {
                b.0 += k;
                b.1 += score * k as f64;
            }
        }
    }
    bins.map(|(k, sum)| (k, if k == 0 { 0.0 } else { sum / k as f64 }))
}

/// `ruler_depth.png`: per mixer, the score by needle depth (rows) and length (columns).
fn depth_figure(rep: &RulerReport, path: &Path) -> Result<(), TrainError> {
    let lens = &rep.preset.ruler_lengths;
    let panels: Vec<HeatPanel> = mixers(rep)
        .into_iter()
        .map(|m| {
            let grid: Vec<[(usize, f64); DEPTH_BINS]> =
                lens.iter().map(|&l| depth_bins(rep, m, l)).collect();
            HeatPanel {
                title: format!("{m}: string_match_all % by needle depth and length"),
                columns: (
                    "length (bytes)".into(),
                    lens.iter().map(|l| l.to_string()).collect(),
                ),
                rows: (
                    "needle depth".into(),
                    (0..DEPTH_BINS)
                        .map(|d| format!("{}-{}%", 10 * d, 10 * (d + 1)))
                        .collect(),
                ),
                values: (0..DEPTH_BINS)
                    .map(|d| {
                        grid.iter()
                            .map(|g| if g[d].0 == 0 { f64::NAN } else { g[d].1 })
                            .collect()
                    })
                    .collect(),
                range: (0.0, 100.0),
            }
        })
        .collect();
    if !panels.is_empty() {
        heat_maps(path, &panels)?;
    }
    Ok(())
}

/// What holds past the trained length: each mixer's average at its longest length against the
/// trained length.
fn past_training(rep: &RulerReport, train_len: usize) -> String {
    let Some(&longest) = rep.preset.ruler_lengths.iter().max() else {
        return String::new();
    };
    if longest <= train_len {
        return String::new();
    }
    let mut s = "## Past the trained length\n\n".to_string();
    for m in mixers(rep) {
        let at = |l: usize| mean(&cell(rep, m, None, l).0);
        s += &format!(
            "- {m}: {:.1}% at {train_len} bytes (trained), {:.1}% at {longest} bytes.\n",
            at(train_len),
            at(longest)
        );
    }
    s + "\n"
}

/// `ruler_by_length.png`: one panel per task and one for the average, score against length
/// (log), a line per mixer (mean over seeds).
fn figure(rep: &RulerReport, path: &Path) -> Result<(), TrainError> {
    if rep.runs.is_empty() {
        return Ok(());
    }
    let names = mixers(rep);
    let panels: Vec<Panel> = RulerKind::ALL
        .map(Some)
        .into_iter()
        .chain([None])
        .map(|task| Panel {
            title: task.map_or("average", RulerKind::name).into(),
            x_label: "length (bytes)".into(),
            y_label: "string_match_all %".into(),
            log_x: true,
            log_y: false,
            series: names
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let pts = rep
                        .preset
                        .ruler_lengths
                        .iter()
                        .filter_map(|&l| {
                            let (x, _, _) = cell(rep, m, task, l);
                            (!x.is_empty()).then(|| (l as f64, mean(&x)))
                        })
                        .collect();
                    Series::line(m.to_string(), pts).with_color(i)
                })
                .collect(),
        })
        .collect();
    panels_plot(path, &panels)?;
    Ok(())
}
