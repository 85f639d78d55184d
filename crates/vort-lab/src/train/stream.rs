//! Streaming evaluation: one long text through a trained model in pieces, carrying the
//! recurrent state (the retention state, O(1) in the stream length) from piece to piece, so
//! the context of a byte is everything before it, far beyond the training length. Reports
//! bits per character in doubling context bins and the resident state size along the way.

use candle_core::{Device, Tensor, D};
use serde::{Deserialize, Serialize};

use super::TrainError;
use vort::model::Model;

/// BPC over a context range of the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextBin {
    /// Smallest context (bytes before and including the current one).
    pub lo: usize,
    /// Largest context.
    pub hi: usize,
    /// Bytes scored.
    pub n: usize,
    /// Mean bits per character.
    pub bits: f64,
}

/// What [`stream_text`] measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamResult {
    /// Bytes streamed (every byte but the last is scored on its successor).
    pub bytes: usize,
    /// Piece length fed per call.
    pub piece: usize,
    /// BPC in doubling context bins \[1,1\], \[2,3\], \[4,7\], ...
    pub bins: Vec<ContextBin>,
    /// Mean BPC over the stream.
    pub bits: f64,
    /// (bytes streamed, resident state bytes) after each piece.
    pub state_bytes: Vec<(usize, usize)>,
    /// Throughput (bytes/s).
    pub bytes_per_s: f64,
    /// What each piece saw: its BPC, the orders and where the normaliser's mass sits
    /// (absent in files written before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pieces: Vec<PieceDiagnostics>,
}

/// One piece of a stream: the evidence for why a carried state helps or hurts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PieceDiagnostics {
    /// Bytes streamed after this piece.
    pub end: usize,
    /// Mean BPC over the piece's scored bytes.
    pub bits: f64,
    /// Mean order α over the piece's tokens, layers and heads (VORT only).
    pub alpha: Option<f64>,
    /// The retention state's normaliser mass after the piece, mean over the blocks that have
    /// one ([`Model::normaliser_mass`]; None for softmax).
    pub normaliser: Option<f64>,
    /// The share of that mass held by nodes slower than one piece (time constant 1/u_n >
    /// the piece length, which every caller sets to the training length), mean over blocks.
    pub slow_share: Option<f64>,
}

/// Streams `text` through `model` in pieces of `piece` bytes (the model's vocabulary must be
/// bytes); `progress` is called with the bytes done after each piece.
///
/// The model's memory must be certified for the whole stream: build its tables for a longer
/// horizon first (`Model::set_horizon(vort::nodes::STREAM_HORIZON)`).
///
/// # Errors
/// candle errors; [`TrainError::Config`] for an empty piece length or a text of < 2 bytes; a
/// text longer than the model's certified horizon (`VortError::BeyondHorizon`), refused before
/// anything is streamed.
pub fn stream_text(
    model: &Model,
    text: &[u8],
    piece: usize,
    device: &Device,
    progress: impl FnMut(usize),
) -> Result<StreamResult, TrainError> {
    stream_text_resetting(model, text, piece, 0, device, progress)
}

/// [`stream_text`] with the state reset before every `reset_every`-th piece (0: never), so a
/// byte's context is the bytes since the last reset (at most `reset_every · piece`); the
/// context bins count from the last reset. `reset_every = 1` scores every piece on its own.
///
/// # Errors
/// As [`stream_text`].
pub fn stream_text_resetting(
    model: &Model,
    text: &[u8],
    piece: usize,
    reset_every: usize,
    device: &Device,
    mut progress: impl FnMut(usize),
) -> Result<StreamResult, TrainError> {
    check_stream(model, text, piece, reset_every)?;
    let t0 = std::time::Instant::now();
    let scored = text.len() - 1;
    let mut sums: Vec<(usize, f64)> = Vec::new(); // per doubling bin: (n, Σ nats)
    let mut state = model.new_state();
    let mut state_bytes = Vec::new();
    let mut pieces = Vec::new();
    let (mut start, mut since) = (0, 0); // since: the byte the context starts at
    let mut pieces_done = 0;
    while start < scored {
        if reset_every > 0 && pieces_done % reset_every == 0 {
            state = model.new_state();
            since = start;
        }
        pieces_done += 1;
        let end = (start + piece).min(scored);
        let n = end - start;
        let (out, picked) = score_piece(model, &mut state, text, start..end, device)?;
        let piece_nats: f64 = picked.iter().map(|&x| -f64::from(x)).sum();
        for (i, &lp) in picked.iter().enumerate() {
            let context = start - since + i + 1;
            let bin = (usize::BITS - 1 - context.leading_zeros()) as usize; // floor(log2)
            if sums.len() <= bin {
                sums.resize(bin + 1, (0, 0.0));
            }
            sums[bin].0 += 1;
            sums[bin].1 -= f64::from(lp);
        }
        start = end;
        state_bytes.push((end, state.bytes()));
        pieces.push(diagnose(
            model,
            &state,
            &out.alphas,
            end,
            piece_nats / n as f64,
            piece,
        )?);
        progress(end);
    }
    let ln2 = std::f64::consts::LN_2;
    let bins: Vec<ContextBin> = sums
        .iter()
        .enumerate()
        .filter(|(_, &(n, _))| n > 0)
        .map(|(k, &(n, s))| ContextBin {
            lo: 1 << k,
            hi: (2 << k) - 1,
            n,
            bits: s / n as f64 / ln2,
        })
        .collect();
    let total: f64 = sums.iter().map(|x| x.1).sum();
    Ok(StreamResult {
        bytes: text.len(),
        piece,
        bits: total / scored as f64 / ln2,
        bins,
        state_bytes,
        bytes_per_s: scored as f64 / t0.elapsed().as_secs_f64().max(1e-9),
        pieces,
    })
}

