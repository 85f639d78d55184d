//! A whole test book streamed through every trained model of [`STREAMED`] (each seed) with
//! the state carried across pieces: BPC against context far past the training length, the
//! resident state (`stream.png`), and the evidence for why a carried state helps or hurts
//! against the same book scored window by window with the state reset
//! (`stream_diagnostics.png`: BPC, the normaliser's mass, α and the share of that mass on
//! nodes slower than one training window, against position in the book). A memory with node
//! tables (VORT) is streamed three ways: with tables rebuilt for 2^20 lags, with the tables it
//! was trained with and their own tail past the training length
//! ([`vort::block::PastHorizon::SoeTail`]), and with every kernel tempered by e^(-j/T)
//! ([`vort::block::PastHorizon::Tempered`]).
//!
//! A stream is cached in its run directory (`stream.json`, [`RunDir::stream_path`]) with the
//! training step of the parameters it streamed, so a report rebuilt from committed runs
//! (which keep weights for seed 0 only) still has every seed's stream.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{BooksReport, Memories, Skipped, StreamRow, TemperedStream, STREAMED};
use crate::plot::{panels_plot, Panel, Series};
use crate::tasks::books::BookCorpus;
use crate::train::eval::EvalResult;
use crate::train::stream::{stream_text, stream_text_resetting, StreamResult};
use crate::train::RunDir;
use crate::train::{self, RunConfig, TrainError};

/// File name of the diagnostics figure.
pub const DIAGNOSTICS_FIGURE: &str = "stream_diagnostics.png";

/// Reset periods of the sweep, in training windows: the state is reset every R windows, so a
/// byte sees at most R windows of context. R = 1 is the evaluation's window by window.
pub const RESET_PERIODS: [usize; 4] = [1, 2, 4, 8];

/// Training windows of the book the reset sweep covers (the carried stream's first ones are
/// its "never" point).
pub const RESET_SWEEP_WINDOWS: usize = 16;

/// One point of the reset sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResetPoint {
    /// The state was reset every this many windows (0: never, the carried stream).
    pub every: usize,
    /// Scored bytes (the same for every point of a sweep).
    pub bytes: usize,
    /// Mean BPC over them.
    pub bits: f64,
}

/// The reset sweep over the first [`RESET_SWEEP_WINDOWS`] windows of `text`: BPC with the state
/// reset every R windows for each R of [`RESET_PERIODS`], then never (the carried stream's
/// own first pieces, `carried`). Empty when the text is shorter than two windows.
fn reset_sweep(
    model: &vort::model::Model,
    text: &[u8],
    piece: usize,
    carried: &StreamResult,
) -> Result<Vec<ResetPoint>, TrainError> {
    let windows = RESET_SWEEP_WINDOWS.min((text.len() - 1) / piece);
    if windows < 2 {
        return Ok(Vec::new());
    }
    let part = &text[..windows * piece + 1];
    let mut out = Vec::new();
    for every in RESET_PERIODS.into_iter().filter(|&r| r < windows) {
        let r = stream_text_resetting(model, part, piece, every, &train::device(), |_| {})?;
        out.push(ResetPoint {
            every,
            bytes: windows * piece,
            bits: r.bits,
        });
    }
    // never reset: the carried stream's first `windows` pieces (all of `piece` bytes)
    let first = &carried.pieces[..windows.min(carried.pieces.len())];
    out.push(ResetPoint {
        every: 0,
        bytes: windows * piece,
        bits: first.iter().map(|p| p.bits).sum::<f64>() / first.len() as f64,
    });
    Ok(out)
}

