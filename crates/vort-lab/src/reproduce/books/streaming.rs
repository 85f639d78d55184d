//! A whole test book streamed through the seed-0 models of [`STREAMED`] with the state
//! carried across pieces: BPC against context far past the training length, and the resident
//! state (`stream.png`).

use std::path::Path;

use super::{BooksReport, StreamRow, STREAMED};
use crate::plot::{panels_plot, Panel, Series};
use crate::tasks::books::BookCorpus;
use crate::train::stream::stream_text;
use crate::train::{self, RunConfig, TrainError};

/// Streams the first test book of `corpus` through the seed-0 model of each kind in
/// [`STREAMED`].
pub(super) fn measure(
    runs: &[RunConfig],
    corpus: &BookCorpus,
    out_dir: &Path,
    max_bytes: usize,
    progress: bool,
) -> Result<Vec<StreamRow>, TrainError> {
    let mut rows = Vec::new();
    for c in runs
        .iter()
        .filter(|c| c.seed == 0 && STREAMED.contains(&c.model.mixer.kind()))
    {
        let book = &corpus.test_books()[0];
        let text = &book.bytes[..book.bytes.len().min(max_bytes)];
        let (_, mut model, _vm) =
            train::eval::load_model(&out_dir.join(crate::reproduce::run_path(c)))?;
        // trained at seq_len; streamed with nodes certified to 2^20 lags (the learned
        // parameters do not depend on the nodes)
        model.set_horizon(vort::nodes::STREAM_HORIZON)?;
        let bar = if progress {
            indicatif::ProgressBar::new(text.len() as u64)
        } else {
            indicatif::ProgressBar::hidden()
        };
        bar.set_message(format!(
            "streaming {} through {}",
            book.title, c.model.mixer
        ));
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} bytes {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let result = stream_text(&model, text, c.task.seq_len, &train::device(), |done| {
            bar.set_position(done as u64)
        })?;
        bar.finish_and_clear();
        rows.push(StreamRow {
            memory: c.model.mixer.kind().into(),
            book: book.title.clone(),
            result,
        });
    }
    Ok(rows)
}

/// The streaming section: per streamed model the BPC by context range and overall, the state
/// at the start and the end, the throughput, and the same book scored window by window with
/// the state reset; nothing when no book was streamed.
pub(super) fn markdown(rep: &BooksReport) -> String {
    let mut s = String::new();
    if let Some(first) = rep.streams.first() {
        s += &format!(
            "## Streaming a whole test book\n\nThe first {} bytes of `{}` streamed in \
             pieces of {} bytes, state carried across pieces (so the context runs far past \
             the training length), with the memory's node tables rebuilt for 2^20 lags. Context and position in the book \
             are the same thing here, so the last column scores the same book with the state \
             reset every window (the evaluation's windows, seed 0): streaming beats it only if \
             memory beyond one window helps.\n\n| memory | BPC, context 1-4095 \
             | BPC, 4096-32767 | BPC, >= 32768 | overall | state at start / end (bytes) | \
             bytes/s | same book, reset every window |\n|---|---|---|---|---|---|---|---|\n",
            first.result.bytes, first.book, first.result.piece
        );
        for r in &rep.streams {
            let range = |lo: usize, hi: usize| {
                let (n, s) = r
                    .result
                    .bins
                    .iter()
                    .filter(|b| b.lo >= lo && b.hi <= hi)
                    .fold((0usize, 0.0), |a, b| (a.0 + b.n, a.1 + b.bits * b.n as f64));
                if n == 0 {
                    "n/a".to_string()
                } else {
                    format!("{:.3}", s / n as f64)
                }
            };
            let sb = &r.result.state_bytes;
            let windowed = rep
                .runs
                .iter()
                .filter(|e| e.memory == r.memory && e.seed == 0)
                .flat_map(|e| e.per_book.iter().filter(|b| b.label == r.book))
                .next()
                .map_or("n/a".into(), |b| format!("{:.3} ({} bytes)", b.bits(), b.n));
            s += &format!(
                "| {} | {} | {} | {} | {:.3} | {} / {} | {:.0} | {} |\n",
                r.memory,
                range(1, 4095),
                range(4096, 32767),
                range(32768, usize::MAX),
                r.result.bits,
                sb.first().map_or(0, |x| x.1),
                sb.last().map_or(0, |x| x.1),
                r.result.bytes_per_s,
                windowed
            );
        }
        s += "\n![streaming](stream.png)\n\n";
    }
    s
}

/// `stream.png`: BPC against context and the resident state while streaming, a line per
/// streamed model; nothing when no book was streamed.
pub(super) fn figure(streams: &[StreamRow], out: &Path) -> Result<(), TrainError> {
    if !streams.is_empty() {
        let bpc = streams
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let pts = s
                    .result
                    .bins
                    .iter()
                    .map(|b| (((b.lo * b.hi) as f64).sqrt(), b.bits))
                    .collect();
                Series::line(s.memory.clone(), pts).with_color(i)
            })
            .collect();
        let mem = streams
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let pts = s
                    .result
                    .state_bytes
                    .iter()
                    .map(|&(at, b)| (at as f64, b as f64 / 1024.0))
                    .collect();
                Series::line(s.memory.clone(), pts).with_color(i)
            })
            .collect();
        panels_plot(
            &out.join("stream.png"),
            &[
                Panel {
                    title: format!(
                        "streaming `{}` with the state carried: BPC against context",
                        streams[0].book
                    ),
                    x_label: "context (bytes)".into(),
                    y_label: "bits per character".into(),
                    log_x: true,
                    log_y: false,
                    series: bpc,
                },
                Panel {
                    title: "resident state while streaming".into(),
                    x_label: "bytes streamed".into(),
                    y_label: "state (KiB)".into(),
                    log_x: false,
                    log_y: false,
                    series: mem,
                },
            ],
        )?;
    }
    Ok(())
}
