//! Deterministic inputs and finite differences shared by the integration tests.
#![allow(dead_code)]

use candle_core::{DType, Device, Tensor, Var};
use vort::Dims;

pub use vort::vort_math::rng::XorShift64Star as Rng;

/// Inputs of one retention call in f64: q, k in [0, 1)/sqrt(F) (nonnegative features),
/// v in [-1, 1), alpha in [lo, 1].
#[derive(Clone)]
pub struct Inputs {
    pub dims: Dims,
    pub q: Vec<f64>,
    pub k: Vec<f64>,
    pub v: Vec<f64>,
    pub alpha: Vec<f64>,
}

impl Inputs {
    pub fn new(dims: Dims, alpha_lo: f64, seed: u64) -> Self {
        let mut r = Rng::new(seed);
        let Dims { b, h, t, f, d } = dims;
        let sc = 1.0 / (f as f64).sqrt();
        let q = (0..b * h * t * f).map(|_| r.unif() * sc).collect();
        let k = (0..b * h * t * f).map(|_| r.unif() * sc).collect();
        let v = (0..b * h * t * d).map(|_| 2.0 * r.unif() - 1.0).collect();
        let alpha = (0..b * h * t)
            .map(|_| alpha_lo + (1.0 - alpha_lo) * r.unif())
            .collect();
        Inputs {
            dims,
            q,
            k,
            v,
            alpha,
        }
    }

    pub fn tensors(&self, dt: DType) -> (Var, Var, Var, Var) {
        let Dims { b, h, t, f, d } = self.dims;
        let dev = Device::Cpu;
        let mk = |x: &Vec<f64>, shape: &[usize]| {
            Var::from_tensor(
                &Tensor::from_vec(x.clone(), shape, &dev)
                    .unwrap()
                    .to_dtype(dt)
                    .unwrap(),
            )
            .unwrap()
        };
        (
            mk(&self.q, &[b, h, t, f]),
            mk(&self.k, &[b, h, t, f]),
            mk(&self.v, &[b, h, t, d]),
            mk(&self.alpha, &[b, h, t]),
        )
    }

    /// A fixed random cotangent w [B, H, T, D] so the loss is Σ y·w.
    pub fn cotangent(&self, seed: u64) -> Vec<f64> {
        let mut r = Rng::new(seed);
        let Dims { b, h, t, d, .. } = self.dims;
        (0..b * h * t * d).map(|_| 2.0 * r.unif() - 1.0).collect()
    }
}

pub fn to_f64(t: &Tensor) -> Vec<f64> {
    t.flatten_all()
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .to_vec1::<f64>()
        .unwrap()
}

/// Central finite differences of `loss` w.r.t. input `which` (0 q, 1 k, 2 v, 3 alpha) at
/// every `stride`-th index; returns (indices, gradients).
pub fn fd_grad(
    inp: &Inputs,
    which: usize,
    stride: usize,
    step: f64,
    loss: &dyn Fn(&Inputs) -> f64,
) -> (Vec<usize>, Vec<f64>) {
    let len = [inp.q.len(), inp.k.len(), inp.v.len(), inp.alpha.len()][which];
    let mut idx = Vec::new();
    let mut g = Vec::new();
    for i in (0..len).step_by(stride) {
        let mut p = inp.clone();
        let mut m = inp.clone();
        let (xp, xm) = match which {
            0 => (&mut p.q, &mut m.q),
            1 => (&mut p.k, &mut m.k),
            2 => (&mut p.v, &mut m.v),
            _ => (&mut p.alpha, &mut m.alpha),
        };
        xp[i] += step;
        xm[i] -= step;
        idx.push(i);
        g.push((loss(&p) - loss(&m)) / (2.0 * step));
    }
    (idx, g)
}

pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The fused form from a zero state, output only (the training call).
pub fn fused0(
    q: &Tensor,
    k: &Tensor,
    vp: &Tensor,
    cw: &Tensor,
    u: &[Vec<f64>],
    chunk: usize,
) -> vort::Result<Tensor> {
    let x = vort::retention::Inputs { q, k, vp, cw };
    let rates = vort::retention::Rates::Fixed {
        u: u.to_vec(),
        horizon: None,
    };
    Ok(vort::retention::fused::fused_raw::<f64>(&x, &rates, chunk, None, false)?.0)
}

/// The plain chunked form from a zero state, output only.
pub fn chunked0(
    q: &Tensor,
    k: &Tensor,
    vp: &Tensor,
    cw: &Tensor,
    u: &Tensor,
    chunk: usize,
) -> vort::Result<Tensor> {
    let x = vort::retention::Inputs { q, k, vp, cw };
    let rates = vort::retention::Rates::Learned(u.clone());
    Ok(vort::retention::chunked::chunked_raw::<f64>(&x, &rates, chunk, None, false)?.0)
}
