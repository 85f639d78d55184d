//! Elementwise ops fused and parallel on the CPU, where candle's own run on one thread and
//! take several passes over memory (`vort bench train`'s profile, results/bench/train.md).
//!
//! [`gelu`]: the tanh approximation of GELU (the same function as candle's `Tensor::gelu`,
//! its plain twin in the tests; in f32 through σ(2z) = (1 + tanh z)/2 and an arithmetic exp, so
//! that the loops vectorise),
//!
//! ```text
//! gelu(x)  = x/2 · (1 + tanh z),   z = √(2/π) (x + 0.044715 x³)
//! gelu'(x) = (1 + tanh z)/2 + x/2 · (1 - tanh² z) · √(2/π) (1 + 3·0.044715 x²)
//! ```
//!
//! Candle computes the forward in one pass but its backward in about ten single-threaded ones
//! (two `powf`, a `tanh`, products and sums, each allocating). Here both are one rayon pass,
//! with one tanh per element.
//!
//! [`rms_norm`]: y = x / sqrt(mean(x²) + eps) · w over the last dim, with its backward
//! (candle-nn's fused `rms_norm` has none; the plain form takes six passes forward and a dozen
//! backward, its weight gradient a single-threaded reduction):
//!
//! ```text
//! r = (mean(x²) + eps)^(-1/2),  y = x r w
//! dx = r (g∘w) - x r³ Σ(g∘w∘x) / D,   dw = Σ_rows g∘x r
//! ```
//!
//! [`short_conv`]: the short causal depthwise convolution of Zoology's recipe,
//! y[b, t, c] = Σ_{i<K} w[i, c] x[b, t-i, c], in one pass, with its backward in one more.
//!
//! [`causal_softmax_rows`]: the row softmax of attention logits [N, T, S] under the causal
//! mask (query i sees keys 0..=off+i), forward and backward (dl = p ∘ (g - Σ g∘p)) one pass
//! each. Its twin is [`crate::attention::causal_softmax_reference`].
//!
//! [`mod@reference`] holds the plain candle forms, the twins the tests compare against.
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::error::Result;

/// Elements per rayon task: large enough that scheduling is noise.
const PAR_CHUNK: usize = 1 << 14;
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_C: f64 = 0.044_715;

/// Rows per rayon task of the row-wise ops.
const PAR_ROWS: usize = 256;

thread_local! {
    /// Set by [`with_plain_ops`]: the fused ops stand down on this thread.
    static PLAIN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the fused ops run for tensors on `dev`: they have a CPU kernel only
/// (`cpu_fwd`), so on any other device (CUDA, Metal) every op of this module, and the fused
/// retention, falls back to its plain candle twin ([`mod@reference`], `retention::chunk`), which
/// runs wherever candle does. [`with_plain_ops`] forces that path on the CPU.
pub fn fused_on(dev: &candle_core::Device) -> bool {
    dev.is_cpu() && !PLAIN.with(std::cell::Cell::get)
}

/// Runs `f` with the fused ops replaced by their plain twins on this thread, the path a
/// non-CPU device takes: the tests compare the two (outputs, states, gradients) on the CPU.
pub fn with_plain_ops<R>(f: impl FnOnce() -> R) -> R {
    /// Restores the flag when `f` returns or unwinds.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            PLAIN.with(|p| p.set(self.0));
        }
    }
    let _restore = Restore(PLAIN.with(|p| p.replace(true)));
    f()
}

/// GELU (tanh approximation), parallel, with a one-pass parallel backward. Any shape;
/// f32 or f64.
///
/// # Errors
/// Other dtypes.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    if !fused_on(x.device()) {
        return reference::gelu(x);
    }
    Ok(x.contiguous()?.apply_op1(Gelu)?)
}

struct Gelu;

trait HostFloat: candle_core::WithDType + Send + Sync {
    /// e^x ([`exp_f32`] in f32, so that loops vectorise).
    fn exp(self) -> Self;
    /// σ(2z) = (1 + tanh z) / 2, the factor GELU needs.
    fn sigmoid2(self) -> Self;
}
impl HostFloat for f32 {
    #[inline(always)]
    fn exp(self) -> Self {
        exp_f32(self)
    }
    /// 1 / (1 + e^(-2z)) with [`exp_f32`]: no libm call, so the GELU loops vectorise (glibc's
    /// scalar `tanhf` took 9% of a books-d256 training step, results/bench/train.md).
    #[inline(always)]
    fn sigmoid2(self) -> Self {
        1.0 / (1.0 + exp_f32(-2.0 * self))
    }
}
impl HostFloat for f64 {
    fn exp(self) -> Self {
        f64::exp(self)
    }
    fn sigmoid2(self) -> Self {
        0.5 * (1.0 + f64::tanh(self))
    }
}

