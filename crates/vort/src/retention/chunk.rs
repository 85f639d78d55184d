//! The chunked (training) form in plain candle ops, fla's `chunk`: the twin of the fused op,
//! differentiable by candle's autodiff in q, k, v, the node weights (hence α) and the rates u.
//!
//! Per head, tokens split into chunks of L (the last may be shorter). For a chunk with entry
//! state G_n (the recurrent G_n(t0 - 1)), local positions τ, σ in 0..L and v' = [v, 1]:
//!
//! ```text
//! intra:  o_τ += Σ_{σ<=τ} M_τσ (φq_τ·φk_σ) v'_σ,   M_ττ = 1,  M_τσ = Σ_n e^(-u_n (τ-σ)) c_n(α_σ)
//! inter:  o_τ += Σ_n e^(-u_n (τ+1)) φq_τᵀ G_n
//! state:  G_n <- e^(-u_n L) G_n + Σ_σ e^(-u_n (L-1-σ)) c_n(α_σ) φk_σ v'_σᵀ   (as G - μ_L G + …)
//! ```
//!
//! The kernel matrix inside a chunk is the same SOE kernel the states carry, so the chunked
//! output equals the recurrent one up to rounding for every chunk size (and streaming gives the
//! same numbers as training). The exact GL kernel is [`super::exact_gl`]'s; the difference is
//! the SOE certificate (docs/DESIGN.md §1). An earlier alternative, the exact GL kernel inside
//! each chunk and the SOE only across chunk boundaries, was built and removed: no model could
//! select it, and it made the output depend on the chunk size and differ from the streaming
//! form (docs/DESIGN.md §2).

use candle_core::{DType, Tensor, WithDType, D};

use super::{begin, dims4, Inputs, Rates, State};
use crate::error::{Result, VortError};

/// The chunked form under the retention contract (module doc of [`super`]): o [B, H, T, D+1]
/// unnormalised, and the state after the last token when `output_final_state`.
///
/// Fixed or learned rates (a learned rate tensor keeps its gradient: this is the only form
/// that trains them). Differentiable in q, k, vp and cw; the initial state (a [`State`] on any
/// device, moved to the inputs' when it lives elsewhere) receives no gradient, and the final
/// one, on the inputs' device, carries none (streams detach their states).
///
/// # Errors
/// Shape or dtype mismatches; chunk = 0; a state of other sizes; initial position + T past
/// the rates' certified horizon.
pub fn chunk<T: WithDType>(
    x: &Inputs,
    rates: &Rates,
    chunk: usize,
    initial_state: Option<&State<T>>,
    output_final_state: bool,
) -> Result<(Tensor, Option<State<T>>)> {
    let dims = begin(x, rates, initial_state)?;
    let dev = x.q.device();
    let g0 = initial_state.map(|s| s.to_tensor(dev)).transpose()?;
    let u = rates.tensor(dev)?;
    let (o, g) = chunked_impl(x.q, x.k, x.vp, x.cw, &u, chunk, g0.as_ref())?;
    let state = if output_final_state {
        Some(State::from_tensor(&g.detach(), dims.pos + dims.t as u64)?)
    } else {
        None
    };
    Ok((o, state))
}

