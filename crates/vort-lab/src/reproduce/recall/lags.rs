//! The paper's lag claim: accuracy by lag bucket at long L beside the paper's accuracy at lags
//! > 1000 (`acc_by_lag.png`).

use std::path::Path;

use super::{
    cell_table, cells_where, color_of, extrapolations, mixer_names, pooled, rows_of, CellResult,
    RecallReport, Section, MIN_BIN,
};
use crate::plot::{panels_plot, Panel, Series};
use crate::reproduce::paper::Claim;
use crate::reproduce::stats::{lag_curve, pct};
use crate::tasks::BUCKETS;
use crate::train::eval::LagAccuracy;
use crate::train::TrainError;

/// The paper's accuracy at lags > 1000 for `mixer` under `claim` (percent;
/// [`crate::reproduce::paper`]).
pub fn paper_lag_number(claim: Claim, mixer: &str) -> Option<f64> {
    crate::reproduce::paper::number(claim, mixer)
}

/// The lags section: its table, the accuracy by lag bucket of every (cell, mixer) beside the
/// paper's number, and `acc_by_lag.png`.
pub(super) fn section(rep: &RecallReport, out: &Path) -> Result<String, TrainError> {
    acc_by_lag(rep, out)?;
    let rows = rows_of(rep, Section::Lags);
    let mut s = cell_table("## The paper's lag claim\n\n", &rows);
    if !rows.is_empty() {
        s.push_str(&bucket_table(&rows, rep.claim()));
    }
    Ok(s)
}

/// Accuracy by lag bucket (seeds pooled) of `rows`, beside the paper's at lags > 1000.
fn bucket_table(rows: &[&CellResult], claim: Claim) -> String {
    let mut s = String::from(
        "Accuracy by lag bucket (all seeds pooled: correct / answers), beside the paper's \
         accuracy at lags > 1000:\n\n| cell | mixer |",
    );
    for (label, _, _) in BUCKETS {
        s.push_str(&format!(" {label} |"));
    }
    s.push_str(" paper > 1000 |\n|---|---|");
    for _ in BUCKETS {
        s.push_str("---|");
    }
    s.push_str("---|\n");
    for c in rows {
        s.push_str(&format!("| {} | {} |", c.cell, c.mixer));
        for i in 0..BUCKETS.len() {
            let (k, n) = pooled(c, Some(i));
            if n == 0 {
                s.push_str(" - |");
            } else {
                s.push_str(&format!(" {} ({k}/{n}) |", pct(k as f64 / n as f64)));
            }
        }
        s.push_str(&format!(
            " {} |\n",
            paper_lag_number(claim, &c.mixer).map_or("-".into(), |x| format!("{x}"))
        ));
    }
    s.push('\n');
    s
}

/// `acc_by_lag.png`: accuracy by lag, one panel per lags cell, in doubling bins with >=
/// [`MIN_BIN`] answers over seeds, with the paper's accuracy at lags > 1000 dashed.
fn acc_by_lag(rep: &RecallReport, out: &Path) -> Result<(), TrainError> {
    let names = mixer_names(rep);
    let mut panels = Vec::new();
    for cell in cells_where(rep, |c| c.section == Section::Lags) {
        let mut series = Vec::new();
        for c in rep.cells.iter().filter(|c| c.cell == cell) {
            let bins: Vec<&[LagAccuracy]> = c.seeds.iter().map(|r| r.lag_bins.as_slice()).collect();
            let curve = lag_curve(&bins, 1.0);
            series.push(
                Series::line(c.mixer.clone(), curve.points)
                    .with_color(color_of(&names, &c.mixer))
                    .with_bars(curve.bars),
            );
        }
        series.extend(paper_lines(rep, cell, &names));
        panels.push(Panel {
            title: format!(
                "{cell}: test accuracy by lag (doubling bins with >= {MIN_BIN} answers, all \
                 seeds, Wilson 95%)"
            ),
            x_label: "lag (query position - value position)".into(),
            y_label: "accuracy".into(),
            log_x: true,
            log_y: false,
            series,
        });
    }
    if !panels.is_empty() {
        panels_plot(&out.join("acc_by_lag.png"), &panels)?;
    }
    Ok(())
}