/// The log-probabilities (nats) of bytes `range.start + 1 ..= range.end` of `text`, each given
/// the bytes before it: the piece `text[range]` fed through `model` from `state` (advanced),
/// and the model's output on it.
///
/// # Errors
/// candle errors; a non-finite log-probability (naming the byte).
fn score_piece(
    model: &Model,
    state: &mut vort::model::ModelState,
    text: &[u8],
    range: std::ops::Range<usize>,
    device: &Device,
) -> Result<(vort::model::ModelOutput, Vec<f32>), TrainError> {
    let (start, end) = (range.start, range.end);
    let tokens: Vec<u32> = text[start..end].iter().map(|&b| u32::from(b)).collect();
    let targets: Vec<u32> = text[start + 1..end + 1]
        .iter()
        .map(|&b| u32::from(b))
        .collect();
    let n = end - start;
    let out = model.forward_with_state(&Tensor::from_vec(tokens, (1, n), device)?, state)?;
    let pos: Vec<usize> = (0..n).collect();
    let lp = candle_nn::ops::log_softmax(&model.logits_at(&out.hidden, &pos)?, D::Minus1)?;
    let idx = Tensor::from_vec(targets, (n, 1), device)?;
    let picked: Vec<f32> = lp.gather(&idx, 1)?.flatten_all()?.to_vec1()?;
    if let Some(i) = picked.iter().position(|x| !x.is_finite()) {
        return Err(TrainError::NonFinite(format!(
            "byte {} of the stream: log-probability {}",
            start + i + 1,
            picked[i]
        )));
    }
    Ok((out, picked))
}

/// The bits of every byte of `text` after the first, each given every byte before it: `text`
/// streamed through `model` in pieces of `piece` bytes with the state carried (element i is
/// byte i + 1's). `progress` is called with the bytes done after each piece.
///
/// # Errors
/// As [`stream_text`].
pub fn byte_bits(
    model: &Model,
    text: &[u8],
    piece: usize,
    device: &Device,
    progress: impl FnMut(usize),
) -> Result<Vec<f32>, TrainError> {
    byte_bits_resetting(model, text, piece, false, device, progress)
}

/// [`byte_bits`], with the state reset before every piece when `reset` (each piece scored on
/// its own: the window-by-window evaluation of a model trained on windows of `piece`).
///
/// # Errors
/// As [`stream_text`].
pub fn byte_bits_resetting(
    model: &Model,
    text: &[u8],
    piece: usize,
    reset: bool,
    device: &Device,
    mut progress: impl FnMut(usize),
) -> Result<Vec<f32>, TrainError> {
    check_stream(model, text, piece, usize::from(reset))?;
    let scored = text.len() - 1;
    let mut state = model.new_state();
    let mut bits = Vec::with_capacity(scored);
    let mut start = 0;
    while start < scored {
        let end = (start + piece).min(scored);
        if reset {
            state = model.new_state();
        }
        let (_, picked) = score_piece(model, &mut state, text, start..end, device)?;
        bits.extend(picked.iter().map(|&x| -x / std::f32::consts::LN_2));
        start = end;
        progress(end);
    }
    Ok(bits)
}

/// Refuses an empty piece, a text of < 2 bytes, and a context (the text, or `reset_every`
/// pieces when the state is reset every so many; 0 = never) longer than the model's certified
/// horizon (before anything is streamed, rather than after hours of it; the blocks check it
/// too).
fn check_stream(
    model: &Model,
    text: &[u8],
    piece: usize,
    reset_every: usize,
) -> Result<(), TrainError> {
    if piece == 0 || text.len() < 2 {
        return Err(TrainError::Config {
            path: "<stream>".into(),
            message: format!(
                "piece = {piece} and text of {} bytes (need piece >= 1, text >= 2)",
                text.len()
            ),
        });
    }
    if let Some(h) = model.context_limit() {
        // the longest context a byte gets: the text, or the bytes since the last reset
        let scored = text.len() - 1;
        let context = match reset_every {
            0 => scored,
            r => scored.min(r.saturating_mul(piece)),
        } as u64;
        if context > h {
            return Err(
                vort::model::ModelError::Layer(vort::VortError::BeyondHorizon {
                    context,
                    horizon: h,
                })
                .into(),
            );
        }
    }
    Ok(())
}

