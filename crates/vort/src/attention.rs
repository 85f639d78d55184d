//! Softmax attention, the baseline of every memory comparison: full causal softmax and the
//! sliding-window form that stays affordable at long T. Both take the T queries as the last T
//! of the S keys, so a KV cache streams through them in pieces.

use candle_core::{Tensor, D};

use crate::error::{Result, VortError};

/// Causal softmax attention where the T queries are the last T of the S keys:
/// q [B, H, T, d], k, v [B, H, S, d] -> [B, H, T, d]; logits q·k (scale already in q, k).
///
/// # Errors
/// Shape mismatches.
pub fn causal_softmax(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    // the causal mask and the row softmax in one parallel pass (and one backward pass):
    // candle's masked softmax takes ~6 passes over the [B·H, T, S] logits forward, ~8 back
    attend(q, k, v, |logits, _, _, off| {
        crate::ops::causal_softmax_rows(logits, off)
    })
}

/// Logits [B·H, T, S] of the T queries against the S keys, the row weights `weights(logits,
/// T, S, off = S - T)` makes of them, and those weights applied to v: [B, H, T, dv].
fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    weights: impl Fn(&Tensor, usize, usize, usize) -> Result<Tensor>,
) -> Result<Tensor> {
    let (b, h, t, d) = q.dims4()?;
    let s = k.dim(2)?;
    if s < t {
        return Err(VortError::InvalidArgument(format!(
            "softmax: {s} keys for {t} queries"
        )));
    }
    let q3 = q.reshape((b * h, t, d))?;
    let k3 = k.reshape((b * h, s, d))?.t()?.contiguous()?;
    let p = weights(&q3.matmul(&k3)?, t, s, s - t)?;
    let dv = v.dim(3)?;
    Ok(p.matmul(&v.reshape((b * h, s, dv))?.contiguous()?)?
        .reshape((b, h, t, dv))?)
}

/// [`causal_softmax`] in plain candle ops (an additive -inf mask and candle-nn's softmax):
/// the twin the tests compare the fused row softmax against.
///
/// # Errors
/// As [`causal_softmax`].
pub fn causal_softmax_reference(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    attend(q, k, v, |logits, _, _, off| {
        crate::ops::reference::causal_softmax_rows(logits, off)
    })
}

/// Causal softmax attention over a sliding window, where the T queries are the last T of the
/// S keys (as in [`causal_softmax`]): q [B, H, T, d], k [B, H, S, d], v [B, H, S, dv] ->
/// [B, H, T, dv]. The query at absolute position p (= S - T + i) attends to the keys at
/// positions j with p - window < j <= p (the last `window`, itself included), softmax over
/// those; `window >= S` equals [`causal_softmax`].
///
/// Cost O(T·window) time and memory, not O(T·S): the queries are split into blocks of
/// `window` (T need not be a multiple; the last block is zero-padded and the padding dropped)
/// and block i attends to the keys of blocks i-1 and i (2·window keys) under a mask that is
/// both causal and window-limited; when T <= window there is one block over the last
/// T + window - 1 keys. Composed candle ops (narrow, cat, matmul, softmax), so autograd gives
/// the gradients.
///
/// # Errors
/// `window = 0`, fewer keys than queries, shape mismatches.
pub fn sliding_softmax(q: &Tensor, k: &Tensor, v: &Tensor, window: usize) -> Result<Tensor> {
    if window == 0 {
        return Err(VortError::InvalidArgument(
            "sliding softmax: window must be >= 1 (each query sees itself)".into(),
        ));
    }
    let (b, h, t, d) = q.dims4()?;
    let s = k.dim(2)?;
    let dv = v.dim(3)?;
    if s < t {
        return Err(VortError::InvalidArgument(format!(
            "sliding softmax: {s} keys for {t} queries"
        )));
    }
    let (bh, off, w) = (b * h, s - t, window);
    let k3 = k.reshape((bh, s, d))?;
    let v3 = v.reshape((bh, s, dv))?;
    // Blocked layout: queries [bh·nb, bs, d], keys/values [bh·nb, nk, ·], and the absolute
    // position of key column c of block i (the query of row r of block i is at off + i·bs + r).
    let (nb, bs, nk, qb, kb, vb, key0): (usize, usize, usize, Tensor, Tensor, Tensor, i64);
    if t <= w {
        // one block: the last T + window - 1 keys are all any of the T queries can see
        nk = s.min(t + w - 1);
        (nb, bs) = (1, t);
        qb = q.reshape((bh, t, d))?;
        kb = k3.narrow(1, s - nk, nk)?;
        vb = v3.narrow(1, s - nk, nk)?;
        key0 = (s - nk) as i64;
    } else {
        (nb, bs, nk) = (t.div_ceil(w), w, 2 * w);
        let tail = nb * w - t; // padding of the last block
        qb = q
            .reshape((bh, t, d))?
            .pad_with_zeros(1, 0, tail)?
            .reshape((bh * nb, w, d))?;
        // keys from position off - w (the block before the first query block): those before
        // position 0 are zero padding, masked below
        let seen = off.min(w);
        let blocks = |x: &Tensor, dd: usize| -> Result<Tensor> {
            let x = x
                .narrow(1, off - seen, t + seen)?
                .pad_with_zeros(1, w - seen, tail)?;
            let prev = x.narrow(1, 0, nb * w)?.reshape((bh, nb, w, dd))?;
            let cur = x.narrow(1, w, nb * w)?.reshape((bh, nb, w, dd))?;
            Ok(Tensor::cat(&[prev, cur], 2)?.reshape((bh * nb, 2 * w, dd))?)
        };
        kb = blocks(&k3, d)?;
        vb = blocks(&v3, dv)?;
        key0 = off as i64 - w as i64;
    }
    // key (i, c) is at key0 + i·bs + c; valid iff 0 <= j and p - window < j <= p. Every row
    // keeps its own position, so no row is all -inf (padded query rows included).
    let mut mask = vec![0f32; nb * bs * nk];
    for i in 0..nb {
        for r in 0..bs {
            let p = (off + i * bs + r) as i64;
            for c in 0..nk {
                let j = key0 + (i * bs + c) as i64;
                if j < 0 || j > p || j <= p - w as i64 {
                    mask[(i * bs + r) * nk + c] = f32::NEG_INFINITY;
                }
            }
        }
    }
    let mask = Tensor::from_vec(mask, (1, nb, bs, nk), q.device())?.to_dtype(q.dtype())?;
    let logits = qb
        .matmul(&kb.t()?.contiguous()?)?
        .reshape((bh, nb, bs, nk))?
        .broadcast_add(&mask)?;
    let p = candle_nn::ops::softmax(&logits, D::Minus1)?.reshape((bh * nb, bs, nk))?;
    Ok(p.matmul(&vb.contiguous()?)?
        .reshape((bh, nb * bs, dv))?
        .narrow(1, 0, t)?
        .reshape((b, h, t, dv))?)
}
