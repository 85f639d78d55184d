//! The recurrent form (docs/DESIGN.md §1-2), fla's `naive_recurrent`: one token at a time on the
//! host, O(N F D) work and memory per head, independent of the context length. This is the
//! streaming and decoding form.
//!
//! Per head, with v'_t = [v_t, 1] (the last column carries the denominator):
//!
//! ```text
//! o_t = (φq_t·φk_t) v'_t + Σ_n λ_n φq_tᵀ G_n(t-1)            (the j = 0 weight applied exactly)
//! G_n(t) = λ_n G_n(t-1) + c_n(α_t) φk_t v'_tᵀ,  written  G_n += c_n φk v'ᵀ - μ_n G_n
//! ```
//!
//! μ_n = -expm1(-u_n) is kept instead of λ_n so the slowest modes keep their decay in f32
//! (docs/DESIGN.md §1). Unrolled, o_t = Σ_{i<=t} K_i(t-i) (φq_t·φk_i) v'_i with the SOE kernel:
//! equal to [`super::naive()`] up to rounding.
//!
//! The kernel is certified only for lags up to the table's horizon, so the form refuses a call
//! that would take the stream past it (`VortError::BeyondHorizon`); stream with a table built
//! for the stream's length (`nodes::STREAM_HORIZON` = 2^20 by default).

use candle_core::{Tensor, WithDType};
use rayon::prelude::*;

use super::{begin, host, Inputs, Rates, State};
use crate::dims::Dims;
use crate::error::{Result, VortError};

/// (λ_n, μ_n) = (e^(-u_n), -expm1(-u_n)) of one row of rates.
fn decays_of<T: WithDType>(u: &[f64]) -> (Vec<T>, Vec<T>) {
    let lam = u.iter().map(|&u| T::from_f64((-u).exp())).collect();
    let mu = u.iter().map(|&u| T::from_f64(-(-u).exp_m1())).collect();
    (lam, mu)
}

/// One head, `steps` consecutive tokens. g: [N, F, D+1]; q, k: [steps, F]; v: [steps, D];
/// cw: [steps, N]; out: the unnormalised o [steps, D+1].
#[allow(clippy::too_many_arguments)]
fn run_head<T: WithDType>(
    g: &mut [T],
    q: &[T],
    k: &[T],
    v: &[T],
    cw: &[T],
    out: &mut [T],
    lam: &[T],
    mu: &[T],
    f: usize,
    d: usize,
) {
    let n = lam.len();
    let d1 = d + 1;
    let steps = q.len() / f;
    let mut o = vec![T::zero(); d1];
    let mut tmp = vec![T::zero(); d1];
    for t in 0..steps {
        let qt = &q[t * f..(t + 1) * f];
        let kt = &k[t * f..(t + 1) * f];
        let vt = &v[t * d..(t + 1) * d];
        let mut s = T::zero();
        for x in 0..f {
            s += qt[x] * kt[x];
        }
        for x in 0..d {
            o[x] = s * vt[x];
        }
        o[d] = s;
        for node in 0..n {
            let gn = &mut g[node * f * d1..(node + 1) * f * d1];
            let w = cw[t * n + node];
            let (l, m) = (lam[node], mu[node]);
            tmp.iter_mut().for_each(|x| *x = T::zero());
            for x in 0..f {
                let row = &mut gn[x * d1..(x + 1) * d1];
                let (qx, wk) = (qt[x], w * kt[x]);
                for c in 0..d {
                    tmp[c] += qx * row[c];
                    row[c] += wk * vt[c] - m * row[c];
                }
                tmp[d] += qx * row[d];
                row[d] += wk - m * row[d];
            }
            for c in 0..d1 {
                o[c] += l * tmp[c];
            }
        }
        out[t * d1..(t + 1) * d1].copy_from_slice(&o);
    }
}

/// One call's host buffers: q, k [B, H, T, F], v [B, H, T, D], cw [B, H, T, N].
struct HostInputs<'a, T> {
    q: &'a [T],
    k: &'a [T],
    v: &'a [T],
    cw: &'a [T],
}