/// The diagnostics of the piece that ended at byte `end` with mean cross-entropy `nats`:
/// the mean of its orders `alphas` (per block [1, H, T]) and the state's normaliser mass,
/// with nodes slower than `piece` tokens counted as slow.
fn diagnose(
    model: &Model,
    state: &vort::model::ModelState,
    alphas: &[Tensor],
    end: usize,
    nats: f64,
    piece: usize,
) -> Result<PieceDiagnostics, TrainError> {
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let mut alpha = Vec::new();
    for a in alphas {
        alpha.push(f64::from(a.mean_all()?.to_scalar::<f32>()?));
    }
    let masses: Vec<_> = model
        .normaliser_mass(state, piece as f64)?
        .into_iter()
        .flatten()
        .collect();
    Ok(PieceDiagnostics {
        end,
        bits: nats / std::f64::consts::LN_2,
        alpha: mean(&alpha),
        normaliser: mean(&masses.iter().map(|m| m.mass).collect::<Vec<_>>()),
        slow_share: mean(&masses.iter().map(|m| m.slow_share).collect::<Vec<_>>()),
    })
}

/// The context buckets of a book streamed from its first byte (issue #40): a byte's context is
/// its position in the book (the bytes before it, itself included), [lo, hi].
pub const BOOK_BUCKETS: [(&str, usize, usize); 6] = [
    ("0-512", 1, 512),
    ("512-2K", 513, 2048),
    ("2K-8K", 2049, 8192),
    ("8K-32K", 8193, 32_768),
    ("32K-128K", 32_769, 131_072),
    ("128K-1M", 131_073, 1 << 20),
];

/// The longest lag a whole-books stream of `books` reads (each book to at most the last
/// bucket's context): the horizon the model's node tables must be certified for.
pub fn longest_book_lag(books: &[(String, Vec<u8>)]) -> u64 {
    let cap = BOOK_BUCKETS[BOOK_BUCKETS.len() - 1].2;
    books
        .iter()
        .map(|(_, b)| b.len().saturating_sub(1).min(cap))
        .max()
        .unwrap_or(0) as u64
}

/// BPC over one context bucket of the books streamed, the state carried and reset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BookBucket {
    /// Label ("0-512", ...).
    pub label: String,
    /// Smallest and largest context (bytes) of the bucket.
    pub lo: usize,
    /// Largest context.
    pub hi: usize,
    /// Bytes scored in it, over every book.
    pub n: usize,
    /// Mean bits per byte with the state carried from the book's first byte.
    pub carried: f64,
    /// Mean bits per byte of the same bytes with the state reset every window.
    pub reset: f64,
}

/// The length of the blocks a context bucket (lo, hi) is cut into for the paired verdicts
/// ([`ContextBlock`]): 512 bytes, or a 32nd of the bucket's upper end where that is longer (so
/// 12-28 blocks a book in each bucket past 2K, few enough to commit, enough for an SE).
pub fn block_len(hi: usize) -> usize {
    (hi / 32).max(512)
}

/// One block of context of one book, scored both ways: the unit of the whole-books paired
/// verdicts (two models, or carried against reset, on the same bytes block by block). Block b
/// of bucket k holds the book's bytes at contexts lo_k + b·[`block_len`] onwards, to the
/// bucket's end or the book's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextBlock {
    /// Index of the book in [`BooksByContext::books`].
    pub book: usize,
    /// Index of the bucket in [`BOOK_BUCKETS`].
    pub bucket: usize,
    /// Bytes in the block.
    pub n: usize,
    /// Mean bits per byte with the state carried.
    pub carried: f64,
    /// Mean bits per byte with the state reset every window.
    pub reset: f64,
}

/// Book `book`'s blocks of context ([`ContextBlock`]), from its bits a byte carried and reset
/// (byte i of each given i + 1 bytes of context).
fn context_blocks(book: usize, carried: &[f32], reset: &[f32]) -> Vec<ContextBlock> {
    let mut blocks = Vec::new();
    for (bucket, &(_, lo, hi)) in BOOK_BUCKETS.iter().enumerate() {
        // contexts lo..=hi are bytes lo - 1 ..= hi - 1
        let (start, end) = (lo - 1, hi.min(carried.len()));
        let step = block_len(hi);
        for a in (start..end).step_by(step) {
            let b = (a + step).min(end);
            let mean =
                |v: &[f32]| v[a..b].iter().map(|&x| f64::from(x)).sum::<f64>() / (b - a) as f64;
            blocks.push(ContextBlock {
                book,
                bucket,
                n: b - a,
                carried: mean(carried),
                reset: mean(reset),
            });
        }
    }
    blocks
}

