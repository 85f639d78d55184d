//! Deterministic inputs and finite differences shared by the integration tests.
#![allow(dead_code)]

use candle_core::{DType, Device, Tensor, Var, WithDType};
use vort::retention::{self, node_weights, normalise, with_ones, Rates, State};
use vort::{Dims, NodeTable};

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
        let Dims { b, h, t, f, d, .. } = dims;
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
        let Dims { b, h, t, f, d, .. } = self.dims;
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
    let x = retention::Inputs { q, k, vp, cw };
    let rates = Rates::Fixed {
        u: u.to_vec(),
        horizon: None,
    };
    Ok(retention::fused_chunk::<f64>(&x, &rates, chunk, None, false)?.0)
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
    let x = retention::Inputs { q, k, vp, cw };
    let rates = Rates::Learned(u.clone());
    Ok(retention::chunk::<f64>(&x, &rates, chunk, None, false)?.0)
}

/// The contract's inputs from host buffers q, k [B, H, T, F], v [B, H, T, D] and α [B, H, T]
/// (tensors in `T`): v' = [v, 1] and the node weights c_n(α) of `tables` computed on the host
/// (`node_weights_host`), with the tables' rates.
pub fn host_call<T: WithDType>(
    q: &[T],
    k: &[T],
    v: &[T],
    alpha: &[f64],
    dims: Dims,
    tables: &[NodeTable],
) -> vort::Result<([Tensor; 4], Rates)> {
    let x = retention::OwnedInputs::from_host(q, k, v, alpha, dims, tables)?;
    Ok(([x.q, x.k, x.vp, x.cw], Rates::of_tables(tables)?))
}

/// [`retention::naive()`] (the SOE reference) from a zero state on host inputs, normalised:
/// y [B, H, T, D].
pub fn naive_y(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    alpha: &[f64],
    dims: Dims,
    tables: &[NodeTable],
    eps_den: f64,
) -> vort::Result<Vec<f64>> {
    let ([q, k, vp, cw], rates) = host_call(q, k, v, alpha, dims, tables)?;
    let x = retention::Inputs {
        q: &q,
        k: &k,
        vp: &vp,
        cw: &cw,
    };
    let (o, _) = retention::naive::<f64>(&x, &rates, 0, None, false)?;
    Ok(to_f64(&normalise(&o, eps_den)?))
}

/// [`retention::naive_recurrent()`] on host inputs, continuing `state` (replaced by the final
/// state; untouched on error), normalised: y [B, H, T, D] in `T`.
#[allow(clippy::too_many_arguments)]
pub fn recurrent_y<T: WithDType>(
    state: &mut State<T>,
    q: &[T],
    k: &[T],
    v: &[T],
    alpha: &[f64],
    dims: Dims,
    tables: &[NodeTable],
    eps_den: f64,
) -> vort::Result<Vec<T>> {
    let ([q, k, vp, cw], rates) = host_call(q, k, v, alpha, dims, tables)?;
    let x = retention::Inputs {
        q: &q,
        k: &k,
        vp: &vp,
        cw: &cw,
    };
    let (o, st) = retention::naive_recurrent(&x, &rates, 0, Some(&*state), true)?;
    *state = st.expect("final state asked for");
    Ok(normalise(&o, eps_den)?.flatten_all()?.to_vec1::<T>()?)
}

/// [`retention::chunk()`] with the node weights of the orders `alpha` [B, H, T] (differentiable
/// in α) and v' = [v, 1], normalised: y [B, H, T, D] and the final state.
#[allow(clippy::too_many_arguments)]
pub fn chunk_y<T: WithDType>(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alpha: &Tensor,
    tables: &[NodeTable],
    chunk: usize,
    state: Option<&State<T>>,
    eps_den: f64,
) -> vort::Result<(Tensor, State<T>)> {
    let cw = node_weights(alpha, tables)?.to_dtype(q.dtype())?;
    let vp = with_ones(v)?;
    let x = retention::Inputs {
        q,
        k,
        vp: &vp,
        cw: &cw,
    };
    let (o, g) = retention::chunk(&x, &Rates::of_tables(tables)?, chunk, state, true)?;
    Ok((normalise(&o, eps_den)?, g.expect("final state asked for")))
}