#[allow(clippy::too_many_arguments)]
fn chunked_impl(
    q: &Tensor,
    k: &Tensor,
    vp: &Tensor,
    cw: &Tensor,
    u: &Tensor,
    chunk: usize,
    state: Option<&Tensor>,
) -> Result<(Tensor, Tensor)> {
    let (b, h, t, f) = dims4("q", q)?;
    let (_, _, _, d1) = dims4("vp", vp)?;
    let (_, _, _, n) = dims4("cw", cw)?;
    if chunk == 0 {
        return Err(VortError::InvalidArgument("chunk size must be >= 1".into()));
    }
    for (name, x, want) in [
        ("k", k, vec![b, h, t, f]),
        ("vp", vp, vec![b, h, t, d1]),
        ("cw", cw, vec![b, h, t, n]),
    ] {
        if x.dims() != want.as_slice() {
            return Err(VortError::Shape {
                name: name.into(),
                got: x.dims().to_vec(),
                expected: format!("{want:?}"),
            });
        }
    }
    let (hu, nu) = u.dims2()?;
    if nu != n || !(hu == 1 || hu == h) {
        return Err(VortError::Shape {
            name: "u".into(),
            got: u.dims().to_vec(),
            expected: format!("[1 or {h}, {n}]"),
        });
    }
    let dt = q.dtype();
    let mut g = match state {
        Some(s) => {
            if s.dims() != [b, h, n, f, d1] {
                return Err(VortError::Shape {
                    name: "state".into(),
                    got: s.dims().to_vec(),
                    expected: format!("{:?}", [b, h, n, f, d1]),
                });
            }
            s.to_dtype(dt)?
        }
        None => Tensor::zeros((b, h, n, f, d1), dt, q.device())?,
    };
    let main = (t / chunk) * chunk;
    let mut outs = Vec::new();
    if main > 0 {
        let (o, g1) = block(
            &q.narrow(2, 0, main)?,
            &k.narrow(2, 0, main)?,
            &vp.narrow(2, 0, main)?,
            &cw.narrow(2, 0, main)?,
            u,
            chunk,
            &g,
        )?;
        outs.push(o);
        g = g1;
    }
    if main < t {
        let r = t - main;
        let (o, g1) = block(
            &q.narrow(2, main, r)?,
            &k.narrow(2, main, r)?,
            &vp.narrow(2, main, r)?,
            &cw.narrow(2, main, r)?,
            u,
            r,
            &g,
        )?;
        outs.push(o);
        g = g1;
    }
    let o = if outs.len() == 1 {
        outs.pop().expect("one block")
    } else {
        Tensor::cat(&outs, 2)?
    };
    Ok((o, g))
}

/// Exp of -u ⊗ lags: u [Hu, N] (its dtype), lags host values -> [Hu, N, len] in `dt`.
fn decay_table(u: &Tensor, lags: &[f64], dt: DType) -> Result<Tensor> {
    let (hu, n) = u.dims2()?;
    let l = Tensor::from_vec(lags.to_vec(), (1, 1, lags.len()), u.device())?.to_dtype(u.dtype())?;
    let e = u.reshape((hu, n, 1))?.broadcast_mul(&l)?.neg()?.exp()?;
    Ok(e.to_dtype(dt)?)
}

/// Batched matmul over any number of leading dims (candle's CPU matmul takes rank <= 4):
/// flattens them, multiplies contiguous operands, restores the shape.
fn bmm(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let da = a.dims();
    let r = da.len();
    let (m, k) = (da[r - 2], da[r - 1]);
    let n = b.dim(D::Minus1)?;
    let batch: usize = da[..r - 2].iter().product();
    let a3 = a.contiguous()?.reshape((batch, m, k))?;
    let b3 = b.contiguous()?.reshape((batch, k, n))?;
    let mut shape = da[..r - 2].to_vec();
    shape.extend([m, n]);
    Ok(a3.matmul(&b3)?.reshape(shape)?)
}

