//! `vort bench stream`: how far the f32 recurrent form drifts from f64 over a long stream.
//!
//! One head (B = H = 1), F = D = 16, random tokens: features φq, φk uniform in [0, 1), values
//! standard normal, orders α uniform in [δ, 1]. The same inputs (rounded to f32 once, so both
//! runs see identical values) stream through [`naive_recurrent::<f32>`](naive_recurrent()) and
//! [`naive_recurrent::<f64>`](naive_recurrent()) in pieces, carrying each [`State`], so memory
//! stays bounded whatever the length. The inputs of each piece are generated as it is fed,
//! every token from a generator seeded by (seed, position) ([`Stream::BenchToken`]): the result
//! does not depend on the piece size.
//!
//! The error is [`vort::tol::rel_rms`] of the f32 outputs against the f64 ones,
//! ‖y32 - y64‖₂ / ‖y64‖₂, accumulated per window of stream positions (log-spaced windows
//! covering [0, tokens) exactly once) and over the whole stream. Both memory modes use node
//! tables certified for [`STREAM_HORIZON`] lags, and the stream may not be longer than that
//! (past its horizon a table's kernel is not certified, docs/DESIGN.md §1).

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::load_avg_1min;
use candle_core::WithDType;
use vort::error::{Result, VortError};
use vort::nodes::{NodeMode, NodeSpec, NodeTable};
use vort::retention::{naive_recurrent, normalise, OwnedInputs, Rates, State};
use vort::Dims;
use vort_math::rng::{stream_seed, Stream, XorShift64Star};

/// The relative-RMS budget of f32 streaming against f64.
pub const STREAM_DRIFT_BUDGET: f64 = 1e-3;
/// Horizon of the node tables: 2^20 lags; streams are at most this long.
pub const STREAM_HORIZON: u64 = 1 << 20;

/// Sizes and options of the drift measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamDriftOpts {
    /// Tokens streamed (at most `horizon`).
    pub tokens: u64,
    /// Horizon the node tables are certified for.
    pub horizon: u64,
    /// Feature dim F.
    pub f: usize,
    /// Value dim D.
    pub d: usize,
    /// Smallest order δ (orders are uniform in [δ, 1]).
    pub delta: f64,
    /// SOE tolerance of the node tables.
    pub eps: f64,
    /// Banks K of the banks mode.
    pub banks: usize,
    /// Tokens per call of the recurrent form.
    pub piece: usize,
    /// Log-spaced windows asked for (fewer when the stream is short: equal edges merge).
    pub bins: usize,
    /// Seed of the inputs.
    pub seed: u64,
    /// eps of the normalisation's denominator.
    pub eps_den: f64,
}

impl Default for StreamDriftOpts {
    fn default() -> Self {
        StreamDriftOpts {
            tokens: STREAM_HORIZON,
            horizon: STREAM_HORIZON,
            f: 16,
            d: 16,
            delta: 0.1,
            eps: 1e-3,
            banks: 4,
            piece: 4096,
            bins: 64,
            seed: 2605,
            eps_den: 1e-6,
        }
    }
}

/// The error over one window of stream positions.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DriftBin {
    /// First position of the window (0-based: the first token of the stream is 0).
    pub lo: u64,
    /// One past its last position.
    pub hi: u64,
    /// ‖y32 - y64‖₂ / ‖y64‖₂ over the window's outputs.
    pub rel_rms: f64,
}

/// The final state's error on one node.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodeDrift {
    /// Rate u_n (decay e^(-u_n) per token).
    pub u: f64,
    /// Relative RMS of the numerator columns G_n[.., ..D] (f32 against f64).
    pub num_rel_rms: f64,
    /// Relative RMS of the denominator column G_n[.., D].
    pub den_rel_rms: f64,
}

/// One memory mode's drift.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamDriftMode {
    /// The node mode, "shared" or "banks" (`memory` in older files).
    #[serde(alias = "memory")]
    pub mode: String,
    /// Nodes N.
    pub nodes: usize,
    /// Certified kernel error of the table on lags 1..=horizon.
    pub kernel_max_rel_error: f64,
    /// Relative RMS over the whole stream.
    pub rel_rms_overall: f64,
    /// Largest relative RMS of a window.
    pub rel_rms_max_bin: f64,
    /// Relative RMS of the f32 state against the f64 one after the last token.
    pub state_rel_rms_final: f64,
    /// The same per node, numerator and denominator columns apart (where the drift sits).
    pub state_by_node: Vec<NodeDrift>,
    /// Wall time of this mode (both precisions), seconds.
    pub wall_s: f64,
    /// Per window, in stream order.
    pub bins: Vec<DriftBin>,
}

/// Everything the drift measurement recorded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamDriftResult {
    /// Tokens streamed.
    pub tokens: u64,
    /// 1-minute load average before the run (None where /proc/loadavg is unreadable).
    pub load_avg_before: Option<f64>,
    /// 1-minute load average after the run.
    pub load_avg_after: Option<f64>,
    /// Wall time of the whole measurement, seconds.
    pub wall_s: f64,
    /// The budget the errors are compared with ([`STREAM_DRIFT_BUDGET`]).
    pub budget: f64,
    /// Shared, then banks.
    pub modes: Vec<StreamDriftMode>,
    /// The options of the run.
    pub options: StreamDriftOpts,
}

