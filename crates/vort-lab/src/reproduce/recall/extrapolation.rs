//! Length extrapolation (beyond the paper): the models of a cell scored on longer sequences,
//! streamed with the state carried (`extrapolation.png`).

use std::path::Path;

use super::{cells_where, color_of, extrapolations, mixer_names, CellResult, RecallReport};
use crate::plot::{panels_plot, Panel, Series};
use crate::reproduce::stats::{pct, sum_rows};
use crate::tasks::BUCKETS;
use crate::train::TrainError;

/// The extrapolation section: accuracy (overall and by lag bucket, seeds pooled) of every
/// (cell, mixer) scored at other lengths, and `extrapolation.png`; nothing when no cell was.
pub(super) fn section(rep: &RecallReport, out: &Path) -> Result<String, TrainError> {
    plot(rep, out)?;
    let extra: Vec<&CellResult> = rep.cells.iter().filter(|c| extrapolated(c)).collect();
    if extra.is_empty() {
        return Ok(String::new());
    }
    let mut s = String::from(
        "## Length extrapolation (beyond the paper)\n\nModels of the cell (tested at its \
         L; trained at L or on the mixture of shorter lengths named in its table) scored on \
         longer sequences of the same task (gaps, so lags, grow with the length), streamed \
         in pieces of the cell's L with the state carried; node tables certified for the \
         scored length; softmax restricted to a window of the cell's L (sliding-window \
         attention: it cannot see lags beyond it). Accuracy over all seeds pooled (correct / \
         answers), then by lag bucket.\n\n\
         | cell | mixer | scored L | accuracy % | ",
    );
    for (label, _, _) in BUCKETS {
        s.push_str(&format!("lags {label} | "));
    }
    s.push_str("\n|---|---|---|---|");
    for _ in BUCKETS {
        s.push_str("---|");
    }
    s.push('\n');
    for c in &extra {
        s.push_str(&rows(c));
    }
    s.push('\n');
    Ok(s)
}

/// Whether a seed of `c` was scored at another length.
fn extrapolated(c: &CellResult) -> bool {
    c.seeds.iter().any(|r| !r.extrapolation.is_empty())
}

/// The rows of `c`, one per length scored.
fn rows(c: &CellResult) -> String {
    let mut s = String::new();
    let lengths: Vec<usize> = c.seeds[0].extrapolation.iter().map(|x| x.seq_len).collect();
    for (i, l) in lengths.iter().enumerate() {
        let (k, n) = extrapolations(c, i).fold((0, 0), |(k, n), x| (k + x.correct, n + x.answers));
        s.push_str(&format!(
            "| {} | {} | {l} | {} ({k}/{n}) |",
            c.cell,
            c.mixer,
            pct(k as f64 / n.max(1) as f64)
        ));
        for b in 0..BUCKETS.len() {
            let (k, n) = sum_rows(extrapolations(c, i).map(|x| &x.buckets[b]));
            if n == 0 {
                s.push_str(" - |");
            } else {
                s.push_str(&format!(" {} ({n}) |", pct(k as f64 / n as f64)));
            }
        }
        s.push('\n');
    }
    s
}

/// `extrapolation.png`: accuracy against the scored length (the training length first), one
/// panel per cell scored at other lengths.
fn plot(rep: &RecallReport, out: &Path) -> Result<(), TrainError> {
    let names = mixer_names(rep);
    let mut panels = Vec::new();
    for cell in cells_where(rep, extrapolated) {
        let series: Vec<Series> = rep
            .cells
            .iter()
            .filter(|c| c.cell == cell)
            .map(|c| {
                let mut pts = vec![(c.seq_len() as f64, c.mean_sd().0)];
                let nx = c.seeds[0].extrapolation.len();
                for i in 0..nx {
                    let (k, n) = extrapolations(c, i)
                        .fold((0, 0), |(k, n), x| (k + x.correct, n + x.answers));
                    if n > 0 {
                        let l = c.seeds[0].extrapolation[i].seq_len as f64;
                        pts.push((l, k as f64 / n as f64));
                    }
                }
                Series::line(c.mixer.clone(), pts).with_color(color_of(&names, &c.mixer))
            })
            .collect();
        panels.push(Panel {
            title: format!("{cell}: test accuracy against sequence length (trained at the first)"),
            x_label: "sequence length L".into(),
            y_label: "accuracy".into(),
            log_x: true,
            log_y: false,
            series,
        });
    }
    if !panels.is_empty() {
        panels_plot(&out.join("extrapolation.png"), &panels)?;
    }
    Ok(())
}