/// e^x in f32 from arithmetic alone (Cephes' `expf`: x = n ln2 + r with |r| <= ln2/2, a
/// degree-6 polynomial for e^r, 2^n from the exponent bits), within ~2 ulp of `f32::exp` on
/// [-87, 88]; arguments are clamped there (e^-87 ≈ 1.6e-38, e^88 ≈ 1.7e38), and NaN stays NaN.
/// Rounding to the nearest n uses the 1.5·2^23 trick instead of `floor`, which is a libm call
/// without SSE4.1 and would stop the loop from vectorising.
#[inline(always)]
fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    // n in [-126, 127]: a normal power of two
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    e * scale
}

fn consts<T: HostFloat>() -> (T, T, T) {
    (
        T::from_f64(SQRT_2_OVER_PI),
        T::from_f64(GELU_C),
        T::from_f64(0.5),
    )
}

// With σ = σ(2z) = (1 + tanh z)/2: gelu(x) = x σ and gelu'(x) = σ + 2x σ(1 - σ) dz/dx,
// since (1 - tanh² z)/2 = 2σ(1 - σ).
fn gelu_fwd<T: HostFloat>(x: &[T]) -> Vec<T> {
    let (s, c, _) = consts::<T>();
    let mut y = vec![T::zero(); x.len()];
    y.par_chunks_mut(PAR_CHUNK)
        .zip(x.par_chunks(PAR_CHUNK))
        .for_each(|(ys, xs)| {
            for (y, &x) in ys.iter_mut().zip(xs) {
                *y = x * (s * (x + c * x * x * x)).sigmoid2();
            }
        });
    y
}

fn gelu_bwd<T: HostFloat>(x: &[T], g: &[T]) -> Vec<T> {
    let (s, c, _) = consts::<T>();
    let three_c = T::from_f64(3.0 * GELU_C);
    let two = T::from_f64(2.0);
    let mut dx = vec![T::zero(); x.len()];
    dx.par_chunks_mut(PAR_CHUNK)
        .zip(x.par_chunks(PAR_CHUNK).zip(g.par_chunks(PAR_CHUNK)))
        .for_each(|(ds, (xs, gs))| {
            for ((d, &x), &g) in ds.iter_mut().zip(xs).zip(gs) {
                let sg = (s * (x + c * x * x * x)).sigmoid2();
                let dz = s * (T::one() + three_c * x * x);
                *d = g * (sg + two * x * sg * (T::one() - sg) * dz);
            }
        });
    dx
}

fn contiguous<'a, T>(s: &'a [T], l: &Layout) -> candle_core::Result<&'a [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&s[a..b]),
        None => candle_core::bail!("gelu: the input must be contiguous"),
    }
}

impl HostOp1 for Gelu {
    const NAME: &'static str = "gelu";
    fn fwd<T: HostFloat>(&self, x: &[T]) -> Vec<T> {
        gelu_fwd(x)
    }
    fn bwd<T: HostFloat>(&self, x: &[T], g: &[T]) -> Vec<T> {
        gelu_bwd(x, g)
    }
}

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "vort-gelu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        Ok((host_fwd1(self, s, l)?, l.shape().clone()))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        host_bwd1(Gelu, arg, grad).map(Some)
    }
}

/// A one-input op computed on the host in f32 or f64, whose backward reads one saved tensor
/// (the input or the output, as the op chooses) and the cotangent: [`host_fwd1`] and
/// [`host_bwd1`] do the dtype dispatch, on the tensors' storage without copies.
trait HostOp1: Send + Sync + 'static {
    /// Name in errors.
    const NAME: &'static str;
    /// The output (contiguous, row-major).
    fn fwd<T: HostFloat>(&self, x: &[T]) -> Vec<T>;
    /// The input's gradient from the saved tensor and the cotangent g.
    fn bwd<T: HostFloat>(&self, saved: &[T], g: &[T]) -> Vec<T>;
}

fn host_fwd1<O: HostOp1>(op: &O, s: &CpuStorage, l: &Layout) -> candle_core::Result<CpuStorage> {
    Ok(match s {
        CpuStorage::F32(x) => CpuStorage::F32(op.fwd(contiguous(x, l)?)),
        CpuStorage::F64(x) => CpuStorage::F64(op.fwd(contiguous(x, l)?)),
        _ => candle_core::bail!("{}: f32 or f64 only", O::NAME),
    })
}

/// `op`'s backward as a no-gradient op on (saved, grad).
fn host_bwd1<O: HostOp1>(op: O, saved: &Tensor, grad: &Tensor) -> candle_core::Result<Tensor> {
    let g = grad.to_dtype(saved.dtype())?.contiguous()?;
    saved.contiguous()?.apply_op2_no_bwd(&g, &Backward1(op))
}

/// The backward of a [`HostOp1`] as a custom op of its own (it reads the storage directly).
struct Backward1<O>(O);

