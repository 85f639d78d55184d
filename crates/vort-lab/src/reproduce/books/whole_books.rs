//! The books report's whole-books section (issue #40 item 3), for presets that ask for it
//! (`whole_books = true`): every seed-0 model streams every test book from its first byte (to
//! 2^20 bytes), the state carried and reset every window
//! ([`crate::train::stream::stream_books_by_context`], `vort eval --whole-books`), each
//! cached as the run's `whole_books.json`. The section gives BPC by context bucket per model,
//! and `bpc_whole_books.png` plots it against context on a log axis, the compressors on the
//! same books as horizontal lines.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{BooksReport, Skipped};
use crate::plot::{panels_plot, Panel, Series};
use crate::tasks::books::BookCorpus;
use crate::train::eval::EvalResult;
use crate::train::stream::{stream_books_by_context, BooksByContext, BOOK_BUCKETS};
use crate::train::{self, RunConfig, RunDir, TrainError};

/// File name of the figure.
pub const FIGURE: &str = "bpc_whole_books.png";

/// One model's whole-books streams, as cached in its run directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WholeBooksRow {
    /// The preset's mixer name.
    pub mixer: String,
    /// Its seed.
    pub seed: u64,
    /// Training steps of the weights streamed.
    pub step: u64,
    /// What the streams measured.
    pub result: BooksByContext,
}

/// The test books as (title, bytes).
fn test_books(corpus: &BookCorpus) -> Vec<(String, Vec<u8>)> {
    corpus
        .test_books()
        .iter()
        .map(|b| (b.title.clone(), b.bytes.clone()))
        .collect()
}

/// The streams of every seed-0 run (`runs` with `results`, in plan order) but those that need
/// marks and full softmax attention: its cache when it is of these weights and books, else
/// measured from its weights (node tables rebuilt for the longest book) and cached. The runs
/// left out (oracle routing, full softmax; neither a cache nor weights) are returned with the
/// reason.
///
/// # Errors
/// Streaming and I/O errors.
pub(super) fn measure(
    runs: &[RunConfig],
    results: &[EvalResult],
    corpus: &BookCorpus,
    out_dir: &Path,
    progress: bool,
) -> Result<(Vec<WholeBooksRow>, Vec<Skipped>), TrainError> {
    let books = test_books(corpus);
    let longest = crate::train::stream::longest_book_lag(&books);
    let (mut rows, mut skipped) = (Vec::new(), Vec::new());
    for (c, e) in runs.iter().zip(results).filter(|(c, _)| c.seed == 0) {
        if let Some(k) = Skipped::needing_marks(c, e) {
            skipped.push(k);
            continue;
        }
        if matches!(c.model.mixer, vort::Mixer::Softmax { window: 0 }) {
            skipped.push(Skipped {
                mixer: e.label().to_string(),
                seed: c.seed,
                why: "full softmax attention: its cache grows with the book".into(),
            });
            continue;
        }
        let dir = RunDir::new(out_dir.join(crate::reproduce::run_path(e.label(), c)));
        let titles: Vec<&str> = books.iter().map(|b| b.0.as_str()).collect();
        let cached = std::fs::read_to_string(dir.whole_books_path())
            .ok()
            .and_then(|t| serde_json::from_str::<WholeBooksRow>(&t).ok())
            .filter(|r| {
                let mine: Vec<&str> = r.result.books.iter().map(|b| b.title.as_str()).collect();
                r.step == e.step && r.result.window == c.task.seq_len && mine == titles
            });
        if let Some(r) = cached {
            rows.push(r);
            continue;
        }
        let (model, step) = match Skipped::or_model(&dir, e, longest)? {
            Ok(m) => m,
            Err(k) => {
                skipped.push(k);
                continue;
            }
        };
        if progress {
            eprintln!("whole test books through {}", dir.path().display());
        }
        let dev = train::device();
        let result = stream_books_by_context(&model, &books, c.task.seq_len, &dev, |_, _| {})?;
        let row = WholeBooksRow {
            mixer: e.label().to_string(),
            seed: c.seed,
            step,
            result,
        };
        train::checkpoint::write_json(&dir.whole_books_path(), &row)?;
        rows.push(row);
    }
    Ok((rows, skipped))
}

