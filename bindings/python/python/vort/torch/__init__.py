"""VORT in PyTorch: the retention core (``VortRetention``) and the project's model (``VortLM``).

Pure Python on top of torch (``pip install vort[torch]``); runs on any torch device. The
certified node tables come from the Rust core at construction (``vort._vort``), so the kernel
is the one the Rust layer uses: for the shared memory, the weights c_n(α) are the same cubic
Hermite table, for banks the same linear split between the two bank orders around α.

The retention is the fla-style chunk form of ``bench/peer/peer.py``: within a chunk all pairs
at once, across chunks the state G [B, H, N, F, D+1] carried by one recurrence per node:

    M[t, s] = sum_n e^(-u_n (t-s)) c_n(α_s)  (t > s),  1 (t = s)
    o       = (M * Q K^T) V' + Qd G,          Qd[t, n] = e^(-u_n (t+1)) q_t
    G      <- e^(-u L) G + Kd^T V',           Kd[s, n] = e^(-u_n (L-1-s)) c_n(α_s) k_s
    y       = o[..., :D] / (o[..., D] + eps_den)
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import _vort

__all__ = [
    "KvState",
    "LMState",
    "NodeWeights",
    "RetentionState",
    "VortAttention",
    "VortLM",
    "VortRetention",
    "fused_chunk",
    "retention_core",
]


# ----------------------------------------------------------------------------------------
# node weights c_n(α)


class NodeWeights(nn.Module):
    """c_n(α) [..., N] of a node table from the Rust core, differentiable in α.

    As in the Rust layer (``vort::retention::node_weights``), the value is the table's and its
    derivative the table's dc/dα: the shared memory's cubic Hermite table (value clamped at 0,
    derivative 0 outside [δ, 1]), the banks' linear split (derivative 0 outside the grid), a
    single order's constant weights.
    """

    def __init__(self, table: Dict[str, Any]):
        super().__init__()
        self.kind = table["kind"]
        self.horizon = int(table["horizon"])
        self.max_rel_error = float(table["max_rel_error"])
        self.register_buffer("u", torch.as_tensor(np.asarray(table["u"]), dtype=torch.float64))
        grid = np.asarray(table["grid"], dtype=np.float64)
        self.register_buffer("grid", torch.as_tensor(grid))
        self.register_buffer(
            "weights", torch.as_tensor(np.asarray(table["weights"], dtype=np.float64))
        )
        if self.kind == "shared":
            self.a0 = float(table["hermite_a0"])
            self.h = float(table["hermite_h"])
            self.register_buffer("hc", torch.as_tensor(np.asarray(table["hermite_c"])))
            self.register_buffer("hdc", torch.as_tensor(np.asarray(table["hermite_dc"])))

    @property
    def n(self) -> int:
        return int(self.u.shape[0])

    def _value_slope(self, a: Tensor) -> Tuple[Tensor, Tensor]:
        """Value and dc/dα at the orders a (no graph), in float64."""
        if self.kind == "shared":
            points = self.hc.shape[0]
            hi = self.a0 + self.h * (points - 1)
            inside = (a >= self.a0) & (a <= hi)
            ac = torch.nan_to_num(a, nan=self.a0).clamp(self.a0, hi)
            pos = (ac - self.a0) / self.h
            i = pos.floor().long().clamp(max=points - 2)
            s = (pos - i.to(pos.dtype)).unsqueeze(-1)
            s2, s3 = s * s, s * s * s
            h00, h10 = 2 * s3 - 3 * s2 + 1, s3 - 2 * s2 + s
            h01, h11 = -2 * s3 + 3 * s2, s3 - s2
            d00, d10 = 6 * s2 - 6 * s, 3 * s2 - 4 * s + 1
            d01, d11 = -6 * s2 + 6 * s, 3 * s2 - 2 * s
            hc, hdc = self.hc.to(torch.float64), self.hdc.to(torch.float64)
            c0, c1, g0, g1 = hc[i], hc[i + 1], hdc[i], hdc[i + 1]
            h = self.h
            val = (h00 * c0 + h10 * h * g0 + h01 * c1 + h11 * h * g1).clamp(min=0.0)
            der = (d00 * c0 + d01 * c1) / h + d10 * g0 + d11 * g1
            return val, der * inside.unsqueeze(-1).to(der.dtype)
        grid, weights = self.grid.to(torch.float64), self.weights.to(torch.float64)
        g = grid.shape[0]
        if g == 1:
            val = weights[0].expand(*a.shape, self.n)
            return val, torch.zeros_like(val)
        lo, hi = float(grid[0]), float(grid[-1])
        outside = (a < lo) | (a > hi) | torch.isnan(a)
        ac = torch.nan_to_num(a, nan=lo).clamp(lo, hi)
        i = (torch.searchsorted(grid, ac.contiguous(), right=True) - 1).clamp(0, g - 2)
        da = grid[i + 1] - grid[i]
        theta = ((ac - grid[i]) / da).unsqueeze(-1)
        wl, wr = weights[i], weights[i + 1]
        inv = torch.where(outside, torch.zeros_like(da), 1.0 / da).unsqueeze(-1)
        return wl + theta * (wr - wl), (wr - wl) * inv

    def forward(self, alpha: Tensor) -> Tensor:
        """c_n(α) [..., N] in α's dtype and device; the gradient w.r.t. α is dc/dα."""
        with torch.no_grad():
            val, der = self._value_slope(alpha.detach().to(torch.float64))
        val, der = val.to(alpha.dtype), der.to(alpha.dtype)
        # value of the table, first derivative dc/dα (the Rust layer's affine form)
        return val + (alpha - alpha.detach()).unsqueeze(-1) * der


