//! Benchmark functions for the CLI (`vort bench layer`): the fused chunked layer forward and
//! forward+backward with their FLOP count, an sgemm timed in the same run, recurrent decode
//! latency and state bytes at several contexts, and causal softmax attention vs the linear form.
//! `vort bench stream` (module `stream`, re-exported here): the drift of the f32 recurrent form
//! from f64 over a stream of up to 2^20 tokens.
//!
//! FLOP counts are those of the matrix products of the algorithm as implemented (the module
//! doc of [`vort::retention::fused_chunk`](mod@vort::retention::fused_chunk)), 2·m·n·k each;
//! elementwise work is not counted. Times are medians.

use std::time::Instant;

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use vort::error::Result;
use vort::nodes::{NodeMode, NodeSpec};
use vort::retention::{
    chunk, fused_chunk, naive_recurrent, node_weights, normalise, with_ones, Inputs, OwnedInputs,
    Rates, State,
};
use vort::Dims;
use vort_math::rng::XorShift64Star;

/// Sizes and options of the layer benchmark.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerBenchOpts {
    /// Batch B.
    pub b: usize,
    /// Heads H.
    pub h: usize,
    /// Tokens T.
    pub t: usize,
    /// Feature dim F.
    pub f: usize,
    /// Value dim D.
    pub d: usize,
    /// Chunk length L.
    pub chunk: usize,
    /// SOE tolerance (S follows from it).
    pub eps: f64,
    /// Banks K.
    pub banks: usize,
    /// Smallest order δ.
    pub delta: f64,
    /// Timed repetitions (median reported) after one warm-up.
    pub reps: usize,
    /// Also time autodiff of the plain candle chunked form (slow; for comparison).
    pub plain: bool,
}

impl Default for LayerBenchOpts {
    fn default() -> Self {
        LayerBenchOpts {
            b: 4,
            h: 4,
            t: 2048,
            f: 64,
            d: 64,
            chunk: 64,
            eps: 1e-3,
            banks: 4,
            delta: 0.1,
            reps: 5,
            plain: false,
        }
    }
}

/// One memory mode's timings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerBenchResult {
    /// The node mode, "banks" or "shared" (`memory` in older files).
    #[serde(alias = "memory")]
    pub mode: String,
    /// Nodes N (all banks' terms, or the shared S).
    pub nodes: usize,
    /// Matmul FLOPs of the forward.
    pub flops_fwd: f64,
    /// Matmul FLOPs of forward + backward.
    pub flops_fwd_bwd: f64,
    /// Median forward time of the fused op, ms.
    pub fwd_ms: f64,
    /// Median forward+backward time of the fused op (loss Σ y·w, normalisation included), ms.
    pub fwd_bwd_ms: f64,
    /// GFLOP/s of the forward.
    pub fwd_gflops: f64,
    /// GFLOP/s of forward+backward.
    pub fwd_bwd_gflops: f64,
    /// Median time to compute the node weights c(α) from α (host, per forward), ms.
    pub node_weights_ms: f64,
    /// Median forward+backward of the plain candle form (autodiff), ms, if measured.
    pub plain_fwd_bwd_ms: Option<f64>,
}

/// A square sgemm timed in the same run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SgemmResult {
    /// Size n of the n×n×n product.
    pub n: usize,
    /// Median time, ms.
    pub ms: f64,
    /// GFLOP/s (2n³ FLOPs).
    pub gflops: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn time_ms<F: FnMut() -> Result<()>>(reps: usize, mut f: F) -> Result<f64> {
    f()?; // warm-up
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let t0 = Instant::now();
        f()?;
        v.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(v))
}

/// sgemm n×n×n through candle (its gemm backend, AVX-512 when the workspace enables x86-v4).
///
/// # Errors
/// Candle errors.
pub fn bench_sgemm(n: usize, reps: usize) -> Result<SgemmResult> {
    let dev = Device::Cpu;
    let a = Tensor::rand(0f32, 1f32, (n, n), &dev)?;
    let b = Tensor::rand(0f32, 1f32, (n, n), &dev)?;
    let ms = time_ms(reps, || {
        let _ = a.matmul(&b)?;
        Ok(())
    })?;
    Ok(SgemmResult {
        n,
        ms,
        gflops: 2.0 * (n as f64).powi(3) / ms / 1e6,
    })
}

