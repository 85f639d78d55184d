//! The O(T²) references (docs/DESIGN.md §2), f64, one loop over (t, i): the twins every fast
//! form is tested against.
//!
//! - [`naive`]: the form of the retention contract, the SOE kernel of the node weights and
//!   rates, K_i(j) = Σ_n c_n(α_i) e^(-u_n j) (K_i(0) = 1), which the recurrent and chunked forms
//!   compute exactly; it carries states like them.
//! - [`exact_gl`]: a different kernel, the exact Grünwald–Letnikov one the SOE approximates
//!   (`NodeTable::exact_kernel`: w_j(α_i) for shared nodes, the bank split
//!   β w_j(a_k) + (1-β) w_j(a_(k+1)) for banks), normalised, with no state:
//!
//! ```text
//! y_t = Σ_{i<=t} K_i(t-i) (φq_t·φk_i) v_i / (Σ_{i<=t} K_i(t-i) (φq_t·φk_i) + eps_den)
//! ```

use super::{begin, check_tables, host, table_for, Inputs, Rates, State};
use crate::dims::Dims;
use crate::error::Result;
use crate::nodes::NodeTable;
use candle_core::{Tensor, WithDType};

/// The naive sum with the exact GL kernel (not the SOE: see the module doc). q, k: [B, H, T, F];
/// v: [B, H, T, D]; alpha: [B, H, T]; `tables`: 1 or H. Returns y: [B, H, T, D], exact up to
/// f64 rounding. The exact kernel is valid at every lag, so no horizon is checked.
///
/// # Errors
/// Wrong buffer lengths or table count.
pub fn exact_gl(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    alpha: &[f64],
    dims: Dims,
    tables: &[NodeTable],
    eps_den: f64,
) -> Result<Vec<f64>> {
    dims.check(q.len(), k.len(), v.len(), alpha.len())?;
    check_tables(tables, dims.h)?;
    let Dims { b, h, t, f, d, .. } = dims;
    let mut y = vec![0.0; b * h * t * d];
    for bh in 0..b * h {
        let table = table_for(tables, bh % h);
        let qo = bh * t * f;
        let vo = bh * t * d;
        let ao = bh * t;
        // kernel rows per stored token: K_i(j), j = 0..t-1
        let mut kern = vec![0.0; t * t];
        for i in 0..t {
            for j in 0..t - i {
                kern[i * t + j] = table.exact_kernel(alpha[ao + i], j as u64)?;
            }
        }
        let mut num = vec![0.0; d];
        for ti in 0..t {
            num.iter_mut().for_each(|x| *x = 0.0);
            let mut den = 0.0;
            for i in 0..=ti {
                let dot: f64 = (0..f).map(|x| q[qo + ti * f + x] * k[qo + i * f + x]).sum();
                let w = kern[i * t + (ti - i)] * dot;
                den += w;
                for (x, n) in num.iter_mut().enumerate() {
                    *n += w * v[vo + i * d + x];
                }
            }
            for x in 0..d {
                y[vo + ti * d + x] = num[x] / (den + eps_den);
            }
        }
    }
    Ok(y)
}

/// The naive form under the retention contract (module doc of [`super`]): the SOE kernel of
/// the given node weights and rates, summed pair by pair in f64, o [B, H, T, D+1]
/// unnormalised (in the dtype of q), and the state after the last token when
/// `output_final_state`:
///
/// ```text
/// o_t = Σ_{i<=t} K_i(t-i) (φq_t·φk_i) v'_i + Σ_n e^(-u_n (t+1)) φq_tᵀ G0_n,
///     K_i(0) = 1, K_i(j) = Σ_n cw_i[n] e^(-u_n j)
/// G_n = e^(-u_n T) G0_n + Σ_i e^(-u_n (T-1-i)) cw_i[n] φk_i v'_iᵀ
/// ```
///
/// The reference of the state-carrying forms. (The exact GL kernel has no state: it is
/// [`exact_gl`].) Learned rates are taken by value (no gradient).
///
/// # Errors
/// Shape mismatches; a state of other sizes; initial position + T past the rates' certified
/// horizon.
pub fn naive<T: WithDType>(
    x: &Inputs,
    rates: &Rates,
    _chunk: usize,
    initial_state: Option<&State<T>>,
    output_final_state: bool,
) -> Result<(Tensor, Option<State<T>>)> {
    let dims = begin(x, rates, initial_state)?;
    let Dims {
        b, h, t, f, n, pos, ..
    } = dims;
    let d1 = dims.d1();
    let (q, k, vp, cw): (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) =
        (host(x.q)?, host(x.k)?, host(x.vp)?, host(x.cw)?);
    let rows = rates.host_rows()?;
    let g0: Vec<f64> = match initial_state {
        Some(s) => s.host()?.iter().map(|v| v.to_f64()).collect(),
        None => vec![0.0; b * h * n * f * d1],
    };
    let mut o = vec![0.0; b * h * t * d1];
    let mut g = vec![0.0; b * h * n * f * d1];
    for bh in 0..b * h {
        let u = &rows[if rows.len() == 1 { 0 } else { bh % h }];
        let (qo, vo, co, go) = (bh * t * f, bh * t * d1, bh * t * n, bh * n * f * d1);
        let kernel = |i: usize, lag: usize| -> f64 {
            if lag == 0 {
                1.0
            } else {
                (0..n)
                    .map(|s| cw[co + i * n + s] * (-u[s] * lag as f64).exp())
                    .sum()
            }
        };
        for ti in 0..t {
            let out = &mut o[vo + ti * d1..vo + (ti + 1) * d1];
            for i in 0..=ti {
                let dot: f64 = (0..f).map(|c| q[qo + ti * f + c] * k[qo + i * f + c]).sum();
                let w = kernel(i, ti - i) * dot;
                for (c, oc) in out.iter_mut().enumerate() {
                    *oc += w * vp[vo + i * d1 + c];
                }
            }
            for s in 0..n {
                let decay = (-u[s] * (ti + 1) as f64).exp();
                for c in 0..f {
                    let qd = decay * q[qo + ti * f + c];
                    let row = &g0[go + (s * f + c) * d1..go + (s * f + c + 1) * d1];
                    for (oc, gv) in out.iter_mut().zip(row) {
                        *oc += qd * gv;
                    }
                }
            }
        }
        for s in 0..n {
            let carry = (-u[s] * t as f64).exp();
            for c in 0..f {
                for e in 0..d1 {
                    let idx = go + (s * f + c) * d1 + e;
                    let mut acc = carry * g0[idx];
                    for i in 0..t {
                        let w = (-u[s] * (t - 1 - i) as f64).exp() * cw[co + i * n + s];
                        acc += w * k[qo + i * f + c] * vp[vo + i * d1 + e];
                    }
                    g[idx] = acc;
                }
            }
        }
    }
    let o = Tensor::from_vec(o, (b, h, t, d1), x.q.device())?.to_dtype(x.q.dtype())?;
    let state = if output_final_state {
        let g = g.into_iter().map(T::from_f64).collect();
        Some(State::from_host(
            b,
            h,
            n,
            f,
            d1 - 1,
            pos + t as u64,
            g,
            x.q.device(),
        )?)
    } else {
        None
    };
    Ok((o, state))
}