/// The paper's accuracy at lags > 1000 in `cell`, dashed over that bucket in the colour of the
/// first mixer it applies to (VORT and the power law share one number).
fn paper_lines(rep: &RecallReport, cell: &str, names: &[String]) -> Vec<Series> {
    let mut drawn: Vec<f64> = Vec::new();
    let mut series = Vec::new();
    for c in rep.cells.iter().filter(|c| c.cell == cell) {
        let Some(x) = paper_lag_number(rep.claim(), &c.mixer) else {
            continue;
        };
        if drawn.contains(&x) || c.seq_len() <= 1000 {
            continue;
        }
        drawn.push(x);
        series.push(
            Series::dashed(
                format!("paper, lags > 1000: {} {x}%", c.mixer),
                vec![(1001.0, x / 100.0), (c.seq_len() as f64, x / 100.0)],
            )
            .with_color(color_of(names, &c.mixer)),
        );
    }
    series
}

/// The answers at lags > 1000 of `c`'s seeds, (correct, answers) per seed, at every length
/// scored that has such lags: the cell's own length first, then its extrapolation lengths in
/// order (a model trained at L = 512 is read on 2048-token sequences; one tested at 2048 also
/// on 4096). Returns (per seed, the length scored) per length.
pub(super) fn far_answers(c: &CellResult) -> Vec<(Vec<(usize, usize)>, usize)> {
    let far = BUCKETS.len() - 1;
    let own: Vec<(usize, usize)> = c
        .seeds
        .iter()
        .map(|r| r.buckets.get(far).map_or((0, 0), |b| (b.correct, b.n)))
        .collect();
    let lengths = c.seeds.first().map_or(0, |r| r.extrapolation.len());
    let scored = (0..lengths).map(|i| {
        let per_seed: Vec<(usize, usize)> = extrapolations(c, i)
            .map(|x| (x.buckets[far].correct, x.buckets[far].n))
            .collect();
        (per_seed, c.seeds[0].extrapolation[i].seq_len)
    });
    std::iter::once((own, c.seq_len()))
        .chain(scored)
        .filter(|(s, _)| s.iter().any(|r| r.1 > 0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{lag_cell, seed_with};
    use super::*;

    /// The lag claim reads lags > 1000 at every length scored that has them, per seed.
    #[test]
    fn far_answers_are_read_at_every_length_scored() {
        let cell = |seeds, seq_len| lag_cell("vort", seq_len, seeds);
        // tested at 2048: its own far bucket, then the extrapolation's
        let c = cell(vec![seed_with((3, 10), &[(8192, (1, 50))])], 2048);
        assert_eq!(
            far_answers(&c),
            vec![(vec![(3, 10)], 2048), (vec![(1, 50)], 8192)]
        );
        // trained at 512 (no lags > 1000): every length with far answers, two seeds
        let ext = [(2048, (4, 20)), (8192, (6, 40)), (32768, (0, 0))];
        let c = cell(vec![seed_with((0, 0), &ext), seed_with((0, 0), &ext)], 512);
        assert_eq!(
            far_answers(&c),
            vec![(vec![(4, 20); 2], 2048), (vec![(6, 40); 2], 8192)]
        );
        // nothing anywhere: no length to read the claim at
        let c = cell(vec![seed_with((0, 0), &[])], 512);
        assert!(far_answers(&c).is_empty());
        // a diverged seed (no buckets) adds no answers, and nothing panics
        let mut diverged = seed_with((0, 0), &[]);
        diverged.buckets.clear();
        let c = cell(vec![seed_with((3, 10), &[]), diverged], 2048);
        assert_eq!(far_answers(&c), vec![(vec![(3, 10), (0, 0)], 2048)]);
        assert_eq!(pooled(&c, Some(BUCKETS.len() - 1)), (3, 10));
    }
}