/// Streams the first test book of `corpus` (at most `max_bytes` of it) through the finished
/// run of each config in `runs` whose kind is in [`STREAMED`] (`results` aligned with
/// `runs`, named by their `memory`), reusing a run's cached stream when it streamed the same
/// parameters over the same bytes. A run with neither a cache nor weights is left out with a
/// warning; a run with oracle routing is left out and listed with the reason (no marks).
///
/// # Errors
/// Model, streaming and I/O errors.
pub(super) fn measure(
    runs: &[RunConfig],
    results: &[EvalResult],
    corpus: &BookCorpus,
    out_dir: &Path,
    max_bytes: usize,
    progress: bool,
) -> Result<(Vec<StreamRow>, Vec<Skipped>), TrainError> {
    let book = &corpus.test_books()[0];
    let text = &book.bytes[..book.bytes.len().min(max_bytes)];
    let (mut rows, mut skipped) = (Vec::new(), Vec::new());
    for (c, e) in runs.iter().zip(results) {
        if !STREAMED.contains(&c.model.mixer.kind().name()) {
            continue;
        }
        if let Some(k) = Skipped::needing_marks(c, e) {
            skipped.push(k);
            continue;
        }
        let dir = RunDir::new(out_dir.join(crate::reproduce::run_path(e.label(), c)));
        if let Some(row) = stream_run((c, e), &dir, (&book.title, text), progress)? {
            rows.push(row);
        }
    }
    Ok((rows, skipped))
}

/// The stream row of one run (`c`, evaluated as `e`) over `text` of the book `title`: its
/// cache when complete, else the missing streams measured from its weights (a cache of the
/// same parameters keeps what it has, bit for bit) and cached. None, with a warning, for a
/// run with neither a cache nor weights.
fn stream_run(
    (c, e): (&RunConfig, &EvalResult),
    dir: &RunDir,
    (title, text): (&str, &[u8]),
    progress: bool,
) -> Result<Option<StreamRow>, TrainError> {
    let tabled = c.model.mixer.horizon().is_some();
    let cached = read_cache(dir).filter(|r| streamed_these((c, e), (title, text), r));
    // a memory with node tables is also streamed with its trained tables, and tempered at
    // τ = the training length
    let tau = c.task.seq_len as f64;
    let complete = |r: &StreamRow| {
        !tabled
            || (r.at_trained_horizon.is_some() && r.tempered.as_ref().is_some_and(|t| t.tau == tau))
    };
    if let Some(row) = cached.clone().filter(complete) {
        return Ok(Some(row));
    }
    let (_, mut model, _vm, step) = match dir.load_model() {
        Ok(m) => m,
        Err(err) => {
            if cached.is_none() {
                eprintln!(
                    "warning: {} is not streamed: no stream.json for these bytes and no \
                     model to stream ({err})",
                    dir.path().display()
                );
            }
            return Ok(cached);
        }
    };
    let bar = stream_bar(progress, text.len());
    let stream = |model: &vort::model::Model, kernel: &str| {
        bar.reset();
        bar.set_message(format!(
            "streaming {title} through {} seed {} ({kernel})",
            c.model.mixer, c.seed
        ));
        stream_text(model, text, c.task.seq_len, &train::device(), |done| {
            bar.set_position(done as u64)
        })
    };
    // what a cache of the same parameters already has is kept, bit for bit
    let have = cached.filter(|r| r.step == step);
    let (at_trained_horizon, tempered) =
        past_horizon_streams(&mut model, have.as_ref(), (tabled, tau), &stream)?;
    if let Some(mut row) = have {
        bar.finish_and_clear();
        row.at_trained_horizon = at_trained_horizon;
        row.tempered = tempered;
        write_cache(dir, &row)?;
        return Ok(Some(row));
    }
    // trained at seq_len; streamed with nodes certified to 2^20 lags (the learned
    // parameters do not depend on the nodes)
    model.set_horizon(vort::nodes::STREAM_HORIZON)?;
    let result = stream(&model, "2^20-lag node tables")?;
    bar.set_message(format!(
        "reset sweep over {RESET_SWEEP_WINDOWS} windows through {} seed {}",
        c.model.mixer, c.seed
    ));
    let resets = reset_sweep(&model, text, c.task.seq_len, &result)?;
    bar.finish_and_clear();
    let row = StreamRow {
        mixer: e.label().to_string(),
        seed: c.seed,
        step,
        book: title.to_string(),
        result,
        resets,
        at_trained_horizon,
        tempered,
    };
    write_cache(dir, &row)?;
    Ok(Some(row))
}

/// Whether the cached stream `r` is of the run `c` (evaluated as `e`) over `text` of the book
/// `title`.
fn streamed_these(
    (c, e): (&RunConfig, &EvalResult),
    (title, text): (&str, &[u8]),
    r: &StreamRow,
) -> bool {
    r.mixer == e.label()
        && r.seed == c.seed
        && r.step == e.step
        && r.book == title
        && r.result.bytes == text.len()
        && r.result.piece == c.task.seq_len
        && !r.result.pieces.is_empty()
        && (!r.resets.is_empty() || text.len() <= 2 * c.task.seq_len)
}