impl<O: HostOp1> CustomOp2 for Backward1<O> {
    fn name(&self) -> &'static str {
        "vort-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        if l1.shape() != l2.shape() {
            candle_core::bail!(
                "{} backward: saved {:?} and grad {:?}",
                O::NAME,
                l1.shape(),
                l2.shape()
            );
        }
        let out = match (s1, s2) {
            (CpuStorage::F32(x), CpuStorage::F32(g)) => {
                CpuStorage::F32(self.0.bwd(contiguous(x, l1)?, contiguous(g, l2)?))
            }
            (CpuStorage::F64(x), CpuStorage::F64(g)) => {
                CpuStorage::F64(self.0.bwd(contiguous(x, l1)?, contiguous(g, l2)?))
            }
            _ => candle_core::bail!("{} backward: f32 or f64 only, one dtype", O::NAME),
        };
        Ok((out, l1.shape().clone()))
    }
}

/// A tensor's values, contiguous, in `T` (one copy).
fn values<T: candle_core::WithDType>(x: &Tensor) -> candle_core::Result<Vec<T>> {
    x.to_dtype(T::DTYPE)?.flatten_all()?.to_vec1::<T>()
}

/// A two-input op computed on the host in f32 or f64, with the gradients of both inputs:
/// [`host_fwd2`] and [`host_bwd2`] do the dtype dispatch and the tensors around it.
trait HostOp2 {
    /// Name in errors.
    const NAME: &'static str;
    /// The output from both inputs (contiguous, row-major).
    fn fwd<T: HostFloat>(&self, a: &[T], b: &[T]) -> Vec<T>;
    /// The gradients (da, db) for the output's cotangent g.
    fn bwd<T: HostFloat>(&self, a: &[T], b: &[T], g: &[T]) -> (Vec<T>, Vec<T>);
    /// Refuses inputs the op cannot take (before anything is computed); the output has a's
    /// shape.
    fn check(&self, _a: &Layout, _b: &Layout) -> candle_core::Result<()> {
        Ok(())
    }
}

/// A [`HostOp2`] as a candle op with its backward: `a.apply_op2(b, Host2(op))`.
struct Host2<O>(O);

impl<O: HostOp2 + Send + Sync> CustomOp2 for Host2<O> {
    fn name(&self) -> &'static str {
        O::NAME
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.0.check(l1, l2)?;
        Ok((host_fwd2(&self.0, s1, l1, s2, l2)?, l1.shape().clone()))
    }

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        host_bwd2(&self.0, a, b, g)
    }
}

fn host_fwd2<O: HostOp2>(
    op: &O,
    s1: &CpuStorage,
    l1: &Layout,
    s2: &CpuStorage,
    l2: &Layout,
) -> candle_core::Result<CpuStorage> {
    Ok(match (s1, s2) {
        (CpuStorage::F32(a), CpuStorage::F32(b)) => {
            CpuStorage::F32(op.fwd(contiguous(a, l1)?, contiguous(b, l2)?))
        }
        (CpuStorage::F64(a), CpuStorage::F64(b)) => {
            CpuStorage::F64(op.fwd(contiguous(a, l1)?, contiguous(b, l2)?))
        }
        _ => candle_core::bail!("{}: f32 or f64 only, one dtype", O::NAME),
    })
}

fn host_bwd2<O: HostOp2>(
    op: &O,
    a: &Tensor,
    b: &Tensor,
    g: &Tensor,
) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
    macro_rules! run {
        ($ty:ty) => {{
            let (da, db) = op.bwd::<$ty>(&values(a)?, &values(b)?, &values(g)?);
            (
                Tensor::from_vec(da, a.shape(), a.device())?,
                Tensor::from_vec(db, b.shape(), b.device())?,
            )
        }};
    }
    let (da, db) = match a.dtype() {
        candle_core::DType::F32 => run!(f32),
        candle_core::DType::F64 => run!(f64),
        dt => candle_core::bail!("{}: unsupported dtype {dt:?}", O::NAME),
    };
    Ok((Some(da), Some(db)))
}

/// RMSNorm with a learned gain over the last dim: x \[.., D\], w \[D\] (f32 or f64, one dtype).
///
/// # Errors
/// Shape or dtype mismatches.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    if !fused_on(x.device()) {
        return reference::rms_norm(x, w, eps);
    }
    Ok(x.contiguous()?
        .apply_op2(&w.contiguous()?, Host2(RmsNorm { eps }))?)
}

struct RmsNorm {
    eps: f64,
}

fn rms_fwd<T: HostFloat>(x: &[T], w: &[T], eps: f64) -> Vec<T> {
    let d = w.len();
    let mut y = vec![T::zero(); x.len()];
    y.par_chunks_mut(PAR_ROWS * d)
        .zip(x.par_chunks(PAR_ROWS * d))
        .for_each(|(ys, xs)| {
            for (yr, xr) in ys.chunks_mut(d).zip(xs.chunks(d)) {
                let ms: f64 = xr.iter().map(|v| (*v * *v).to_f64()).sum::<f64>() / d as f64;
                let r = T::from_f64(1.0 / (ms + eps).sqrt());
                for ((y, &x), &w) in yr.iter_mut().zip(xr).zip(w) {
                    *y = x * r * w;
                }
            }
        });
    y
}

