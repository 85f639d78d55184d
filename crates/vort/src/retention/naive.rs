//! The O(T²) reference (DESIGN §2), f64, one loop over (t, i): the twin every fast form is
//! tested against.
//!
//! ```text
//! y_t = Σ_{i<=t} K_i(t-i) (φq_t·φk_i) v_i / (Σ_{i<=t} K_i(t-i) (φq_t·φk_i) + eps_den)
//! ```
//!
//! with K_i the exact GL kernel of token i's order ([`Kernel::Exact`], `NodeTable::exact_kernel`:
//! w_j(α_i) for shared nodes, the bank split β w_j(a_k) + (1-β) w_j(a_(k+1)) for banks), or the
//! table's own SOE ([`Kernel::Soe`]) which the recurrent and chunked forms compute exactly.

use super::{check_context, check_tables, table_for};
use crate::dims::Dims;
use crate::error::Result;
use crate::nodes::NodeTable;

/// Which kernel the naive form uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// The exact Grünwald–Letnikov weights (the model the SOE approximates).
    Exact,
    /// The table's SOE, K(j) = Σ c_n(α) e^(-u_n j): what recurrent/chunked compute.
    Soe,
}

/// Naive retention. q, k: [B, H, T, F]; v: [B, H, T, D]; alpha: [B, H, T]; `tables`: 1 or H.
/// Returns y: [B, H, T, D]. Exact up to f64 rounding for the chosen kernel.
///
/// # Errors
/// Wrong buffer lengths or table count; with [`Kernel::Soe`], T past the tables' horizon.
#[allow(clippy::too_many_arguments)]
pub fn naive(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    alpha: &[f64],
    dims: Dims,
    tables: &[NodeTable],
    kernel: Kernel,
    eps_den: f64,
) -> Result<Vec<f64>> {
    dims.check(q.len(), k.len(), v.len(), alpha.len())?;
    check_tables(tables, dims.h)?;
    if kernel == Kernel::Soe {
        check_context(tables, dims.t as u64)?;
    }
    let Dims { b, h, t, f, d } = dims;
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
                kern[i * t + j] = match kernel {
                    Kernel::Exact => table.exact_kernel(alpha[ao + i], j as u64)?,
                    Kernel::Soe => table.kernel(alpha[ao + i], j as u64),
                };
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
