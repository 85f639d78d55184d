//! The gate: softmax attention must solve the gate cell ((L, K) = (64, 4)) before any
//! comparison of memories means anything.

use super::{cell_table, rows_of, CellResult, Preset, RecallReport, Role, Section};

/// Whether the gate mixer (role "gate": softmax attention) reached the preset's gate accuracy
/// in every seed of every gate cell (None: no gate mixer's run in a gate cell).
pub(super) fn passed(preset: &Preset, cells: &[CellResult]) -> Option<bool> {
    let gates = preset.with_role(Role::Gate);
    let gate: Vec<&CellResult> = cells
        .iter()
        .filter(|c| c.section == Section::Gate && gates.contains(&c.mixer.as_str()))
        .collect();
    (!gate.is_empty()).then(|| {
        gate.iter()
            .all(|c| c.seeds.iter().all(|r| r.accuracy >= preset.gate_accuracy))
    })
}

/// The gate's outcome, stated at the top of the report.
pub(super) fn status(rep: &RecallReport) -> String {
    let p = &rep.preset;
    match rep.gate_passed {
        Some(true) => format!(
            "**Gate: passed.** Softmax attention reached >= {:.0}% in every gate run.\n\n",
            100.0 * p.gate_accuracy
        ),
        Some(false) => format!(
            "**Gate: FAILED.** Softmax attention stayed below {:.0}% in a gate run: the \
             training stack or the recipe is broken, and no comparison below means anything.\n\n",
            100.0 * p.gate_accuracy
        ),
        None => baseline_status(rep),
    }
}

/// Without a gate cell (the ladder): the gate mixer is the sanity baseline of each cell it
/// runs in, and the report says, per cell, at how many seeds it learned the task.
fn baseline_status(rep: &RecallReport) -> String {
    let gates = rep.preset.with_role(Role::Gate);
    let learned = rep.preset.learned_accuracy;
    let cells: Vec<String> = rep
        .cells
        .iter()
        .filter(|c| gates.contains(&c.mixer.as_str()))
        .map(|c| {
            let n = c.seeds.iter().filter(|r| r.accuracy >= learned).count();
            let accs: Vec<String> = c
                .seeds
                .iter()
                .map(|r| format!("s{}: {:.1}%", r.seed, 100.0 * r.accuracy))
                .collect();
            format!(
                "{} in {}: learned at {n} of {} seeds ({})",
                c.mixer,
                c.cell,
                c.seeds.len(),
                accs.join(", ")
            )
        })
        .collect();
    if cells.is_empty() {
        return "No run of a gate mixer (`role = \"gate\"` in the preset): no sanity baseline.\n\n"
            .into();
    }
    format!(
        "**Sanity baseline** (no gate cell in this preset: the gate mixer of each cell it runs in, \
         learned at >= {:.0}% test accuracy): {}.\n\n",
        100.0 * learned,
        cells.join("; ")
    )
}

/// The gate section: the results of every mixer in the gate cells (no figure of its own; the
/// gate cell is a point of the grid's figures).
pub(super) fn section(rep: &RecallReport) -> String {
    cell_table("## The gate\n\n", &rows_of(rep, Section::Gate))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{lag_cell, seed_with};
    use super::*;

    /// A preset without a gate cell (the ladder) states its sanity baseline per cell: the
    /// gate mixer's seeds that learned the task, with their accuracies; "no gate" was printed
    /// while softmax had learned the lag cell at every seed.
    #[test]
    fn without_a_gate_cell_the_baseline_is_stated_per_cell() {
        let seed = |seed: u64, correct: usize| {
            let mut r = seed_with((10, 100), &[]);
            (r.seed, r.correct, r.answers) = (seed, correct, 1000);
            r.accuracy = correct as f64 / 1000.0;
            r
        };
        let mut rep = RecallReport {
            preset: Preset::embedded("recall", "quick").unwrap(),
            cells: vec![
                lag_cell(
                    "softmax",
                    2048,
                    vec![seed(0, 958), seed(1, 400), seed(2, 962)],
                ),
                lag_cell("vort", 2048, vec![seed(0, 300)]),
            ],
            gate_passed: None,
            wall_s: 0.0,
            reused: 0,
            pending: Vec::new(),
        };
        let s = status(&rep);
        assert!(
            s.contains("**Sanity baseline**")
                && s.contains("learned at 2 of 3 seeds (s0: 95.8%, s1: 40.0%, s2: 96.2%)")
                && !s.contains("vort"),
            "{s}"
        );
        rep.cells.remove(0);
        assert!(status(&rep).contains("no sanity baseline"));
    }
}
