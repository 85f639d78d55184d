//! The fused chunked retention, fla's `fused_chunk`: one candle `CustomOp3` for the whole layer
//! core, forward and hand-written backward in Rust, gemm on blocks, rayon over batch × heads.
//! Same algorithm and numbers as [`super::chunk()`] (its autodiff twin, tested against it),
//! without the per-op autodiff graph.
//!
//! Per head, chunk of L tokens, entry state G [N·F, D'] (D' = D + 1, the ones column; stored
//! column-major, as are the chunk's outputs before they are copied out: see `mm`):
//!
//! ```text
//! P = Q Kᵀ,  R = E cwᵀ (E[lag, n] = e^(-u_n lag), lag >= 1),  M[τ,σ] = R[τ-σ, σ] (τ>σ), 1 (τ=σ)
//! O = (M ∘ P) V + Qd G,           Qd[τ, nF+f] = e^(-u_n (τ+1)) q_τ[f]
//! G <- G - μ_L ∘ G + Kdᵀ V,       Kd[σ, nF+f] = e^(-u_n (L-1-σ)) cw[σ, n] k_σ[f]
//! ```
//!
//! Backward (reverse over chunks, with H = ∂L/∂G after the chunk, states recomputed):
//! dV = (M∘P)ᵀ dO + Kd H,  dS = dO Vᵀ (lower), dP = dS ∘ M, dM = dS ∘ P, dQ = dP K + Σ_n
//! e^(-u_n(τ+1)) (dO Gᵀ)_n, dK = dPᵀ Q + Σ_n e^(-u_n(L-1-σ)) cw (V Hᵀ)_n, dcw from dM through E
//! and from V Hᵀ through k; then H <- H - μ_L ∘ H + Qdᵀ dO.
//!
//! Rate gradient (learned rates only; the exponential baseline), from the four places u enters:
//! E (∂E/∂u = -lag·E), Qd (-(τ+1)·Qd), Kd (-(L-1-σ)·Kd) and the chunk decay λ = e^(-u L)
//! (-L·λ):
//!
//! ```text
//! du_n = -Σ_{lag,σ} dR[lag,σ] lag E[lag,n] cw[σ,n] - Σ_τ (τ+1) (dQd·Qd)_{τ,n}
//!        - Σ_σ (L-1-σ) (dKd·Kd)_{σ,n} - L λ_n Σ (H ∘ G)_n
//! ```
//!
//! Inputs: qkv [B, H, T, 2F+D'] (φq, φk and v' concatenated on the last dim: one buffer, one
//! row stride), cw [B, H, T, N] and u [Hu, N] (the rates as a tensor, only for their gradient:
//! the op computes with the f64 values it was built with); output o [B, H, T, D']
//! (unnormalised; normalise with [`crate::retention::normalise`]).

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor, WithDType};
use rayon::prelude::*;

use super::{begin, host, Inputs, Rates, State};
use crate::dims::Dims;
use crate::error::{Result, VortError};

/// Values below this are flushed to zero in the decay tables (no denormals in the gemms).
const FLUSH: f64 = 1e-30;

/// The fused retention op. `u`: rates [Hu, N] row-major with Hu in {1, H}.
#[derive(Debug, Clone)]
struct FusedRetention {
    /// Rates, [Hu, N] row-major (f64 values: the op computes its decays from these).
    u: Vec<f64>,
    /// Rows of `u` (1: shared by all heads, or H).
    hu: usize,
    /// Nodes N.
    n: usize,
    /// Feature dim F (the qkv input is [.., 2F + D']).
    f: usize,
    /// Chunk length L.
    chunk: usize,
    /// Also compute the gradient of the rates (learned rates); fixed rates skip its work.
    rate_grad: bool,
}

struct Consts<T> {
    l: usize,
    e: Vec<T>,      // [L, N], lag 0 row zero
    el: Vec<T>,     // [L, N] lag·e^(-u lag) (-∂E/∂u, for the rate gradient)
    dq: Vec<T>,     // [L, N] e^(-u (τ+1))
    dk: Vec<T>,     // [L, N] e^(-u (L-1-σ))
    mu: Vec<T>,     // [N] 1 - e^(-u L)
    lambda: Vec<T>, // [N] e^(-u L)
}

fn flush(x: f64) -> f64 {
    if x < FLUSH {
        0.0
    } else {
        x
    }
}

fn consts<T: WithDType>(u: &[f64], l: usize) -> Consts<T> {
    let n = u.len();
    let mut e = vec![T::zero(); l * n];
    let mut el = vec![T::zero(); l * n];
    let mut dq = vec![T::zero(); l * n];
    let mut dk = vec![T::zero(); l * n];
    for i in 0..l {
        for (s, &us) in u.iter().enumerate() {
            if i > 0 {
                let lag = i as f64;
                e[i * n + s] = T::from_f64(flush((-us * lag).exp()));
                el[i * n + s] = T::from_f64(flush(lag * (-us * lag).exp()));
            }
            dq[i * n + s] = T::from_f64(flush((-us * (i + 1) as f64).exp()));
            dk[i * n + s] = T::from_f64(flush((-us * (l - 1 - i) as f64).exp()));
        }
    }
    let mu = u
        .iter()
        .map(|&us| T::from_f64(-(-us * l as f64).exp_m1()))
        .collect();
    let lambda = u
        .iter()
        .map(|&us| T::from_f64(flush((-us * l as f64).exp())))
        .collect();
    Consts {
        l,
        e,
        el,
        dq,
        dk,
        mu,
        lambda,
    }
}

