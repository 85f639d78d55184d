//! The retention core in its four forms, fla's layout and names (docs/DESIGN.md §2 and §5), one
//! public function each under one contract:
//!
//! - [`naive()`]: the O(T²) f64 reference of the table's SOE kernel, summed pair by pair;
//! - [`naive_recurrent()`]: one token at a time on the host, the streaming and decoding form;
//! - [`chunk()`]: the training form in plain candle ops, differentiable by candle's autodiff
//!   (the twin the fused op is tested against);
//! - [`fused_chunk()`]: the fused CustomOp with a hand-written backward (the training form).
//!
//! The contract (fla's): every form takes the same [`Inputs`] (φq, φk, v' = [v, 1] and the
//! per-token node weights), the same [`Rates`], a chunk length (which the naive and recurrent
//! forms ignore), an optional initial [`State`] and whether to return the final one, and returns
//! the unnormalised output o [B, H, T, D+1] with that state:
//!
//! ```text
//! form(&Inputs, &Rates, chunk, initial_state: Option<&State<T>>, output_final_state: bool)
//!     -> (o, Option<State<T>>)
//! ```
//!
//! The tests chain naive <- naive_recurrent <- chunk <- fused_chunk on pieces of uneven length
//! with carried states. Every form refuses a context (initial position + T) past the rates'
//! certified horizon.
//!
//! Beside them, [`exact_gl`] is the naive sum with the exact Grünwald–Letnikov kernel, a
//! different kernel (the model the SOE approximates, within its certificate): it has no state
//! and is what the tests and `vort retention --form naive` compare the SOE against.
//!
//! This module also holds what the forms share: the table checks (one table for all heads or one
//! per head; the certified horizon), per-token node weights c_n(α) on the host and as a tensor
//! differentiable in α, and the normalisation y = o[..D] / (o[D] + eps).

use candle_core::{DType, Device, Tensor, WithDType, D};

use crate::dims::Dims;
use crate::error::{Result, VortError};
use crate::nodes::NodeTable;

pub mod checked;
pub mod chunk;
pub mod fused_chunk;
pub mod naive;
pub mod naive_recurrent;

pub use chunk::chunk;
pub use fused_chunk::fused_chunk;
pub use naive::{exact_gl, naive};
pub use naive_recurrent::naive_recurrent;

/// One call's inputs, shared by every form: q, k [B, H, T, F] (nonnegative features),
/// vp [B, H, T, D+1] (values with a last column of ones, which carries the denominator) and
/// cw [B, H, T, N] (each token's node weights: c_n(α) from node tables, or a baseline's own).
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// φ(q) [B, H, T, F].
    pub q: &'a Tensor,
    /// φ(k) [B, H, T, F].
    pub k: &'a Tensor,
    /// [v, 1] [B, H, T, D+1].
    pub vp: &'a Tensor,
    /// Node weights [B, H, T, N].
    pub cw: &'a Tensor,
}

impl Inputs<'_> {
    /// The call's sizes (B, H, T, F, D, N; position 0), checked for consistency.
    ///
    /// # Errors
    /// Shapes that do not agree.
    pub fn dims(&self) -> Result<Dims> {
        let (b, h, t, f) = dims4("q", self.q)?;
        let (_, _, _, d1) = dims4("vp", self.vp)?;
        let (_, _, _, n) = dims4("cw", self.cw)?;
        for (name, x, want) in [
            ("k", self.k, [b, h, t, f]),
            ("vp", self.vp, [b, h, t, d1]),
            ("cw", self.cw, [b, h, t, n]),
        ] {
            if x.dims() != want {
                return Err(VortError::Shape {
                    name: name.into(),
                    got: x.dims().to_vec(),
                    expected: format!("{want:?}"),
                });
            }
        }
        if d1 < 2 {
            return Err(VortError::Shape {
                name: "vp".into(),
                got: self.vp.dims().to_vec(),
                expected: "[B, H, T, D+1] with D >= 1".into(),
            });
        }
        Ok(Dims {
            n,
            ..Dims::new(b, h, t, f, d1 - 1)
        })
    }
}

