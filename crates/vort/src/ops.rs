//! Elementwise ops fused and parallel on the CPU, where candle's own run on one thread and
//! take several passes over memory (`vort bench train`'s profile, results/bench/train.md).
//!
//! [`gelu`]: the tanh approximation of GELU (the same function as candle's `Tensor::gelu`,
//! its plain twin in the tests),
//!
//! ```text
//! gelu(x)  = x/2 · (1 + tanh z),   z = √(2/π) (x + 0.044715 x³)
//! gelu'(x) = (1 + tanh z)/2 + x/2 · (1 - tanh² z) · √(2/π) (1 + 3·0.044715 x²)
//! ```
//!
//! Candle computes the forward in one pass but its backward in about ten single-threaded ones
//! (two `powf`, a `tanh`, products and sums, each allocating). Here both are one rayon pass,
//! with one tanh per element.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::error::Result;

/// Elements per rayon task: large enough that scheduling is noise.
const PAR_CHUNK: usize = 1 << 14;
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_C: f64 = 0.044_715;

/// GELU (tanh approximation), parallel, with a one-pass parallel backward. Any shape;
/// f32 or f64.
///
/// # Errors
/// Other dtypes.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    Ok(x.contiguous()?.apply_op1(Gelu)?)
}

struct Gelu;
struct GeluBackward;

trait GeluFloat: candle_core::WithDType + Send + Sync {
    fn tanh(self) -> Self;
}
impl GeluFloat for f32 {
    fn tanh(self) -> Self {
        f32::tanh(self)
    }
}
impl GeluFloat for f64 {
    fn tanh(self) -> Self {
        f64::tanh(self)
    }
}

fn consts<T: GeluFloat>() -> (T, T, T) {
    (
        T::from_f64(SQRT_2_OVER_PI),
        T::from_f64(GELU_C),
        T::from_f64(0.5),
    )
}

fn gelu_fwd<T: GeluFloat>(x: &[T]) -> Vec<T> {
    let (s, c, half) = consts::<T>();
    let mut y = vec![T::zero(); x.len()];
    y.par_chunks_mut(PAR_CHUNK)
        .zip(x.par_chunks(PAR_CHUNK))
        .for_each(|(ys, xs)| {
            for (y, &x) in ys.iter_mut().zip(xs) {
                let th = (s * (x + c * x * x * x)).tanh();
                *y = half * x * (T::one() + th);
            }
        });
    y
}

fn gelu_bwd<T: GeluFloat>(x: &[T], g: &[T]) -> Vec<T> {
    let (s, c, half) = consts::<T>();
    let three_c = T::from_f64(3.0 * GELU_C);
    let mut dx = vec![T::zero(); x.len()];
    dx.par_chunks_mut(PAR_CHUNK)
        .zip(x.par_chunks(PAR_CHUNK).zip(g.par_chunks(PAR_CHUNK)))
        .for_each(|(ds, (xs, gs))| {
            for ((d, &x), &g) in ds.iter_mut().zip(xs).zip(gs) {
                let th = (s * (x + c * x * x * x)).tanh();
                let dz = s * (T::one() + three_c * x * x);
                *d = g * (half * (T::one() + th) + half * x * (T::one() - th * th) * dz);
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

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "vort-gelu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let out = match s {
            CpuStorage::F32(x) => CpuStorage::F32(gelu_fwd(contiguous(x, l)?)),
            CpuStorage::F64(x) => CpuStorage::F64(gelu_fwd(contiguous(x, l)?)),
            _ => candle_core::bail!("gelu: f32 or f64 only"),
        };
        Ok((out, l.shape().clone()))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let g = grad.to_dtype(arg.dtype())?.contiguous()?;
        Ok(Some(arg.apply_op2_no_bwd(&g, &GeluBackward)?))
    }
}

impl CustomOp2 for GeluBackward {
    fn name(&self) -> &'static str {
        "vort-gelu-backward"
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
                "gelu backward: x {:?} and grad {:?}",
                l1.shape(),
                l2.shape()
            );
        }
        let out = match (s1, s2) {
            (CpuStorage::F32(x), CpuStorage::F32(g)) => {
                CpuStorage::F32(gelu_bwd(contiguous(x, l1)?, contiguous(g, l2)?))
            }
            (CpuStorage::F64(x), CpuStorage::F64(g)) => {
                CpuStorage::F64(gelu_bwd(contiguous(x, l1)?, contiguous(g, l2)?))
            }
            _ => candle_core::bail!("gelu backward: f32 or f64 only, one dtype"),
        };
        Ok((out, l1.shape().clone()))
    }
}
