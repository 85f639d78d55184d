//! Training curves: was each run still learning when it stopped? A run's training loss is the
//! task's cross-entropy on its own training windows (`task_loss` in `metrics.jsonl`, without
//! the router's auxiliary terms), in bits per byte: a table by tenth of the run with the slope
//! over the last 30% of steps, and `training_curves.png`.
//!
//! The slope is what says whether a longer run would help: under the cosine schedule the rate
//! is near its floor there, so a slope still well below zero means the run stopped early.
//! At batch 1 it is noisy (which windows came last), so a run with `train.eval_every` also
//! gets its held-out curve: BPC on the validation books at each check (`val_loss`), a table
//! and a second panel.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::BooksReport;
use crate::plot::{panels_plot, Panel, Series};
use crate::train::eval::EvalResult;
use crate::train::{self, RunConfig, TrainError};

/// Parts of a run per table column group (tenths).
const PARTS: u64 = 10;
/// Parts of a run per point of the figure.
const FIGURE_PARTS: u64 = 50;
/// Most held-out checks shown as table columns (the last always among them).
const HELD_OUT_COLUMNS: usize = 10;
/// The share of the run at its end over which the late slope is fitted.
const LATE_SHARE: f64 = 0.3;

/// One run's training curve.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CurveRow {
    /// The preset's mixer name (`memory` in older files).
    #[serde(alias = "memory")]
    pub mixer: String,
    /// Training seed.
    pub seed: u64,
    /// Steps of the run.
    pub steps: u64,
    /// Per tenth of the run that has metrics lines: (its last step, mean training loss in bits
    /// per byte over its lines).
    pub tenths: Vec<(u64, f64)>,
    /// Least-squares slope of the training loss against step over the last 30% of the steps,
    /// in bits per byte per 100 steps (None with fewer than 2 lines there).
    pub late_slope: Option<f64>,
    /// Finer means for the figure: (last step of the part, bits), per fiftieth of the run.
    pub fine: Vec<(u64, f64)>,
    /// Held-out curve: (step, bits per byte on the validation books) at every validation
    /// check of the run (`train.eval_every`); empty without checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_out: Vec<(u64, f64)>,
}

/// Reads the curve of every run in `configs` (finished runs, in plan order, `results` aligned
/// with them and naming them by their `memory`) from its `metrics.jsonl` under `out_dir`; a
/// run without metrics lines gives no row.
pub(super) fn measure(
    configs: &[RunConfig],
    results: &[EvalResult],
    out_dir: &Path,
) -> Vec<CurveRow> {
    configs
        .iter()
        .zip(results)
        .filter_map(|(c, e)| {
            let dir = train::RunDir::new(out_dir.join(crate::reproduce::run_path(e.label(), c)));
            let metrics = dir.metrics();
            // (step, bits per byte) of every logged step
            let pts: Vec<(u64, f64)> = metrics
                .iter()
                .map(|m| (m.step, m.task_loss / std::f64::consts::LN_2))
                .collect();
            let held_out: Vec<(u64, f64)> = metrics
                .iter()
                .filter_map(|m| Some((m.step, m.val_loss? / std::f64::consts::LN_2)))
                .collect();
            curve(e.label(), c.seed, c.train.steps, &pts).map(|r| CurveRow { held_out, ..r })
        })
        .collect()
}

/// The curve of one run of `steps` steps from its logged (step, bits) points; None without
/// points.
pub fn curve(memory: &str, seed: u64, steps: u64, pts: &[(u64, f64)]) -> Option<CurveRow> {
    if pts.is_empty() || steps == 0 {
        return None;
    }
    let late_from = (steps as f64 * (1.0 - LATE_SHARE)).floor() as u64;
    let late: Vec<(f64, f64)> = pts
        .iter()
        .filter(|p| p.0 > late_from)
        .map(|&(s, b)| (s as f64, b))
        .collect();
    Some(CurveRow {
        mixer: memory.into(),
        seed,
        steps,
        tenths: part_means(steps, PARTS, pts),
        late_slope: slope(&late).map(|s| 100.0 * s),
        fine: part_means(steps, FIGURE_PARTS, pts),
        held_out: Vec::new(),
    })
}