/// The checks every form makes before computing: the inputs agree, the rates fit their heads
/// and nodes, the initial state has the call's sizes, and the context (start position + T) is
/// inside the rates' certified horizon. Returns the call's sizes, with the initial state's
/// position (or 0).
///
/// # Errors
/// Shape mismatches, a state of other sizes, [`VortError::BeyondHorizon`].
pub(crate) fn begin<T: WithDType>(
    x: &Inputs,
    rates: &Rates,
    initial_state: Option<&State<T>>,
) -> Result<Dims> {
    let mut dims = x.dims()?;
    rates.check_shape(dims.h, dims.n)?;
    if let Some(s) = initial_state {
        s.check_dims(&dims)?;
    }
    dims.pos = initial_state.map_or(0, |s| s.pos);
    rates.check_context(dims.pos + dims.t as u64)?;
    Ok(dims)
}

/// A tensor's values on the host in `T` (detached: no gradient).
pub(crate) fn host<T: WithDType>(x: &Tensor) -> Result<Vec<T>> {
    Ok(x.detach()
        .to_dtype(T::DTYPE)?
        .flatten_all()?
        .to_vec1::<T>()?)
}

/// The decay rates u_n of the nodes, one row per head or one for all: fixed (node tables,
/// with the horizon their kernel is certified for; or a baseline's constants, valid at every
/// lag) or learned (a tensor whose gradient [`chunk()`] and [`fused_chunk()`] compute; the naive
/// and recurrent forms take its values).
#[derive(Debug, Clone)]
pub enum Rates {
    /// Fixed rates `[Hu][N]` and the certified horizon (None: valid at every lag).
    Fixed {
        /// Rows u_n >= 0, 1 or H of them, all of one length N.
        u: Vec<Vec<f64>>,
        /// Certified horizon, checked against every call's context.
        horizon: Option<u64>,
    },
    /// Learned rates [Hu, N] (softplus of parameters), differentiable.
    Learned(Tensor),
}

impl Rates {
    /// The fixed rates of 1 or H node tables and their smallest horizon.
    ///
    /// # Errors
    /// No tables, or tables with different node counts.
    pub fn of_tables(tables: &[NodeTable]) -> Result<Rates> {
        let Some(first) = tables.first() else {
            return Err(VortError::InvalidArgument("no node tables given".into()));
        };
        if tables.iter().any(|t| t.len() != first.len()) {
            return Err(VortError::InvalidArgument(
                "all heads' node tables must have the same number of nodes".into(),
            ));
        }
        Ok(Rates::Fixed {
            u: tables.iter().map(|t| t.u.clone()).collect(),
            horizon: tables.iter().map(|t| t.horizon).min(),
        })
    }

    /// Nodes N.
    pub fn nodes(&self) -> Result<usize> {
        match self {
            Rates::Fixed { u, .. } => Ok(u.first().map_or(0, Vec::len)),
            Rates::Learned(u) => Ok(u.dims2()?.1),
        }
    }

    /// Rows Hu (1 or H).
    pub fn rows(&self) -> Result<usize> {
        match self {
            Rates::Fixed { u, .. } => Ok(u.len()),
            Rates::Learned(u) => Ok(u.dims2()?.0),
        }
    }

    /// The rates as a tensor [Hu, N] (f64 for fixed rates; learned ones as they are).
    ///
    /// # Errors
    /// Ragged rows.
    pub fn tensor(&self, device: &Device) -> Result<Tensor> {
        match self {
            Rates::Fixed { u, .. } => {
                let n = u.first().map_or(0, Vec::len);
                if u.is_empty() || u.iter().any(|r| r.len() != n) {
                    return Err(VortError::InvalidArgument(
                        "rates: rows must be non-empty and of one length".into(),
                    ));
                }
                let flat: Vec<f64> = u.iter().flatten().copied().collect();
                Ok(Tensor::from_vec(flat, (u.len(), n), device)?)
            }
            Rates::Learned(u) => Ok(u.clone()),
        }
    }

    /// The rates as host rows `[Hu][N]` (learned ones by value, without their gradient).
    ///
    /// # Errors
    /// A learned tensor that is not [Hu, N].
    pub fn host_rows(&self) -> Result<Vec<Vec<f64>>> {
        match self {
            Rates::Fixed { u, .. } => Ok(u.clone()),
            Rates::Learned(u) => Ok(u.detach().to_dtype(DType::F64)?.to_vec2::<f64>()?),
        }
    }

