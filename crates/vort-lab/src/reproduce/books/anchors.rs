//! Classical compressors beside the models: the bits per byte of gzip -9, zstd -19 --long,
//! xz -9e, bzip2 -9 and PPMd on exactly the bytes the models score (the targets of the scored
//! test windows, per test book and for the split as one stream), measured in the same run,
//! as a table and `bpc_vs_compressors.png`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::data::compressors::{split_anchors, AnchorError, SplitAnchors};
use crate::plot::{category_plot, CategoryPanel};
use crate::tasks::books::BookCorpus;
use crate::train::eval::EvalResult;
use crate::train::TrainError;

/// Label of the whole test split in the tables.
pub const SPLIT_LABEL: &str = "test split";

/// File name of the figure.
pub const FIGURE: &str = "bpc_vs_compressors.png";

/// The anchors of a report and the bytes they were measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Anchors {
    /// Window length T of the scored windows (each window scores its T bytes after the first).
    pub seq_len: usize,
    /// Test windows scored.
    pub windows: usize,
    /// Per test book and for the split.
    pub measured: SplitAnchors,
}

/// Measures the anchors on the bytes that an evaluation of `n_seq` windows of `seq_len` scores
/// on the test books of `corpus`.
///
/// # Errors
/// [`TrainError::Anchor`] when a compressor fails (a library failure).
pub fn measure(
    corpus: &BookCorpus,
    seq_len: usize,
    n_seq: usize,
    progress: bool,
) -> Result<Anchors, TrainError> {
    let scored = corpus.scored_bytes(seq_len, n_seq);
    let t0 = std::time::Instant::now();
    if progress {
        let bytes: usize = scored.iter().map(|(_, b)| b.len()).sum();
        eprintln!(
            "compressor anchors on the {bytes} scored test bytes (xz -9e and PPMd take seconds)"
        );
    }
    let anchors = measure_scored(&scored, seq_len, &|_, _| {})?;
    if progress {
        eprintln!(
            "compressor anchors done in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(anchors)
}

/// The anchors of `scored`, the per-book scored bytes of windows of `seq_len`
/// ([`crate::tasks::books::scored_bytes`]); `done(finished, total)` as each compression ends.
///
/// # Errors
/// [`AnchorError`] when a compressor fails.
pub fn measure_scored(
    scored: &[(String, Vec<u8>)],
    seq_len: usize,
    done: &(dyn Fn(usize, usize) + Sync),
) -> Result<Anchors, AnchorError> {
    let bytes: usize = scored.iter().map(|(_, b)| b.len()).sum();
    Ok(Anchors {
        seq_len,
        windows: bytes / seq_len.max(1),
        measured: split_anchors(scored, SPLIT_LABEL, done)?,
    })
}

/// One memory's test BPC per test book (seeds pooled: Σ nll·n / Σ n over its runs) and
/// over every scored byte, aligned with the anchors' books.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelBpc {
    /// The preset's mixer name.
    pub mixer: String,
    /// Seeds pooled.
    pub seeds: usize,
    /// Per test book of the anchors (None: the runs did not score it).
    pub books: Vec<Option<f64>>,
    /// Over all scored bytes.
    pub split: Option<f64>,
}

/// The models' rows, in the report's order of memories (the kinds, then the other names).
pub fn model_rows(runs: &[EvalResult], anchors: &Anchors) -> Vec<ModelBpc> {
    let bits = |nll: f64, n: usize| (n > 0).then(|| nll / n as f64 / std::f64::consts::LN_2);
    let mut out = Vec::new();
    let memories = super::Memories::new(runs.iter().map(|r| r.label()), &crate::reproduce::KINDS);
    for memory in memories.order() {
        let rs: Vec<&EvalResult> = runs.iter().filter(|r| r.label() == memory).collect();
        let pooled = |book: Option<&str>| {
            let (mut nll, mut n) = (0.0, 0usize);
            for row in rs
                .iter()
                .flat_map(|r| &r.per_book)
                .filter(|row| book.is_none_or(|b| row.label == b))
            {
                nll += row.nll * row.n as f64;
                n += row.n;
            }
            bits(nll, n)
        };
        out.push(ModelBpc {
            mixer: memory.clone(),
            seeds: rs.len(),
            books: anchors
                .measured
                .books
                .iter()
                .map(|b| pooled(Some(&b.label)))
                .collect(),
            split: pooled(None),
        });
    }
    out
}

/// The table alone: a row per model (if any) and per compressor, a column per test book
/// (title and scored bytes) and for the split; `n/a` where nothing was measured.
pub fn table(anchors: &Anchors, models: &[ModelBpc]) -> String {
    let m = &anchors.measured;
    let cols: Vec<_> = m.books.iter().chain(std::iter::once(&m.split)).collect();
    let mut s = String::from("| | ");
    s += &cols
        .iter()
        .map(|c| format!("{} ({} B)", c.label, c.raw_bytes))
        .collect::<Vec<_>>()
        .join(" | ");
    s += " |\n|---|";
    s += &"---|".repeat(cols.len());
    s += "\n";
    let cell = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.3}"));
    for r in models {
        let seeds = if r.seeds == 1 {
            String::new()
        } else {
            format!(" ({} seeds pooled)", r.seeds)
        };
        s += &format!("| {}{seeds} |", r.mixer);
        for v in r.books.iter().chain(std::iter::once(&r.split)) {
            s += &format!(" {} |", cell(*v));
        }
        s += "\n";
    }
    for (k, row) in m.split.rows.iter().enumerate() {
        s += &format!("| {} |", row.name);
        for c in &cols {
            s += &format!(" {} |", cell(c.rows.get(k).and_then(|r| r.bits_per_byte)));
        }
        s += "\n";
    }
    s
}