/// (dx, dw) of RMSNorm for cotangent g.
fn rms_bwd<T: HostFloat>(x: &[T], w: &[T], g: &[T], eps: f64) -> (Vec<T>, Vec<T>) {
    let d = w.len();
    let mut dx = vec![T::zero(); x.len()];
    let partial: Vec<Vec<f64>> = dx
        .par_chunks_mut(PAR_ROWS * d)
        .zip(x.par_chunks(PAR_ROWS * d).zip(g.par_chunks(PAR_ROWS * d)))
        .map(|(dxs, (xs, gs))| {
            let mut dw = vec![0f64; d];
            for ((dxr, xr), gr) in dxs.chunks_mut(d).zip(xs.chunks(d)).zip(gs.chunks(d)) {
                let ms: f64 = xr.iter().map(|v| (*v * *v).to_f64()).sum::<f64>() / d as f64;
                let r = 1.0 / (ms + eps).sqrt();
                let gwx: f64 = (0..d).map(|j| (gr[j] * w[j] * xr[j]).to_f64()).sum();
                let c = r * r * r * gwx / d as f64;
                for j in 0..d {
                    let (xj, gj) = (xr[j].to_f64(), gr[j].to_f64());
                    dxr[j] = T::from_f64(r * gj * w[j].to_f64() - xj * c);
                    dw[j] += gj * xj * r;
                }
            }
            dw
        })
        .collect();
    let mut dw = vec![0f64; d];
    for p in &partial {
        for (a, b) in dw.iter_mut().zip(p) {
            *a += b;
        }
    }
    (dx, dw.into_iter().map(T::from_f64).collect())
}

impl HostOp2 for RmsNorm {
    const NAME: &'static str = "vort-rms-norm";
    fn fwd<T: HostFloat>(&self, x: &[T], w: &[T]) -> Vec<T> {
        rms_fwd(x, w, self.eps)
    }
    fn bwd<T: HostFloat>(&self, x: &[T], w: &[T], g: &[T]) -> (Vec<T>, Vec<T>) {
        rms_bwd(x, w, g, self.eps)
    }
    fn check(&self, l1: &Layout, l2: &Layout) -> candle_core::Result<()> {
        let d = l1.shape().dims().last().copied().unwrap_or(0);
        if l2.shape().dims() != [d] || d == 0 {
            candle_core::bail!(
                "rms_norm: x {:?} needs a gain of [{d}] (d >= 1), got {:?}",
                l1.shape(),
                l2.shape()
            );
        }
        Ok(())
    }
}

/// Rows scaled to a per-head length: ẑ = s_h z / sqrt(|z|² + 1e-12) for z [B, H, T, d] and
/// s \[H\] (the q/k normalisation of every block), forward and backward one parallel pass each
/// (the plain form is six candle ops, and its gradient of s a single-threaded reduction).
/// With u = z/n, n = sqrt(|z|² + 1e-12):
///
/// ```text
/// dz = (s g - u (u · s g)) / n,   ds_h = Σ_{rows of head h} g · u
/// ```
///
/// # Errors
/// Shape or dtype mismatches.
pub fn qk_norm(z: &Tensor, scale: &Tensor) -> Result<Tensor> {
    let (_, h, t, d) = z.dims4()?;
    if scale.dims() != [h] || d == 0 {
        return Err(crate::error::VortError::Shape {
            name: "scale".into(),
            got: scale.dims().to_vec(),
            expected: format!("[{h}] for z [.., {h}, .., d >= 1]"),
        });
    }
    if !fused_on(z.device()) {
        return reference::qk_norm(z, scale);
    }
    Ok(z.contiguous()?
        .apply_op2(&scale.contiguous()?, Host2(QkNorm { t, d }))?)
}

/// [`qk_norm`]'s op: rows of `d`, `t` rows per (batch, head).
struct QkNorm {
    t: usize,
    d: usize,
}

/// The ε under the square root of [`qk_norm`].
const QK_NORM_EPS: f64 = 1e-12;