/// dst (m×n, row stride dst_rs, column stride dst_cs) = [dst +] lhs (m×k) · rhs (k×n),
/// arbitrary strides.
///
/// gemm's microkernel runs down the rows of a column-major dst in blocks of 64 (AVX-512) and
/// transposes a row-major one, so an output with D' = D + 1 = 65 columns should be column-major:
/// row-major, its 65 columns become 64 + 1 rows and the lone row costs a 16-row block (a
/// quarter more work on every such product; measured ~20% of the op at D = 64).
#[allow(clippy::too_many_arguments)]
#[inline]
fn mm<T: WithDType>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    dst_rs: usize,
    dst_cs: usize,
    lhs: &[T],
    lhs_rs: usize,
    lhs_cs: usize,
    rhs: &[T],
    rhs_rs: usize,
    rhs_cs: usize,
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    // bounds: the last element each operand touches must be inside its slice
    assert!(
        (m - 1) * dst_rs + (n - 1) * dst_cs < dst.len(),
        "mm: dst too short"
    );
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    dst[i * dst_rs + j * dst_cs] = T::zero();
                }
            }
        }
        return;
    }
    assert!(
        (m - 1) * lhs_rs + (k - 1) * lhs_cs < lhs.len(),
        "mm: lhs too short"
    );
    assert!(
        (k - 1) * rhs_rs + (n - 1) * rhs_cs < rhs.len(),
        "mm: rhs too short"
    );
    // SAFETY: the asserts above keep every access inside the slices; dst does not alias.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            dst_cs as isize,
            dst_rs as isize,
            accumulate,
            lhs.as_ptr(),
            lhs_cs as isize,
            lhs_rs as isize,
            rhs.as_ptr(),
            rhs_cs as isize,
            rhs_rs as isize,
            T::one(),
            T::one(),
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// Row stride of the op's qkv input, 2F + D' (q at 0, k at F, v' at 2F); the node weights'
/// row stride is N. `hd` holds one head's sizes (its B, H and position are not read).
fn row_stride(hd: &Dims) -> usize {
    2 * hd.f + hd.d1()
}

/// Chunk starts and which constants (0 main, 1 tail).
fn chunks(t: usize, l: usize) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    let mut s = 0;
    while s < t {
        let len = l.min(t - s);
        v.push((s, len));
        s += len;
    }
    v
}

struct Work<T> {
    ot: Vec<T>,
    /// Qd or Kd transposed ([N·F, L]): gemm packs an lhs fastest with its rows contiguous.
    xt: Vec<T>,
    y: Vec<T>,
    p: Vec<T>,
    m: Vec<T>,
    s: Vec<T>,
    ds: Vec<T>,
    qd: Vec<T>,
    kd: Vec<T>,
    dqd: Vec<T>,
    dkd: Vec<T>,
}

impl<T: WithDType> Work<T> {
    fn new(l: usize, nf: usize, n: usize, d1: usize) -> Self {
        let z = |k: usize| vec![T::zero(); k];
        Work {
            ot: z(l * d1),
            xt: z(l * nf),
            y: z(l * n),
            p: z(l * l),
            m: z(l * l),
            s: z(l * l),
            ds: z(l * l),
            qd: z(l * nf),
            kd: z(l * nf),
            dqd: z(l * nf),
            dkd: z(l * nf),
        }
    }
}

/// P = Q Kᵀ, M (materialised from R = E cwᵀ), S = M ∘ P for one chunk.
fn intra<T: WithDType>(qkv: &[T], cwc: &[T], hd: Dims, c: &Consts<T>, l: usize, w: &mut Work<T>) {
    let (f, n, cws, rs) = (hd.f, hd.n, hd.n, row_stride(&hd));
    mm(l, l, f, &mut w.p, l, 1, qkv, rs, 1, &qkv[f..], 1, rs, false);
    // R[lag][σ] into w.s temporarily: Σ_n E[lag, n] cw[σ, n]
    mm(l, l, n, &mut w.s, l, 1, &c.e, n, 1, cwc, 1, cws, false);
    for tau in 0..l {
        for sig in 0..l {
            w.m[tau * l + sig] = if sig < tau {
                w.s[(tau - sig) * l + sig]
            } else if sig == tau {
                T::one()
            } else {
                T::zero()
            };
        }
    }
    for i in 0..l * l {
        w.s[i] = w.m[i] * w.p[i];
    }
}

