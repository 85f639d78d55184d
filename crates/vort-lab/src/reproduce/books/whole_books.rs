//! The books report's whole-books section (issue #40 items 3 and 5), for presets that ask for
//! it (`whole_books = true`): every model (every seed that kept weights) streams every test
//! book from its first byte (to 2^20 bytes), the state carried and reset every window
//! ([`crate::train::stream::stream_books_by_context`], `vort eval --whole-books`), each
//! cached as the run's `whole_books.json`. The section gives BPC by context bucket per model
//! and the paired verdicts per bucket (VORT against each other mixer with the state carried,
//! and carried against reset per mixer, over blocks of context:
//! [`crate::train::stream::ContextBlock`]); `bpc_whole_books.png` plots the seed-0 models
//! against context on a log axis, the compressors on the same books as horizontal lines.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{BooksReport, Skipped};
use crate::plot::{panels_plot, Panel, Series};
use crate::reproduce::stats::{compare_pairs, Paired, Scores};
use crate::tasks::books::BookCorpus;
use crate::train::eval::EvalResult;
use crate::train::stream::{
    stream_books_by_context, BookStream, BooksByContext, ContextBlock, BOOK_BUCKETS,
};
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

/// The streams of every run (`runs` with `results`, in plan order) but those that need marks
/// and full softmax attention: its cache when it is of these weights and books and holds the
/// blocks the verdicts pair, else measured from its weights or checkpoint (node tables rebuilt
/// for the longest book) and cached. The runs left out (oracle routing, full softmax; neither
/// a cache nor weights: seeds past 0 on a machine that did not train them) are returned with
/// the reason.
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
    for (c, e) in runs.iter().zip(results) {
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
                r.step == e.step
                    && r.result.window == c.task.seq_len
                    && mine == titles
                    && !r.result.blocks.is_empty()
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
    if let Some(a) = &rep.anchors {
        s += &format!(
            "\nThe models streamed whole against the compressors, by test book and for the split \
             (the models: mean bits a byte of every byte of each book but its first, to 2^20; \
             seeds pooled; the compressors: the scored bytes of the test windows, as in \
             \"Against the compressors\": the same books to within a window's tail). A \
             compressor sees the whole book before each byte, as the carried state does.\n\n{}",
            super::anchors::table(a, &compressor_rows(&rep.whole_books, a))
        );
    }
    s + &verdicts(&rep.whole_books) + &skipped
}

/// The mixers of `rows` in report order ([`super::Memories`]: the kinds first, as in the
/// report's other tables).
fn mixers_of<'a>(rows: impl Iterator<Item = &'a WholeBooksRow>) -> Vec<String> {
    let names = rows.map(|r| r.mixer.as_str());
    super::Memories::new(names, &crate::reproduce::KINDS)
        .order()
        .to_vec()
}

/// Per mixer (report order), two rows for the compressor table: carried and reset, each book's
/// mean bits a byte averaged over the seeds streamed, matched to the anchors' books by title;
/// the split the byte-weighted mean over the books.
fn compressor_rows(
    rows: &[WholeBooksRow],
    anchors: &super::anchors::Anchors,
) -> Vec<super::anchors::ModelBpc> {
    let mut out = Vec::new();
    for m in mixers_of(rows.iter()) {
        let runs: Vec<&WholeBooksRow> = rows.iter().filter(|r| r.mixer == m).collect();
        for (side, pick) in [
            (
                "carried",
                (|b: &BookStream| b.carried) as fn(&BookStream) -> f64,
            ),
            ("reset", |b: &BookStream| b.reset),
        ] {
            // (bits, bytes) of one book averaged over the runs that streamed it
            let book = |title: &str| {
                let v: Vec<(f64, usize)> = runs
                    .iter()
                    .filter_map(|r| r.result.books.iter().find(|b| b.title == title))
                    .map(|b| (pick(b), b.bytes.saturating_sub(1)))
                    .collect();
                (!v.is_empty()).then(|| {
                    let mean = v.iter().map(|x| x.0).sum::<f64>() / v.len() as f64;
                    (mean, v[0].1)
                })
            };
            let per: Vec<Option<(f64, usize)>> = anchors
                .measured
                .books
                .iter()
                .map(|b| book(&b.label))
                .collect();
            let n: usize = per.iter().flatten().map(|x| x.1).sum();
            let split = (n > 0 && per.iter().all(Option::is_some))
                .then(|| per.iter().flatten().map(|x| x.0 * x.1 as f64).sum::<f64>() / n as f64);
            out.push(super::anchors::ModelBpc {
                mixer: format!("{m}, {side}"),
                seeds: runs.len(),
                books: per.iter().map(|x| x.map(|x| x.0)).collect(),
                split,
            });
        }
    }
    out
}