/// Runs every (batch, head) pair in parallel (rayon): g [B·H, N, F, D+1] in place, `out`
/// [B·H, T, D+1] unnormalised. `consts` holds (λ, μ) for one row of rates shared by all heads,
/// or one per head.
fn run_heads<T: WithDType>(
    g: &mut [T],
    x: &HostInputs<T>,
    out: &mut [T],
    consts: &[(Vec<T>, Vec<T>)],
    dims: Dims,
) {
    let Dims {
        b, h, t, f, d, n, ..
    } = dims;
    if t == 0 {
        return;
    }
    let width = d + 1;
    let gsz = n * f * (d + 1);
    // with no nodes every head gets an empty state (only the lag-0 term remains)
    let gs: Vec<&mut [T]> = if gsz > 0 {
        g.chunks_mut(gsz).collect()
    } else {
        (0..b * h).map(|_| &mut [][..]).collect()
    };
    gs.into_par_iter()
        .zip(out.par_chunks_mut(t * width))
        .enumerate()
        .for_each(|(bh, (g, out))| {
            let (lam, mu) = &consts[if consts.len() == 1 { 0 } else { bh % h }];
            run_head(
                g,
                &x.q[bh * t * f..(bh + 1) * t * f],
                &x.k[bh * t * f..(bh + 1) * t * f],
                &x.v[bh * t * d..(bh + 1) * t * d],
                &x.cw[bh * t * n..(bh + 1) * t * n],
                out,
                lam,
                mu,
                f,
                d,
            )
        });
}

/// The recurrent form under the retention contract (module doc of [`super`]): token by token
/// on the host in the precision of the inputs (f32 or f64), o [B, H, T, D+1] unnormalised, and
/// the state after the last token when `output_final_state`. Fixed or learned rates (learned
/// ones by value: this form has no gradient). The last column of vp must be ones (the
/// denominator's column, which the recurrence adds itself).
///
/// # Errors
/// Shape or dtype mismatches; vp's last column not ones; a state of other sizes; initial
/// position + T past the rates' certified horizon.
pub fn naive_recurrent<T: WithDType>(
    x: &Inputs,
    rates: &Rates,
    _chunk: usize,
    initial_state: Option<&State<T>>,
    output_final_state: bool,
) -> Result<(Tensor, Option<State<T>>)> {
    let dims = begin(x, rates, initial_state)?;
    let Dims {
        b, h, t, f, d, n, ..
    } = dims;
    let d1 = dims.d1();
    if f == 0 {
        return Err(VortError::InvalidArgument(format!(
            "naive_recurrent: F must be >= 1 ({dims:?})"
        )));
    }
    let mut g = match initial_state {
        Some(s) => s.host()?,
        None => vec![T::zero(); b * h * n * f * d1],
    };
    let ones = host::<T>(&x.vp.narrow(3, d, 1)?)?;
    if ones.iter().any(|&o| o != T::one()) {
        return Err(VortError::InvalidArgument(
            "recurrent: the last column of vp must be ones".into(),
        ));
    }
    let (q, k, v, cw): (Vec<T>, Vec<T>, Vec<T>, Vec<T>) = (
        host(x.q)?,
        host(x.k)?,
        host(&x.vp.narrow(3, 0, d)?)?,
        host(x.cw)?,
    );
    let rows = rates.host_rows()?;
    let consts: Vec<(Vec<T>, Vec<T>)> = rows.iter().map(|r| decays_of(r)).collect();
    let mut o = vec![T::zero(); b * h * t * d1];
    let inputs = HostInputs {
        q: &q,
        k: &k,
        v: &v,
        cw: &cw,
    };
    run_heads(&mut g, &inputs, &mut o, &consts, dims);
    let o = Tensor::from_vec(o, (b, h, t, d1), x.q.device())?.to_dtype(x.q.dtype())?;
    let state = if output_final_state {
        let pos = dims.pos + t as u64;
        Some(State::from_host(b, h, n, f, d, pos, g, x.q.device())?)
    } else {
        None
    };
    Ok((o, state))
}