impl HostOp2 for QkNorm {
    const NAME: &'static str = "vort-qk-norm";
    fn fwd<T: HostFloat>(&self, z: &[T], s: &[T]) -> Vec<T> {
        let (t, d, h) = (self.t, self.d, s.len());
        let block = (t * d).max(1); // an empty z (T = 0) has no blocks
        let mut y = vec![T::zero(); z.len()];
        y.par_chunks_mut(block)
            .zip(z.par_chunks(block))
            .enumerate()
            .for_each(|(bh, (ys, zs))| {
                let sh = s[bh % h].to_f64();
                for (yr, zr) in ys.chunks_mut(d).zip(zs.chunks(d)) {
                    let n2: f64 = zr.iter().map(|v| v.to_f64() * v.to_f64()).sum();
                    let c = T::from_f64(sh / (n2 + QK_NORM_EPS).sqrt());
                    for (y, &z) in yr.iter_mut().zip(zr) {
                        *y = z * c;
                    }
                }
            });
        y
    }
    fn bwd<T: HostFloat>(&self, z: &[T], s: &[T], g: &[T]) -> (Vec<T>, Vec<T>) {
        let (t, d, h) = (self.t, self.d, s.len());
        let block = (t * d).max(1);
        let mut dz = vec![T::zero(); z.len()];
        // per (batch, head) block: its share of ds
        let ds_blocks: Vec<f64> = dz
            .par_chunks_mut(block)
            .zip(z.par_chunks(block).zip(g.par_chunks(block)))
            .enumerate()
            .map(|(bh, (dzs, (zs, gs)))| {
                let sh = s[bh % h].to_f64();
                let mut ds = 0.0;
                for ((dzr, zr), gr) in dzs.chunks_mut(d).zip(zs.chunks(d)).zip(gs.chunks(d)) {
                    let n = (zr.iter().map(|v| v.to_f64() * v.to_f64()).sum::<f64>() + QK_NORM_EPS)
                        .sqrt();
                    // u·g
                    let ug: f64 = zr
                        .iter()
                        .zip(gr)
                        .map(|(z, g)| z.to_f64() * g.to_f64())
                        .sum::<f64>()
                        / n;
                    ds += ug;
                    for ((dz, &z), &g) in dzr.iter_mut().zip(zr).zip(gr) {
                        let u = z.to_f64() / n;
                        *dz = T::from_f64(sh * (g.to_f64() - u * ug) / n);
                    }
                }
                ds
            })
            .collect();
        let mut ds = vec![0f64; h];
        for (bh, v) in ds_blocks.iter().enumerate() {
            ds[bh % h] += v;
        }
        (dz, ds.into_iter().map(T::from_f64).collect())
    }
}

/// The elementwise half of the FAVOR+ feature map: φ = exp(p - |z|²/2) / √m for the
/// projections p = z ωᵀ [R, m] and the rows z [R, d] (see [`crate::features`]), forward and
/// backward one parallel pass each (the plain form is six candle ops and three reductions):
///
/// ```text
/// dp = g ∘ φ,   dz = -(Σ_j dp_j) z
/// ```
///
/// # Errors
/// Shape or dtype mismatches.
pub fn favor_exp(p: &Tensor, z: &Tensor) -> Result<Tensor> {
    let (r, m) = p.dims2()?;
    let (rz, d) = z.dims2()?;
    if r != rz || m == 0 || d == 0 {
        return Err(crate::error::VortError::Shape {
            name: "p, z".into(),
            got: [p.dims(), z.dims()].concat(),
            expected: format!("[{r}, m >= 1] and [{r}, d >= 1]"),
        });
    }
    if !fused_on(p.device()) {
        return reference::favor_exp(p, z);
    }
    Ok(p.contiguous()?
        .apply_op2(&z.contiguous()?, Host2(FavorExp { m, d }))?)
}

/// [`favor_exp`]'s op.
struct FavorExp {
    m: usize,
    d: usize,
}

impl FavorExp {
    /// φ of one row: exp(p - |z|²/2) / √m.
    fn row<T: HostFloat>(&self, pr: &[T], zr: &[T], out: &mut [T]) {
        let half_sq: f64 = 0.5 * zr.iter().map(|v| v.to_f64() * v.to_f64()).sum::<f64>();
        // exp(p - sq - ln √m): the 1/√m folded into the exponent
        let shift = T::from_f64(half_sq + 0.5 * (self.m as f64).ln());
        for (o, &p) in out.iter_mut().zip(pr) {
            *o = (p - shift).exp();
        }
    }
}

impl HostOp2 for FavorExp {
    const NAME: &'static str = "vort-favor-exp";
    fn fwd<T: HostFloat>(&self, p: &[T], z: &[T]) -> Vec<T> {
        let (m, d) = (self.m, self.d);
        let mut phi = vec![T::zero(); p.len()];
        phi.par_chunks_mut(PAR_ROWS * m)
            .zip(p.par_chunks(PAR_ROWS * m).zip(z.par_chunks(PAR_ROWS * d)))
            .for_each(|(os, (ps, zs))| {
                for ((or, pr), zr) in os.chunks_mut(m).zip(ps.chunks(m)).zip(zs.chunks(d)) {
                    self.row(pr, zr, or);
                }
            });
        phi
    }
    fn bwd<T: HostFloat>(&self, p: &[T], z: &[T], g: &[T]) -> (Vec<T>, Vec<T>) {
        let (m, d) = (self.m, self.d);
        let mut dp = vec![T::zero(); p.len()];
        let mut dz = vec![T::zero(); z.len()];
        dp.par_chunks_mut(PAR_ROWS * m)
            .zip(dz.par_chunks_mut(PAR_ROWS * d))
            .zip(
                p.par_chunks(PAR_ROWS * m)
                    .zip(z.par_chunks(PAR_ROWS * d).zip(g.par_chunks(PAR_ROWS * m))),
            )
            .for_each(|((dps, dzs), (ps, (zs, gs)))| {
                for ((((dpr, dzr), pr), zr), gr) in dps
                    .chunks_mut(m)
                    .zip(dzs.chunks_mut(d))
                    .zip(ps.chunks(m))
                    .zip(zs.chunks(d))
                    .zip(gs.chunks(m))
                {
                    // φ recomputed into dp, then dp = g ∘ φ
                    self.row(pr, zr, dpr);
                    let mut total = 0f64;
                    for (x, &g) in dpr.iter_mut().zip(gr) {
                        *x *= g;
                        total += x.to_f64();
                    }
                    for (dz, &z) in dzr.iter_mut().zip(zr) {
                        *dz = T::from_f64(-total * z.to_f64());
                    }
                }
            });
        (dp, dz)
    }
}