/// Matmul FLOPs (forward, backward) of the fused op for one call (see the module doc).
pub fn fused_flops(
    b: usize,
    h: usize,
    t: usize,
    f: usize,
    d: usize,
    n: usize,
    chunk: usize,
) -> (f64, f64) {
    let d1 = (d + 1) as f64;
    let (ff, nn) = (f as f64, n as f64);
    let nf = nn * ff;
    let mut fwd = 0.0;
    let mut bwd = 0.0;
    let mut s = 0;
    let mut first = true;
    while s < t {
        let l = chunk.min(t - s) as f64;
        let last = s + chunk >= t;
        let intra = 2.0 * l * l * (ff + nn + d1);
        let state = if last { 0.0 } else { 2.0 * l * nf * d1 };
        fwd += intra + 2.0 * l * nf * d1 + state;
        // recompute P, R; dV, dS; dQ, dK; dcw; dQd; (state recompute, dKd, dV inter); H update
        bwd += 2.0 * l * l * (ff + nn)
            + 4.0 * l * l * d1
            + 4.0 * l * l * ff
            + 2.0 * l * l * nn
            + 2.0 * l * nf * d1
            + 3.0 * state
            + if first { 0.0 } else { 2.0 * l * nf * d1 };
        first = false;
        s += chunk;
    }
    let bh = (b * h) as f64;
    (bh * fwd, bh * bwd)
}

fn rand_inputs(
    b: usize,
    h: usize,
    t: usize,
    f: usize,
    d: usize,
    lo: f64,
    seed: u64,
) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor)> {
    let mut r = XorShift64Star::new(seed);
    let dev = Device::Cpu;
    let sc = 1.0 / (f as f64).sqrt();
    let mk = |r: &mut XorShift64Star, n: usize, g: &dyn Fn(f64) -> f64| -> Vec<f32> {
        (0..n).map(|_| g(r.unif()) as f32).collect()
    };
    let q = Tensor::from_vec(mk(&mut r, b * h * t * f, &|x| x * sc), (b, h, t, f), &dev)?;
    let k = Tensor::from_vec(mk(&mut r, b * h * t * f, &|x| x * sc), (b, h, t, f), &dev)?;
    let v = Tensor::from_vec(
        mk(&mut r, b * h * t * d, &|x| 2.0 * x - 1.0),
        (b, h, t, d),
        &dev,
    )?;
    let w = Tensor::from_vec(
        mk(&mut r, b * h * t * d, &|x| 2.0 * x - 1.0),
        (b, h, t, d),
        &dev,
    )?;
    let a = Tensor::from_vec(
        mk(&mut r, b * h * t, &|x| lo + (1.0 - lo) * x),
        (b, h, t),
        &dev,
    )?;
    Ok((q, k, v, w, a))
}