# ----------------------------------------------------------------------------------------
# the retention core


@dataclass
class RetentionState:
    """The state after a call: G [B, H, N, F, D+1] and the tokens consumed (checked against
    the certified horizon)."""

    g: Tensor
    pos: int


@dataclass
class LMState:
    """``VortLM``'s streaming state: each layer's memory state (``RetentionState`` or
    ``KvState``), each layer's last k - 1 inputs of the short convolution [B, k-1, d_model]
    (None without one), and the previous token [B] (None at the start)."""

    mix: List[Any]
    conv: List[Optional[Tensor]]
    prev: Optional[Tensor]


@dataclass
class KvState:
    """A softmax layer's state: the keys and values [B, H, S, head_dim] the next tokens
    attend to (all of them, or the last window - 1 for a sliding window)."""

    k: Tensor
    v: Tensor


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
    args = [x.detach().cpu().numpy() for x in (q, k, vp, cw, u)]
    o = _vort._fused_chunk(*args, chunk, dt)
    return torch.from_numpy(o).to(dtype=q.dtype, device=q.device)


@fused_chunk.register_fake
def _(q, k, vp, cw, u, chunk):
    return q.new_empty(*q.shape[:-1], vp.shape[-1])


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
    args = [x.detach().cpu().numpy() for x in (q, k, vp, cw, u)]
    grads = _vort._fused_chunk(*args, ctx.chunk, _rust_dtype(q), grad.detach().cpu().contiguous().numpy())
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
        memory: str = "shared",
        delta: float = 0.1,
        eps: float = 1e-3,
        horizon: Union[int, float] = 4096,
        banks: int = 4,
        chunk: int = 64,
        eps_den: float = 1e-6,
        table: Optional[Dict[str, Any]] = None,
        backend: str = "torch",
    ):
        super().__init__()
        if backend not in ("torch", "rust"):
            raise ValueError(f"backend `{backend}` is not one of torch|rust")
        self.backend = backend
        if chunk < 1:
            raise ValueError("--chunk must be >= 1")
        if table is None:
            table = _vort._node_table(memory, delta, horizon, eps, banks)
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
            raise ValueError(
                f"phi_q {tuple(phi_q.shape)} and phi_k {tuple(phi_k.shape)} must be [B, H, T, F]"
            )
        b, h, t, _ = phi_q.shape
        if v.dim() != 4 or tuple(v.shape[:3]) != (b, h, t):
            raise ValueError(f"v {tuple(v.shape)} must be [{b}, {h}, {t}, D]")
        if tuple(alpha.shape) != (b, h, t):
            raise ValueError(f"alpha {tuple(alpha.shape)} must be [{b}, {h}, {t}]")
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


