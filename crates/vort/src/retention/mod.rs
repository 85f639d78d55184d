//! The retention core in its four forms, chained in the tests (fla's layout, DESIGN §2 and §5):
//!
//! - [`naive`]: the O(T²) f64 reference (exact GL kernel or the table's SOE);
//! - [`recurrent`]: one token at a time with an explicit [`recurrent::State`], the streaming
//!   and decoding form;
//! - [`chunked`]: the training form in plain candle ops (autodiff twin of the fused op);
//! - [`fused`]: the fused CustomOp with a hand-written backward, and the state prefill.
//!
//! This module holds what the forms share: the table checks (one table for all heads or one
//! per head; the certified horizon), per-token node weights c_n(α) on the host and as a tensor
//! differentiable in α, the rates as a tensor, and the normalisation y = o[..D] / (o[D] + eps).

use candle_core::{DType, Device, Tensor, WithDType, D};

use crate::dims::Dims;
use crate::error::{Result, VortError};
use crate::nodes::NodeTable;

pub mod chunked;
pub mod fused;
pub mod naive;
pub mod recurrent;

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

/// Refuses a context of `context` tokens past any table's certified horizon.
///
/// # Errors
/// [`VortError::BeyondHorizon`].
pub(crate) fn check_context(tables: &[NodeTable], context: u64) -> Result<()> {
    tables.iter().try_for_each(|t| t.check_context(context))
}

/// Rates of 1 or H tables as a tensor [Hu, N] (f64), Hu = number of tables.
///
/// # Errors
/// Tables with different node counts.
pub fn rates_tensor(tables: &[NodeTable], device: &Device) -> Result<Tensor> {
    let Some(first) = tables.first() else {
        return Err(VortError::InvalidArgument("no node tables given".into()));
    };
    let n = first.len();
    if tables.iter().any(|t| t.len() != n) {
        return Err(VortError::InvalidArgument(
            "all heads' node tables must have the same number of nodes".into(),
        ));
    }
    let u: Vec<f64> = tables.iter().flat_map(|t| t.u.iter().copied()).collect();
    Ok(Tensor::from_vec(u, (tables.len(), n), device)?)
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
