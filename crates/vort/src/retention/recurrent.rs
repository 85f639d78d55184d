//! The recurrent form (DESIGN §1-2): one token at a time, O(N F D) work and memory per head,
//! independent of the context length. This is the streaming/decoding API.
//!
//! Per head, with v'_t = [v_t, 1] (the last column carries the denominator):
//!
//! ```text
//! o_t = (φq_t·φk_t) v'_t + Σ_n λ_n φq_tᵀ G_n(t-1)            (the j = 0 weight applied exactly)
//! G_n(t) = λ_n G_n(t-1) + c_n(α_t) φk_t v'_tᵀ,  written  G_n += c_n φk v'ᵀ - μ_n G_n
//! y_t = o_t[..D] / (o_t[D] + eps_den)
//! ```
//!
//! μ_n = -expm1(-u_n) is kept instead of λ_n so the slowest modes keep their decay in f32
//! (DESIGN §1). Unrolled, o_t = Σ_{i<=t} K_i(t-i) (φq_t·φk_i) v'_i with the table's SOE kernel:
//! equal to `naive(.., Kernel::Soe, ..)` up to rounding.
//!
//! The kernel is certified only for lags up to the table's horizon, so [`recurrent`] refuses a
//! call that would take the stream past it (`VortError::BeyondHorizon`); stream with a table
//! built for the stream's length (`nodes::STREAM_HORIZON` = 2^20 by default).

use candle_core::{Device, Tensor, WithDType};
use rayon::prelude::*;

use super::{check_context, check_tables, node_weights_host, table_for};
use crate::dims::Dims;
use crate::error::{Result, VortError};
use crate::nodes::NodeTable;

/// Recurrent state of a retention layer: G [B, H, N, F, D+1] (numerator and denominator
/// columns) and the number of tokens consumed.
#[derive(Debug, Clone, PartialEq)]
pub struct State<T> {
    /// Batch B.
    pub b: usize,
    /// Heads H.
    pub h: usize,
    /// Nodes N.
    pub n: usize,
    /// Feature dim F.
    pub f: usize,
    /// Value dim D (the state has D + 1 columns).
    pub d: usize,
    /// Tokens consumed so far.
    pub pos: u64,
    /// G, row-major [B, H, N, F, D+1].
    pub g: Vec<T>,
}

impl<T: WithDType> State<T> {
    /// The empty state (no token seen).
    pub fn zeros(b: usize, h: usize, n: usize, f: usize, d: usize) -> Self {
        State {
            b,
            h,
            n,
            f,
            d,
            pos: 0,
            g: vec![T::zero(); b * h * n * f * (d + 1)],
        }
    }

    /// Bytes held by the state (flat in the context length).
    pub fn bytes(&self) -> usize {
        self.g.len() * std::mem::size_of::<T>()
    }

    /// The state as a tensor [B, H, N, F, D+1] (the layout of the chunked forms).
    ///
    /// # Errors
    /// Candle errors only.
    pub fn to_tensor(&self, device: &Device) -> Result<Tensor> {
        Ok(Tensor::from_vec(
            self.g.clone(),
            (self.b, self.h, self.n, self.f, self.d + 1),
            device,
        )?)
    }

    /// A state from a tensor [B, H, N, F, D+1] (converted to `T`) and a position.
    ///
    /// # Errors
    /// A tensor that is not rank 5 with at least 2 columns.
    pub fn from_tensor(t: &Tensor, pos: u64) -> Result<Self> {
        let (b, h, n, f, d1) = t.dims5().map_err(|_| VortError::Shape {
            name: "state".into(),
            got: t.dims().to_vec(),
            expected: "[B, H, N, F, D+1]".into(),
        })?;
        if d1 < 2 {
            return Err(VortError::Shape {
                name: "state".into(),
                got: t.dims().to_vec(),
                expected: "[B, H, N, F, D+1] with D >= 1".into(),
            });
        }
        let g = t.to_dtype(T::DTYPE)?.flatten_all()?.to_vec1::<T>()?;
        Ok(State {
            b,
            h,
            n,
            f,
            d: d1 - 1,
            pos,
            g,
        })
    }
}

/// Per-head decay constants (λ_n, μ_n) in the working precision.
fn decays<T: WithDType>(table: &NodeTable) -> (Vec<T>, Vec<T>) {
    let lam = table.u.iter().map(|&u| T::from_f64((-u).exp())).collect();
    let mu = table
        .u
        .iter()
        .map(|&u| T::from_f64(-(-u).exp_m1()))
        .collect();
    (lam, mu)
}

/// One head, `steps` consecutive tokens. g: [N, F, D+1]; q, k: [steps, F]; v: [steps, D];
/// cw: [steps, N]; out: [steps, D].
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
    eps_den: T,
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
        let den = o[d] + eps_den;
        for c in 0..d {
            out[t * d + c] = o[c] / den;
        }
    }
}