# ----------------------------------------------------------------------------------------
# the model


def _rms_norm(x: Tensor, w: Tensor, eps: float = 1e-6) -> Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _qk_norm(z: Tensor, scale: Tensor) -> Tensor:
    return z / torch.sqrt(z.pow(2).sum(-1, keepdim=True) + 1e-12) * scale.view(1, -1, 1, 1)


def _short_conv(x: Tensor, w: Tensor) -> Tensor:
    """y[b, t, c] = sum_{i<k} w[i, c] x[b, t-i, c] (zeros before the start)."""
    k = w.shape[0]
    xp = F.pad(x, (0, 0, k - 1, 0))
    t = x.shape[1]
    y = x * w[0]
    for i in range(1, k):
        y = y + xp[:, k - 1 - i : k - 1 - i + t] * w[i]
    return y


def _gelu(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")


class _Features(nn.Module):
    def __init__(self, kind: str, d: int, projection: Optional[np.ndarray]):
        super().__init__()
        self.kind, self.d = kind, d
        if kind == "favor":
            self.register_buffer("omega_t", torch.as_tensor(np.asarray(projection)))
        elif kind == "taylor":
            idx, scale = [], []
            for i in range(d):
                for j in range(i, d):
                    idx.append(i * d + j)
                    scale.append(1.0 / math.sqrt(2.0 * d) if i == j else 1.0 / math.sqrt(d))
            self.register_buffer("idx", torch.tensor(idx, dtype=torch.long))
            self.register_buffer("scale", torch.tensor(scale, dtype=torch.float64))
        elif kind != "elu":
            raise ValueError(f"feature map `{kind}` is not one of favor|elu|taylor")

    def forward(self, z: Tensor) -> Tensor:
        if self.kind == "favor":
            m = self.omega_t.shape[1]
            p = z @ self.omega_t.to(z.dtype)
            return torch.exp(p - 0.5 * z.pow(2).sum(-1, keepdim=True)) / math.sqrt(m)
        if self.kind == "elu":
            return F.elu(z) + 1.0
        d = self.d
        outer = (z.unsqueeze(-1) * z.unsqueeze(-2)).flatten(-2)
        second = outer[..., self.idx] * self.scale.to(z.dtype)
        return torch.cat([torch.ones_like(z[..., :1]), z * d**-0.25, second], dim=-1)


class _Router(nn.Module):
    def __init__(self, dm: int, h: int, delta: float, routing: str):
        super().__init__()
        if routing != "learned":  # "learned": one order per head, c only
            self.probe = nn.Parameter(torch.zeros(dm, 1))
            self.g = nn.Parameter(torch.zeros(dm, h))
            self.a = nn.Parameter(torch.zeros(h))
            self.b = nn.Parameter(torch.zeros(h))
        self.c = nn.Parameter(torch.zeros(h))
        self.delta, self.routing = delta, routing

    def forward(self, x: Tensor, entropy: Optional[Tensor]) -> Tensor:
        if self.routing == "learned":
            z = self.c.expand(x.shape[0], x.shape[1], -1)
            return (torch.sigmoid(z) * (1.0 - self.delta) + self.delta).transpose(1, 2)
        logit_e = x @ self.probe  # [B, T, 1]
        z = x @ self.g + self.c
        if self.routing in ("full", "entity-only"):
            z = z + torch.sigmoid(logit_e) * self.a
        if self.routing in ("full", "entropy-only") and entropy is not None:
            z = z - entropy.detach().unsqueeze(-1) * self.b
        alpha = torch.sigmoid(z) * (1.0 - self.delta) + self.delta
        return alpha.transpose(1, 2)  # [B, H, T]


class _Mixer(nn.Module):
    """One block's mixer (the Rust ``vort::block::Block``) with the parameters under the same
    names: wq, wk, wv, wo, scale_q, scale_k, router.*, decay_rho, mix_logits."""

    def __init__(self, mc: Dict[str, Any], mixer: Dict[str, Any], buf: Dict[str, Any]):
        super().__init__()
        dm, h, dh = mc["d_model"], mc["heads"], mc["head_dim"]
        self.h, self.dh, self.chunk, self.eps_den = h, dh, mc["chunk"], mc["eps_den"]
        self.kind = mixer["kind"]
        self.wq = nn.Parameter(torch.zeros(dm, h * dh))
        self.wk = nn.Parameter(torch.zeros(dm, h * dh))
        self.wv = nn.Parameter(torch.zeros(dm, h * dh))
        self.wo = nn.Parameter(torch.zeros(h * dh, dm))
        self.scale_q = nn.Parameter(torch.zeros(h))
        self.scale_k = nn.Parameter(torch.zeros(h))
        self.router: Optional[_Router] = None
        self.fixed_alpha: Optional[float] = None
        self.nodes: Optional[NodeWeights] = None
        self.window = 0
        if self.kind != "softmax":
            self.features = _Features(buf["feature_map"], dh, buf.get("projection"))
        if self.kind == "vort":
            self.nodes = NodeWeights(buf["tables"][0])
            routing = mixer.get("routing", "full")
            if isinstance(routing, dict) and "oracle" in routing:
                raise ValueError(
                    "oracle routing reads the task's memorable marks at every token; the torch "
                    "twin does not take them (use the Rust model's forward_marked)"
                )
            if isinstance(routing, dict):
                self.fixed_alpha = float(routing["fixed"]["alpha"])
            else:
                self.router = _Router(dm, h, float(mixer["nodes"]["delta"]), routing)
        elif self.kind == "power-law":
            self.nodes = NodeWeights(buf["tables"][0])
            self.fixed_alpha = float(mixer["alpha"])
        elif self.kind == "exponential":
            self.decay_rho = nn.Parameter(torch.zeros(h, 1))
        elif self.kind in ("retnet", "mixture"):
            self.register_buffer(
                "rates", torch.tensor(buf["fixed_rates"], dtype=torch.float64)
            )
            if self.kind == "mixture":
                self.mix_logits = nn.Parameter(torch.zeros(h, int(mixer["m"])))
        elif self.kind == "softmax":
            self.window = int(mixer.get("window", 0))
        else:
            raise ValueError(
                f"mixer `{self.kind}` is not supported by vort.torch (expected "
                "vort|power-law|exponential|retnet|mixture|softmax)"
            )

    @property
    def horizon(self) -> Optional[int]:
        return None if self.nodes is None else self.nodes.horizon

    def _heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.reshape(b, t, self.h, self.dh).transpose(1, 2)

    def forward(self, x: Tensor, entropy: Optional[Tensor]) -> Tensor:
        return self.run(x, entropy, None)[0]

    def run(self, x: Tensor, entropy: Optional[Tensor], state: Any) -> Tuple[Tensor, Any]:
        """y [B, T, d_model] and the state after x, continuing from `state` (None: empty): a
        ``RetentionState`` for the linear mixers, a ``KvState`` for softmax."""
        b, t, dm = x.shape
        q = _qk_norm(self._heads(x @ self.wq), self.scale_q)
        k = _qk_norm(self._heads(x @ self.wk), self.scale_k)
        v = self._heads(x @ self.wv)
        if self.kind == "softmax":
            if state is not None and not isinstance(state, KvState):
                raise ValueError("a retention state was given to a softmax layer")
            if state is not None:
                k = torch.cat([state.k, k], dim=2)
                v = torch.cat([state.v, v], dim=2)
            s = k.shape[2]
            logits = q @ k.transpose(-1, -2)
            i = torch.arange(t, device=x.device)[:, None] + (s - t)  # the queries' positions
            j = torch.arange(s, device=x.device)[None, :]
            keep = j <= i
            if self.window > 0:
                keep = keep & (j > i - self.window)
            logits = logits.masked_fill(~keep, float("-inf"))
            y = torch.softmax(logits, dim=-1) @ v
            if self.window > 0:  # the next query sees the last window - 1 keys at most
                kept = min(self.window - 1, s)
                k, v = k[:, :, s - kept :], v[:, :, s - kept :]
            new_state: Any = KvState(k.detach(), v.detach())
        else:
            if state is not None and not isinstance(state, RetentionState):
                raise ValueError("a softmax KV cache was given to a retention layer")
            if state is not None and (state.pos < 0 or state.g.shape[0] != b):
                raise ValueError(
                    f"the state (batch {state.g.shape[0]}, position {state.pos}) does not match "
                    f"hidden states of batch {b}"
                )
            pos = 0 if state is None else state.pos
            if self.horizon is not None and pos + t > self.horizon:
                raise _beyond_horizon(pos + t, self.horizon)
            if self.nodes is not None:
                if self.router is not None:
                    alpha = self.router(x, entropy)
                else:
                    alpha = x.new_full((b, self.h, t), float(self.fixed_alpha))
                cw = self.nodes(alpha)
                u = self.nodes.u.to(device=x.device, dtype=x.dtype)[None, :]
            elif self.kind == "exponential":
                cw = x.new_ones(b, self.h, t, 1)
                u = F.softplus(self.decay_rho)
            elif self.kind == "retnet":
                cw = x.new_ones(b, self.h, t, 1)
                u = self.rates.to(x.dtype)
            else:  # mixture
                w = torch.softmax(self.mix_logits, dim=1)
                cw = w[None, :, None, :].expand(b, self.h, t, w.shape[1])
                u = self.rates.to(x.dtype)
            o, g = retention_core(
                self.features(q),
                self.features(k),
                _with_ones(v),
                cw,
                u,
                self.chunk,
                None if state is None else state.g,
            )
            y = _normalise(o, self.eps_den)
            new_state = RetentionState(g.detach(), pos + t)
        return y.transpose(1, 2).reshape(b, t, self.h * self.dh) @ self.wo, new_state


def _toml_value(x: Any) -> str:
    """A TOML value: bool, number, string or (inline) table."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, (int, float)):
        return repr(x)
    if isinstance(x, str):
        return json.dumps(x)
    if isinstance(x, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in x.items()) + " }"
    raise ValueError(f"{x!r} is not a TOML value of a mixer setting")


class VortAttention(nn.Module):
    """A VORT memory layer over hidden states, shaped as fla's ``GatedLinearAttention``:
    ``forward(hidden_states [B, T, hidden_size], past_state=None, entropy=None) -> (output
    [B, T, hidden_size], state)``. Feeding a sequence in pieces with the returned state gives
    the output of one call (the state is detached, as the Rust layer's streams are).

    The layer owns its projections ``wq``, ``wk``, ``wv`` [hidden_size, H·head_dim], ``wo``,
    the q/k scales, the router (``router.*``) or the decays of a baseline, and as buffers the
    FAVOR+ projection and the certified node tables: ``state_dict()`` holds all of them under
    the Rust layer's names. It is built by the Rust core (``vort::block::Block``): the
    parameters are ``Block::init``'s from ``seed``, the node tables those the Rust layer
    certifies on lags up to ``max_len`` (where the mixer's horizon is 0).

    mixer: a kind (vort|power-law|exponential|retnet|mixture|softmax) or the ``[model.mixer]``
    table as a dict, e.g. ``{"kind": "vort", "routing": "entity-only", "nodes": {"mode":
    "shared", "banks": 4, "delta": 0.1, "horizon": 0, "eps": 1e-3}}``; a plain "vort" routes
    by the entity probe only (no entropy signal needed). entropy [B, T] in [0, 1] (the
    routings that read it; None: 0).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        head_dim: Optional[int] = None,
        *,
        mixer: Union[str, Dict[str, Any]] = "vort",
        features: int = 32,
        feature_map: str = "favor",
        max_len: int = 4096,
        chunk: int = 64,
        eps_den: float = 1e-6,
        qk_scale_init: float = 1.0,
        seed: int = 0,
    ):
        super().__init__()
        if head_dim is None:
            if num_heads < 1 or hidden_size % num_heads:
                raise ValueError(
                    f"hidden_size {hidden_size} is not a multiple of num_heads {num_heads}: "
                    "give head_dim"
                )
            head_dim = hidden_size // num_heads
        table = {"kind": mixer} if isinstance(mixer, str) else dict(mixer)
        if table == {"kind": "vort"}:
            table["routing"] = "entity-only"
        mixer_toml = "\n".join(f"{k} = {_toml_value(v)}" for k, v in table.items())
        # a one-block model of the Rust core; only its block is kept (the task section sets
        # the length the node tables are certified to, nothing else)
        text = (
            f"seed = {int(seed)}\n\n[task]\nkind = \"mqar\"\nseq_len = {int(max_len)}\n"
            "vocab_size = 8\nnum_kv_pairs = 1\n\n[model]\n"
            f"d_model = {int(hidden_size)}\nlayers = 1\nheads = {int(num_heads)}\n"
            f"head_dim = {int(head_dim)}\nfeatures = {int(features)}\n"
            f"feature_map = {_toml_value(feature_map)}\nmlp_mult = 0\nchunk = {int(chunk)}\n"
            f"token_shift = false\nshort_conv = 0\nqk_scale_init = {float(qk_scale_init)!r}\n"
            f"eps_den = {float(eps_den)!r}\n\n[model.mixer]\n{mixer_toml}\n"
        )
        rust = _vort._init(text)
        config = json.loads(rust.config_json)
        self.config = config["model"]
        self.mix = _Mixer(self.config, self.config["mixer"], rust._buffers()[0])
        prefix = "blocks.0.mix."
        params = {k[len(prefix) :]: v for k, v in rust._parameters().items() if k.startswith(prefix)}
        mine = dict(self.mix.named_parameters())
        if set(params) != set(mine):
            raise RuntimeError(f"the Rust block's parameters {sorted(params)} are not {sorted(mine)}")
        with torch.no_grad():
            for name, p in mine.items():
                p.copy_(torch.from_numpy(np.asarray(params[name])))
        self.hidden_size = int(hidden_size)

    @property
    def horizon(self) -> Optional[int]:
        """The certified horizon of the node tables (None: no table, no limit)."""
        return self.mix.horizon

    def forward(
        self,
        hidden_states: Tensor,
        past_state: Optional[Union[RetentionState, KvState]] = None,
        entropy: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Union[RetentionState, KvState]]:
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != self.hidden_size:
            raise ValueError(
                f"hidden_states {tuple(hidden_states.shape)} must be [B, T, {self.hidden_size}]"
            )
        if entropy is not None and tuple(entropy.shape) != tuple(hidden_states.shape[:2]):
            raise ValueError(
                f"entropy {tuple(entropy.shape)} must be [B, T] = {tuple(hidden_states.shape[:2])}"
            )
        return self.mix.run(hidden_states, entropy, past_state)


class _Mlp(nn.Module):
    def __init__(self, dm: int, hid: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.zeros(dm, hid))
        self.w2 = nn.Parameter(torch.zeros(hid, dm))


class _Layer(nn.Module):
    def __init__(self, mc: Dict[str, Any], buf: Dict[str, Any]):
        super().__init__()
        dm = mc["d_model"]
        self.mix = _Mixer(mc, mc["mixer"], buf)
        self.norm1 = nn.Parameter(torch.ones(dm))
        self.conv = nn.Parameter(torch.zeros(mc["short_conv"], dm)) if mc["short_conv"] > 0 else None
        if mc["mlp_mult"] > 0:
            self.norm2 = nn.Parameter(torch.ones(dm))
            self.mlp: Optional[_Mlp] = _Mlp(dm, mc["mlp_mult"] * dm)
        else:
            self.mlp = None


class VortLM(nn.Module):
    """The project's sequence model (``vort::model::Model``) in torch: token embedding plus the
    one-token-shift embedding, L pre-norm blocks (short convolution, mixer, MLP), RMSNorm and
    the head; for VORT's entropy router, the bigram table's entropy (stop-gradient).

    ``state_dict()`` keys are the Rust parameter names (``blocks.0.mix.wq``, ...). The random
    features and node tables are buffers from the Rust core. Every mixer kind of the Rust
    model is covered (vort with shared nodes or banks and every routing, power-law,
    exponential, retnet, mixture, softmax full or windowed), in one call or streamed in pieces
    with an ``LMState`` (``forward(tokens, state, use_cache=True)``).
    """

    def __init__(self, config: Dict[str, Any], buffers: List[Dict[str, Any]], vocab: int):
        super().__init__()
        mc = config["model"]
        self.config = config
        dm = mc["d_model"]
        self.vocab, self.d_model = vocab, dm
        self.emb = nn.Parameter(torch.zeros(vocab, dm))
        self.prev_emb = nn.Parameter(torch.zeros(vocab, dm)) if mc["token_shift"] else None
        mixer = mc["mixer"]
        routing = mixer.get("routing", "full") if mixer["kind"] == "vort" else None
        uses_entropy = routing in ("full", "entropy-only")
        self.bigram = nn.Parameter(torch.zeros(vocab, vocab)) if uses_entropy else None
        if len(buffers) != mc["layers"]:
            raise ValueError(f"{len(buffers)} block buffers for {mc['layers']} layers")
        self.blocks = nn.ModuleList(_Layer(mc, buf) for buf in buffers)
        self.norm_f = nn.Parameter(torch.ones(dm))
        self.head = nn.Parameter(torch.zeros(dm, vocab))

    @classmethod
    def from_pretrained(cls, path: Union[str, "os.PathLike[str]"]) -> "VortLM":
        """Loads a run directory or a ``vort export`` file (through ``vort.load``, which checks
        the config and every parameter), float32, on the CPU (``.to(device)`` moves it)."""
        return cls._from_rust(_vort.load(os.fspath(path)), str(path))

    @classmethod
    def from_config(cls, config: Union[str, "os.PathLike[str]"]) -> "VortLM":
        """A freshly seeded model of a run config (a TOML file or its text): the parameters
        ``vort train`` starts from, to train in torch and save with ``save_pretrained``."""
        text = os.fspath(config)
        is_path = isinstance(config, os.PathLike) or ("\n" not in text and "=" not in text)
        if is_path:
            # a path (a PathLike, or one line that is no TOML assignment): read it, or say it
            # is missing, instead of parsing the path as TOML
            if not os.path.isfile(text):
                raise ValueError(f"config {text}: no such file (give a run config's path or its TOML text)")
            with open(text, encoding="utf-8") as fh:
                text = fh.read()
        return cls._from_rust(_vort._init(text), "<config>")

    def save_pretrained(self, path: Union[str, "os.PathLike[str]"], step: Optional[int] = None) -> None:
        """Writes the parameters as a ``vort export`` file (float32, with the run config and a
        checksum; atomic), which ``vort eval --run`` and ``vort generate --run`` take."""
        params = {k: v.detach().to("cpu", torch.float32).contiguous().numpy() for k, v in self.named_parameters()}
        _vort._save_export(os.fspath(path), self.config_toml, params, self.steps if step is None else int(step))

    @classmethod
    def _from_rust(cls, m: Any, path: str) -> "VortLM":
        model = cls(json.loads(m.config_json), m._buffers(), m.vocab)
        model.config_toml = m.config_toml
        model.steps = m.steps
        params = {k: torch.from_numpy(np.asarray(v)) for k, v in m._parameters().items()}
        mine = dict(model.named_parameters())
        missing = sorted(set(mine) - set(params))
        extra = sorted(set(params) - set(mine))
        if missing or extra:
            raise ValueError(
                f"{path}: parameters do not match the torch model (missing {missing}, "
                f"unexpected {extra})"
            )
        with torch.no_grad():
            for name, p in mine.items():
                if tuple(p.shape) != tuple(params[name].shape):
                    raise ValueError(
                        f"{path}: parameter `{name}` has shape {tuple(params[name].shape)}, "
                        f"the torch model's is {tuple(p.shape)}"
                    )
                p.copy_(params[name])
        return model

    def forward(
        self, tokens: Tensor, state: Optional["LMState"] = None, use_cache: bool = False
    ) -> Union[Tensor, Tuple[Tensor, "LMState"]]:
        """tokens [B, T] (int) -> logits [B, T, V] in the parameters' dtype.

        With ``use_cache`` or a ``state`` (``LMState``), it streams: returns (logits, state),
        continuing from ``state`` (None: the start of the sequence). Feeding a sequence in
        pieces with the returned state gives the logits of one call (each layer's memory
        state, the short convolution's last inputs and the previous token are carried; the
        states are detached, as the Rust model's streams are)."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens {tuple(tokens.shape)} must be [B, T]")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab):
            raise ValueError(f"a token is outside the vocabulary of {self.vocab}")
        b, t = tokens.shape
        if state is not None and state.prev is not None and state.prev.shape[0] != b:
            raise ValueError(f"a state of batch {state.prev.shape[0]} for tokens of batch {b}")
        streaming = use_cache or state is not None
        x = self.emb[tokens]
        if self.prev_emb is not None:
            prev = self.prev_emb[tokens]
            first = (
                torch.zeros_like(prev[:, :1])
                if state is None or state.prev is None
                else self.prev_emb[state.prev][:, None]
            )
            x = x + torch.cat([first, prev[:, :-1]], dim=1)
        x = x * (1.0 / math.sqrt(2.0))
        entropy = None
        if self.bigram is not None:
            lp = torch.log_softmax(self.bigram[tokens].detach(), dim=-1)
            entropy = (-(lp.exp() * lp).sum(-1) / math.log(self.vocab)).detach()
        mix_states: List[Any] = []
        tails: List[Optional[Tensor]] = []
        for i, layer in enumerate(self.blocks):
            xn = _rms_norm(x, layer.norm1)
            if layer.conv is not None:
                k = layer.conv.shape[0]
                before = None if state is None else state.conv[i]
                if before is None:
                    before = xn.new_zeros(b, k - 1, xn.shape[-1])
                xn_all = torch.cat([before, xn], dim=1)
                tails.append(xn_all[:, xn_all.shape[1] - (k - 1) :].detach())
                xn = _short_conv(xn_all, layer.conv)[:, k - 1 :]
            else:
                tails.append(None)
            y, st = layer.mix.run(xn, entropy, None if state is None else state.mix[i])
            mix_states.append(st)
            x = x + y
            if layer.mlp is not None:
                hdn = _gelu(_rms_norm(x, layer.norm2) @ layer.mlp.w1)
                x = x + hdn @ layer.mlp.w2
        logits = _rms_norm(x, self.norm_f) @ self.head
        if not streaming:
            return logits
        last = tokens[:, -1].detach() if t > 0 else (None if state is None else state.prev)
        return logits, LMState(mix_states, tails, last)