fn build_qd<T: WithDType>(qkv: &[T], hd: Dims, c: &Consts<T>, l: usize, qd: &mut [T]) {
    let (f, n) = (hd.f, hd.n);
    for tau in 0..l {
        let q = &qkv[tau * row_stride(&hd)..tau * row_stride(&hd) + f];
        for s in 0..n {
            let dec = c.dq[tau * n + s];
            let row = &mut qd[tau * n * f + s * f..tau * n * f + (s + 1) * f];
            for x in 0..f {
                row[x] = dec * q[x];
            }
        }
    }
}

fn build_kd<T: WithDType>(qkv: &[T], cwc: &[T], hd: Dims, c: &Consts<T>, l: usize, kd: &mut [T]) {
    let (f, n) = (hd.f, hd.n);
    for sig in 0..l {
        let k = &qkv[sig * row_stride(&hd) + f..sig * row_stride(&hd) + 2 * f];
        for s in 0..n {
            let w = c.dk[sig * n + s] * cwc[sig * hd.n + s];
            let row = &mut kd[sig * n * f + s * f..sig * n * f + (s + 1) * f];
            for x in 0..f {
                row[x] = w * k[x];
            }
        }
    }
}

/// x <- x - μ ∘ x for a column-major state [N·F, D'] (node n owns rows nF..(n+1)F).
fn decay_state<T: WithDType>(g: &mut [T], mu: &[T], f: usize) {
    if f == 0 {
        return;
    }
    for col in g.chunks_mut(mu.len() * f) {
        for (blk, &m) in col.chunks_mut(f).zip(mu) {
            for x in blk {
                *x -= m * *x;
            }
        }
    }
}

/// G <- G - μ ∘ G + Kdᵀ V for a column-major G [N·F, D'] (`v`: rows of stride `row_stride(&hd)`).
fn state_update<T: WithDType>(g: &mut [T], kd: &[T], v: &[T], hd: Dims, c: &Consts<T>, l: usize) {
    let (f, n, d1) = (hd.f, hd.n, hd.d1());
    let nf = n * f;
    decay_state(g, &c.mu, f);
    mm(nf, d1, l, g, 1, nf, kd, 1, nf, v, row_stride(&hd), 1, true);
}

/// dst [cols, rows] = src [rows, cols]ᵀ (both row-major).
fn transpose<T: WithDType>(src: &[T], rows: usize, cols: usize, dst: &mut [T]) {
    for i in 0..rows {
        for j in 0..cols {
            dst[j * rows + i] = src[i * cols + j];
        }
    }
}

/// dst [L, D'] (rows of stride `dst_rs`) += src, a column-major [L, D'] block.
fn add_transposed<T: WithDType>(dst: &mut [T], dst_rs: usize, src: &[T], l: usize, d1: usize) {
    for tau in 0..l {
        let row = &mut dst[tau * dst_rs..tau * dst_rs + d1];
        for (j, x) in row.iter_mut().enumerate() {
            *x += src[j * l + tau];
        }
    }
}

fn fwd_head<T: WithDType>(
    qkv: &[T],
    cw: &[T],
    out: &mut [T],
    hd: Dims,
    cm: &Consts<T>,
    ct: &Consts<T>,
) {
    let Dims { t, f, n, .. } = hd;
    let (d1, rs) = (hd.d1(), row_stride(&hd));
    let nf = n * f;
    let mut g = vec![T::zero(); nf * d1];
    let mut w = Work::new(cm.l, nf, n, d1);
    let list = chunks(t, cm.l);
    for (ci, &(s0, l)) in list.iter().enumerate() {
        let c = if l == cm.l { cm } else { ct };
        let qkc = &qkv[s0 * rs..(s0 + l) * rs];
        let vc = &qkc[2 * f..];
        let cwc = &cw[s0 * hd.n..(s0 + l) * hd.n];
        intra(qkc, cwc, hd, c, l, &mut w);
        // O (column-major, see `mm`) = S V + Qd G
        mm(l, d1, l, &mut w.ot, 1, l, &w.s, l, 1, vc, rs, 1, false);
        if n > 0 {
            build_qd(qkc, hd, c, l, &mut w.qd);
            transpose(&w.qd[..l * nf], l, nf, &mut w.xt);
            mm(l, d1, nf, &mut w.ot, 1, l, &w.xt, 1, l, &g, 1, nf, true);
        }
        add_transposed(&mut out[s0 * d1..(s0 + l) * d1], d1, &w.ot, l, d1);
        if n > 0 && ci + 1 < list.len() {
            build_kd(qkc, cwc, hd, c, l, &mut w.kd);
            state_update(&mut g, &w.kd, vc, hd, c, l);
        }
    }
}