/// Chunks of exactly `l` tokens: t = nc * l.
#[allow(clippy::too_many_arguments)]
fn block(
    q: &Tensor,
    k: &Tensor,
    vp: &Tensor,
    cw: &Tensor,
    u: &Tensor,
    l: usize,
    g0: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let (b, h, t, f) = q.dims4()?;
    let d1 = vp.dim(3)?;
    let n = cw.dim(3)?;
    let hu = u.dim(0)?;
    let nc = t / l;
    let dt = q.dtype();
    let dev = q.device();
    let qc = q.reshape((b, h, nc, l, f))?;
    let kc = k.reshape((b, h, nc, l, f))?;
    let vc = vp.reshape((b, h, nc, l, d1))?;
    let eye = Tensor::eye(l, dt, dev)?;
    let a = bmm(&qc, &kc.transpose(3, 4)?)?; // [B,H,nc,L,L]
    if n == 0 {
        let intra = bmm(&a.broadcast_mul(&eye)?, &vc)?;
        return Ok((intra.reshape((b, h, t, d1))?, g0.clone()));
    }
    let cwc = cw.reshape((b, h, nc, l, n))?;
    // intra-chunk kernel matrix M[τ, σ] = δ_τσ + [τ>σ] Σ_n e^(-u_n(τ-σ)) c_n(α_σ)
    let mut lag = vec![0.0; l * l];
    let mut mask = vec![0.0; l * l];
    for tau in 0..l {
        for sig in 0..tau {
            lag[tau * l + sig] = (tau - sig) as f64;
            mask[tau * l + sig] = 1.0;
        }
    }
    let e = decay_table(u, &lag, dt)?; // [Hu, N, L*L] (the SOE intra kernel)
    let mask = Tensor::from_vec(mask, (1, 1, l * l), dev)?.to_dtype(dt)?;
    let e = e
        .broadcast_mul(&mask)?
        .reshape((hu, n, l, l))?
        .permute((0, 2, 3, 1))?
        .contiguous()?; // [Hu, τ, σ, N]
    let m = e
        .reshape((1, hu, 1, l, l, n))?
        .broadcast_mul(&cwc.unsqueeze(3)?)?
        .sum(5)?
        .broadcast_add(&eye)?; // [B,H,nc,L,L]
    let intra = bmm(&(a * m)?, &vc)?;
    // inter-chunk readout: Qd[τ, n, :] = e^(-u_n (τ+1)) φq_τ
    let lag_q: Vec<f64> = (1..=l).map(|x| x as f64).collect();
    let d_q = decay_table(u, &lag_q, dt)?
        .permute((0, 2, 1))?
        .reshape((1, hu, 1, l, n, 1))?;
    let qd = qc
        .unsqueeze(4)?
        .broadcast_mul(&d_q)?
        .reshape((b, h, nc, l, n * f))?;
    // chunk contributions: Kd[σ, n, :] = e^(-u_n (L-1-σ)) c_n(α_σ) φk_σ
    let lag_k: Vec<f64> = (0..l).map(|x| (l - 1 - x) as f64).collect();
    let d_k = decay_table(u, &lag_k, dt)?
        .permute((0, 2, 1))?
        .reshape((1, hu, 1, l, n))?;
    let wk = cwc.broadcast_mul(&d_k)?.unsqueeze(5)?; // [B,H,nc,L,N,1]
    let kd = kc
        .unsqueeze(4)?
        .broadcast_mul(&wk)?
        .reshape((b, h, nc, l, n * f))?;
    let kv = bmm(&kd.transpose(3, 4)?, &vc)?; // [B,H,nc,NF,D']

    // scan over chunks: G <- G - μ_L G + KV, μ_L = 1 - e^(-u L)
    let mu = decay_table(u, &[l as f64], u.dtype())?
        .affine(-1.0, 1.0)?
        .to_dtype(dt)?
        .reshape((1, hu, n, 1, 1))?;
    let mut g = g0.clone();
    let mut gins = Vec::with_capacity(nc);
    for c in 0..nc {
        gins.push(g.reshape((b, h, n * f, d1))?);
        let kv_c = kv.narrow(2, c, 1)?.reshape((b, h, n, f, d1))?;
        g = ((&g - g.broadcast_mul(&mu)?)? + kv_c)?;
    }
    let gin = Tensor::stack(&gins, 2)?; // [B,H,nc,NF,D']
    let inter = bmm(&qd, &gin)?;
    let o = (intra + inter)?.reshape((b, h, t, d1))?;
    Ok((o, g))
}