/// Per run of `mixer`: (seed, its blocks in bucket `bucket`, scored by `score`) as units.
fn units_of(
    rows: &[WholeBooksRow],
    mixer: &str,
    bucket: usize,
    score: fn(&ContextBlock) -> f64,
) -> Vec<(u64, Scores)> {
    rows.iter()
        .filter(|r| r.mixer == mixer && !r.result.blocks.is_empty())
        .map(|r| {
            let v = r.result.blocks.iter().filter(|b| b.bucket == bucket);
            (r.seed, Scores::Units(v.map(score).collect()))
        })
        .collect()
}

/// `a` − `b` with the state carried, in bucket `bucket`, paired by seed over the blocks.
fn mixer_gap(rows: &[WholeBooksRow], a: &str, b: &str, bucket: usize) -> Paired {
    let carried = |x: &ContextBlock| x.carried;
    compare_pairs(
        &units_of(rows, a, bucket, carried),
        &units_of(rows, b, bucket, carried),
    )
}

/// Carried − reset for `mixer` in bucket `bucket`, each seed paired with itself.
fn carry_gain(rows: &[WholeBooksRow], mixer: &str, bucket: usize) -> Paired {
    compare_pairs(
        &units_of(rows, mixer, bucket, |x| x.carried),
        &units_of(rows, mixer, bucket, |x| x.reset),
    )
}

/// A paired difference as "+0.012 ± 0.003 (n 2, lower)": bits, so "lower" is better for a.
fn cell(p: &Paired) -> String {
    if p.diff.is_finite() {
        format!(
            "{:+.3} ± {:.3} (n {}, {})",
            p.diff,
            p.se,
            p.pairs.len(),
            p.word
        )
    } else {
        format!("- ({})", p.word)
    }
}

/// The whole-books verdicts (issue #40 item 5): per context bucket, VORT against every other
/// mixer with the state carried, and carried against reset per mixer, by the paired rule over
/// blocks of context ([`crate::train::stream::ContextBlock`]); then whether VORT's gap to the
/// exponential grows with context: its gap in the last bucket against the last bucket inside
/// the first window (2K-8K for windows of 8192: where carrying changes nothing), SE
/// √(SE₁² + SE₂²) (the two are on disjoint bytes).
fn verdicts(rows: &[WholeBooksRow]) -> String {
    let names = mixers_of(rows.iter().filter(|r| !r.result.blocks.is_empty()));
    let mixers: Vec<&str> = names.iter().map(String::as_str).collect();
    let buckets: Vec<usize> = (0..BOOK_BUCKETS.len())
        .filter(|&k| {
            rows.iter()
                .any(|r| r.result.blocks.iter().any(|b| b.bucket == k))
        })
        .collect();
    if mixers.is_empty() || buckets.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\n### Verdicts by context\n\nRule: seed k of one model is paired with seed k of the \
         other on the same bytes; the unit is a block of context of one test book (512 bytes, or \
         a 32nd of the bucket's upper end where that is longer: 12-28 blocks a book in each \
         bucket past 2K), each block's difference averaged over the pairs; a difference counts \
         when it exceeds twice its SE (sd over blocks / √blocks). Neighbouring blocks of one \
         book are not independent samples, so the SE is optimistic. Bits a byte: negative is \
         the first model better.\n\n",
    );
    let others: Vec<&str> = mixers.iter().copied().filter(|m| *m != "vort").collect();
    if mixers.contains(&"vort") && !others.is_empty() {
        let cols: Vec<String> = others.iter().map(|m| format!("vort − {m}")).collect();
        s += "VORT against each mixer, the state carried:\n\n";
        s += &bucket_table(&buckets, &cols, |k, i| {
            cell(&mixer_gap(rows, "vort", others[i], k))
        });
        s += "\n";
    }
    let cols: Vec<String> = mixers
        .iter()
        .map(|m| format!("{m}: carried − reset"))
        .collect();
    s += "Carried against reset, per mixer (does context past the window help?):\n\n";
    s += &bucket_table(&buckets, &cols, |k, i| {
        cell(&carry_gain(rows, mixers[i], k))
    });
    if mixers.contains(&"vort") && mixers.contains(&"exponential") {
        s += &growth_line(rows, &buckets);
    }
    s + "\n"
}

/// A table with a row per bucket of `buckets` and a column per `cols`, cell (bucket, column)
/// from `cell_of`.
fn bucket_table(
    buckets: &[usize],
    cols: &[String],
    cell_of: impl Fn(usize, usize) -> String,
) -> String {
    let mut s = format!(
        "| context | {} |\n|---|{}\n",
        cols.join(" | "),
        "---|".repeat(cols.len())
    );
    for &k in buckets {
        let c: Vec<String> = (0..cols.len()).map(|i| cell_of(k, i)).collect();
        s += &format!("| {} | {} |\n", BOOK_BUCKETS[k].0, c.join(" | "));
    }
    s
}