    /// Refuses a context of `context` tokens past the certified horizon.
    ///
    /// # Errors
    /// [`VortError::BeyondHorizon`].
    pub fn check_context(&self, context: u64) -> Result<()> {
        match self {
            Rates::Fixed {
                horizon: Some(h), ..
            } if context > *h => Err(VortError::BeyondHorizon {
                context,
                horizon: *h,
            }),
            _ => Ok(()),
        }
    }

    /// Checks the rows against H heads and N node weights.
    pub(crate) fn check_shape(&self, heads: usize, n: usize) -> Result<()> {
        let (hu, nu) = (self.rows()?, self.nodes()?);
        if nu != n || !(hu == 1 || hu == heads) {
            return Err(VortError::Shape {
                name: "rates".into(),
                got: vec![hu, nu],
                expected: format!("[1 or {heads}, {n}]"),
            });
        }
        Ok(())
    }
}

/// Picks the table of head `h` from a slice of 1 (shared by all heads) or H tables.
pub(crate) fn table_for(tables: &[NodeTable], h: usize) -> &NodeTable {
    if tables.len() == 1 {
        &tables[0]
    } else {
        &tables[h]
    }
}

pub(crate) fn check_tables(tables: &[NodeTable], heads: usize) -> Result<()> {
    if !tables.is_empty() && (tables.len() == 1 || tables.len() == heads) {
        Ok(())
    } else {
        Err(VortError::InvalidArgument(format!(
            "{} node tables given for {heads} heads (need 1 or H)",
            tables.len()
        )))
    }
}

/// Node weights c_n(α) of every token, differentiable in α: alpha [B, H, T] -> [B, H, T, N]
/// (dtype of alpha). Piecewise linear: c = base + (α - a0) slope on α's grid cell.
///
/// # Errors
/// Alpha not rank 3, wrong table count.
pub fn node_weights(alpha: &Tensor, tables: &[NodeTable]) -> Result<Tensor> {
    let (_, h, _) = alpha_dims(alpha)?;
    check_tables(tables, h)?;
    let n = tables[0].len();
    affine_rows(alpha, n, |head, x| Ok(table_for(tables, head).affine_at(x)))
}

/// [B, H, T] of alpha, or a shape error naming it.
pub(crate) fn alpha_dims(alpha: &Tensor) -> Result<(usize, usize, usize)> {
    alpha.dims3().map_err(|_| VortError::Shape {
        name: "alpha".into(),
        got: alpha.dims().to_vec(),
        expected: "[B, H, T]".into(),
    })
}

/// Rows that are affine in each token's α near its value, as a tensor differentiable in α:
/// `row(head, α) = (base, slope, a0)` gives base + (α - a0) slope. alpha [B, H, T] ->
/// [B, H, T, width] (dtype of alpha). The rows are computed on the host in f64; candle's
/// autodiff sees only the final affine map, so the gradient in α is `slope`.
pub(crate) fn affine_rows(
    alpha: &Tensor,
    width: usize,
    row: impl Fn(usize, f64) -> Result<(Vec<f64>, Vec<f64>, f64)>,
) -> Result<Tensor> {
    let (b, h, t) = alpha_dims(alpha)?;
    let a: Vec<f64> = alpha
        .to_dtype(DType::F64)?
        .flatten_all()?
        .to_vec1::<f64>()?;
    let mut base = Vec::with_capacity(a.len() * width);
    let mut slope = Vec::with_capacity(a.len() * width);
    let mut a0 = Vec::with_capacity(a.len());
    for (idx, &x) in a.iter().enumerate() {
        let (bs, sl, lo) = row((idx / t) % h, x)?;
        base.extend(bs);
        slope.extend(sl);
        a0.push(lo);
    }
    let dev = alpha.device();
    let dt = alpha.dtype();
    let base = Tensor::from_vec(base, (b, h, t, width), dev)?.to_dtype(dt)?;
    let slope = Tensor::from_vec(slope, (b, h, t, width), dev)?.to_dtype(dt)?;
    let a0 = Tensor::from_vec(a0, (b, h, t, 1), dev)?.to_dtype(dt)?;
    let da = alpha.unsqueeze(3)?.broadcast_sub(&a0)?;
    Ok(base.add(&da.broadcast_mul(&slope)?)?)
}