/// Feeds T tokens through the recurrence, updating `state` in place.
///
/// q, k: [B, H, T, F]; v: [B, H, T, D]; alpha: [B, H, T] (f64, orders); returns y [B, H, T, D].
/// `tables`: 1 (all heads) or H tables with the same number of nodes as the state.
/// Parallel over B×H (rayon).
///
/// # Errors
/// Shape mismatches between the buffers, the tables and the state; a stream that would pass
/// the tables' certified horizon (state.pos + T > horizon), refused before any update.
#[allow(clippy::too_many_arguments)]
pub fn recurrent<T: WithDType>(
    state: &mut State<T>,
    q: &[T],
    k: &[T],
    v: &[T],
    alpha: &[f64],
    dims: Dims,
    tables: &[NodeTable],
    eps_den: f64,
) -> Result<Vec<T>> {
    dims.check(q.len(), k.len(), v.len(), alpha.len())?;
    check_tables(tables, dims.h)?;
    let Dims { b, h, t, f, d } = dims;
    if f == 0 || d == 0 {
        return Err(VortError::InvalidArgument(format!(
            "recurrent: F and D must be >= 1 ({dims:?})"
        )));
    }
    let n = state.n;
    if (state.b, state.h, state.f, state.d) != (b, h, f, d) || tables.iter().any(|tb| tb.len() != n)
    {
        return Err(VortError::InvalidArgument(format!(
            "state [B={}, H={}, N={}, F={}, D={}] does not match inputs {dims:?} / tables with N = {:?}",
            state.b,
            state.h,
            state.n,
            state.f,
            state.d,
            tables.iter().map(|tb| tb.len()).collect::<Vec<_>>()
        )));
    }
    check_context(tables, state.pos + t as u64)?;
    let cw: Vec<T> = node_weights_host(alpha, dims, tables)?;
    let consts: Vec<(Vec<T>, Vec<T>)> = (0..h).map(|hh| decays(table_for(tables, hh))).collect();
    let mut y = vec![T::zero(); b * h * t * d];
    let gsz = n * f * (d + 1);
    let eps = T::from_f64(eps_den);
    if t == 0 {
        return Ok(y);
    }
    let gs: Vec<&mut [T]> = if gsz > 0 {
        state.g.chunks_mut(gsz).collect()
    } else {
        (0..b * h).map(|_| &mut [][..]).collect()
    };
    gs.into_par_iter()
        .zip(y.par_chunks_mut(t * d))
        .enumerate()
        .for_each(|(bh, (g, out))| {
            let (lam, mu) = &consts[bh % h];
            run_head(
                g,
                &q[bh * t * f..(bh + 1) * t * f],
                &k[bh * t * f..(bh + 1) * t * f],
                &v[bh * t * d..(bh + 1) * t * d],
                &cw[bh * t * n..(bh + 1) * t * n],
                out,
                lam,
                mu,
                f,
                d,
                eps,
            )
        });
    state.pos += t as u64;
    Ok(y)
}

/// Format tag written into saved states.
pub const STATE_FORMAT: &str = "vort-state-v1";

impl<T: WithDType> State<T> {
    /// Saves the state to safetensors: tensor `g` [B, H, N, F, D+1] (F32 or F64 as `T`),
    /// tensor `u` [Hu, N] (the rates it was built with, checked on restore) and metadata
    /// `format`, `pos`.
    ///
    /// # Errors
    /// I/O or a rates buffer whose length is not a multiple of N.
    pub fn save(&self, path: &std::path::Path, rates: &[f64]) -> Result<()> {
        use crate::st::{write, Precision};
        let prec = if T::DTYPE == candle_core::DType::F64 {
            Precision::F64
        } else {
            Precision::F32
        };
        let g: Vec<f64> = self.g.iter().map(|x| x.to_f64()).collect();
        let hu = match rates.len().checked_div(self.n) {
            Some(hu) if hu * self.n == rates.len() => hu,
            None if rates.is_empty() => 0,
            _ => {
                return Err(VortError::InvalidArgument(format!(
                    "state save: {} rates for N = {}",
                    rates.len(),
                    self.n
                )))
            }
        };
        let mut meta = std::collections::HashMap::new();
        meta.insert("format".into(), STATE_FORMAT.into());
        meta.insert("pos".into(), self.pos.to_string());
        write(
            path,
            &[
                (
                    "g",
                    &g,
                    vec![self.b, self.h, self.n, self.f, self.d + 1],
                    prec,
                ),
                ("u", rates, vec![hu, self.n], Precision::F64),
            ],
            meta,
        )
    }

    /// Restores a state saved by [`State::save`], checking that it was built with `rates`
    /// (bitwise equal) so a state is never fed to a layer with other memory nodes.
    ///
    /// # Errors
    /// Missing tensors or metadata, wrong format, rates that differ.
    pub fn load(path: &std::path::Path, rates: &[f64]) -> Result<Self> {
        let mut file = crate::st::read(path)?;
        if file.metadata.get("format").map(String::as_str) != Some(STATE_FORMAT) {
            return Err(VortError::InvalidArgument(format!(
                "{}: not a {STATE_FORMAT} file",
                path.display()
            )));
        }
        let pos: u64 = file
            .metadata
            .get("pos")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| VortError::InvalidArgument("state file: bad `pos`".into()))?;
        let g = file.take("g")?;
        let u = file.take("u")?;
        if u.data != rates {
            return Err(VortError::InvalidArgument(
                "state file was saved with different memory nodes (rates u differ)".into(),
            ));
        }
        let [b, h, n, f, d1] = g.shape[..] else {
            return Err(VortError::Shape {
                name: "g".into(),
                got: g.shape.clone(),
                expected: "[B, H, N, F, D+1]".into(),
            });
        };
        if d1 < 2 {
            return Err(VortError::Shape {
                name: "g".into(),
                got: g.shape.clone(),
                expected: "[B, H, N, F, D+1] with D >= 1".into(),
            });
        }
        Ok(State {
            b,
            h,
            n,
            f,
            d: d1 - 1,
            pos,
            g: g.data.into_iter().map(T::from_f64).collect(),
        })
    }
}
