"""The layer: the mixers of the Rust block (``_Mixer``: features, router, retention or
softmax) and ``VortAttention``, the public layer over hidden states."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import _vort
from .config import MixerConfig, VortConfig
from .nodes import NodeWeights
from .ops import (
    RetentionState,
    _beyond_horizon,
    _floats,
    _normalise,
    _with_ones,
    retention_core,
)


@dataclass
class KvState:
    """A softmax layer's state: the keys and values [B, H, S, head_dim] the next tokens
    attend to (all of them, or the last window - 1 for a sliding window)."""

    k: Tensor
    v: Tensor


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
    # buffers: the FAVOR+ projection, or the Taylor map's pair indices and scales
    omega_t: Tensor
    idx: Tensor
    scale: Tensor

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

    rates: Tensor  # buffer: the fixed rates of the retnet and mixture baselines

    def __init__(self, mc: VortConfig, buf: Dict[str, Any]):
        super().__init__()
        mixer = mc.mixer
        dm, h, dh = mc.d_model, mc.heads, mc.head_dim
        self.h, self.dh, self.chunk, self.eps_den = h, dh, mc.chunk, mc.eps_den
        self.kind = mixer.kind
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
            routing = mixer.routing
            if isinstance(routing, dict) and "oracle" in routing:
                raise ValueError(
                    "oracle routing reads the task's memorable marks at every token; the torch "
                    "twin does not take them (use the Rust model's forward_marked)"
                )
            if isinstance(routing, dict):
                self.fixed_alpha = float(routing["fixed"]["alpha"])
            else:
                self.router = _Router(dm, h, float(mixer.nodes.delta), routing)
        elif self.kind == "power-law":
            self.nodes = NodeWeights(buf["tables"][0])
            self.fixed_alpha = float(mixer.alpha)
        elif self.kind == "exponential":
            self.decay_rho = nn.Parameter(torch.zeros(h, 1))
        elif self.kind in ("retnet", "mixture"):
            self.register_buffer("rates", torch.tensor(buf["fixed_rates"], dtype=torch.float64))
            if self.kind == "mixture":
                self.mix_logits = nn.Parameter(torch.zeros(h, int(mixer.m)))
        elif self.kind == "softmax":
            self.window = int(mixer.window)
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
                    assert self.fixed_alpha is not None  # a table without a router: one order
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

    mixer: a kind (vort|power-law|exponential|retnet|mixture|softmax), a ``MixerConfig``, or
    the ``[model.mixer]`` table as a dict, e.g. ``{"kind": "vort", "routing": "entity-only",
    "nodes": {"mode": "shared", "banks": 4, "delta": 0.1, "horizon": 0, "eps": 1e-3}}``; a
    plain "vort" (or ``{"kind": "vort"}``) routes by the entity probe only (no entropy signal
    needed). entropy [B, T] in [0, 1] (the routings that read it; None: 0). ``config`` is the
    layer's ``VortConfig`` (one block, no MLP, no token shift, no convolution).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        head_dim: Optional[int] = None,
        *,
        mixer: Union[str, MixerConfig, Dict[str, Any]] = "vort",
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
                raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_heads {num_heads}: give head_dim")
            head_dim = hidden_size // num_heads
        if isinstance(mixer, MixerConfig):
            chosen = mixer
        elif mixer == "vort" or (isinstance(mixer, dict) and mixer == {"kind": "vort"}):
            chosen = MixerConfig(kind="vort", routing="entity-only")
        else:
            chosen = MixerConfig.from_dict(mixer)
        mixer_toml = "\n".join(f"{k} = {_toml_value(v)}" for k, v in chosen.to_dict().items())
        # a one-block model of the Rust core; only its block is kept (the task section sets
        # the length the node tables are certified to, nothing else)
        text = (
            f'seed = {int(seed)}\n\n[task]\nkind = "mqar"\nseq_len = {int(max_len)}\n'
            "vocab_size = 8\nnum_kv_pairs = 1\n\n[model]\n"
            f"d_model = {int(hidden_size)}\nlayers = 1\nheads = {int(num_heads)}\n"
            f"head_dim = {int(head_dim)}\nfeatures = {int(features)}\n"
            f"feature_map = {_toml_value(feature_map)}\nmlp_mult = 0\nchunk = {int(chunk)}\n"
            f"token_shift = false\nshort_conv = 0\nqk_scale_init = {float(qk_scale_init)!r}\n"
            f"eps_den = {float(eps_den)!r}\n\n[model.mixer]\n{mixer_toml}\n"
        )
        rust = _vort._init(text)
        self.config = VortConfig.from_dict(json.loads(rust.config_json)["model"])
        self.mix = _Mixer(self.config, rust._buffers()[0])
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
            raise ValueError(f"hidden_states {tuple(hidden_states.shape)} must be [B, T, {self.hidden_size}]")
        _floats(hidden_states=hidden_states, entropy=entropy)
        if hidden_states.shape[1] == 0:
            raise ValueError("hidden_states hold no position (T = 0)")
        if entropy is not None and tuple(entropy.shape) != tuple(hidden_states.shape[:2]):
            raise ValueError(f"entropy {tuple(entropy.shape)} must be [B, T] = {tuple(hidden_states.shape[:2])}")
        return self.mix.run(hidden_states, entropy, past_state)
