//! The learned orders α of VORT on books: means on entity, function-word and other bytes
//! beside the paper's (`alpha_by_class_books.png`).

use std::path::Path;

use super::BooksReport;
use crate::plot::{panels_plot, Panel, Series};
use crate::reproduce::{density, with_paper_alpha};
use crate::train::eval::{AlphaSample, EvalResult};
use crate::train::TrainError;

/// The α section: the mean α by byte class of each memory kind with α samples, and the figure.
pub(super) fn markdown(rep: &BooksReport) -> String {
    let mut s = String::new();
    for r in &rep.rows {
        if let Some((e, f, o)) = r.alpha_means {
            s += &format!(
                "Learned α ({}): mean {e:.3} on entity bytes, {} on function-word bytes, \
                 {o:.3} on the rest (paper: entities ≈ 0.80, function words ≈ 0.35).\n\n",
                r.memory,
                f.map_or("n/a".into(), |f| format!("{f:.3}"))
            );
        }
    }
    s += "![α by class](alpha_by_class_books.png)\n\n";
    s
}

/// `alpha_by_class_books.png`: densities of VORT's α on entity, function-word and other bytes
/// beside the paper's orders; nothing without VORT α samples.
pub(super) fn figure(results: &[EvalResult], out: &Path) -> Result<(), TrainError> {
    let vort: Vec<_> = results
        .iter()
        .filter(|r| r.memory == "vort")
        .filter_map(|r| r.alpha.as_ref())
        .collect();
    if !vort.is_empty() {
        let pick = |f: &dyn Fn(&AlphaSample) -> &Vec<f32>| -> Vec<f64> {
            vort.iter()
                .flat_map(|a| f(a).iter().map(|&x| f64::from(x)))
                .collect()
        };
        panels_plot(
            &out.join("alpha_by_class_books.png"),
            &[Panel {
                title: "books: learned α by byte class (VORT; all layers and heads)".into(),
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
            }],
        )?;
    }
    Ok(())
}