/// The gradients of one head: dqkv (rows of stride 2F + D', like the input), dcw and, when
/// `du` is given, the rate gradient du [N] (accumulated in f64).
#[allow(clippy::too_many_arguments)]
fn bwd_head<T: WithDType>(
    qkv: &[T],
    cw: &[T],
    dout: &[T],
    dqkv: &mut [T],
    dcw: &mut [T],
    mut du: Option<&mut [f64]>,
    hd: Dims,
    cm: &Consts<T>,
    ct: &Consts<T>,
) {
    let Dims { f, n, .. } = hd;
    let (d1, rs) = (hd.d1(), row_stride(&hd));
    let nf = n * f;
    let gsz = nf * d1;
    let list = chunks(hd.t, cm.l);
    let mut w = Work::new(cm.l, nf, n, d1);
    // pass 1: entry state of every chunk
    let mut gs = vec![T::zero(); list.len() * gsz];
    for (ci, &(s0, l)) in list.iter().enumerate().take(list.len().saturating_sub(1)) {
        if n == 0 {
            break;
        }
        let c = if l == cm.l { cm } else { ct };
        let (done, next) = gs.split_at_mut((ci + 1) * gsz);
        next[..gsz].copy_from_slice(&done[ci * gsz..]);
        let qkc = &qkv[s0 * rs..(s0 + l) * rs];
        build_kd(qkc, &cw[s0 * hd.n..(s0 + l) * hd.n], hd, c, l, &mut w.kd);
        state_update(&mut next[..gsz], &w.kd, &qkc[2 * f..], hd, c, l);
    }
    // pass 2: reverse
    let mut h = vec![T::zero(); gsz];
    for (ci, &(s0, l)) in list.iter().enumerate().rev() {
        let c = if l == cm.l { cm } else { ct };
        let qkc = &qkv[s0 * rs..(s0 + l) * rs];
        let vc = &qkc[2 * f..];
        let cwc = &cw[s0 * hd.n..(s0 + l) * hd.n];
        let doc = &dout[s0 * d1..(s0 + l) * d1];
        let dqkc = &mut dqkv[s0 * rs..(s0 + l) * rs];
        let dcwc = &mut dcw[s0 * hd.n..(s0 + l) * hd.n];
        intra(qkc, cwc, hd, c, l, &mut w);
        // dV = Sᵀ dO (+ Kd H below), column-major in w.ot (see `mm`)
        mm(l, d1, l, &mut w.ot, 1, l, &w.s, 1, l, doc, d1, 1, false);
        // dS = dO Vᵀ, lower triangle
        mm(l, l, d1, &mut w.ds, l, 1, doc, d1, 1, vc, 1, rs, false);
        // dM (as dR[lag][σ], into w.s) and dP = dS ∘ M (into w.ds)
        w.s[..l * l].fill(T::zero());
        for tau in 0..l {
            for sig in 0..l {
                let i = tau * l + sig;
                if sig < tau {
                    w.s[(tau - sig) * l + sig] = w.ds[i] * w.p[i];
                }
                w.ds[i] = if sig <= tau {
                    w.ds[i] * w.m[i]
                } else {
                    T::zero()
                };
            }
        }
        // dQ = dP K, dK = dPᵀ Q
        mm(l, f, l, dqkc, rs, 1, &w.ds, l, 1, &qkc[f..], rs, 1, true);
        mm(
            l,
            f,
            l,
            &mut dqkc[f..],
            rs,
            1,
            &w.ds,
            1,
            l,
            qkc,
            rs,
            1,
            true,
        );
        // dcw (intra) = dRᵀ E
        mm(l, n, l, dcwc, hd.n, 1, &w.s, 1, l, &c.e, n, 1, true);
        if let Some(du) = du.as_deref_mut() {
            // du (intra) = -Σ_σ cw[σ, n] (dRᵀ (lag∘E))[σ, n]
            mm(l, n, l, &mut w.y, n, 1, &w.s, 1, l, &c.el, n, 1, false);
            for sig in 0..l {
                for s in 0..n {
                    du[s] -= (w.y[sig * n + s] * cwc[sig * hd.n + s]).to_f64();
                }
            }
        }
        if n > 0 {
            // inter readout: dQd = dO Gᵀ (G column-major)
            let gin = &gs[ci * gsz..(ci + 1) * gsz];
            mm(l, nf, d1, &mut w.dqd, nf, 1, doc, d1, 1, gin, nf, 1, false);
            for tau in 0..l {
                for s in 0..n {
                    let dec = c.dq[tau * n + s];
                    let src = &w.dqd[tau * nf + s * f..tau * nf + (s + 1) * f];
                    let row = &mut dqkc[tau * rs..tau * rs + f];
                    for x in 0..f {
                        row[x] += dec * src[x];
                    }
                    if let Some(du) = du.as_deref_mut() {
                        // Qd = e^(-u (τ+1)) q: du -= (τ+1) dec (q · dQd)
                        let q = &qkc[tau * rs..tau * rs + f];
                        let acc: f64 = (0..f).map(|x| (q[x] * src[x]).to_f64()).sum();
                        du[s] -= (tau + 1) as f64 * dec.to_f64() * acc;
                    }
                }
            }
            // state contribution of this chunk (H = ∂L/∂G after it; zero for the last chunk)
            if ci + 1 < list.len() {
                build_kd(qkc, cwc, hd, c, l, &mut w.kd);
                // dKd = V Hᵀ, dV += Kd H (H column-major)
                mm(l, nf, d1, &mut w.dkd, nf, 1, vc, rs, 1, &h, nf, 1, false);
                transpose(&w.kd[..l * nf], l, nf, &mut w.xt);
                mm(l, d1, nf, &mut w.ot, 1, l, &w.xt, 1, l, &h, 1, nf, true);
                for sig in 0..l {
                    for s in 0..n {
                        let dec = c.dk[sig * n + s];
                        let src = &w.dkd[sig * nf + s * f..sig * nf + (s + 1) * f];
                        let mut acc = T::zero();
                        {
                            let k = &qkc[sig * rs + f..sig * rs + 2 * f];
                            for x in 0..f {
                                acc += k[x] * src[x];
                            }
                        }
                        dcwc[sig * hd.n + s] += dec * acc;
                        let cws = cwc[sig * hd.n + s];
                        if let Some(du) = du.as_deref_mut() {
                            // Kd = e^(-u (L-1-σ)) cw k: du -= (L-1-σ) dec cw (k · dKd)
                            du[s] -= (l - 1 - sig) as f64 * (dec * cws * acc).to_f64();
                        }
                        let wgt = dec * cws;
                        let dst = &mut dqkc[sig * rs + f..sig * rs + 2 * f];
                        for x in 0..f {
                            dst[x] += wgt * src[x];
                        }
                    }
                }
                if let Some(du) = du.as_deref_mut() {
                    // G_next = λ G_in + ...: du -= L λ Σ (H ∘ G_in) over node n's rows
                    for (s, dus) in du.iter_mut().enumerate() {
                        let mut hg = 0f64;
                        for j in 0..d1 {
                            let r = j * nf + s * f..j * nf + (s + 1) * f;
                            for (a, b) in h[r.clone()].iter().zip(&gin[r]) {
                                hg += (*a * *b).to_f64();
                            }
                        }
                        *dus -= l as f64 * c.lambda[s].to_f64() * hg;
                    }
                }
            }
        }
        add_transposed(&mut dqkc[2 * f..], rs, &w.ot, l, d1);
        // H <- H - μ ∘ H + Qdᵀ dO (column-major)
        if ci > 0 && n > 0 {
            build_qd(qkc, hd, c, l, &mut w.qd);
            decay_state(&mut h, &c.mu, f);
            mm(nf, d1, l, &mut h, 1, nf, &w.qd, 1, nf, doc, d1, 1, true);
        }
    }
}

