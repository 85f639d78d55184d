//! Zoology's grid: test accuracy in (L, K) cells against model width (`acc_vs_width.png`) and
//! against the recurrent state size (`acc_vs_state.png`).

use std::path::Path;

use super::{cell_table, mixer_names, rows_of, CellResult, RecallReport, Section};
use crate::plot::{panels_plot, Panel, Series};
use crate::train::TrainError;

/// Zoology's published MQAR points (read off its figures): (model, state floats, accuracy).
pub const ZOOLOGY_POINTS: [(&str, f64, f64); 5] = [
    ("Based (Zoology)", 2.5e4, 0.84),
    ("Based (Zoology)", 1.5e5, 0.99),
    ("GLA (Zoology)", 7.0e4, 0.95),
    ("Mamba-2 (Zoology)", 6.0e4, 0.83),
    ("Mamba-2 (Zoology)", 1.0e5, 0.83),
];

/// The grid section: its table, and the accuracy against width and against state size of
/// every cell outside the lags section (the gate cell is a point of the grid too), one panel
/// per (L, K).
pub(super) fn section(rep: &RecallReport, out: &Path) -> Result<String, TrainError> {
    let cells = grid_cells(rep);
    acc_vs_width(rep, &cells, out)?;
    acc_vs_state(rep, &cells, out)?;
    Ok(cell_table(
        "## Zoology's grid\n\n",
        &rows_of(rep, Section::Grid),
    ))
}

/// The (L, K) of every cell outside the lags section, in order, once each.
fn grid_cells(rep: &RecallReport) -> Vec<(usize, usize)> {
    let mut cells: Vec<(usize, usize)> = rep
        .cells
        .iter()
        .filter(|c| c.section != Section::Lags)
        .map(|c| (c.seq_len, c.num_kv_pairs))
        .collect();
    cells.sort_unstable();
    cells.dedup();
    cells
}

/// (x(cell), mean test accuracy) of `mixer` in every non-lag cell at (L, K) = `lk`.
fn grid_points(
    rep: &RecallReport,
    mixer: &str,
    lk: (usize, usize),
    x: impl Fn(&CellResult) -> f64,
) -> Vec<(f64, f64)> {
    rep.cells
        .iter()
        .filter(|c| {
            c.section != Section::Lags && c.mixer == mixer && (c.seq_len, c.num_kv_pairs) == lk
        })
        .map(|c| (x(c), c.mean_sd().0))
        .collect()
}

/// `acc_vs_width.png`: accuracy against d_model, one panel per (L, K), a line per mixer.
fn acc_vs_width(rep: &RecallReport, grid: &[(usize, usize)], out: &Path) -> Result<(), TrainError> {
    let names = mixer_names(rep);
    let mut panels = Vec::new();
    for &(l, k) in grid {
        let mut series = Vec::new();
        for (ci, name) in names.iter().enumerate() {
            let mut pts = grid_points(rep, name, (l, k), |c| c.d_model as f64);
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !pts.is_empty() {
                series.push(Series::line(name.clone(), pts).with_color(ci));
            }
        }
        panels.push(Panel {
            title: format!("MQAR L = {l}, K = {k}: test accuracy (mean over seeds)"),
            x_label: "d_model".into(),
            y_label: "accuracy".into(),
            log_x: true,
            log_y: false,
            series,
        });
    }
    if !panels.is_empty() {
        panels_plot(&out.join("acc_vs_width.png"), &panels)?;
    }
    Ok(())
}

/// `acc_vs_state.png`: accuracy against the recurrent state size, one panel per (L, K), a
/// marker per mixer and width, and Zoology's published points (from its figures, the same on
/// every panel).
fn acc_vs_state(rep: &RecallReport, grid: &[(usize, usize)], out: &Path) -> Result<(), TrainError> {
    let names = mixer_names(rep);
    let mut panels = Vec::new();
    for &(l, k) in grid {
        let mut series = Vec::new();
        for (ci, name) in names.iter().enumerate() {
            let pts = grid_points(rep, name, (l, k), |c| c.state_floats as f64);
            if !pts.is_empty() {
                series.push(Series::points(name.clone(), pts).with_color(ci));
            }
        }
        for (i, label) in ["Based (Zoology)", "GLA (Zoology)", "Mamba-2 (Zoology)"]
            .iter()
            .enumerate()
        {
            let pts: Vec<(f64, f64)> = ZOOLOGY_POINTS
                .iter()
                .filter(|p| p.0 == *label)
                .map(|p| (p.1, p.2))
                .collect();
            // markers: a single published point (GLA) would not show as a line
            series.push(Series::points(*label, pts).with_color(names.len() + i));
        }
        panels.push(Panel {
            title: format!(
                "MQAR L = {l}, K = {k}: test accuracy against recurrent state size (mean over \
                 seeds)"
            ),
            x_label: "state floats (whole model; softmax: its KV cache at L)".into(),
            y_label: "accuracy".into(),
            log_x: true,
            log_y: false,
            series,
        });
    }
    if !panels.is_empty() {
        panels_plot(&out.join("acc_vs_state.png"), &panels)?;
    }
    Ok(())
}