/// Windows [lo, hi) covering 0..tokens exactly once, in order, with log-spaced ends:
/// hi_i ≈ tokens^(i / count), equal ends merged (so short streams get fewer windows).
pub fn log_bins(tokens: u64, count: usize) -> Vec<(u64, u64)> {
    if tokens == 0 {
        return Vec::new();
    }
    let count = count.max(1);
    let mut ends: Vec<u64> = (1..count)
        .map(|i| {
            let e = (tokens as f64).powf(i as f64 / count as f64).round() as u64;
            e.clamp(1, tokens)
        })
        .collect();
    ends.push(tokens);
    ends.dedup();
    let mut lo = 0;
    ends.into_iter()
        .map(|hi| {
            let b = (lo, hi);
            lo = hi;
            b
        })
        .collect()
}

/// One piece's inputs in f32, and the same values in f64.
struct Piece {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    q64: Vec<f64>,
    k64: Vec<f64>,
    v64: Vec<f64>,
    alpha: Vec<f64>,
}

/// Tokens [start, start + t): each token's inputs come from its own generator, seeded by
/// (seed, position), so they do not depend on how the stream is cut into pieces.
fn piece_inputs(o: &StreamDriftOpts, start: u64, t: usize) -> Piece {
    let (f, d) = (o.f, o.d);
    let mut p = Piece {
        q: Vec::with_capacity(t * f),
        k: Vec::with_capacity(t * f),
        v: Vec::with_capacity(t * d),
        q64: Vec::new(),
        k64: Vec::new(),
        v64: Vec::new(),
        alpha: Vec::with_capacity(t),
    };
    for pos in start..start + t as u64 {
        let mut r = XorShift64Star::new(stream_seed(o.seed, Stream::BenchToken, pos));
        p.q.extend((0..f).map(|_| r.unif() as f32));
        p.k.extend((0..f).map(|_| r.unif() as f32));
        p.v.extend((0..d).map(|_| r.normal() as f32));
        p.alpha.push(o.delta + (1.0 - o.delta) * r.unif());
    }
    let wide = |x: &[f32]| x.iter().map(|&x| f64::from(x)).collect();
    p.q64 = wide(&p.q);
    p.k64 = wide(&p.k);
    p.v64 = wide(&p.v);
    p
}

fn check(o: &StreamDriftOpts) -> Result<()> {
    let bad = |m: String| Err(VortError::InvalidArgument(m));
    if o.tokens == 0 {
        return bad("stream drift: tokens must be >= 1".into());
    }
    if o.tokens > o.horizon {
        return bad(format!(
            "stream drift: {} tokens exceed the node tables' horizon {} (the kernel is not \
             certified past it)",
            o.tokens, o.horizon
        ));
    }
    if o.f == 0 || o.d == 0 || o.piece == 0 || o.bins == 0 || o.banks == 0 {
        return bad(format!(
            "stream drift: F, D, piece, bins and banks must be >= 1 (F = {}, D = {}, piece = {}, \
             bins = {}, banks = {})",
            o.f, o.d, o.piece, o.bins, o.banks
        ));
    }
    Ok(())
}

/// Streams the same inputs through the f32 and f64 recurrent forms in both memory modes
/// (shared, then banks) and measures the relative RMS of f32 against f64 per window.
///
/// # Errors
/// Invalid options (zero or more tokens than the horizon, zero sizes), an SOE that cannot be
/// certified.
pub fn bench_stream_drift(o: &StreamDriftOpts) -> Result<StreamDriftResult> {
    bench_stream_drift_with(o, |_, _| {})
}

/// [`bench_stream_drift`] calling `progress(memory, tokens done)` after every piece.
///
/// # Errors
/// As [`bench_stream_drift`].
pub fn bench_stream_drift_with(
    o: &StreamDriftOpts,
    mut progress: impl FnMut(&str, u64),
) -> Result<StreamDriftResult> {
    check(o)?;
    let load_avg_before = load_avg_1min();
    let t0 = Instant::now();
    let mut modes = Vec::new();
    for mode in [NodeMode::Shared, NodeMode::Banks] {
        let table = NodeSpec {
            mode,
            banks: o.banks,
            delta: o.delta,
            horizon: o.horizon,
            eps: o.eps,
        }
        .build()?;
        modes.push(drift_one_mode(o, mode, &table, &mut progress)?);
    }
    Ok(StreamDriftResult {
        tokens: o.tokens,
        load_avg_before,
        load_avg_after: load_avg_1min(),
        wall_s: t0.elapsed().as_secs_f64(),
        budget: STREAM_DRIFT_BUDGET,
        modes,
        options: o.clone(),
    })
}

