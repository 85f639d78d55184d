"""``VortLM``: the project's sequence model in torch, loaded from and saved to the Rust core's
formats, and its streaming state ``LMState``."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union, cast

import numpy as np
import torch
from torch import Tensor, nn

from .. import _vort
from .config import VortConfig
from .layers import _gelu, _Mixer, _rms_norm, _short_conv


@dataclass
class LMState:
    """``VortLM``'s streaming state: each layer's memory state (``RetentionState`` or
    ``KvState``), each layer's last k - 1 inputs of the short convolution [B, k-1, d_model]
    (None without one), and the previous token [B] (None at the start)."""

    mix: List[Any]
    conv: List[Optional[Tensor]]
    prev: Optional[Tensor]


class _Mlp(nn.Module):
    def __init__(self, dm: int, hid: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.zeros(dm, hid))
        self.w2 = nn.Parameter(torch.zeros(hid, dm))


class _Layer(nn.Module):
    conv: Optional[nn.Parameter]
    mlp: Optional[_Mlp]

    def __init__(self, mc: VortConfig, buf: Dict[str, Any]):
        super().__init__()
        dm = mc.d_model
        self.mix = _Mixer(mc, buf)
        self.norm1 = nn.Parameter(torch.ones(dm))
        self.conv = nn.Parameter(torch.zeros(mc.short_conv, dm)) if mc.short_conv > 0 else None
        if mc.mlp_mult > 0:
            self.norm2 = nn.Parameter(torch.ones(dm))
            self.mlp = _Mlp(dm, mc.mlp_mult * dm)
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

    config_toml: str  # the run config (TOML), as the Rust core validated it
    steps: int  # the training steps of the parameters

    def __init__(self, config: Dict[str, Any], buffers: List[Dict[str, Any]], vocab: int):
        super().__init__()
        self.config = config  # the whole run config (task, model, train), as parsed from JSON
        self.model_config = mc = VortConfig.from_dict(config["model"])
        dm = mc.d_model
        self.vocab, self.d_model = vocab, dm
        self.emb = nn.Parameter(torch.zeros(vocab, dm))
        self.prev_emb = nn.Parameter(torch.zeros(vocab, dm)) if mc.token_shift else None
        routing = mc.mixer.routing if mc.mixer.kind == "vort" else None
        uses_entropy = routing in ("full", "entropy-only")
        self.bigram = nn.Parameter(torch.zeros(vocab, vocab)) if uses_entropy else None
        if len(buffers) != mc.layers:
            raise ValueError(f"{len(buffers)} block buffers for {mc.layers} layers")
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
        if not os.fspath(path):
            raise ValueError("save_pretrained: the path is empty")
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
            raise ValueError(f"{path}: parameters do not match the torch model (missing {missing}, unexpected {extra})")
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
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise ValueError(f"tokens are {tokens.dtype}: token ids are an integer tensor (.long())")
        if tokens.shape[1] == 0:
            raise ValueError("tokens hold no position (T = 0)")
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
        for i, layer in enumerate(cast(List[_Layer], list(self.blocks))):
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