fn contiguous<'a, T>(s: &'a [T], l: &Layout) -> candle_core::Result<&'a [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&s[a..b]),
        None => candle_core::bail!("fused retention: inputs must be contiguous"),
    }
}

impl FusedRetention {
    fn head_consts<T: WithDType>(&self, t: usize) -> Vec<(Consts<T>, Consts<T>)> {
        let tail = match t % self.chunk {
            0 => self.chunk,
            rem => rem,
        };
        (0..self.hu)
            .map(|r| {
                let u = &self.u[r * self.n..(r + 1) * self.n];
                (consts(u, self.chunk), consts(u, tail))
            })
            .collect()
    }

    /// The call's sizes from the qkv and cw layouts (position 0: the op does not read it).
    fn dims(&self, l1: &Layout, l2: &Layout) -> candle_core::Result<Dims> {
        let (b, h, t, rs) = l1.shape().dims4()?;
        let (_, _, _, cws) = l2.shape().dims4()?;
        if rs <= 2 * self.f
            || cws != self.n
            || !(self.hu == 1 || self.hu == h)
            || self.u.len() != self.hu * self.n
            || self.chunk == 0
        {
            candle_core::bail!(
                "fused retention: qkv last dim {rs} must be 2F + D' with F = {} and D' >= 1, cw columns {cws} must be {}, rate rows {} must be 1 or H = {h} with {} rates, chunk {} >= 1",
                self.f,
                self.n,
                self.hu,
                self.u.len(),
                self.chunk
            );
        }
        if l2.shape().dims()[..3] != [b, h, t] {
            candle_core::bail!("fused retention: qkv and cw must share [B, H, T]");
        }
        Ok(Dims {
            n: self.n,
            ..Dims::new(b, h, t, self.f, rs - 2 * self.f - 1)
        })
    }