/// One piece through [`naive_recurrent`] in `T` from `state` (replaced by the state after it),
/// node weights c_n(α) on the host: the normalised y [B, H, T, D].
#[allow(clippy::too_many_arguments)]
fn step<T: WithDType>(
    state: &mut State<T>,
    q: &[T],
    k: &[T],
    v: &[T],
    alpha: &[f64],
    dims: Dims,
    tables: &[NodeTable],
    eps_den: f64,
) -> Result<Vec<T>> {
    let x = OwnedInputs::from_host(q, k, v, alpha, dims, tables)?;
    let (o, next) = naive_recurrent(
        &x.inputs(),
        &Rates::of_tables(tables)?,
        1,
        Some(&*state),
        true,
    )?;
    *state = next.expect("final state asked for");
    Ok(normalise(&o, eps_den)?.flatten_all()?.to_vec1::<T>()?)
}

fn drift_one_mode(
    o: &StreamDriftOpts,
    mode: NodeMode,
    table: &NodeTable,
    progress: &mut impl FnMut(&str, u64),
) -> Result<StreamDriftMode> {
    let t0 = Instant::now();
    let memory = format!("{mode:?}").to_lowercase();
    let tables = std::slice::from_ref(table);
    let n = table.len();
    let mut s32 = State::<f32>::zeros(1, 1, n, o.f, o.d);
    let mut s64 = State::<f64>::zeros(1, 1, n, o.f, o.d);
    let windows = log_bins(o.tokens, o.bins);
    // Σ (y32 - y64)² and Σ y64² per window.
    let mut num = vec![0.0f64; windows.len()];
    let mut den = vec![0.0f64; windows.len()];
    let mut w = 0;
    while s64.pos < o.tokens {
        let t = (o.tokens - s64.pos).min(o.piece as u64) as usize;
        let dims = Dims::new(1, 1, t, o.f, o.d);
        let start = s64.pos;
        let p = piece_inputs(o, start, t);
        let (y32, y64) = rayon::join(
            || {
                step(
                    &mut s32, &p.q, &p.k, &p.v, &p.alpha, dims, tables, o.eps_den,
                )
            },
            || {
                step(
                    &mut s64, &p.q64, &p.k64, &p.v64, &p.alpha, dims, tables, o.eps_den,
                )
            },
        );
        let (y32, y64) = (y32?, y64?);
        for (i, (a, b)) in y32.chunks(o.d).zip(y64.chunks(o.d)).enumerate() {
            let pos = start + i as u64;
            while pos >= windows[w].1 {
                w += 1;
            }
            for (&a, &b) in a.iter().zip(b) {
                let e = f64::from(a) - b;
                num[w] += e * e;
                den[w] += b * b;
            }
        }
        progress(&memory, s64.pos);
    }
    let ratio = |num: f64, den: f64| {
        if den == 0.0 {
            num.sqrt()
        } else {
            (num / den).sqrt()
        }
    };
    let bins: Vec<DriftBin> = windows
        .iter()
        .zip(num.iter().zip(&den))
        .map(|(&(lo, hi), (&nu, &de))| DriftBin {
            lo,
            hi,
            rel_rms: ratio(nu, de),
        })
        .collect();
    let g32: Vec<f64> = s32.host()?.iter().map(|&x| f64::from(x)).collect();
    let g64 = s64.host()?;
    let (f, d1) = (o.f, o.d + 1);
    let state_by_node = (0..n)
        .map(|node| {
            let block = node * f * d1..(node + 1) * f * d1;
            let cols = |den: bool| -> (Vec<f64>, Vec<f64>) {
                block
                    .clone()
                    .filter(|i| (i % d1 == o.d) == den)
                    .map(|i| (g32[i], g64[i]))
                    .unzip()
            };
            let ((a, b), (c, e)) = (cols(false), cols(true));
            NodeDrift {
                u: table.u[node],
                num_rel_rms: vort::tol::rel_rms(&a, &b),
                den_rel_rms: vort::tol::rel_rms(&c, &e),
            }
        })
        .collect();
    Ok(StreamDriftMode {
        mode: memory,
        nodes: n,
        kernel_max_rel_error: table.max_rel_error,
        rel_rms_overall: ratio(num.iter().sum(), den.iter().sum()),
        // NaN propagates (a non-finite window must not be hidden by max).
        rel_rms_max_bin: bins.iter().map(|b| b.rel_rms).fold(0.0, |m, x| {
            if x.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(x)
            }
        }),
        state_rel_rms_final: vort::tol::rel_rms(&g32, &g64),
        state_by_node,
        wall_s: t0.elapsed().as_secs_f64(),
        bins,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_bins_cover_the_stream_once() {
        for (tokens, count) in [(1, 64), (2, 64), (4096, 64), (1 << 20, 64), (1000, 1)] {
            let b = log_bins(tokens, count);
            assert_eq!(b[0].0, 0);
            assert_eq!(b.last().unwrap().1, tokens);
            assert!(b.iter().all(|&(lo, hi)| lo < hi));
            assert!(b.windows(2).all(|w| w[0].1 == w[1].0));
            assert!(b.len() <= count);
        }
        assert!(log_bins(0, 8).is_empty());
    }
}
