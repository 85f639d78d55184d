//! The learned orders α of VORT: by token role, pair tokens against the rest
//! (`alpha_hist.png`, `alpha_hist_other.png`).

use std::path::Path;

use super::RecallReport;
use crate::plot::histogram;
use crate::train::eval::AlphaSample;
use crate::train::TrainError;

/// The α section: the mean α of each role (seed 0, test set) per (cell, mixer) whose model
/// routes orders (its evaluation samples them: the VORT mixers, whatever the preset names
/// them), and the histograms of the pair tokens and of the rest over every cell; nothing
/// without such runs.
pub(super) fn section(rep: &RecallReport, out: &Path) -> Result<String, TrainError> {
    histograms(rep, out)?;
    let alpha: Vec<(String, &AlphaSample)> = rep
        .cells
        .iter()
        .filter_map(|c| {
            Some((
                format!("{} {}", c.cell, c.mixer),
                c.seeds.first()?.alpha.as_ref()?,
            ))
        })
        .collect();
    if alpha.is_empty() {
        return Ok(String::new());
    }
    let mut s = String::from(
        "## Learned orders α (VORT, seed 0, test set, mean over layers and heads)\n\n\
         The paper's router gives what must be remembered a high α (slow power-law decay) \
         and the rest a low one. Here the pair tokens are the keys and values, the query is \
         the repeated key, the filler is everything else.\n\n\
         | cell | key | value | query | filler | pairs (key, value) | the rest |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for (n, a) in alpha {
        let role = |r: &str| {
            a.mean_by_role
                .iter()
                .find(|(name, _)| name == r)
                .map_or("-".to_string(), |(_, x)| format!("{x:.3}"))
        };
        s.push_str(&format!(
            "| {n} | {} | {} | {} | {} | {:.3} | {:.3} |\n",
            role("key"),
            role("value"),
            role("query"),
            role("filler"),
            a.mean_memorable,
            a.mean_other
        ));
    }
    s.push_str("\nHistograms: `alpha_hist.png` (pair tokens), `alpha_hist_other.png`.\n\n");
    Ok(s)
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
