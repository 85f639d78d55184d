//! The learning-rate sweeps: validation accuracy of the first seed at each peak rate
//! (`lr_sweep.png`).

use std::path::Path;

use super::{cells_where, color_of, lr_label, mixer_names, RecallReport, SweepPlace};
use crate::plot::{panels_plot, Panel, Series};
use crate::reproduce::stats::pct;
use crate::train::TrainError;

/// The sweeps section: per (cell, mixer) each rate's validation accuracy and steps, and
/// `lr_sweep.png` (one panel per cell).
pub(super) fn section(rep: &RecallReport, out: &Path) -> Result<String, TrainError> {
    plot(rep, out)?;
    let mut s = String::from(
        "## Learning-rate sweeps (seed 0: validation accuracy at the end of each run)\n\n",
    );
    s.push_str("| cell | mixer | lr: val acc % (steps) | chosen |\n|---|---|---|---|\n");
    for c in &rep.cells {
        let sw: Vec<String> = c
            .sweep
            .iter()
            .map(|r| match r.diverged_at {
                Some(step) => format!("{}: diverged at step {step}", lr_label(r.lr)),
                None => format!("{}: {} ({})", lr_label(r.lr), pct(r.val_accuracy), r.steps),
            })
            .collect();
        // a choice at an edge of several rates is flagged; one rate ran is just that rate
        let place = c.sweep_place();
        let chosen = match place.unbracketed() {
            Some(why) if place != SweepPlace::OneRate => {
                format!("{}: {why}, not bracketed", lr_label(c.best_lr))
            }
            _ => lr_label(c.best_lr),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {chosen} |\n",
            c.cell,
            c.mixer,
            sw.join("; ")
        ));
    }
    s.push_str(
        "\n\"Not bracketed\": validation chose the smallest or largest rate swept, so the \
         mixer's best rate may lie beyond its sweep.\n\n",
    );
    Ok(s)
}

/// `lr_sweep.png`: validation accuracy against the peak learning rate, one panel per cell (a
/// diverged run at 0).
fn plot(rep: &RecallReport, out: &Path) -> Result<(), TrainError> {
    let names = mixer_names(rep);
    let mut panels = Vec::new();
    for cell in cells_where(rep, |_| true) {
        let series: Vec<Series> = rep
            .cells
            .iter()
            .filter(|c| c.cell == cell)
            .map(|c| {
                let pts = c
                    .sweep
                    .iter()
                    .map(|r| {
                        (
                            r.lr,
                            if r.val_accuracy.is_nan() {
                                0.0
                            } else {
                                r.val_accuracy
                            },
                        )
                    })
                    .collect();
                Series::line(c.mixer.clone(), pts).with_color(color_of(&names, &c.mixer))
            })
            .collect();
        panels.push(Panel {
            title: format!("{cell}: validation accuracy against peak learning rate (seed 0)"),
            x_label: "learning rate".into(),
            y_label: "validation accuracy".into(),
            log_x: true,
            log_y: false,
            series,
        });
    }
    if !panels.is_empty() {
        panels_plot(&out.join("lr_sweep.png"), &panels)?;
    }
    Ok(())
}