/// Times the fused layer core for banks and shared memory.
///
/// # Errors
/// Invalid options, an SOE that cannot be certified.
pub fn bench_layer(o: &LayerBenchOpts) -> Result<Vec<LayerBenchResult>> {
    let mut out = Vec::new();
    for mode in [NodeMode::Banks, NodeMode::Shared] {
        let table = NodeSpec {
            mode,
            banks: o.banks,
            delta: o.delta,
            horizon: o.t as u64,
            eps: o.eps,
        }
        .build()?;
        let tables = std::slice::from_ref(&table);
        let (q, k, v, w, a) = rand_inputs(o.b, o.h, o.t, o.f, o.d, o.delta, 7)?;
        let (qv, kv, vv) = (
            candle_core::Var::from_tensor(&q)?,
            candle_core::Var::from_tensor(&k)?,
            candle_core::Var::from_tensor(&v)?,
        );
        let av = candle_core::Var::from_tensor(&a)?;
        let rates = Rates::of_tables(tables)?;
        let node_weights_ms = time_ms(o.reps, || {
            let _ = node_weights(&a, tables)?;
            Ok(())
        })?;
        let cw = node_weights(&a, tables)?;
        let vp = with_ones(&v)?;
        let fwd_ms = time_ms(o.reps, || {
            let x = Inputs {
                q: &q,
                k: &k,
                vp: &vp,
                cw: &cw,
            };
            let _ = fused_chunk::<f32>(&x, &rates, o.chunk, None, false)?;
            Ok(())
        })?;
        let fwd_bwd = |fused: bool| -> Result<()> {
            let cw = node_weights(av.as_tensor(), tables)?;
            let vp = with_ones(vv.as_tensor())?;
            let x = Inputs {
                q: qv.as_tensor(),
                k: kv.as_tensor(),
                vp: &vp,
                cw: &cw,
            };
            let o_raw = if fused {
                fused_chunk::<f32>(&x, &rates, o.chunk, None, false)?.0
            } else {
                chunk::<f32>(&x, &rates, o.chunk, None, false)?.0
            };
            let y = normalise(&o_raw, 1e-6)?;
            let _ = (y * &w)?.sum_all()?.backward()?;
            Ok(())
        };
        let fwd_bwd_ms = time_ms(o.reps, || fwd_bwd(true))?;
        let plain_fwd_bwd_ms = if o.plain {
            Some(time_ms(o.reps.min(3), || fwd_bwd(false))?)
        } else {
            None
        };
        let (ff, fb) = fused_flops(o.b, o.h, o.t, o.f, o.d, table.len(), o.chunk);
        out.push(LayerBenchResult {
            mode: format!("{mode:?}").to_lowercase(),
            nodes: table.len(),
            flops_fwd: ff,
            flops_fwd_bwd: ff + fb,
            fwd_ms,
            fwd_bwd_ms,
            fwd_gflops: ff / fwd_ms / 1e6,
            fwd_bwd_gflops: (ff + fb) / fwd_bwd_ms / 1e6,
            node_weights_ms,
            plain_fwd_bwd_ms,
        });
    }
    Ok(out)
}

/// Decode latency at one context length.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecodeResult {
    /// Tokens in the state before the timed steps.
    pub context: u64,
    /// Nodes N.
    pub nodes: usize,
    /// Bytes of the recurrent state (f32).
    pub state_bytes: usize,
    /// Median latency of one decode step (all heads), microseconds.
    pub us_per_token: f64,
    /// Time to prefill the context with [`fused_chunk()`] (its forward and final state, as a
    /// block prefills a stream), seconds.
    pub prefill_s: f64,
}