/// Whether VORT's gap to the exponential grows with context: vort − exponential in the last
/// of `buckets` minus in the last bucket inside the first window (where carrying changes
/// nothing), SE √(SE₁² + SE₂²) (disjoint bytes); empty when either is missing.
fn growth_line(rows: &[WholeBooksRow], buckets: &[usize]) -> String {
    let window = rows.first().map_or(0, |r| r.result.window);
    let far = *buckets.last().unwrap_or(&0);
    let Some(near) = buckets
        .iter()
        .copied()
        .filter(|&k| BOOK_BUCKETS[k].2 <= window && k < far)
        .max()
    else {
        return String::new();
    };
    let (a, b) = (
        mixer_gap(rows, "vort", "exponential", near),
        mixer_gap(rows, "vort", "exponential", far),
    );
    if !(a.diff.is_finite() && b.diff.is_finite()) {
        return String::new();
    }
    let (d, se) = (b.diff - a.diff, (a.se.powi(2) + b.se.powi(2)).sqrt());
    let word = if d < -2.0 * se {
        "yes: the gap grows in VORT's favour"
    } else if d > 2.0 * se {
        "no: it shrinks (or turns against VORT)"
    } else {
        "not distinguishable"
    };
    format!(
        "\nDoes VORT's gap to the exponential grow with context (the paper: \"the advantage \
         grew with context length\")? vort − exponential at {} minus at {}: {d:+.3} ± {se:.3}: \
         **{word}**.\n",
        BOOK_BUCKETS[far].0, BOOK_BUCKETS[near].0
    )
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
    // seed 0 only: a line per seed and stream would bury the figure (the table has every seed)
    for (i, r) in rep.whole_books.iter().filter(|r| r.seed == 0).enumerate() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::stream::BookBucket;

    /// A stream of one book whose blocks in bucket k score `base[k] + wobble` carried (the
    /// wobble differs per block, so the SE is not zero) and `reset[k]` reset.
    fn row(mixer: &str, seed: u64, carried: [f64; 4], reset: [f64; 4]) -> WholeBooksRow {
        let mut blocks = Vec::new();
        for k in 0..4 {
            for b in 0..12 {
                let wobble = 0.01 * ((b * 7 + seed as usize) % 5) as f64;
                blocks.push(ContextBlock {
                    book: 0,
                    bucket: k,
                    n: 512,
                    carried: carried[k] + wobble,
                    reset: reset[k] + wobble,
                });
            }
        }
        WholeBooksRow {
            mixer: mixer.into(),
            seed,
            step: 10,
            result: BooksByContext {
                window: 8192,
                books: vec![BookStream {
                    title: "t".into(),
                    bytes: 1,
                    carried: 0.0,
                    reset: 0.0,
                }],
                buckets: Vec::<BookBucket>::new(),
                blocks,
                bytes_per_s: 1.0,
            },
        }
    }

    #[test]
    fn verdicts_pair_blocks_by_seed_and_see_a_gap_grow() {
        // VORT 0.1 bits below the exponential inside the window (buckets 0-2), 0.3 below at
        // 8K-32K; carrying helps VORT by 0.2 there and the exponential by nothing
        let rows = [0, 1]
            .into_iter()
            .flat_map(|seed| {
                [
                    row("vort", seed, [2.0, 2.0, 2.0, 1.7], [2.0, 2.0, 2.0, 1.9]),
                    row(
                        "exponential",
                        seed,
                        [2.1, 2.1, 2.1, 2.0],
                        [2.1, 2.1, 2.1, 2.0],
                    ),
                ]
            })
            .collect::<Vec<_>>();
        let gap = mixer_gap(&rows, "vort", "exponential", 3);
        assert_eq!(gap.pairs, [0, 1]);
        assert!(
            (gap.diff + 0.3).abs() < 1e-12 && gap.word == "lower",
            "{gap:?}"
        );
        let gain = carry_gain(&rows, "vort", 3);
        assert!(
            (gain.diff + 0.2).abs() < 1e-12 && gain.word == "lower",
            "{gain:?}"
        );
        // no difference at all: the SE is zero, the difference zero, not "lower"
        let none = carry_gain(&rows, "exponential", 3);
        assert_eq!(none.diff, 0.0);
        assert_eq!(none.word, "not distinguishable");
        let md = verdicts(&rows);
        assert!(
            md.contains("| 8K-32K | -0.300 ± 0.000 (n 2, lower) |"),
            "{md}"
        );
        assert!(md.contains("at 8K-32K minus at 2K-8K: -0.200"), "{md}");
        assert!(
            md.contains("**yes: the gap grows in VORT's favour**"),
            "{md}"
        );
        // a seed without its pair is left out, not paired with another seed
        let lone = [rows[0].clone(), rows[3].clone()];
        assert!(mixer_gap(&lone, "vort", "exponential", 3).pairs.is_empty());
    }
}