/// The run cut into `parts` consecutive parts of ⌈steps / parts⌉ steps, part i holding the
/// steps in (i·w, (i+1)·w]: per part with points, (its last step, the mean of its points).
fn part_means(steps: u64, parts: u64, pts: &[(u64, f64)]) -> Vec<(u64, f64)> {
    let w = steps.div_ceil(parts).max(1);
    let mut out = Vec::new();
    let mut i = 0;
    while i * w < steps {
        let (lo, hi) = (i * w, ((i + 1) * w).min(steps));
        let v: Vec<f64> = pts
            .iter()
            .filter(|p| p.0 > lo && p.0 <= hi)
            .map(|p| p.1)
            .collect();
        if !v.is_empty() {
            out.push((hi, v.iter().sum::<f64>() / v.len() as f64));
        }
        i += 1;
    }
    out
}

/// Least-squares slope dy/dx of `pts` (None with fewer than 2 points or one x).
fn slope(pts: &[(f64, f64)]) -> Option<f64> {
    let n = pts.len() as f64;
    if pts.len() < 2 {
        return None;
    }
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The section: a row per run with its training loss at every other tenth of the run and the
/// late slope, and the figure.
pub(super) fn markdown(rep: &BooksReport) -> String {
    let Some(first) = rep.curves.first() else {
        return String::new();
    };
    let w = first.steps.div_ceil(PARTS).max(1);
    // every other tenth: the 2nd, 4th, ... (enough to see the shape, narrow enough to read)
    let shown: Vec<u64> = (1..=PARTS).filter(|k| k % 2 == 0).collect();
    let mut s = format!(
        "## Training curves\n\nWas each run still learning when it stopped? Training loss: the \
         cross-entropy on the run's own training windows (`task_loss` in `metrics.jsonl`, \
         without the router's auxiliary terms), bits per byte, mean over the logged steps of \
         each part of the run. Late slope: the least-squares slope over the last {:.0}% of the \
         steps, bits per 100 steps (negative: still falling when the run stopped, with the \
         learning rate near its floor).\n\n| memory | seed |",
        100.0 * LATE_SHARE
    );
    for k in &shown {
        s += &format!(" steps {}-{} |", (k - 1) * w + 1, (k * w).min(first.steps));
    }
    s += " late slope |\n|---|---|";
    s += &"---|".repeat(shown.len() + 1);
    s += "\n";
    for r in &rep.curves {
        s += &format!("| {} | {} |", r.mixer, r.seed);
        for k in &shown {
            let end = (k * w).min(r.steps);
            match r.tenths.iter().find(|t| t.0 == end) {
                Some(t) => s += &format!(" {:.3} |", t.1),
                None => s += " |",
            }
        }
        s += &format!(
            " {} |\n",
            r.late_slope.map_or("n/a".into(), |v| format!("{v:+.3}"))
        );
    }
    s + &held_out_markdown(&rep.curves) + "\n![training curves](training_curves.png)\n\n"
}

/// The held-out table: a row per run with checks, its validation BPC at (at most
/// [`HELD_OUT_COLUMNS`] of) the check steps of the first such run, the last included; empty
/// when no run was validated during training.
fn held_out_markdown(curves: &[CurveRow]) -> String {
    let Some(first) = curves.iter().find(|r| !r.held_out.is_empty()) else {
        return String::new();
    };
    let n = first.held_out.len();
    let every = n.div_ceil(HELD_OUT_COLUMNS).max(1);
    // every k-th check counted back from the last, so the last check is always shown
    let mut cols: Vec<u64> = (0..n)
        .rev()
        .step_by(every)
        .map(|i| first.held_out[i].0)
        .collect();
    cols.reverse();
    let mut s = String::from(
        "\nHeld-out curve: bits per byte on the validation books (never a test byte), scored \
         during training at the steps below (`val_loss` in `metrics.jsonl`, / ln 2), each \
         validation window once. Unlike the training loss it is the same bytes at every \
         check, so it shows whether a longer run would still gain.\n\n| memory | seed |",
    );
    for c in &cols {
        s += &format!(" step {c} |");
    }
    s += "\n|---|---|";
    s += &"---|".repeat(cols.len());
    s += "\n";
    for r in curves.iter().filter(|r| !r.held_out.is_empty()) {
        s += &format!("| {} | {} |", r.mixer, r.seed);
        for c in &cols {
            match r.held_out.iter().find(|p| p.0 == *c) {
                Some(p) => s += &format!(" {:.3} |", p.1),
                None => s += " |",
            }
        }
        s += "\n";
    }
    s
}

/// `training_curves.png`: every run's training loss against step (per fiftieth of the run,
/// from the second tenth on: the warm-up's losses would flatten the rest), coloured by
/// memory, seed 0 solid; nothing without curves.
pub(super) fn figure(curves: &[CurveRow], out: &Path) -> Result<(), TrainError> {
    if curves.is_empty() {
        return Ok(());
    }
    // one series per run: memory by colour, seed 0 solid
    let memories = super::Memories::new(
        curves.iter().map(|r| r.mixer.as_str()),
        &crate::reproduce::KINDS,
    );
    let series_of = |r: &CurveRow, pts: Vec<(f64, f64)>| {
        let name = format!("{} seed {}", r.mixer, r.seed);
        let color = memories.color(&r.mixer);
        let s = if r.seed == 0 {
            Series::line(name, pts)
        } else {
            Series::dashed(name, pts)
        };
        s.with_color(color)
    };
    let series = curves
        .iter()
        .map(|r| {
            let from = r.steps / PARTS;
            let pts = r
                .fine
                .iter()
                .filter(|p| p.0 > from)
                .map(|&(s, b)| (s as f64, b))
                .collect();
            series_of(r, pts)
        })
        .collect();
    let mut panels = vec![Panel {
        title: "books: training loss (task cross-entropy on the training windows), \
                mean per fiftieth of the run"
            .into(),
        x_label: "step".into(),
        y_label: "bits per byte".into(),
        log_x: false,
        log_y: false,
        series,
    }];
    let held_out: Vec<Series> = curves
        .iter()
        .filter(|r| !r.held_out.is_empty())
        .map(|r| {
            let pts = r.held_out.iter().map(|&(s, b)| (s as f64, b)).collect();
            series_of(r, pts)
        })
        .collect();
    if !held_out.is_empty() {
        panels.push(Panel {
            title: "books: held-out BPC on the validation books, at each check".into(),
            x_label: "step".into(),
            y_label: "bits per byte".into(),
            log_x: false,
            log_y: false,
            series: held_out,
        });
    }
    panels_plot(&out.join("training_curves.png"), &panels)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_hold_their_steps_and_the_slope_is_the_line_s() {
        // a line 3 - 0.002·step logged every 5 steps of 100
        let pts: Vec<(u64, f64)> = (1..=20)
            .map(|i| (5 * i, 3.0 - 0.002 * (5 * i) as f64))
            .collect();
        let c = curve("vort", 1, 100, &pts).unwrap();
        // tenths of 10 steps: (0, 10] holds the points at steps 5 and 10
        assert_eq!(c.tenths.len(), 10);
        assert_eq!(c.tenths[0].0, 10);
        let first = (pts[0].1 + pts[1].1) / 2.0;
        assert!((c.tenths[0].1 - first).abs() < 1e-12);
        // the slope over steps > 70 is the line's, per 100 steps
        assert!((c.late_slope.unwrap() + 0.2).abs() < 1e-9);
        assert!(curve("vort", 0, 100, &[]).is_none());
        // one late point: no slope
        assert!(curve("vort", 0, 100, &[(5, 1.0), (100, 2.0)])
            .unwrap()
            .late_slope
            .is_none());
    }

    #[test]
    fn the_held_out_table_shows_at_most_ten_checks_and_always_the_last() {
        let row = |memory: &str, checks: u64| CurveRow {
            held_out: (1..=checks)
                .map(|i| (10 * i, 3.0 - 0.01 * i as f64))
                .collect(),
            ..curve(memory, 0, 250, &[(1, 3.0)]).unwrap()
        };
        // no run validated: no section, so reports of such runs are unchanged
        assert_eq!(held_out_markdown(&[row("vort", 0)]), "");
        // 25 checks: every 3rd counted back from the last, steps 10..250
        let md = held_out_markdown(&[row("exponential", 0), row("vort", 25)]);
        let header = md.lines().find(|l| l.starts_with("| memory")).unwrap();
        let steps: Vec<&str> = header.split(" step ").skip(1).collect();
        assert_eq!(steps.len(), 9, "{header}");
        assert!(
            header.ends_with(" step 250 |") && header.contains(" step 10 |"),
            "{header}"
        );
        // the row of the validated run only, its last check at 3 - 0.25
        assert!(
            md.contains("| vort | 0 |") && !md.contains("| exponential |"),
            "{md}"
        );
        assert!(md.trim_end().ends_with(" 2.750 |"), "{md}");
    }
}
