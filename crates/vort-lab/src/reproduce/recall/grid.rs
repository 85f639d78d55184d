//! Zoology's grid: test accuracy in (L, K) cells against model width (`acc_vs_width.png`) and
//! against the recurrent state size (`acc_vs_state.png`).

use std::path::Path;

use super::{cell_table, mixer_names, rows_of, CellResult, RecallReport, Section};
use crate::plot::{panels_plot, Panel, Series};
use crate::train::TrainError;

/// Why `acc_vs_state.png` shows no published points. The points it showed (Based, GLA and
/// Mamba-2, read off HazyResearch/zoology's recall-memory figure,
/// `zoology/analysis/paper/zoology_paper/zoology_results.png`; Based's figure 2 has the same
/// setting) come from models trained on a mixture of five (L, K) settings, (64, 4) to
/// (256, 64), and scored by their validation accuracy over seven test settings, (64, 4) to
/// (1024, 256) (`zoology/experiments/mqar_example_configs/original_mqar_configs.py`,
/// `zoology/experiments/paper_configs/arxiv24_based_figure2/configs.py`): no single (L, K),
/// and the setting of no cell here, so they are left out rather than drawn beside cells they
/// were not measured in.
pub(super) const NO_ANCHORS: &str = "no published points: Zoology's recall-against-state points \
    average the accuracy over seven test settings, (L, K) = (64, 4) to (1024, 256), of models \
    trained on five, a setting no cell here has";

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
        .map(|c| (c.seq_len(), c.num_kv_pairs()))
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
            c.section != Section::Lags && c.mixer == mixer && (c.seq_len(), c.num_kv_pairs()) == lk
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
/// marker per mixer and width; no published points (see [`NO_ANCHORS`]).
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