/// Appends the ones column: v [B, H, T, D] -> v' [B, H, T, D+1].
pub fn with_ones(v: &Tensor) -> Result<Tensor> {
    let (b, h, t, _) = dims4("v", v)?;
    let ones = Tensor::ones((b, h, t, 1), v.dtype(), v.device())?;
    Ok(Tensor::cat(&[v, &ones], 3)?)
}

/// y = o[.., :D] / (o[.., D] + eps_den) for o [B, H, T, D+1].
pub fn normalise(o: &Tensor, eps_den: f64) -> Result<Tensor> {
    let d1 = o.dim(D::Minus1)?;
    let num = o.narrow(D::Minus1, 0, d1 - 1)?;
    let den = (o.narrow(D::Minus1, d1 - 1, 1)? + eps_den)?;
    Ok(num.broadcast_div(&den)?)
}

/// The owned tensors of one call, built on the CPU from host buffers: φq, φk [B, H, T, F], v
/// [B, H, T, D] with the ones column added, and the node weights c_n(α) of the orders α
/// [B, H, T], computed on the host in `T` ([`node_weights_host`]). What callers holding slices
/// (the file format, the benches, the tests) build before any form; [`OwnedInputs::inputs`]
/// lends them as [`Inputs`].
#[derive(Debug, Clone)]
pub struct OwnedInputs {
    /// φ(q) [B, H, T, F].
    pub q: Tensor,
    /// φ(k) [B, H, T, F].
    pub k: Tensor,
    /// [v, 1] [B, H, T, D+1].
    pub vp: Tensor,
    /// Node weights [B, H, T, N].
    pub cw: Tensor,
}

impl OwnedInputs {
    /// Builds the tensors from host buffers of `dims` and the node tables (1 or H).
    ///
    /// # Errors
    /// Buffer lengths that do not match `dims`; a table count other than 1 or H.
    pub fn from_host<T: WithDType>(
        q: &[T],
        k: &[T],
        v: &[T],
        alpha: &[f64],
        dims: Dims,
        tables: &[NodeTable],
    ) -> Result<OwnedInputs> {
        dims.check(q.len(), k.len(), v.len(), alpha.len())?;
        let Dims { b, h, t, f, d, .. } = dims;
        let n = tables.first().map_or(0, NodeTable::len);
        let cw: Vec<T> = node_weights_host(alpha, dims, tables)?;
        let dev = Device::Cpu;
        let mk = |x: &[T], w: usize| Tensor::from_vec(x.to_vec(), (b, h, t, w), &dev);
        Ok(OwnedInputs {
            q: mk(q, f)?,
            k: mk(k, f)?,
            vp: with_ones(&mk(v, d)?)?,
            cw: mk(&cw, n)?,
        })
    }

    /// The tensors as one call's [`Inputs`].
    pub fn inputs(&self) -> Inputs<'_> {
        Inputs {
            q: &self.q,
            k: &self.k,
            vp: &self.vp,
            cw: &self.cw,
        }
    }
}

/// Node weights c_n(α) per token: alpha [B, H, T] -> [B, H, T, N] (host).
pub fn node_weights_host<T: WithDType>(
    alpha: &[f64],
    dims: Dims,
    tables: &[NodeTable],
) -> Result<Vec<T>> {
    check_tables(tables, dims.h)?;
    let n = tables[0].len();
    let mut cw = Vec::with_capacity(alpha.len() * n);
    for (idx, &a) in alpha.iter().enumerate() {
        let head = (idx / dims.t) % dims.h;
        cw.extend(
            table_for(tables, head)
                .weights_at(a)
                .into_iter()
                .map(T::from_f64),
        );
    }
    Ok(cw)
}

pub(crate) fn dims4(name: &str, t: &Tensor) -> Result<(usize, usize, usize, usize)> {
    t.dims4().map_err(|_| VortError::Shape {
        name: name.into(),
        got: t.dims().to_vec(),
        expected: "rank 4".into(),
    })
}

