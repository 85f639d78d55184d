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
        None => {
            "No run of a gate mixer (`role = \"gate\"` in the preset) in a gate cell: no gate.\n\n"
                .into()
        }
    }
}

/// The gate section: the results of every mixer in the gate cells (no figure of its own; the
/// gate cell is a point of the grid's figures).
pub(super) fn section(rep: &RecallReport) -> String {
    cell_table("## The gate\n\n", &rows_of(rep, Section::Gate))
}