    fn fwd_typed<T: WithDType>(&self, qkv: &[T], cw: &[T], hd: Dims) -> Vec<T> {
        let Dims {
            b, h, t, n: cws, ..
        } = hd;
        let (d1, rs) = (hd.d1(), row_stride(&hd));
        let mut out = vec![T::zero(); b * h * t * d1];
        if t == 0 {
            return out;
        }
        let cs = self.head_consts::<T>(t);
        out.par_chunks_mut(t * d1).enumerate().for_each(|(bh, o)| {
            let (cm, ct) = &cs[if self.hu == 1 { 0 } else { bh % h }];
            fwd_head(
                &qkv[bh * t * rs..(bh + 1) * t * rs],
                &cw[bh * t * cws..(bh + 1) * t * cws],
                o,
                hd,
                cm,
                ct,
            )
        });
        out
    }

    /// dqkv [B, H, T, 2F+D'], dcw [B, H, T, N] and, with `rate_grad`, du [Hu, N] (f64).
    fn bwd_typed<T: WithDType>(
        &self,
        qkv: &[T],
        cw: &[T],
        dout: &[T],
        hd: Dims,
    ) -> (Vec<T>, Vec<T>, Vec<f64>) {
        let Dims { b, h, t, n, .. } = hd;
        let (d1, rs, cws) = (hd.d1(), row_stride(&hd), n);
        let mut dqkv = vec![T::zero(); b * h * t * rs];
        let mut dcw = vec![T::zero(); b * h * t * cws];
        let mut du = vec![0f64; self.hu * n];
        if t == 0 {
            return (dqkv, dcw, du);
        }
        let cs = self.head_consts::<T>(t);
        let dcw_chunks: Vec<&mut [T]> = if cws > 0 {
            dcw.chunks_mut(t * cws).collect()
        } else {
            (0..b * h).map(|_| &mut [][..]).collect()
        };
        // one rate-gradient row per head, summed into the rate rows afterwards
        let mut du_heads = vec![0f64; if self.rate_grad { b * h * n } else { 0 }];
        let du_chunks: Vec<Option<&mut [f64]>> = if self.rate_grad && n > 0 {
            du_heads.chunks_mut(n).map(Some).collect()
        } else {
            (0..b * h).map(|_| None).collect()
        };
        dqkv.par_chunks_mut(t * rs)
            .zip(dcw_chunks.into_par_iter())
            .zip(du_chunks.into_par_iter())
            .enumerate()
            .for_each(|(bh, ((dq, dc), duh))| {
                let (cm, ct) = &cs[if self.hu == 1 { 0 } else { bh % h }];
                bwd_head(
                    &qkv[bh * t * rs..(bh + 1) * t * rs],
                    &cw[bh * t * cws..(bh + 1) * t * cws],
                    &dout[bh * t * d1..(bh + 1) * t * d1],
                    dq,
                    dc,
                    duh,
                    hd,
                    cm,
                    ct,
                )
            });
        if self.rate_grad {
            for (bh, row) in du_heads.chunks(n.max(1)).enumerate().take(b * h) {
                let r = if self.hu == 1 { 0 } else { bh % h };
                for (acc, x) in du[r * n..(r + 1) * n].iter_mut().zip(row) {
                    *acc += x;
                }
            }
        }
        (dqkv, dcw, du)
    }
}

impl CustomOp3 for FusedRetention {
    fn name(&self) -> &'static str {
        "vort-fused-retention"
    }

    /// Inputs qkv [B, H, T, 2F+D'], cw [B, H, T, N], u [Hu, N] (read only by the backward's
    /// shape: the values are `self.u`); output o [B, H, T, D'].
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        _s3: &CpuStorage,
        _l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let hd = self.dims(l1, l2)?;
        let shape = Shape::from((hd.b, hd.h, hd.t, hd.d1()));
        let out = match (s1, s2) {
            (CpuStorage::F32(a), CpuStorage::F32(c)) => {
                CpuStorage::F32(self.fwd_typed(contiguous(a, l1)?, contiguous(c, l2)?, hd))
            }
            (CpuStorage::F64(a), CpuStorage::F64(c)) => {
                CpuStorage::F64(self.fwd_typed(contiguous(a, l1)?, contiguous(c, l2)?, hd))
            }
            _ => candle_core::bail!("fused retention: qkv and cw must both be f32 or both f64"),
        };
        Ok((out, shape))
    }

    fn bwd(
        &self,
        a1: &Tensor,
        a2: &Tensor,
        a3: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let hd = self.dims(a1.layout(), a2.layout())?;
        let (b, h) = (hd.b, hd.h);
        let (t, rs, cws) = (hd.t, row_stride(&hd), hd.n);
        let dev = a1.device();
        macro_rules! run {
            ($ty:ty) => {{
                let v = |x: &Tensor| x.flatten_all()?.to_vec1::<$ty>();
                let (dqkv, dc, du) =
                    self.bwd_typed(&v(a1)?, &v(a2)?, &v(&grad.to_dtype(a1.dtype())?)?, hd);
                (
                    Tensor::from_vec(dqkv, (b, h, t, rs), dev)?,
                    Tensor::from_vec(dc, (b, h, t, cws), dev)?,
                    Tensor::from_vec(du, (self.hu, self.n), dev)?.to_dtype(a3.dtype())?,
                )
            }};
        }
        let (dqkv, dc, du) = match a1.dtype() {
            DType::F32 => run!(f32),
            DType::F64 => run!(f64),
            dt => candle_core::bail!("fused retention: unsupported dtype {dt:?}"),
        };
        Ok((Some(dqkv), Some(dc), self.rate_grad.then_some(du)))
    }
}