/// One book of [`BooksByContext`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BookStream {
    /// Its title.
    pub title: String,
    /// Bytes streamed (its first 2^20 + 1 at most).
    pub bytes: usize,
    /// Mean bits per byte, carried and reset.
    pub carried: f64,
    /// Mean bits per byte with the state reset every window.
    pub reset: f64,
}

/// Whole books streamed from their first byte, twice: the state carried, and reset every
/// window (the evaluation's windows): BPC by context bucket on the same bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BooksByContext {
    /// The window (piece) length: the reset period, and the piece fed per call.
    pub window: usize,
    /// Per book.
    pub books: Vec<BookStream>,
    /// Per bucket of [`BOOK_BUCKETS`] (empty buckets left out), bytes pooled over the books.
    pub buckets: Vec<BookBucket>,
    /// Every book's blocks of context, book by book, in context order (empty in streams
    /// cached before the verdicts).
    #[serde(default)]
    pub blocks: Vec<ContextBlock>,
    /// Throughput of the two streams together (bytes/s).
    pub bytes_per_s: f64,
}

/// Streams each of `books` (title, bytes; each cut to its first 2^20 + 1 bytes) from its first
/// byte through `model`, in pieces of `window`, with the state carried and with it reset
/// before every piece, and pools the bits by the byte's position into [`BOOK_BUCKETS`].
/// `progress` gets (bytes done, bytes in all) over both streams of every book. The model's
/// tables must be certified to the longest book streamed (`Model::set_horizon`).
///
/// # Errors
/// As [`stream_text`]; no book of two bytes or more.
pub fn stream_books_by_context(
    model: &Model,
    books: &[(String, Vec<u8>)],
    window: usize,
    device: &Device,
    mut progress: impl FnMut(usize, usize),
) -> Result<BooksByContext, TrainError> {
    let cap = BOOK_BUCKETS[BOOK_BUCKETS.len() - 1].2 + 1;
    let texts: Vec<(&str, &[u8])> = books
        .iter()
        .filter(|(_, b)| b.len() >= 2)
        .map(|(t, b)| (t.as_str(), &b[..b.len().min(cap)]))
        .collect();
    if texts.is_empty() {
        return Err(TrainError::Config {
            path: "<stream>".into(),
            message: "no book of two bytes or more to stream".into(),
        });
    }
    let total: usize = texts.iter().map(|(_, b)| 2 * (b.len() - 1)).sum();
    let (t0, mut done) = (std::time::Instant::now(), 0);
    let mut sums = vec![(0usize, 0f64, 0f64); BOOK_BUCKETS.len()];
    let mut per_book = Vec::new();
    let mut blocks = Vec::new();
    for (book, (title, text)) in texts.into_iter().enumerate() {
        let mut bits = [Vec::new(), Vec::new()];
        for (k, reset) in [false, true].into_iter().enumerate() {
            bits[k] = byte_bits_resetting(model, text, window, reset, device, |d| {
                progress(done + d, total)
            })?;
            done += text.len() - 1;
        }
        for (i, (c, r)) in bits[0].iter().zip(&bits[1]).enumerate() {
            // byte i + 1 of the book, given the i + 1 bytes before it
            if let Some(b) = BOOK_BUCKETS
                .iter()
                .position(|&(_, lo, hi)| (lo..=hi).contains(&(i + 1)))
            {
                sums[b].0 += 1;
                sums[b].1 += f64::from(*c);
                sums[b].2 += f64::from(*r);
            }
        }
        blocks.extend(context_blocks(book, &bits[0], &bits[1]));
        let mean = |v: &[f32]| v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
        per_book.push(BookStream {
            title: title.to_string(),
            bytes: text.len(),
            carried: mean(&bits[0]),
            reset: mean(&bits[1]),
        });
    }
    let buckets = BOOK_BUCKETS
        .iter()
        .zip(&sums)
        .filter(|(_, s)| s.0 > 0)
        .map(|(&(label, lo, hi), &(n, c, r))| BookBucket {
            label: label.to_string(),
            lo,
            hi,
            n,
            carried: c / n as f64,
            reset: r / n as f64,
        })
        .collect();
    Ok(BooksByContext {
        window,
        books: per_book,
        buckets,
        blocks,
        bytes_per_s: total as f64 / t0.elapsed().as_secs_f64().max(1e-9),
    })
}
