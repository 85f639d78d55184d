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
    check_stream(model, text, piece)?;
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
    mut progress: impl FnMut(usize),
) -> Result<Vec<f32>, TrainError> {
    check_stream(model, text, piece)?;
    let scored = text.len() - 1;
    let mut state = model.new_state();
    let mut bits = Vec::with_capacity(scored);
    let mut start = 0;
    while start < scored {
        let end = (start + piece).min(scored);
        let (_, picked) = score_piece(model, &mut state, text, start..end, device)?;
        bits.extend(picked.iter().map(|&x| -x / std::f32::consts::LN_2));
        start = end;
        progress(end);
    }
    Ok(bits)
}

/// Refuses an empty piece, a text of < 2 bytes, and a text longer than the model's certified
/// horizon (before anything is streamed, rather than after hours of it; the blocks check it
/// too).
fn check_stream(model: &Model, text: &[u8], piece: usize) -> Result<(), TrainError> {
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
        let context = (text.len() - 1) as u64;
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