/// Recurrent decode latency: one layer core (B = 1, H heads, F, D) whose memory is certified
/// for the largest context plus the timed steps; the state is prefilled with random tokens up
/// to each context in turn ([`fused_chunk()`] with its final state), then `steps` single-token
/// steps of [`naive_recurrent()`] are timed (node weights, the step and the normalisation).
///
/// # Errors
/// Invalid options.
#[allow(clippy::too_many_arguments)]
pub fn bench_decode(
    contexts: &[u64],
    mode: NodeMode,
    h: usize,
    f: usize,
    d: usize,
    eps: f64,
    delta: f64,
    steps: usize,
) -> Result<Vec<DecodeResult>> {
    // the timed steps run past the largest context: the table covers them too
    let horizon = contexts.iter().copied().max().unwrap_or(1024) + steps as u64;
    let table = NodeSpec {
        mode,
        banks: 4,
        delta,
        horizon,
        eps,
    }
    .build()?;
    let tables = std::slice::from_ref(&table);
    let rates = Rates::of_tables(tables)?;
    let n = table.len();
    let mut st = State::<f32>::zeros(1, h, n, f, d);
    let mut rng = XorShift64Star::new(11);
    let sc = 1.0 / (f as f64).sqrt();
    let mut out = Vec::new();
    let piece = 16384usize;
    for &ctx in contexts {
        let t0 = Instant::now();
        while st.pos < ctx {
            let t = ((ctx - st.pos) as usize).min(piece);
            let dims = Dims::new(1, h, t, f, d);
            let k: Vec<f32> = (0..h * t * f).map(|_| (rng.unif() * sc) as f32).collect();
            let v: Vec<f32> = (0..h * t * d)
                .map(|_| (2.0 * rng.unif() - 1.0) as f32)
                .collect();
            let a: Vec<f64> = (0..h * t)
                .map(|_| delta + (1.0 - delta) * rng.unif())
                .collect();
            // q does not change the state: zeros (the random draws stay those of the prefill)
            let q = vec![0f32; h * t * f];
            let x = OwnedInputs::from_host(&q, &k, &v, &a, dims, tables)?;
            st = fused_chunk::<f32>(&x.inputs(), &rates, 64, Some(&st), true)?
                .1
                .expect("final state asked for");
        }
        let prefill_s = t0.elapsed().as_secs_f64();
        let dims = Dims::new(1, h, 1, f, d);
        let mut lat = Vec::with_capacity(steps);
        for _ in 0..steps {
            let q: Vec<f32> = (0..h * f).map(|_| (rng.unif() * sc) as f32).collect();
            let k: Vec<f32> = (0..h * f).map(|_| (rng.unif() * sc) as f32).collect();
            let v: Vec<f32> = (0..h * d)
                .map(|_| (2.0 * rng.unif() - 1.0) as f32)
                .collect();
            let a: Vec<f64> = (0..h).map(|_| delta + (1.0 - delta) * rng.unif()).collect();
            let t1 = Instant::now();
            let x = OwnedInputs::from_host(&q, &k, &v, &a, dims, tables)?;
            let (o, next) = naive_recurrent::<f32>(&x.inputs(), &rates, 1, Some(&st), true)?;
            let _ = normalise(&o, 1e-6)?;
            st = next.expect("final state asked for");
            lat.push(t1.elapsed().as_secs_f64() * 1e6);
        }
        out.push(DecodeResult {
            context: ctx,
            nodes: n,
            state_bytes: st.bytes(),
            us_per_token: median(lat),
            prefill_s,
        });
    }
    Ok(out)
}

/// Softmax attention vs the linear (fused) form at one length.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CrossoverResult {
    /// Tokens T.
    pub t: usize,
    /// Causal softmax attention forward, ms.
    pub softmax_ms: f64,
    /// Fused power-law retention forward (shared nodes), ms.
    pub linear_ms: f64,
}

/// Forward time of causal softmax attention and of the fused retention, B = 1, H heads,
/// head dim `d` (F = d features), at each T.
///
/// # Errors
/// Candle errors (e.g. out of memory at large T for softmax).
pub fn bench_crossover(
    ts: &[usize],
    h: usize,
    d: usize,
    eps: f64,
    reps: usize,
) -> Result<Vec<CrossoverResult>> {
    let mut out = Vec::new();
    for &t in ts {
        let (q, k, v, _, a) = rand_inputs(1, h, t, d, d, 0.1, 5)?;
        let softmax_ms = time_ms(reps, || {
            let _ = vort::attention::causal_softmax(&q, &k, &v)?;
            Ok(())
        })?;
        let table = NodeSpec {
            mode: NodeMode::Shared,
            banks: 4,
            delta: 0.1,
            horizon: t as u64,
            eps,
        }
        .build()?;
        let tables = std::slice::from_ref(&table);
        let rates = Rates::of_tables(tables)?;
        let linear_ms = time_ms(reps, || {
            let cw = node_weights(&a, tables)?;
            let vp = with_ones(&v)?;
            let x = Inputs {
                q: &q,
                k: &k,
                vp: &vp,
                cw: &cw,
            };
            let (o, _) = fused_chunk::<f32>(&x, &rates, 64, None, false)?;
            let _ = normalise(&o, 1e-6)?;
            Ok(())
        })?;
        out.push(CrossoverResult {
            t,
            softmax_ms,
            linear_ms,
        });
    }
    Ok(out)
}