/// Recurrent state of a retention layer: G [B, H, N, F, D+1] (numerator and denominator
/// columns) and the number of tokens consumed.
///
/// G is a tensor of dtype `T` on the device of the call that produced it, so a stream on a
/// device keeps its state there between pieces (the chunked form reads and writes it as a
/// tensor). The host forms (`naive`, `naive_recurrent`, the fused CPU op's prefill) read it
/// with [`State::host`] and write it back with [`State::from_host`].
#[derive(Debug, Clone)]
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
    /// G [B, H, N, F, D+1], contiguous, of dtype `T`.
    g: Tensor,
    _dtype: std::marker::PhantomData<T>,
}

/// Equal sizes, position and values of G (wherever the two live).
impl<T: WithDType> PartialEq for State<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.b, self.h, self.n, self.f, self.d, self.pos)
            == (other.b, other.h, other.n, other.f, other.d, other.pos)
            && matches!((self.host(), other.host()), (Ok(a), Ok(b)) if a == b)
    }
}

impl<T: WithDType> State<T> {
    /// The empty state (no token seen), on the CPU.
    pub fn zeros(b: usize, h: usize, n: usize, f: usize, d: usize) -> Self {
        let g = vec![T::zero(); b * h * n * f * (d + 1)];
        // a buffer of exactly the shape's size: the constructor cannot fail
        Self::from_host(b, h, n, f, d, 0, g, &Device::Cpu)
            .unwrap_or_else(|_| unreachable!("zeros of the state's own shape"))
    }

    /// A state from a host buffer G, row-major [B, H, N, F, D+1], placed on `device`.
    ///
    /// # Errors
    /// A buffer whose length is not B·H·N·F·(D+1).
    #[allow(clippy::too_many_arguments)]
    pub fn from_host(
        b: usize,
        h: usize,
        n: usize,
        f: usize,
        d: usize,
        pos: u64,
        g: Vec<T>,
        device: &Device,
    ) -> Result<Self> {
        let g = Tensor::from_vec(g, (b, h, n, f, d + 1), device)?;
        Ok(State {
            b,
            h,
            n,
            f,
            d,
            pos,
            g,
            _dtype: std::marker::PhantomData,
        })
    }

    /// G copied to the host, row-major [B, H, N, F, D+1].
    ///
    /// # Errors
    /// Candle errors only.
    pub fn host(&self) -> Result<Vec<T>> {
        Ok(self.g.flatten_all()?.to_vec1::<T>()?)
    }

    /// G as a tensor [B, H, N, F, D+1] (the state's own; no copy).
    pub fn tensor(&self) -> &Tensor {
        &self.g
    }

    /// Checks the sizes B, H, N, F, D against a call's.
    ///
    /// # Errors
    /// [`VortError::InvalidArgument`] naming both.
    pub fn check_dims(&self, dims: &Dims) -> Result<()> {
        let Dims { b, h, n, f, d, .. } = *dims;
        if (self.b, self.h, self.n, self.f, self.d) == (b, h, n, f, d) {
            Ok(())
        } else {
            Err(VortError::InvalidArgument(format!(
                "state [B={}, H={}, N={}, F={}, D={}] does not match the call's [B={b}, H={h}, \
                 N={n}, F={f}, D={d}]",
                self.b, self.h, self.n, self.f, self.d
            )))
        }
    }

    /// Bytes held by the state (flat in the context length).
    pub fn bytes(&self) -> usize {
        self.g.elem_count() * std::mem::size_of::<T>()
    }

    /// The state as a tensor [B, H, N, F, D+1] on `device` (the layout of the chunked forms):
    /// the state's own tensor when it already lives there, a copy otherwise.
    ///
    /// # Errors
    /// Candle errors only.
    pub fn to_tensor(&self, device: &Device) -> Result<Tensor> {
        Ok(self.g.to_device(device)?)
    }

    /// A state from a tensor [B, H, N, F, D+1] (converted to `T`, kept on its device) and a
    /// position.
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
        Ok(State {
            b,
            h,
            n,
            f,
            d: d1 - 1,
            pos,
            g: t.to_dtype(T::DTYPE)?.contiguous()?,
            _dtype: std::marker::PhantomData,
        })
    }
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
        let g: Vec<f64> = self.host()?.iter().map(|x| x.to_f64()).collect();
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
        let mut meta = std::collections::BTreeMap::new();
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
            &meta,
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
        let data = g.data.into_iter().map(T::from_f64).collect();
        State::from_host(b, h, n, f, d1 - 1, pos, data, &Device::Cpu)
    }
}