/// Short causal depthwise convolution: y[b, t, c] = Σ_{i<K} w[i, c] · x[b, t-i, c] for
/// x [B, T, C], w [K, C], with x before the piece taken from `prev` [B, K-1, C] (zeros at a
/// sequence start). Returns y [B, T, C] and the last K-1 inputs (detached) for the next piece.
///
/// # Errors
/// Shape or dtype mismatches.
pub fn short_conv(x: &Tensor, w: &Tensor, prev: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
    if !fused_on(x.device()) {
        return reference::short_conv(x, w, prev);
    }
    let (b, t, c) = x.dims3()?;
    let k = w.dim(0)?;
    let pad = match prev {
        Some(p) => p.clone(),
        None => Tensor::zeros((b, k.saturating_sub(1), c), x.dtype(), x.device())?,
    };
    let xp = Tensor::cat(&[&pad, x], 1)?.contiguous()?; // [B, K-1+T, C]
    let y = xp.apply_op2(&w.contiguous()?, ShortConv { t })?;
    let tail = xp.narrow(1, t, k.saturating_sub(1))?.detach();
    Ok((y, tail))
}

/// The convolution on the padded input xp [B, K-1+T, C] (the op's first input).
struct ShortConv {
    t: usize,
}

fn conv_fwd<T: HostFloat>(xp: &[T], w: &[T], b: usize, t: usize, k: usize, c: usize) -> Vec<T> {
    let s = k - 1 + t;
    let mut y = vec![T::zero(); b * t * c];
    if t * c == 0 {
        return y;
    }
    y.par_chunks_mut(t * c).enumerate().for_each(|(bi, yb)| {
        let xb = &xp[bi * s * c..(bi + 1) * s * c];
        for (tt, yr) in yb.chunks_mut(c).enumerate() {
            for i in 0..k {
                // x[t - i] sits at row K-1+t-i of xp
                let xr = &xb[(k - 1 + tt - i) * c..(k - 1 + tt - i + 1) * c];
                let wr = &w[i * c..(i + 1) * c];
                for ((y, &x), &w) in yr.iter_mut().zip(xr).zip(wr) {
                    *y += w * x;
                }
            }
        }
    });
    y
}

/// (dxp [B, K-1+T, C], dw [K, C]) for cotangent g [B, T, C].
fn conv_bwd<T: HostFloat>(
    xp: &[T],
    w: &[T],
    g: &[T],
    b: usize,
    t: usize,
    k: usize,
    c: usize,
) -> (Vec<T>, Vec<T>) {
    let s = k - 1 + t;
    let mut dxp = vec![T::zero(); b * s * c];
    if t * c == 0 {
        return (dxp, vec![T::zero(); k * c]);
    }
    let partial: Vec<Vec<T>> = dxp
        .par_chunks_mut(s * c)
        .enumerate()
        .map(|(bi, dxb)| {
            let xb = &xp[bi * s * c..(bi + 1) * s * c];
            let gb = &g[bi * t * c..(bi + 1) * t * c];
            let mut dw = vec![T::zero(); k * c];
            for (tt, gr) in gb.chunks(c).enumerate() {
                for i in 0..k {
                    let row = (k - 1 + tt - i) * c;
                    let wr = &w[i * c..(i + 1) * c];
                    let dwr = &mut dw[i * c..(i + 1) * c];
                    let xr = &xb[row..row + c];
                    let dxr = &mut dxb[row..row + c];
                    for j in 0..c {
                        dxr[j] += wr[j] * gr[j];
                        dwr[j] += xr[j] * gr[j];
                    }
                }
            }
            dw
        })
        .collect();
    let mut dw = vec![T::zero(); k * c];
    for p in &partial {
        for (a, &v) in dw.iter_mut().zip(p) {
            *a += v;
        }
    }
    (dxp, dw)
}

