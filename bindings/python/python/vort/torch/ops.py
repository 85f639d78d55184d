"""The retention core in torch (``retention_core``, ``VortRetention``) and the Rust fused op as
the torch custom op ``vort::fused_chunk``: the chunk form and its state, as in the package's
``vort.torch`` docstring."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor, nn

from .. import _vort
from .nodes import NodeWeights


@dataclass
class RetentionState:
    """The state after a call: G [B, H, N, F, D+1] and the tokens consumed (checked against
    the certified horizon)."""

    g: Tensor
    pos: int


def _chunks(q, k, vp, cw, u, g, chunk):
    """One pass over T = nc·L tokens (T divisible by L = chunk); returns o and G."""
    b, h, t, f = q.shape
    n = cw.shape[-1]
    d1 = vp.shape[-1]
    nc = t // chunk
    lag = torch.arange(chunk, dtype=q.dtype, device=q.device)
    uu = u.to(q.dtype)  # [H or 1, N]
    e = torch.exp(-uu[:, None, :] * lag[None, :, None])  # [Hu, L, N]
    rel = (lag[:, None] - lag[None, :]).clamp(min=0).long()  # t - s
    strict = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool, device=q.device), -1)
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    dq = torch.exp(-uu[:, None, :] * (lag[None, :, None] + 1))  # [Hu, L, N]
    dk = torch.exp(-uu[:, None, :] * (chunk - 1 - lag[None, :, None]))  # [Hu, L, N]
    lam = torch.exp(-uu * chunk)  # [Hu, N]
    e, dq, dk = (x.expand(h, chunk, n) for x in (e, dq, dk))
    lam = lam.expand(h, n)
    qc = q.reshape(b, h, nc, chunk, f)
    kc = k.reshape(b, h, nc, chunk, f)
    vc = vp.reshape(b, h, nc, chunk, d1)
    cwc = cw.reshape(b, h, nc, chunk, n)
    # intra-chunk, all chunks at once
    m = torch.einsum("htsn,bhcsn->bhcts", e[:, rel], cwc) * strict + eye
    o_intra = (m * (qc @ kc.transpose(-1, -2))) @ vc
    outs = []
    for c in range(nc):
        qd = qc[:, :, c, :, None, :] * dq[None, :, :, :, None]  # [B, H, L, N, F]
        outs.append(o_intra[:, :, c] + torch.einsum("bhlnf,bhnfd->bhld", qd, g))
        kd = kc[:, :, c, :, None, :] * (dk[None] * cwc[:, :, c])[..., None]
        g = lam[None, :, :, None, None] * g + torch.einsum("bhlnf,bhld->bhnfd", kd, vc[:, :, c])
    return torch.stack(outs, dim=2).reshape(b, h, t, d1), g


def retention_core(
    q: Tensor,
    k: Tensor,
    vp: Tensor,
    cw: Tensor,
    u: Tensor,
    chunk: int,
    g: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """The unnormalised o [B, H, T, D+1] of the chunk form and the final G.

    q, k [B, H, T, F] (features), vp [B, H, T, D+1] (v with a column of ones), cw
    [B, H, T, N] (node weights), u [1 or H, N] (rates), g [B, H, N, F, D+1] the initial state
    (None: zeros). Any T: the chunks after the last full one are one shorter chunk, so the
    state returned is the state after exactly T tokens.
    """
    b, h, t, f = q.shape
    n, d1 = cw.shape[-1], vp.shape[-1]
    if g is None:
        g = q.new_zeros(b, h, n, f, d1)
    full = (t // chunk) * chunk
    outs = []
    if full > 0:
        o, g = _chunks(q[:, :, :full], k[:, :, :full], vp[:, :, :full], cw[:, :, :full], u, g, chunk)
        outs.append(o)
    if full < t:
        r = t - full
        o, g = _chunks(q[:, :, full:], k[:, :, full:], vp[:, :, full:], cw[:, :, full:], u, g, r)
        outs.append(o)
    return torch.cat(outs, dim=2), g


def _normalise(o: Tensor, eps_den: float) -> Tensor:
    return o[..., :-1] / (o[..., -1:] + eps_den)


def _with_ones(v: Tensor) -> Tensor:
    return torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)


def _check_retention_state(state: Any, want: Tuple[int, ...]) -> None:
    """Refuses a state of another shape (batch, heads, nodes, features, D + 1) or position: it
    was broadcast over another batch, or failed inside an einsum."""
    if not isinstance(state, RetentionState):
        raise ValueError(f"state must be a RetentionState, not {type(state).__name__}")
    if tuple(state.g.shape) != tuple(want):
        raise ValueError(
            f"the state's G {tuple(state.g.shape)} does not match this call's [B, H, N, F, D+1] = "
            f"{list(want)} (a state of another batch or configuration)"
        )
    if not isinstance(state.pos, int) or state.pos < 0:
        raise ValueError(f"the state's position {state.pos!r} must be an int >= 0")


def _beyond_horizon(context: int, horizon: int) -> ValueError:
    # the Rust core's words (VortError::BeyondHorizon)
    return ValueError(
        f"context of {context} tokens exceeds the memory's certified horizon of {horizon} "
        "(build the node table for a longer horizon)"
    )


# ----------------------------------------------------------------------------------------
# the Rust fused op as a torch custom op (CPU)


@torch.library.custom_op("vort::fused_chunk", mutates_args=())
def fused_chunk(q: Tensor, k: Tensor, vp: Tensor, cw: Tensor, u: Tensor, chunk: int) -> Tensor:
    """The Rust layer's fused chunked op (``vort::retention::fused_chunk``) from an empty state:
    the unnormalised o [B, H, T, D+1] of q, k [B, H, T, F], vp [B, H, T, D+1], cw [B, H, T, N]
    and rates u [1 or H, N], float32 or float64 on the CPU. Its backward is the Rust op's
    hand-written one (gradients for all five inputs)."""
    dt = _rust_dtype(q)
    qn, kn, vpn, cwn, un = (_host(x) for x in (q, k, vp, cw, u))
    o = _vort._fused_chunk(qn, kn, vpn, cwn, un, chunk, dt)
    return torch.from_numpy(o).to(dtype=q.dtype, device=q.device)


@fused_chunk.register_fake
def _(q, k, vp, cw, u, chunk):
    return q.new_empty(*q.shape[:-1], vp.shape[-1])


def _whole(x: Any, name: str, lo: int = 1) -> int:
    """An int >= lo (a float with an integral value too), else ValueError: ``chunk=1.5`` was
    truncated to 1 (issue #43 J)."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} = {x!r} must be a whole number >= {lo}")
    if isinstance(x, (float, np.floating)) and not (math.isfinite(x) and float(x).is_integer()):
        raise ValueError(f"{name} = {x!r} must be a whole number >= {lo}")
    if int(x) < lo:
        raise ValueError(f"{name} = {x!r} must be a whole number >= {lo}")
    return int(x)


def _floats(**tensors: Optional[Tensor]) -> None:
    """One real floating dtype for every tensor given (None: not given): mixed dtypes, complex
    numbers or integers gave raw torch errors (issue #43 I)."""
    dtypes = {n: t.dtype for n, t in tensors.items() if t is not None}
    for n, dt in dtypes.items():
        if not dt.is_floating_point:
            raise ValueError(f"{n} is {dt}: the layer takes real floating tensors")
    if len(set(dtypes.values())) > 1:
        kinds = ", ".join(f"{n} {dt}" for n, dt in dtypes.items())
        raise ValueError(f"the inputs must share one dtype ({kinds}): cast them with .to(dtype)")


def _host(x: Tensor) -> np.ndarray:
    return x.detach().cpu().numpy()


def _rust_dtype(x: Tensor) -> str:
    if x.dtype == torch.float32:
        return "f32"
    if x.dtype == torch.float64:
        return "f64"
    raise ValueError(f"the Rust fused op takes float32 or float64, not {x.dtype}")


def _fused_setup(ctx, inputs, output):
    q, k, vp, cw, u, chunk = inputs
    ctx.save_for_backward(q, k, vp, cw, u)
    ctx.chunk = chunk


def _fused_backward(ctx, grad):
    q, k, vp, cw, u = ctx.saved_tensors
    qn, kn, vpn, cwn, un = (_host(x) for x in (q, k, vp, cw, u))
    grads = _vort._fused_chunk(qn, kn, vpn, cwn, un, ctx.chunk, _rust_dtype(q), _host(grad.contiguous()))
    out = [torch.from_numpy(g).to(dtype=x.dtype, device=x.device) for g, x in zip(grads, (q, k, vp, cw, u))]
    return (*out, None)


fused_chunk.register_autograd(_fused_backward, setup_context=_fused_setup)


def _fused_core(q, k, vp, cw, u, chunk, g0):
    """retention_core through the Rust op: the op's zero-state output, plus the initial
    state's readout and the final state in torch (as the Rust fused form adds them)."""
    b, h, t, f = q.shape
    uu = u.to(q.dtype).expand(h, u.shape[-1])
    o = fused_chunk(q, k, vp, cw, uu, chunk)
    lag = torch.arange(t, dtype=q.dtype, device=q.device)
    if g0 is not None:
        dq = torch.exp(-uu[None, :, None, :] * (lag[None, None, :, None] + 1))  # [1, H, T, N]
        o = o + torch.einsum("bhtn,bhtf,bhnfd->bhtd", dq.expand(b, h, t, -1), q, g0)
    # G_T = e^(-u T) G0 + sum_i e^(-u (T-1-i)) c_i k_i v'_i^T
    dk = torch.exp(-uu[None, :, None, :] * (t - 1 - lag[None, None, :, None])) * cw
    g = torch.einsum("bhtn,bhtf,bhtd->bhnfd", dk, k, vp)
    if g0 is not None:
        g = g + torch.exp(-uu * t)[None, :, :, None, None] * g0
    return o, g


class VortRetention(nn.Module):
    """The VORT retention core in torch, batched [B, H, T, ·], with a state across calls.

    The node table (shared nodes or banks, certified on lags 1..=horizon) is built by the Rust
    core at construction, exactly as ``vort.retention`` and the Rust layer build it.

    forward(phi_q, phi_k, v, alpha, state=None) -> (y, state): phi_q, phi_k [B, H, T, F]
    (nonnegative features), v [B, H, T, D], alpha [B, H, T] in [0, 1] (clamped to δ below).
    Feeding a sequence in pieces with the returned state gives the output of one call.
    Differentiable in every input (the gradient w.r.t. α through dc/dα).

    backend="torch" (default) is the chunk form in torch ops, on any device; backend="rust" runs
    the Rust layer's fused op through the torch custom op ``vort::fused_chunk`` (CPU, float32
    or float64), with the state's readout and update in torch.
    """

    def __init__(
        self,
        *,
        mode: Optional[str] = None,
        delta: float = 0.1,
        eps: float = 1e-3,
        horizon: Union[int, float] = 4096,
        banks: int = 4,
        chunk: int = 64,
        eps_den: float = 1e-6,
        table: Optional[Dict[str, Any]] = None,
        backend: str = "torch",
        memory: Optional[str] = None,
    ):
        super().__init__()
        if backend not in ("torch", "rust"):
            raise ValueError(f"backend `{backend}` is not one of torch|rust")
        if mode is not None and memory is not None:
            raise ValueError("give the node mode as mode= (or memory=, its older name), not both")
        self.backend = backend
        chunk = _whole(chunk, "chunk")
        if table is None:
            table = _vort._node_table(mode or memory or "shared", delta, horizon, eps, banks)
        self.nodes = NodeWeights(table)
        self.chunk = int(chunk)
        self.eps_den = float(eps_den)

    @property
    def horizon(self) -> int:
        return self.nodes.horizon

    def forward(
        self,
        phi_q: Tensor,
        phi_k: Tensor,
        v: Tensor,
        alpha: Tensor,
        state: Optional[RetentionState] = None,
    ) -> Tuple[Tensor, RetentionState]:
        if phi_q.dim() != 4 or phi_k.shape != phi_q.shape:
            raise ValueError(f"phi_q {tuple(phi_q.shape)} and phi_k {tuple(phi_k.shape)} must be [B, H, T, F]")
        b, h, t, _ = phi_q.shape
        if v.dim() != 4 or tuple(v.shape[:3]) != (b, h, t):
            raise ValueError(f"v {tuple(v.shape)} must be [{b}, {h}, {t}, D]")
        if tuple(alpha.shape) != (b, h, t):
            raise ValueError(f"alpha {tuple(alpha.shape)} must be [{b}, {h}, {t}]")
        _floats(phi_q=phi_q, phi_k=phi_k, v=v, alpha=alpha)
        if t == 0:
            raise ValueError("the inputs hold no position (T = 0)")
        if state is not None:
            _check_retention_state(state, (b, h, self.nodes.n, phi_q.shape[3], v.shape[3] + 1))
        pos = 0 if state is None else state.pos
        if pos + t > self.horizon:
            raise _beyond_horizon(pos + t, self.horizon)
        cw = self.nodes(alpha)
        u = self.nodes.u.to(device=phi_q.device)[None, :]
        core = _fused_core if self.backend == "rust" else retention_core
        o, g = core(phi_q, phi_k, _with_ones(v), cw, u, self.chunk, None if state is None else state.g)
        return _normalise(o, self.eps_den), RetentionState(g, pos + t)
