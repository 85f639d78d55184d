//! The roles of a task's tokens for the α tables and the router's inputs, and which of them are
//! memorable (what the paper's router should give a high α): MQAR's keys and values, label
//! copy's entities and labels, books' entity bytes, the memorable tokens of Zipf retrieval.

use super::{Batch, TaskKind};

/// Roles of MQAR tokens: pair keys, pair values, queries, filler.
pub const MQAR_ROLES: [&str; 4] = ["key", "value", "query", "filler"];

/// Roles of label-copy tokens: an entity where it is introduced, its label there, the entity
/// where it reappears (the query, where the label is asked for), and everything else (filler,
/// and the label echoed after its query).
pub const LABEL_COPY_ROLES: [&str; 4] = ["entity", "label", "query", "filler"];

/// (role, memorable) of `kind`'s tokens, in table order.
pub fn roles(kind: TaskKind) -> Vec<(&'static str, bool)> {
    match kind {
        TaskKind::Mqar => MQAR_ROLES
            .iter()
            .map(|&r| (r, r == "key" || r == "value"))
            .collect(),
        TaskKind::LabelCopy => LABEL_COPY_ROLES
            .iter()
            .map(|&r| (r, r == "entity" || r == "label"))
            .collect(),
        TaskKind::Books => vec![("entity", true), ("function word", false), ("other", false)],
        TaskKind::Zipf => vec![("memorable", true), ("other", false)],
        TaskKind::Ruler => vec![("needle", true), ("other", false)],
    }
}

/// Whether the evaluation tallies α by role for `kind` (`AlphaSample::mean_by_role`): the
/// tasks whose roles are more than the memorable / other split of its classes.
pub fn tallied(kind: TaskKind) -> bool {
    matches!(kind, TaskKind::Mqar | TaskKind::LabelCopy)
}

/// The role of the MQAR token at position `j` of its sequence (an index into [`MQAR_ROLES`]):
/// the first `pairs` (2K) positions alternate key and value, an answer position (`answer`)
/// past them is a query, and the rest is filler.
pub fn mqar_role(j: usize, pairs: usize, answer: bool) -> usize {
    match (j < pairs, j.is_multiple_of(2), answer) {
        (true, true, _) => 0,
        (true, false, _) => 1,
        (false, _, true) => 2,
        (false, _, false) => 3,
    }
}

/// The role (an index into [`roles`]) of position `j` of sequence `i` of `batch`; `pairs` is
/// MQAR's 2K (None for the other tasks). Books: entity bytes first, then function words (as
/// the evaluation's α classes).
pub fn role_of(batch: &Batch, kind: TaskKind, pairs: Option<usize>, i: usize, j: usize) -> usize {
    let f = i * batch.t + j;
    match (kind, pairs) {
        (TaskKind::Mqar, Some(p)) => mqar_role(j, p, batch.mask[f]),
        (TaskKind::LabelCopy, _) => match (batch.entity[f], batch.memorable[f]) {
            (true, true) => 0,
            (false, true) => 1,
            (true, false) => 2,
            (false, false) => 3,
        },
        (TaskKind::Books, _) => {
            if batch.memorable[f] {
                0
            } else if batch.function[f] {
                1
            } else {
                2
            }
        }
        _ => usize::from(!batch.memorable[f]),
    }
}