impl ShortConv {
    /// The call's sizes from the shapes of xp [B, K-1+T, C] and w [K, C].
    fn call(&self, xp: &Shape, w: &Shape) -> candle_core::Result<ShortConvCall> {
        let (b, s, c) = xp.dims3()?;
        let (k, cw) = w.dims2()?;
        if k == 0 || cw != c || s + 1 != k + self.t {
            candle_core::bail!(
                "short_conv: padded input {xp:?} and weights {w:?} must be [B, K-1+T, C] and [K, C] with K >= 1, T = {}",
                self.t
            );
        }
        Ok(ShortConvCall { b, t: self.t, k, c })
    }
}

/// [`ShortConv`] with the sizes of one call.
struct ShortConvCall {
    b: usize,
    t: usize,
    k: usize,
    c: usize,
}

impl HostOp2 for ShortConvCall {
    const NAME: &'static str = "short_conv";
    fn fwd<T: HostFloat>(&self, xp: &[T], w: &[T]) -> Vec<T> {
        conv_fwd(xp, w, self.b, self.t, self.k, self.c)
    }
    fn bwd<T: HostFloat>(&self, xp: &[T], w: &[T], g: &[T]) -> (Vec<T>, Vec<T>) {
        conv_bwd(xp, w, g, self.b, self.t, self.k, self.c)
    }
}

impl CustomOp2 for ShortConv {
    fn name(&self) -> &'static str {
        "vort-short-conv"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let call = self.call(l1.shape(), l2.shape())?;
        let shape = Shape::from((call.b, call.t, call.c));
        Ok((host_fwd2(&call, s1, l1, s2, l2)?, shape))
    }

    fn bwd(
        &self,
        xp: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        host_bwd2(&self.call(xp.shape(), w.shape())?, xp, w, g)
    }
}

/// Row softmax of logits [N, T, S] with the causal mask of T queries that are the last T of S
/// keys (query i sees keys 0..=off+i, off = S - T); masked entries are exactly 0.
///
/// # Errors
/// A rank other than 3, off != S - T, other dtypes.
pub fn causal_softmax_rows(logits: &Tensor, off: usize) -> Result<Tensor> {
    if !fused_on(logits.device()) {
        return reference::causal_softmax_rows(logits, off);
    }
    Ok(logits.contiguous()?.apply_op1(CausalSoftmax { off })?)
}

struct CausalSoftmax {
    off: usize,
}

fn softmax_fwd<T: HostFloat>(x: &[T], t: usize, s: usize, off: usize) -> Vec<T> {
    let mut p = vec![T::zero(); x.len()];
    if s == 0 {
        return p;
    }
    p.par_chunks_mut(s)
        .zip(x.par_chunks(s))
        .enumerate()
        .for_each(|(row, (pr, xr))| {
            let seen = off + row % t + 1;
            let (xr, pr) = (&xr[..seen], &mut pr[..seen]);
            let m = xr.iter().fold(f64::NEG_INFINITY, |a, v| a.max(v.to_f64()));
            let mut z = 0f64;
            for (p, x) in pr.iter_mut().zip(xr) {
                let e = (x.to_f64() - m).exp();
                z += e;
                *p = T::from_f64(e);
            }
            let inv = T::from_f64(1.0 / z);
            for p in pr {
                *p *= inv;
            }
        });
    p
}

fn softmax_bwd<T: HostFloat>(p: &[T], g: &[T], t: usize, s: usize, off: usize) -> Vec<T> {
    let mut dl = vec![T::zero(); p.len()];
    if s == 0 {
        return dl;
    }
    dl.par_chunks_mut(s)
        .zip(p.par_chunks(s).zip(g.par_chunks(s)))
        .enumerate()
        .for_each(|(row, (dr, (pr, gr)))| {
            let seen = off + row % t + 1;
            let dot: f64 = (0..seen).map(|j| (pr[j] * gr[j]).to_f64()).sum();
            let dot = T::from_f64(dot);
            for j in 0..seen {
                dr[j] = pr[j] * (gr[j] - dot);
            }
        });
    dl
}

/// [`CausalSoftmax`] with the sizes of one call.
#[derive(Clone, Copy)]
struct SoftmaxCall {
    t: usize,
    s: usize,
    off: usize,
}

impl HostOp1 for SoftmaxCall {
    const NAME: &'static str = "causal softmax";
    fn fwd<T: HostFloat>(&self, x: &[T]) -> Vec<T> {
        softmax_fwd(x, self.t, self.s, self.off)
    }
    /// From the output p (the saved tensor).
    fn bwd<T: HostFloat>(&self, p: &[T], g: &[T]) -> Vec<T> {
        softmax_bwd(p, g, self.t, self.s, self.off)
    }
}

impl CausalSoftmax {
    fn call(&self, shape: &Shape) -> candle_core::Result<SoftmaxCall> {
        let (_, t, s) = shape.dims3()?;
        if s != t + self.off {
            candle_core::bail!(
                "causal softmax: logits {shape:?} must be [N, T, T + {}]",
                self.off
            );
        }
        Ok(SoftmaxCall {
            t,
            s,
            off: self.off,
        })
    }
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "vort-causal-softmax"
    }

    fn cpu_fwd(&self, st: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let call = self.call(l.shape())?;
        Ok((host_fwd1(&call, st, l)?, l.shape().clone()))
    }

    fn bwd(
        &self,
        _arg: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        host_bwd1(self.call(res.shape())?, res, grad).map(Some)
    }
}