/// The section: one table of the models and the compressors by test book and for the split,
/// then which compressors each model beats.
pub fn markdown(anchors: &Anchors, models: &[ModelBpc]) -> String {
    let m = &anchors.measured;
    let scored: u64 = m.books.iter().map(|b| b.raw_bytes).sum();
    let mut s = format!(
        "## Against the compressors\n\nBits per byte of the models and of classical \
         compressors on the same bytes: the {scored} bytes the models score ({} test \
         window(s) of {} + 1 bytes, each scoring its last {}; per book the scored bytes of \
         its windows, concatenated; the split as one stream). Measured in this run, each \
         compressed stream checked to decompress to its input. A compressor sees the whole \
         book before each byte, a model only its window.\n\n",
        anchors.windows, anchors.seq_len, anchors.seq_len
    );
    s += &table(anchors, models);
    s += "\nSettings: ";
    s += &m
        .split
        .rows
        .iter()
        .map(|r| format!("{}: {}", r.name, r.setting))
        .collect::<Vec<_>>()
        .join("; ");
    s += ".\n\n";
    for r in models {
        let beaten: Vec<String> = m
            .split
            .rows
            .iter()
            .map(|row| {
                let wins = m
                    .books
                    .iter()
                    .zip(&r.books)
                    .filter(|(b, v)| matches!((b.bpc(&row.name), v), (Some(a), Some(v)) if *v < a))
                    .count();
                format!("{} on {wins}/{}", row.name, m.books.len())
            })
            .collect();
        s += &format!(
            "- {} below the compressor, by test book: {}.\n",
            r.mixer,
            beaten.join(", ")
        );
    }
    s += &format!("\n![BPC of the models and the compressors]({FIGURE})\n\n");
    s
}

/// The section of a report (nothing when it has no anchors: a plan without runs, or a
/// results.json written before them).
pub(super) fn report_markdown(rep: &super::BooksReport) -> String {
    rep.anchors
        .as_ref()
        .map_or(String::new(), |a| markdown(a, &model_rows(&rep.runs, a)))
}

/// The figure of a report, when it has anchors.
///
/// # Errors
/// [`TrainError::Plot`].
pub(super) fn report_figure(rep: &super::BooksReport, out: &Path) -> Result<(), TrainError> {
    match &rep.anchors {
        Some(a) => figure(a, &model_rows(&rep.runs, a), out),
        None => Ok(()),
    }
}

/// `bpc_vs_compressors.png`: per test book and for the split, the models as markers and the
/// compressors as dashed levels.
///
/// # Errors
/// [`TrainError::Plot`].
pub fn figure(anchors: &Anchors, models: &[ModelBpc], out: &Path) -> Result<(), TrainError> {
    let m = &anchors.measured;
    let cols: Vec<_> = m.books.iter().chain(std::iter::once(&m.split)).collect();
    let nan = |v: Option<f64>| v.unwrap_or(f64::NAN);
    let panel = CategoryPanel {
        title: "books: test bits per byte, models (markers) against compressors (dashed)".into(),
        y_label: "bits per byte".into(),
        categories: cols.iter().map(|c| short_title(&c.label)).collect(),
        markers: models
            .iter()
            .map(|r| {
                let v = r.books.iter().chain(std::iter::once(&r.split));
                (r.mixer.clone(), v.map(|v| nan(*v)).collect())
            })
            .collect(),
        levels: m
            .split
            .rows
            .iter()
            .map(|row| {
                let v = cols.iter().map(|c| nan(c.bpc(&row.name))).collect();
                (row.name.clone(), v)
            })
            .collect(),
    };
    category_plot(&out.join(FIGURE), &panel)?;
    Ok(())
}