/// The fused form under the retention contract (module doc of [`super`]): o [B, H, T, D+1]
/// unnormalised, and the state after the last token when `output_final_state`.
///
/// Fixed or learned rates. The custom op computes the zero-state output, differentiable in q, k,
/// vp, cw and (learned) the rates by its hand-written backward, with the SOE kernel inside
/// chunks (the same numbers as [`super::chunk()`] and the recurrent form). An initial state adds
/// its readout, o_t += Σ_n e^(-u_n (t+1)) φq_tᵀ G0_n, in plain candle ops (differentiable in q
/// and learned rates); the final state, G_T = e^(-u T) G0 + Σ_i e^(-u (T-1-i)) c_i φk_i v'_iᵀ,
/// comes from the chunked state recurrence alone (no outputs: ~1/4 of the forward's work) on
/// the host and carries no gradient (streams detach their states anyway). Training calls it
/// with neither state and pays for neither.
///
/// # Errors
/// Shape or dtype mismatches; chunk = 0; a state of other sizes; initial position + T past
/// the rates' certified horizon.
pub fn fused_chunk<T: WithDType>(
    x: &Inputs,
    rates: &Rates,
    chunk: usize,
    initial_state: Option<&State<T>>,
    output_final_state: bool,
) -> Result<(Tensor, Option<State<T>>)> {
    let dims = begin(x, rates, initial_state)?;
    let Dims { b, h, t, f, n, .. } = dims;
    let d1 = dims.d1();
    let dev = x.q.device();
    let dt = x.q.dtype();
    // the rates' values (f64 rows) and, learned, the tensor their gradient flows to
    let (u, learned): (Vec<Vec<f64>>, Option<&Tensor>) = match rates {
        Rates::Fixed { u, .. } => (u.clone(), None),
        Rates::Learned(ut) => {
            let (hu, nu) = ut.dims2()?;
            let flat = host::<f64>(ut)?;
            (
                (0..hu)
                    .map(|r| flat[r * nu..(r + 1) * nu].to_vec())
                    .collect(),
                Some(ut),
            )
        }
    };
    let mut o = fused_impl(x.q, x.k, x.vp, x.cw, &u, learned, chunk)?;
    // readout of the initial state: Qd[t, n, :] = e^(-u_n (t+1)) φq_t, then Qd · G0
    if let Some(s) = initial_state.filter(|_| n > 0 && t > 0) {
        let hu = u.len();
        let decay = match learned {
            // e^(-u (t+1)) from the tensor, so that the rates get this term's gradient
            Some(ut) => {
                let lags = Tensor::arange(1u32, t as u32 + 1, dev)?
                    .to_dtype(ut.dtype())?
                    .reshape((1, 1, t, 1, 1))?;
                ut.reshape((1, hu, 1, n, 1))?
                    .broadcast_mul(&lags)?
                    .neg()?
                    .exp()?
                    .to_dtype(dt)?
            }
            None => {
                let decay: Vec<f64> = u
                    .iter()
                    .flat_map(|row| {
                        (0..t).flat_map(move |tt| {
                            row.iter().map(move |&un| (-un * (tt + 1) as f64).exp())
                        })
                    })
                    .collect();
                Tensor::from_vec(decay, (1, hu, t, n, 1), dev)?.to_dtype(dt)?
            }
        };
        let qd =
            x.q.unsqueeze(3)?
                .broadcast_mul(&decay)?
                .reshape((b * h, t, n * f))?;
        let g0 = s
            .to_tensor(dev)?
            .to_dtype(dt)?
            .reshape((b * h, n * f, d1))?;
        o = (o + qd.matmul(&g0)?.reshape((b, h, t, d1))?)?;
    }
    if !output_final_state {
        return Ok((o, None));
    }
    // final state on the host: the prefill recurrence from G0 over the T tokens
    let mut st = match initial_state {
        Some(s) => s.clone(),
        None => State::zeros(b, h, n, f, d1 - 1),
    };
    let v = x.vp.narrow(3, 0, d1 - 1)?;
    prefill_state(&mut st, &host(x.k)?, &host(&v)?, &host(x.cw)?, t, &u, chunk)?;
    Ok((o, Some(st)))
}

