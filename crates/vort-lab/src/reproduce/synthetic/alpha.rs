//! The learned orders α of VORT on a synthetic task: means on memorable and other tokens beside
//! the paper's (`alpha_hist_<task>.png`, `alpha_by_class_<task>.png`).

use std::path::Path;

use super::Report;
use crate::plot::{histogram, panels_plot, Panel, Series};
use crate::reproduce::{density, with_paper_alpha};
use crate::tasks::TaskKind;
use crate::train::eval::EvalResult;
use crate::train::TrainError;

/// The α lines of `task`: the mean α of each memory kind with α samples, on memorable tokens
/// and on the others.
pub(super) fn markdown(rep: &Report, task: TaskKind) -> String {
    let mut s = String::new();
    for r in rep.rows.iter().filter(|r| r.task == task) {
        if let Some((m, o)) = r.alpha_means {
            s.push_str(&format!(
                "Learned α ({}): mean {m:.3} on memorable tokens, {o:.3} on the others \
                 (paper: entities ≈ 0.80, function words ≈ 0.35).\n\n",
                r.mixer
            ));
        }
    }
    s
}

/// `alpha_hist_<task>.png` (every α of the VORT runs of `task`) and
/// `alpha_by_class_<task>.png` (densities of memorable and other tokens beside the paper's
/// orders); nothing without VORT α samples.
pub(super) fn figures(
    task: TaskKind,
    of_task: &[&EvalResult],
    out: &Path,
) -> Result<(), TrainError> {
    let vort: Vec<&&EvalResult> = of_task
        .iter()
        .filter(|r| r.label() == "vort" && r.alpha.is_some())
        .collect();
    if vort.is_empty() {
        return Ok(());
    }
    let mut all = Vec::new();
    let (mut mem, mut oth) = (Vec::new(), Vec::new());
    for r in &vort {
        let a = r.alpha.as_ref().expect("filtered");
        mem.extend(a.memorable.iter().map(|&x| x as f64));
        oth.extend(a.other.iter().map(|&x| x as f64));
    }
    all.extend(&mem);
    all.extend(&oth);
    histogram(
        &out.join(format!("alpha_hist_{}.png", task.name())),
        &format!(
            "{}: learned orders α of the VORT models (all layers, heads; {} seeds)",
            task.name(),
            vort.len()
        ),
        "α",
        &all,
        40,
    )?;
    panels_plot(
        &out.join(format!("alpha_by_class_{}.png", task.name())),
        &[Panel {
            title: format!("{}: α by token class (VORT)", task.name()),
            x_label: "α".into(),
            y_label: "fraction of tokens".into(),
            log_x: false,
            log_y: false,
            series: with_paper_alpha(
                vec![
                    Series::line("memorable (keys, values, entities, labels)", density(&mem))
                        .with_color(0),
                    Series::line("other (filler, queries, repeats)", density(&oth)).with_color(1),
                ],
                0,
                1,
            ),
        }],
    )?;
    Ok(())
}