/// A title up to its first `;` or `:` (the subtitle), for tick labels.
fn short_title(title: &str) -> String {
    title
        .split([';', ':'])
        .next()
        .unwrap_or(title)
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::compressors::{AnchorRow, TextAnchors};
    use crate::train::eval::LagAccuracy;

    /// A text of 1000 bytes that gzip and PPMd compress to `compressed` bytes.
    fn text(label: &str, compressed: [usize; 2]) -> TextAnchors {
        TextAnchors {
            label: label.into(),
            raw_bytes: 1000,
            rows: ["gzip -9", "PPMd var.I o8"]
                .iter()
                .zip(compressed)
                .map(|(n, c)| AnchorRow::new(n, "s".into(), 1000, c))
                .collect(),
        }
    }

    fn run(memory: &str, seed: u64, books: &[(&str, f64, usize)]) -> EvalResult {
        let per_book = books
            .iter()
            .map(|&(label, bits, n)| LagAccuracy {
                label: label.into(),
                lo: 1,
                hi: 8,
                n,
                correct: 0,
                accuracy: 0.0,
                nll: bits * std::f64::consts::LN_2,
                nll_sd: f64::NAN,
            })
            .collect();
        EvalResult {
            task: crate::tasks::TaskKind::Books,
            mixer: memory.parse().expect("a mixer kind"),
            label: None,
            seed,
            step: 1,
            sequences: 1,
            accuracy: 0.0,
            positions: 0,
            loss: 0.0,
            buckets: Vec::new(),
            lag_bins: Vec::new(),
            alpha: None,
            per_book,
            per_window: Vec::new(),
            horizon: None,
        }
    }

    #[test]
    fn models_are_pooled_by_book_and_set_beside_the_compressors() {
        let anchors = Anchors {
            seq_len: 8,
            windows: 3,
            measured: SplitAnchors {
                // bits per byte: A 3.0 and 2.0, B 2.8 and 1.904, the split 2.896 and 1.952
                books: vec![text("A; sub", [375, 250]), text("B", [350, 238])],
                split: text(SPLIT_LABEL, [362, 244]),
            },
        };
        // two seeds of vort: book A pooled (2.2·100 + 2.6·300) / 400 = 2.5
        let runs = [
            run("vort", 0, &[("A; sub", 2.2, 100), ("B", 1.8, 100)]),
            run("vort", 1, &[("A; sub", 2.6, 300)]),
            run("exponential", 0, &[("A; sub", 3.1, 100)]),
        ];
        let rows = model_rows(&runs, &anchors);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].mixer, "vort");
        assert_eq!(rows[0].seeds, 2);
        assert!((rows[0].books[0].unwrap() - 2.5).abs() < 1e-12);
        assert!((rows[0].books[1].unwrap() - 1.8).abs() < 1e-12);
        assert!(
            (rows[0].split.unwrap() - (2.2 * 100.0 + 1.8 * 100.0 + 2.6 * 300.0) / 500.0).abs()
                < 1e-12
        );
        assert_eq!(rows[1].books[1], None, "exponential did not score B");
        let md = markdown(&anchors, &rows);
        assert!(
            md.contains("| vort (2 seeds pooled) | 2.500 | 1.800 |"),
            "{md}"
        );
        assert!(md.contains("| gzip -9 | 3.000 | 2.800 | 2.896 |"), "{md}");
        assert!(md.contains("| exponential | 3.100 | n/a |"), "{md}");
        // vort is below gzip on both books, below PPMd on B only
        assert!(
            md.contains(
                "- vort below the compressor, by test book: gzip -9 on 2/2, PPMd var.I o8 on 1/2."
            ),
            "{md}"
        );
        assert!(
            md.contains("- exponential below the compressor, by test book: gzip -9 on 0/2"),
            "{md}"
        );
        assert_eq!(short_title("A; sub"), "A");
        let dir = std::env::temp_dir().join(format!("vort-anchors-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        figure(&anchors, &rows, &dir).unwrap();
        assert!(dir.join(FIGURE).is_file());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
