//! The paper's numbers (arXiv 2605.08966, docs/DESIGN.md §3) in one table, read by every
//! report: the accuracy at lags > 1000 of the recall and label-copy claims, and the BPC at
//! context > 4096 of the books claim.

use crate::tasks::TaskKind;

/// A claim of the paper with a number per memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Associative recall at lags > 1000 (the Zipf task, and MQAR's lag cells), percent.
    Recall,
    /// Label copy at lags > 1000, percent.
    LabelCopy,
    /// Bits per character on PG-19 at context > 4096.
    BooksBpc,
}

impl Claim {
    /// The claim a task measures (None for books, whose claim is in bits).
    pub fn of_task(task: TaskKind) -> Option<Claim> {
        match task {
            TaskKind::Zipf | TaskKind::Mqar => Some(Claim::Recall),
            TaskKind::LabelCopy => Some(Claim::LabelCopy),
            _ => None,
        }
    }
}

/// The paper's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Row {
    PowerLaw,
    Exponential,
    Mixture,
}

/// (claim, row, the paper's number).
const TABLE: [(Claim, Row, f64); 7] = [
    (Claim::Recall, Row::PowerLaw, 79.4),
    (Claim::Recall, Row::Exponential, 52.3),
    (Claim::Recall, Row::Mixture, 61.8),
    (Claim::LabelCopy, Row::PowerLaw, 82.7),
    (Claim::LabelCopy, Row::Exponential, 58.4),
    (Claim::BooksBpc, Row::PowerLaw, 1.56),
    (Claim::BooksBpc, Row::Exponential, 1.68),
];

/// The paper's row a mixer of the reports stands beside: its "power law" row beside VORT (both
/// node modes) and the fixed power law.
fn row_of(mixer: &str) -> Option<Row> {
    match mixer {
        "vort" | "vort-banks" | "power-law" => Some(Row::PowerLaw),
        "exponential" => Some(Row::Exponential),
        "mixture" => Some(Row::Mixture),
        _ => None,
    }
}

/// The paper's rows of `claim` in words: "power law 79.4%, exponential 52.3%, 5-exponential
/// mixture 61.8%" (accuracy claims).
pub fn accuracies(claim: Claim) -> String {
    let name = |r: Row| match r {
        Row::PowerLaw => "power law",
        Row::Exponential => "exponential",
        Row::Mixture => "5-exponential mixture",
    };
    TABLE
        .iter()
        .filter(|(c, _, _)| *c == claim)
        .map(|&(_, r, x)| format!("{} {x}%", name(r)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The paper's number for `mixer` under `claim` (None where the paper has no row for it).
pub fn number(claim: Claim, mixer: &str) -> Option<f64> {
    let row = row_of(mixer)?;
    TABLE
        .iter()
        .find(|(c, r, _)| *c == claim && *r == row)
        .map(|&(_, _, x)| x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_the_papers_numbers() {
        assert_eq!(number(Claim::Recall, "vort"), Some(79.4));
        assert_eq!(number(Claim::Recall, "vort-banks"), Some(79.4));
        assert_eq!(number(Claim::Recall, "mixture"), Some(61.8));
        assert_eq!(number(Claim::LabelCopy, "exponential"), Some(58.4));
        assert_eq!(number(Claim::LabelCopy, "mixture"), None);
        assert_eq!(number(Claim::BooksBpc, "power-law"), Some(1.56));
        assert_eq!(number(Claim::BooksBpc, "softmax"), None);
        assert_eq!(
            accuracies(Claim::Recall),
            "power law 79.4%, exponential 52.3%, 5-exponential mixture 61.8%"
        );
        assert_eq!(
            accuracies(Claim::LabelCopy),
            "power law 82.7%, exponential 58.4%"
        );
    }
}