/// A progress bar over `bytes` bytes (hidden without `progress`).
fn stream_bar(progress: bool, bytes: usize) -> indicatif::ProgressBar {
    let bar = if progress {
        indicatif::ProgressBar::new(bytes as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} bytes {eta} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// The streams of a model with node tables (`tabled`) past its trained horizon: with the
/// tables it was trained with (the config's horizon, resolved to seq_len; their own tail
/// weighs the lags past it) and with its kernels tempered at `tau`. Those `have` holds are
/// kept; the model is left refusing lags past its horizon.
fn past_horizon_streams(
    model: &mut vort::model::Model,
    have: Option<&StreamRow>,
    (tabled, tau): (bool, f64),
    stream: &dyn Fn(&vort::model::Model, &str) -> Result<StreamResult, TrainError>,
) -> Result<(Option<StreamResult>, Option<TemperedStream>), TrainError> {
    use vort::block::PastHorizon;
    let mut at_trained_horizon = have.and_then(|r| r.at_trained_horizon.clone());
    let mut tempered = have
        .and_then(|r| r.tempered.clone())
        .filter(|t| t.tau == tau);
    if tabled {
        if at_trained_horizon.is_none() {
            model.set_past_horizon(PastHorizon::SoeTail)?;
            at_trained_horizon = Some(stream(model, "trained node tables")?);
        }
        if tempered.is_none() {
            model.set_past_horizon(PastHorizon::Tempered { tau })?;
            let result = stream(model, "tempered kernels")?;
            tempered = Some(TemperedStream { tau, result });
        }
        model.set_past_horizon(PastHorizon::Refuse)?;
    }
    Ok((at_trained_horizon, tempered))
}

/// Writes a run's stream cache (`stream.json`) through the atomic writer.
fn write_cache(dir: &RunDir, row: &StreamRow) -> Result<(), TrainError> {
    train::checkpoint::write_json(&dir.stream_path(), row)
}

/// The cached stream of a run, if one was written and parses.
fn read_cache(dir: &RunDir) -> Option<StreamRow> {
    std::fs::read_to_string(dir.stream_path())
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
}

/// BPC of each evaluation window of the streamed book with the state reset every window:
/// (window centre in the book, bits), from the run's per-window scores. The book is the first
/// test book, so its windows are the evaluation's first ones, tiling it from byte 0 in
/// windows of `piece + 1` bytes.
fn reset_windows(rep: &BooksReport, r: &StreamRow) -> Vec<(f64, f64)> {
    let Some(e) = rep
        .runs
        .iter()
        .find(|e| e.label() == r.mixer && e.seed == r.seed)
    else {
        return Vec::new();
    };
    let Some(book) = e.per_book.iter().find(|b| b.label == r.book) else {
        return Vec::new();
    };
    let piece = r.result.piece;
    let windows = book.n / piece.max(1);
    e.per_window
        .iter()
        .take(windows)
        .enumerate()
        .map(|(w, s)| {
            let (nll, n) = (s.nll.iter().sum::<f64>(), s.n.iter().sum::<usize>());
            (
                ((w as f64 + 0.5) * (piece + 1) as f64),
                nll / n.max(1) as f64 / std::f64::consts::LN_2,
            )
        })
        .collect()
}

/// Mean BPC over the streamed pieces whose end lies in [lo, hi) bytes.
fn pieces_bits(r: &StreamRow, lo: usize, hi: usize) -> Option<f64> {
    let v: Vec<f64> = r
        .result
        .pieces
        .iter()
        .filter(|p| p.end > lo && p.end <= hi)
        .map(|p| p.bits)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Mean of the reset windows whose centre lies in [lo, hi) bytes.
fn windows_bits(w: &[(f64, f64)], lo: usize, hi: usize) -> Option<f64> {
    let v: Vec<f64> = w
        .iter()
        .filter(|(x, _)| *x >= lo as f64 && *x < hi as f64)
        .map(|(_, b)| *b)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The diagnosis table: per streamed run, the carried-minus-reset gap in the first window, the
/// first half and the second half of the book, and the normaliser's mass, its slow share and
/// the mean α after the first window and at the end.
fn diagnosis(rep: &BooksReport) -> String {
    let mut s = String::from(
        "Why the carried state helps or hurts (`stream_diagnostics.png`). Carried − reset is \
         the streamed BPC minus the same bytes scored window by window with the state reset \
         (negative: memory beyond one window helps); the first window is the same context in \
         both, so its gap is only the pieces' alignment. Mass is the retention state's \
         normaliser Σ_n Σ_f G_n[f, D] (mean over layers and heads): the denominator of every \
         read-out. Slow share is the part of it held by nodes whose time constant 1/u_n \
         exceeds one training window: lags the model was never trained on, when the node \
         tables are rebuilt for the stream.\n\n\
         | memory | seed | carried − reset, first window | first half | second half | \
         mass after one window → end | slow share after one window → end | α after one \
         window → end |\n|---|---|---|---|---|---|---|---|\n",
    );
    let f3 = |x: Option<f64>| x.map_or("n/a".into(), |v| format!("{v:+.3}"));
    let g = |x: Option<f64>| x.map_or("n/a".into(), |v| format!("{v:.3}"));
    for r in &rep.streams {
        let w = reset_windows(rep, r);
        let (piece, len) = (r.result.piece, r.result.bytes);
        let gap = |lo: usize, hi: usize| match (pieces_bits(r, lo, hi), windows_bits(&w, lo, hi)) {
            (Some(a), Some(b)) => Some(a - b),
            _ => None,
        };
        let (first, last) = (r.result.pieces.first(), r.result.pieces.last());
        let pair = |f: &dyn Fn(&crate::train::stream::PieceDiagnostics) -> Option<f64>| match (
            first.and_then(f),
            last.and_then(f),
        ) {
            (Some(a), Some(b)) => format!("{} → {}", g(Some(a)), g(Some(b))),
            _ => "n/a".into(),
        };
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.mixer,
            r.seed,
            f3(gap(0, piece + 1)),
            f3(gap(0, len / 2)),
            f3(gap(len / 2, len + 1)),
            pair(&|p| p.normaliser),
            pair(&|p| p.slow_share),
            pair(&|p| p.alpha),
        );
    }
    s + "\n"
}

/// The streaming section: per streamed run the BPC by context range and overall, the same
/// book scored window by window with the state reset and the difference, the state at the
/// start and the end, and the throughput; then the diagnosis. The runs left unstreamed are
/// named with the reason; nothing when no book was streamed and none was left out.
pub(super) fn markdown(rep: &BooksReport) -> String {
    let mut s = String::new();
    let not_streamed = Skipped::markdown("Not streamed", &rep.not_streamed);
    let Some(first) = rep.streams.first() else {
        if !not_streamed.is_empty() {
            s += "## Streaming a whole test book\n\n";
            s += &not_streamed;
        }
        return s;
    };
    s += &format!(
        "## Streaming a whole test book\n\nThe first {} bytes of `{}` streamed in pieces of {} \
         bytes, state carried across pieces (so the context runs far past the training \
         length), with the memory's node tables rebuilt for 2^20 lags. Context and position \
         in the book are the same thing here, so the reset column scores the same book with \
         the state reset every window (the evaluation's windows, same run): streaming beats \
         it only if memory beyond one window helps.\n\n| memory | seed | BPC, context \
         1-4095 | 4096-32767 | >= 32768 | overall, carried | same book, reset every window | \
         carried − reset | state at start / end (bytes) | bytes/s |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
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
        let (windowed, diff) = reset_columns(rep, r, &r.result);
        s += &format!(
            "| {} | {} | {} | {} | {} | {:.3} | {} | {} | {} / {} | {:.0} |\n",
            r.mixer,
            r.seed,
            range(1, 4095),
            range(4096, 32767),
            range(32768, usize::MAX),
            r.result.bits,
            windowed,
            diff,
            sb.first().map_or(0, |x| x.1),
            sb.last().map_or(0, |x| x.1),
            r.result.bytes_per_s,
        );
    }
    s += "\n";
    s += &not_streamed;
    s += "![streaming](stream.png)\n\n";
    s += &kernel_variants_table(rep);
    if rep.streams.iter().any(|r| !r.result.pieces.is_empty()) {
        s += &diagnosis(rep);
        s += &sweep_table(rep);
        s += &format!("![stream diagnostics]({DIAGNOSTICS_FIGURE})\n\n");
    }
    s
}

/// The "reset every window" and "carried − reset" cells of a stream of `r`'s run: its BPC on
/// the streamed book scored window by window, and `carried`'s BPC minus it (only when the
/// stream spans the scored windows, to within one window's tail the windows do not tile;
/// else the bytes differ).
fn reset_columns(rep: &BooksReport, r: &StreamRow, carried: &StreamResult) -> (String, String) {
    let reset = rep
        .runs
        .iter()
        .filter(|e| e.label() == r.mixer && e.seed == r.seed)
        .flat_map(|e| e.per_book.iter().filter(|b| b.label == r.book))
        .next();
    match reset {
        Some(b) => (
            format!("{:.3} ({} bytes)", b.bits(), b.n),
            if carried
                .bytes
                .abs_diff(b.n / carried.piece.max(1) * (carried.piece + 1))
                <= carried.piece
            {
                format!("{:+.3}", carried.bits - b.bits())
            } else {
                "n/a (other bytes)".into()
            },
        ),
        None => ("n/a".into(), "n/a".into()),
    }
}

/// The streams of a run with another kernel past the training length, labelled: the trained
/// node tables' own tail, then the tempered kernel (empty for memories without node tables).
fn kernel_variants(r: &StreamRow) -> Vec<(String, &StreamResult)> {
    let mut v = Vec::new();
    if let Some(t) = &r.at_trained_horizon {
        v.push(("trained node tables' tail".to_string(), t));
    }
    if let Some(t) = &r.tempered {
        v.push((format!("tempered, e^(-j/{})", t.tau), &t.result));
    }
    v
}

/// The book streamed with the kernel changed past the training length, beside the 2^20-lag
/// stream and the reset windows; nothing when no stream has such a variant.
fn kernel_variants_table(rep: &BooksReport) -> String {
    let runs: Vec<&StreamRow> = rep
        .streams
        .iter()
        .filter(|r| !kernel_variants(r).is_empty())
        .collect();
    let Some(first) = runs.first() else {
        return String::new();
    };
    let mut s = format!(
        "Can the stream be fixed without training? The same book streamed again by the same \
         parameters with two other kernels past the training length T = {}: (a) the node \
         tables the model was trained with, not rebuilt for 2^20 lags, their own tail Σ_n \
         c_n e^(-u_n j) weighing the lags past T (its slowest nodes outlast T, since a \
         near-flat kernel of α ≈ 1 needs them); (b) every kernel tempered by e^(-j/T), which \
         bounds the weight of lags far past T but also lowers the in-window weights (by up \
         to e^(-1) at lag T), so it is another model than the one trained and scored. Reset \
         is the evaluation's window-by-window score of the trained model.\n\n| memory | seed \
         | kernel | carried | same book, reset every window | carried − reset | mass after \
         one window → end |\n|---|---|---|---|---|---|---|\n",
        first.result.piece
    );
    let mass = |x: &StreamResult| match (x.pieces.first(), x.pieces.last()) {
        (Some(a), Some(b)) => match (a.normaliser, b.normaliser) {
            (Some(a), Some(b)) => format!("{a:.1} → {b:.1}"),
            _ => "n/a".into(),
        },
        _ => "n/a".into(),
    };
    for r in runs {
        let all = std::iter::once(("power law, 2^20-lag node tables".to_string(), &r.result))
            .chain(kernel_variants(r));
        for (label, x) in all {
            let (windowed, diff) = reset_columns(rep, r, x);
            s += &format!(
                "| {} | {} | {label} | {:.3} | {windowed} | {diff} | {} |\n",
                r.mixer,
                r.seed,
                x.bits,
                mass(x),
            );
        }
    }
    s + "\n"
}

/// `stream.png`: BPC against context and the resident state while streaming, a line per
/// streamed model; nothing when no book was streamed.
pub(super) fn figure(streams: &[StreamRow], out: &Path) -> Result<(), TrainError> {
    let memories = streamed(streams);
    if !streams.is_empty() {
        let bpc = streams
            .iter()
            .map(|s| {
                let pts = s
                    .result
                    .bins
                    .iter()
                    .map(|b| (((b.lo * b.hi) as f64).sqrt(), b.bits))
                    .collect();
                run_series(&memories, s, pts)
            })
            .collect();
        let mem = streams
            .iter()
            .map(|s| {
                let pts = s
                    .result
                    .state_bytes
                    .iter()
                    .map(|&(at, b)| (at as f64, b as f64 / 1024.0))
                    .collect();
                run_series(&memories, s, pts)
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

/// The streamed memories with their colours: the kinds of [`STREAMED`] at their places, then
/// the other names (the ladder's learned order), as they come.
fn streamed(streams: &[StreamRow]) -> Memories {
    Memories::new(streams.iter().map(|s| s.mixer.as_str()), &STREAMED)
}

/// A streamed run's line: named by memory and seed, coloured by memory, seed 0 solid.
fn run_series(m: &Memories, r: &StreamRow, pts: Vec<(f64, f64)>) -> Series {
    let name = format!("{} seed {}", r.mixer, r.seed);
    let color = m.color(&r.mixer);
    let s = if r.seed == 0 {
        Series::line(name, pts)
    } else {
        Series::dashed(name, pts)
    };
    s.with_color(color)
}

/// The points one panel draws for one stream of a run.
type PointsOf<'a> = &'a dyn Fn(&StreamRow, &StreamResult) -> Vec<(f64, f64)>;

/// The `i`-th kernel variant of a run's stream: named by its label, in a colour after the
/// memories' own.
fn variant_series(
    m: &Memories,
    r: &StreamRow,
    i: usize,
    label: &str,
    pts: Vec<(f64, f64)>,
) -> Series {
    let name = format!("{} seed {}, {label}", r.mixer, r.seed);
    let color = m.colors() * (i + 1) + m.color(&r.mixer);
    let s = if r.seed == 0 {
        Series::line(name, pts)
    } else {
        Series::dashed(name, pts)
    };
    s.with_color(color)
}

/// `stream_diagnostics.png`: against position in the book, per streamed run, the BPC of each
/// carried piece minus the same bytes' BPC with the state reset every window, the normaliser's
/// mass, its slow share and the mean α; nothing without piece diagnostics.
pub(super) fn diagnostics_figure(rep: &BooksReport, out: &Path) -> Result<(), TrainError> {
    let runs: Vec<&StreamRow> = rep
        .streams
        .iter()
        .filter(|r| !r.result.pieces.is_empty())
        .collect();
    if runs.is_empty() {
        return Ok(());
    }
    let memories = streamed(&rep.streams);
    let series = |f: &dyn Fn(&StreamRow) -> Vec<(f64, f64)>| -> Vec<Series> {
        runs.iter()
            .map(|r| (r, f(r)))
            .filter(|(_, pts)| !pts.is_empty())
            .map(|(r, pts)| run_series(&memories, r, pts))
            .collect()
    };
    let gap_of = |r: &StreamRow, stream: &StreamResult| gap_points(rep, r, stream);
    let gap = |r: &StreamRow| gap_of(r, &r.result);
    // the streams with other kernels past the training length, beside the 2^20-lag ones
    let variants = |f: PointsOf| -> Vec<Series> {
        runs.iter()
            .flat_map(|r| {
                kernel_variants(r)
                    .into_iter()
                    .enumerate()
                    .map(move |(i, (label, x))| (r, i, label, f(r, x)))
            })
            .filter(|(_, _, _, pts)| !pts.is_empty())
            .map(|(r, i, label, pts)| variant_series(&memories, r, i, &label, pts))
            .collect()
    };
    let mut panels =
        vec![
        position_panel(
            "BPC carried minus reset every window, per piece (< 0: memory beyond a window helps)",
            "Δ bits per character",
            false,
            [series(&gap), variants(&gap_of)].concat(),
        ),
        position_panel(
            "the retention state's normaliser mass Σ_n Σ_f G_n[f, D] (mean over layers, heads)",
            "mass",
            true,
            [series(&|r| piece_points(r, |p| p.normaliser)), variants(&mass_points)].concat(),
        ),
        position_panel(
            "share of that mass on nodes slower than one training window (1/u_n > T)",
            "slow share",
            false,
            series(&|r| piece_points(r, |p| p.slow_share)),
        ),
    ];
    let alpha = series(&|r| piece_points(r, |p| p.alpha));
    if !alpha.is_empty() {
        panels.push(position_panel(
            "mean learned α of each piece (all layers and heads)",
            "α",
            false,
            alpha,
        ));
    }
    panels.push(Panel {
        title: "the first windows with the state reset every R windows (R = all: never reset)"
            .into(),
        x_label: "R, windows of context at most".into(),
        y_label: "bits per character".into(),
        log_x: true,
        log_y: false,
        series: series(&sweep_points),
    });
    panels.retain(|p| !p.series.is_empty());
    if panels.is_empty() {
        return Ok(());
    }
    panels_plot(&out.join(DIAGNOSTICS_FIGURE), &panels)?;
    Ok(())
}

/// (end of the piece, normaliser mass) over the pieces of `stream`.
fn mass_points(_: &StreamRow, stream: &StreamResult) -> Vec<(f64, f64)> {
    stream
        .pieces
        .iter()
        .filter_map(|p| p.normaliser.map(|v| (p.end as f64, v)))
        .collect()
}

/// A panel over the position in the book.
fn position_panel(title: &str, y: &str, log_y: bool, series: Vec<Series>) -> Panel {
    Panel {
        title: title.into(),
        x_label: "position in the book (bytes)".into(),
        y_label: y.into(),
        log_x: false,
        log_y,
        series,
    }
}

/// (end of the piece, g(piece)) over the pieces of `r`'s stream where g is defined.
fn piece_points(
    r: &StreamRow,
    g: fn(&crate::train::stream::PieceDiagnostics) -> Option<f64>,
) -> Vec<(f64, f64)> {
    r.result
        .pieces
        .iter()
        .filter_map(|p| g(p).map(|v| (p.end as f64, v)))
        .collect()
}

/// Carried minus reset, piece by window: each piece of `stream` against the reset window of
/// `r` whose centre is nearest the piece's centre (pieces of T bytes, windows of T + 1).
fn gap_points(rep: &BooksReport, r: &StreamRow, stream: &StreamResult) -> Vec<(f64, f64)> {
    let w = reset_windows(rep, r);
    let half = stream.piece as f64 / 2.0;
    stream
        .pieces
        .iter()
        .filter_map(|p| {
            let centre = p.end as f64 - half;
            w.iter()
                .min_by(|a, b| (a.0 - centre).abs().total_cmp(&(b.0 - centre).abs()))
                .filter(|(x, _)| (x - centre).abs() <= half)
                .map(|(_, b)| (p.end as f64, p.bits - b))
        })
        .collect()
}

/// The reset sweep of `r`: (windows of context at most, BPC), "never" drawn at the sweep's
/// whole length.
fn sweep_points(r: &StreamRow) -> Vec<(f64, f64)> {
    let windows = r
        .resets
        .first()
        .map_or(0, |p| p.bytes / r.result.piece.max(1));
    r.resets
        .iter()
        .map(|p| {
            let span = if p.every == 0 { windows } else { p.every };
            (span as f64, p.bits)
        })
        .collect()
}

/// The reset sweep as a table: BPC over the book's first windows with the state reset every R
/// windows, per streamed run; nothing without a sweep.
fn sweep_table(rep: &BooksReport) -> String {
    let Some(first) = rep.streams.iter().find(|r| !r.resets.is_empty()) else {
        return String::new();
    };
    let windows = first.resets[0].bytes / first.result.piece.max(1);
    let mut s = format!(
        "Is it the lags the model was never trained on? The first {windows} windows ({} bytes) \
         streamed with the state reset every R windows, so a byte sees at most R windows of \
         context (R = 1: window by window; never: the carried stream). If the BPC rises with \
         R, context beyond the training window hurts.\n\n| memory | seed |",
        first.resets[0].bytes
    );
    for p in &first.resets {
        s += &match p.every {
            0 => " never |".to_string(),
            r => format!(" R = {r} |"),
        };
    }
    s += "\n|---|---|";
    s += &"---|".repeat(first.resets.len());
    s += "\n";
    for r in rep.streams.iter().filter(|r| !r.resets.is_empty()) {
        s += &format!("| {} | {} |", r.mixer, r.seed);
        for p in &r.resets {
            s += &format!(" {:.3} |", p.bits);
        }
        s += "\n";
    }
    s + "\n"
}