/// Runs the op on [φq, φk, v'] (one concatenated buffer), cw and the rates: `u` their values,
/// `learned` the tensor that receives their gradient (None: fixed rates, no rate gradient).
fn fused_impl(
    q: &Tensor,
    k: &Tensor,
    vp: &Tensor,
    cw: &Tensor,
    u: &[Vec<f64>],
    learned: Option<&Tensor>,
    chunk: usize,
) -> Result<Tensor> {
    if chunk == 0 || u.is_empty() {
        return Err(VortError::InvalidArgument(
            "fused retention: chunk >= 1 and at least one rate row".into(),
        ));
    }
    let n = u[0].len();
    if u.iter().any(|r| r.len() != n) {
        return Err(VortError::InvalidArgument(
            "fused retention: rate rows of different lengths".into(),
        ));
    }
    let op = FusedRetention {
        u: u.iter().flatten().copied().collect(),
        hu: u.len(),
        n,
        f: q.dim(3)?,
        chunk,
        rate_grad: learned.is_some(),
    };
    let ut = match learned {
        Some(ut) => ut.to_dtype(q.dtype())?,
        // fixed rates: a constant tensor (no gradient is tracked or computed for it)
        None => Tensor::from_vec(op.u.clone(), (op.hu, n), q.device())?.to_dtype(q.dtype())?,
    };
    let qkv = Tensor::cat(&[q, k, vp], 3)?.contiguous()?;
    Ok(qkv.apply_op3(&cw.contiguous()?, &ut, op)?)
}

/// Advances a recurrent state over T tokens with the chunked state recurrence only (no
/// outputs): G <- e^(-u L) G + Kdᵀ V' per chunk, gemm on blocks, rayon over B×H. This is the
/// final state of [`fused_chunk`] (the prompt-processing path for decoding): ~1/4 of the
/// forward's work.
///
/// q is not needed; k: [B, H, T, F], v: [B, H, T, D], cw: [B, H, T, N] (flat, row-major);
/// `u`: rates `[Hu][N]`; `state`'s G [B, H, N, F, D+1] is replaced by the advanced one (a
/// host computation: the state is read to the host and written back on its device).
///
/// # Errors
/// Length or shape mismatches.
fn prefill_state<T: WithDType>(
    state: &mut State<T>,
    k: &[T],
    v: &[T],
    cw: &[T],
    t: usize,
    u: &[Vec<f64>],
    chunk: usize,
) -> Result<()> {
    let State { b, h, n, f, d, .. } = *state;
    let d1 = d + 1;
    if k.len() != b * h * t * f
        || v.len() != b * h * t * d
        || cw.len() != b * h * t * n
        || chunk == 0
        || !(u.len() == 1 || u.len() == h)
        || u.iter().any(|r| r.len() != n)
    {
        return Err(VortError::InvalidArgument(format!(
            "prefill: buffers k {}, v {}, cw {} / rates {}x? / chunk {chunk} do not match state [B={b}, H={h}, N={n}, F={f}, D={d}] and T = {t}",
            k.len(),
            v.len(),
            cw.len(),
            u.len()
        )));
    }
    if t == 0 || n == 0 {
        state.pos += t as u64;
        return Ok(());
    }
    let tail = match t % chunk {
        0 => chunk,
        rem => rem,
    };
    let cs: Vec<(Consts<T>, Consts<T>)> = u
        .iter()
        .map(|r| (consts(r, chunk), consts(r, tail)))
        .collect();
    let hd = Dims {
        n,
        ..Dims::new(b, h, t, f, d)
    };
    let rs = row_stride(&hd);
    let nf = n * f;
    let mut g_host = state.host()?;
    g_host
        .par_chunks_mut(nf * d1)
        .enumerate()
        .for_each(|(bh, g)| {
            let (cm, ct) = &cs[if cs.len() == 1 { 0 } else { bh % h }];
            // the state is row-major [N·F, D'] in `State`, column-major in the updates
            let mut gc = vec![T::zero(); nf * d1];
            for i in 0..nf {
                for j in 0..d1 {
                    gc[j * nf + i] = g[i * d1 + j];
                }
            }
            let mut kd = vec![T::zero(); chunk * nf];
            // the op's row layout [q | k | v'] with q zero (build_kd reads k, the update v')
            let mut qkv = vec![T::zero(); chunk * rs];
            for (s0, l) in chunks(t, chunk) {
                let c = if l == cm.l { cm } else { ct };
                for i in 0..l {
                    let row = &mut qkv[i * rs..(i + 1) * rs];
                    row[f..2 * f].copy_from_slice(&k[(bh * t + s0 + i) * f..][..f]);
                    row[2 * f..2 * f + d].copy_from_slice(&v[(bh * t + s0 + i) * d..][..d]);
                    row[2 * f + d] = T::one();
                }
                let cwc = &cw[(bh * t + s0) * n..(bh * t + s0 + l) * n];
                build_kd(&qkv[..l * rs], cwc, hd, c, l, &mut kd);
                state_update(&mut gc, &kd[..l * nf], &qkv[2 * f..l * rs], hd, c, l);
            }
            for i in 0..nf {
                for j in 0..d1 {
                    g[i * d1 + j] = gc[j * nf + i];
                }
            }
        });
    let device = state.tensor().device().clone();
    *state = State::from_host(b, h, n, f, d, state.pos + t as u64, g_host, &device)?;
    Ok(())
}