/// The plain candle forms of the fused ops: the twins the tests compare against.
pub mod reference {
    use candle_core::{Tensor, D};

    use crate::error::Result;

    /// [`super::gelu`] in plain candle ops: candle's `Tensor::gelu`, the same tanh
    /// approximation.
    ///
    /// # Errors
    /// Other dtypes.
    pub fn gelu(x: &Tensor) -> Result<Tensor> {
        Ok(x.gelu()?)
    }

    /// [`super::causal_softmax_rows`] in plain candle ops: an additive -inf mask (query i
    /// sees keys 0..=off+i) and candle-nn's row softmax, logits [N, T, S].
    ///
    /// # Errors
    /// A rank other than 3.
    pub fn causal_softmax_rows(logits: &Tensor, off: usize) -> Result<Tensor> {
        let (_, t, s) = logits.dims3()?;
        let mut mask = vec![0f32; t * s];
        for i in 0..t {
            for j in (off + i + 1).min(s)..s {
                mask[i * s + j] = f32::NEG_INFINITY;
            }
        }
        let mask = Tensor::from_vec(mask, (1, t, s), logits.device())?.to_dtype(logits.dtype())?;
        Ok(candle_nn::ops::softmax(
            &logits.broadcast_add(&mask)?,
            D::Minus1,
        )?)
    }

    /// RMSNorm in plain candle ops: x / sqrt(mean(x²) + eps) · w.
    ///
    /// # Errors
    /// Shape mismatches.
    pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
        let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
        Ok(x.broadcast_div(&(ms + eps)?.sqrt()?)?.broadcast_mul(w)?)
    }

    /// [`super::qk_norm`] in plain candle ops: z / sqrt(|z|² + 1e-12) · s_h, z [B, H, T, d].
    ///
    /// # Errors
    /// Shape mismatches.
    pub fn qk_norm(z: &Tensor, scale: &Tensor) -> Result<Tensor> {
        let h = scale.dim(0)?;
        let norm = (z.sqr()?.sum_keepdim(D::Minus1)? + 1e-12)?.sqrt()?;
        Ok(z.broadcast_div(&norm)?
            .broadcast_mul(&scale.reshape((1, h, 1, 1))?)?)
    }

    /// [`super::favor_exp`] in plain candle ops: exp(p - |z|²/2) / √m, p [R, m], z [R, d].
    ///
    /// # Errors
    /// Shape mismatches.
    pub fn favor_exp(p: &Tensor, z: &Tensor) -> Result<Tensor> {
        let m = p.dim(1)?;
        let sq = (z.sqr()?.sum_keepdim(1)? * 0.5)?;
        Ok((p.broadcast_sub(&sq)?.exp()? / (m as f64).sqrt())?)
    }

    /// The short causal depthwise convolution in plain candle ops (see [`super::short_conv`]).
    ///
    /// # Errors
    /// Shape mismatches.
    pub fn short_conv(x: &Tensor, w: &Tensor, prev: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
        let (b, t, c) = x.dims3()?;
        let k = w.dim(0)?;
        let pad = match prev {
            Some(p) => p.clone(),
            None => Tensor::zeros((b, k - 1, c), x.dtype(), x.device())?,
        };
        let xp = Tensor::cat(&[&pad, x], 1)?; // [B, k-1+T, C]
        let mut y = x.broadcast_mul(&w.get(0)?)?;
        for i in 1..k {
            // x[t - i] sits at row k-1+t-i of xp
            let shifted = xp.narrow(1, k - 1 - i, t)?;
            y = (y + shifted.broadcast_mul(&w.get(i)?)?)?;
        }
        let tail = xp.narrow(1, t, k - 1)?.detach();
        Ok((y, tail))
    }
}

#[cfg(test)]
mod tests {
    use super::exp_f32;

    /// The arithmetic exp against libm's over its whole range, the clamped ends and NaN.
    #[test]
    fn exp_f32_is_within_a_few_ulp_of_libm() {
        let mut worst = 0f64;
        for i in 0..=200_000 {
            let x = -87.0 + 175.0 * i as f32 / 200_000.0;
            let (got, want) = (exp_f32(x) as f64, (x as f64).exp());
            worst = worst.max(((got - want) / want).abs());
        }
        // 2 ulp of f32 is 2.4e-7
        assert!(worst < 2.5e-7, "{worst:e}");
        assert_eq!(exp_f32(0.0), 1.0);
        assert!(exp_f32(-1e4) > 0.0 && exp_f32(-1e4) < 1e-37);
        assert!(exp_f32(1e4).is_finite() && exp_f32(1e4) > 1e38);
        assert!(exp_f32(f32::NAN).is_nan());
    }
}