/// The section: per model and context bucket, BPC with the state carried and reset on the
/// same bytes, and their difference; nothing when no model was streamed whole.
pub(super) fn markdown(rep: &BooksReport) -> String {
    let skipped = Skipped::markdown("Not streamed whole", &rep.not_whole_books);
    let Some(first) = rep.whole_books.first() else {
        return if skipped.is_empty() {
            String::new()
        } else {
            format!("\n## Whole books\n\n{skipped}")
        };
    };
    let labels: Vec<&str> = first
        .result
        .buckets
        .iter()
        .map(|b| b.label.as_str())
        .collect();
    let mut s = format!(
        "\n## Whole books\n\nEvery test book streamed from its first byte (to 2^20 bytes; \
         `vort eval --whole-books`), the state carried, and the same bytes scored window by \
         window with the state reset every {} bytes (the held-out score's windows). BPC by \
         context, carried / reset (carried - reset); a negative difference is context past the \
         window helping. ![BPC against context]({FIGURE})\n\n| model | {} |\n|---|{}\n",
        first.result.window,
        labels.join(" | "),
        "---|".repeat(labels.len())
    );
    for r in &rep.whole_books {
        let cells: Vec<String> = labels
            .iter()
            .map(|l| {
                r.result
                    .buckets
                    .iter()
                    .find(|b| b.label == *l)
                    .map_or("-".into(), |b| {
                        format!(
                            "{:.3} / {:.3} ({:+.3})",
                            b.carried,
                            b.reset,
                            b.carried - b.reset
                        )
                    })
            })
            .collect();
        s += &format!("| {} s{} | {} |\n", r.mixer, r.seed, cells.join(" | "));
    }
    s + &skipped
}

/// BPC against context (log axis), carried (solid) and reset (dashed) per model, with each
/// compressor on the test split's scored bytes (the report's anchors) as a horizontal line;
/// nothing when no model was streamed whole.
///
/// # Errors
/// Plot errors.
pub(super) fn figure(rep: &BooksReport, out: &Path) -> Result<(), TrainError> {
    if rep.whole_books.is_empty() {
        return Ok(());
    }
    let mid = |b: &crate::train::stream::BookBucket| ((b.lo * b.hi) as f64).sqrt();
    let mut series = Vec::new();
    for (i, r) in rep.whole_books.iter().enumerate() {
        let name = format!("{} s{}", r.mixer, r.seed);
        let pts = |f: fn(&crate::train::stream::BookBucket) -> f64| {
            r.result.buckets.iter().map(|b| (mid(b), f(b))).collect()
        };
        series.push(Series::line(format!("{name}, carried"), pts(|b| b.carried)).with_color(i));
        series.push(Series::dashed(format!("{name}, reset"), pts(|b| b.reset)).with_color(i));
    }
    let span = (1.0, BOOK_BUCKETS[BOOK_BUCKETS.len() - 1].2 as f64);
    if let Some(a) = &rep.anchors {
        let n = rep.whole_books.len();
        for (k, row) in a.measured.split.rows.iter().enumerate() {
            if let Some(bits) = row.bits_per_byte {
                let flat = vec![(span.0, bits), (span.1, bits)];
                series.push(Series::dashed(row.name.clone(), flat).with_color(n + k));
            }
        }
    }
    panels_plot(
        &out.join(FIGURE),
        &[Panel {
            title: "the test books streamed whole: BPC against context".into(),
            x_label: "context (bytes before the byte, in the book)".into(),
            y_label: "bits per byte".into(),
            log_x: true,
            log_y: false,
            series,
        }],
    )?;
    Ok(())
}
