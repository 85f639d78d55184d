"""Typed model settings: ``VortConfig`` (the ``[model]`` table of a run config), its
``MixerConfig`` (``[model.mixer]``) and ``NodeConfig`` (``[model.mixer.nodes]``).

They mirror the Rust ``vort::model::ModelConfig``, ``vort::Mixer`` and ``vort::NodeSpec``, with
the same names and the Rust defaults, and read and write the same dicts (``from_dict``,
``to_dict``), so a config read from a run, an export or ``VortLM`` is one typed object. The Rust
core still checks every value when a model is built; these classes check only the shape (the
kind, the names of the fields, their types)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, Mapping, Tuple, Union

MIXER_KINDS: Tuple[str, ...] = ("vort", "power-law", "exponential", "retnet", "mixture", "softmax")

# the settings each mixer kind reads (the Rust `Mixer` variant's fields)
_MIXER_FIELDS: Dict[str, Tuple[str, ...]] = {
    "vort": ("nodes", "routing", "router_bias_init"),
    "power-law": ("alpha", "horizon", "eps"),
    "exponential": (),
    "retnet": (),
    "mixture": ("m", "min_rate"),
    "softmax": ("window",),
}

Routing = Union[str, Dict[str, Dict[str, float]]]


def _checked(cls: Any, d: Mapping[str, Any], what: str, allowed: Tuple[str, ...]) -> Dict[str, Any]:
    """The fields of `d` for `cls`, refusing names `allowed` does not hold and values of
    another type than the field's default."""
    if not isinstance(d, Mapping):
        raise ValueError(f"{what} must be a table (a dict), not {type(d).__name__}")
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise ValueError(f"{what}: unknown field(s) {unknown} (expected some of {sorted(allowed)})")
    defaults = {f.name: f.default for f in fields(cls)}
    out: Dict[str, Any] = {}
    for k, v in d.items():
        want = defaults.get(k)
        if isinstance(want, bool) and not isinstance(v, bool):
            raise ValueError(f"{what}.{k} = {v!r} must be true or false")
        if isinstance(want, (int, float)) and not isinstance(want, bool):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"{what}.{k} = {v!r} must be a number")
            if isinstance(want, int) and not isinstance(want, bool) and not float(v).is_integer():
                raise ValueError(f"{what}.{k} = {v!r} must be a whole number")
            v = type(want)(v)
        if isinstance(want, str) and not isinstance(v, str):
            raise ValueError(f"{what}.{k} = {v!r} must be a string")
        out[k] = v
    return out


@dataclass(frozen=True)
class NodeConfig:
    """How VORT stores orders (``vort::NodeSpec``): ``mode`` "shared" (one node set for every
    order in [delta, 1]) or "banks" (``banks`` fixed orders), certified to ``eps`` on lags
    1..=``horizon`` (0: the model's length)."""

    mode: str = "shared"
    banks: int = 4
    delta: float = 0.1
    horizon: int = 0
    eps: float = 1e-3

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "NodeConfig":
        return cls(**_checked(cls, d, "nodes", tuple(f.name for f in fields(cls))))

    def to_dict(self) -> Dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class MixerConfig:
    """The mixer of every block (``vort::Mixer``). ``kind`` picks it; each kind reads its own
    settings and ignores the rest:

    - "vort": ``nodes``, ``routing`` ("full", "entity-only", "entropy-only", "learned", or
      ``{"fixed": {"alpha": a}}``, ``{"oracle": {"entity": a, "other": b}}``) and
      ``router_bias_init``;
    - "power-law": ``alpha``, ``horizon``, ``eps``;
    - "mixture": ``m``, ``min_rate``;
    - "softmax": ``window`` (0: full attention);
    - "exponential", "retnet": none.
    """

    kind: str = "vort"
    nodes: NodeConfig = field(default_factory=NodeConfig)
    routing: Routing = "full"
    router_bias_init: float = 0.0
    alpha: float = 0.8
    horizon: int = 0
    eps: float = 1e-3
    m: int = 5
    min_rate: float = 1e-3
    window: int = 0

    def __post_init__(self) -> None:
        if self.kind not in _MIXER_FIELDS:
            raise ValueError(f"mixer kind `{self.kind}` is not one of {'|'.join(MIXER_KINDS)}")

    @classmethod
    def from_dict(cls, d: Union[str, Mapping[str, Any]]) -> "MixerConfig":
        """From a kind or a ``[model.mixer]`` table (a dict); the fields of another kind are
        refused, so a misspelt setting is not silently ignored."""
        if isinstance(d, str):
            return cls(kind=d)
        if not isinstance(d, Mapping) or not isinstance(d.get("kind"), str):
            raise ValueError(f"a mixer table needs a `kind` ({'|'.join(MIXER_KINDS)}), got {d!r}")
        kind = d["kind"]
        if kind not in _MIXER_FIELDS:
            raise ValueError(f"mixer kind `{kind}` is not one of {'|'.join(MIXER_KINDS)}")
        rest = {k: v for k, v in d.items() if k not in ("kind", "nodes", "routing")}
        values = _checked(cls, rest, f"mixer `{kind}`", _MIXER_FIELDS[kind])
        unknown = sorted(k for k in ("nodes", "routing") if k in d and k not in _MIXER_FIELDS[kind])
        if unknown:
            raise ValueError(
                f"mixer `{kind}`: unknown field(s) {unknown} (expected some of {list(_MIXER_FIELDS[kind])})"
            )
        if "nodes" in d:
            values["nodes"] = d["nodes"] if isinstance(d["nodes"], NodeConfig) else NodeConfig.from_dict(d["nodes"])
        if "routing" in d:
            if not isinstance(d["routing"], (str, dict)):
                raise ValueError(f"routing = {d['routing']!r} must be a name or a table")
            values["routing"] = d["routing"]
        return cls(kind=kind, **values)

    def to_dict(self) -> Dict[str, Any]:
        """The ``[model.mixer]`` table: the kind and its own settings only."""
        out: Dict[str, Any] = {"kind": self.kind}
        for name in _MIXER_FIELDS[self.kind]:
            v = getattr(self, name)
            out[name] = v.to_dict() if isinstance(v, NodeConfig) else v
        return out


@dataclass(frozen=True)
class VortConfig:
    """The sequence model's settings (``vort::model::ModelConfig``, a run config's ``[model]``):
    width, depth, heads, random features, the MLP, the chunk of the chunked form, the token
    shift, the short convolution, the q/k scale and the normaliser's epsilon, and the
    ``mixer``. Defaults are the Rust defaults."""

    d_model: int = 64
    layers: int = 2
    heads: int = 4
    head_dim: int = 16
    features: int = 32
    feature_map: str = "favor"
    mlp_mult: int = 2
    chunk: int = 64
    token_shift: bool = True
    short_conv: int = 0
    qk_scale_init: float = 2.0
    eps_den: float = 1e-6
    mixer: MixerConfig = field(default_factory=MixerConfig)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "VortConfig":
        """From a ``[model]`` table (a dict, as ``json.loads(model.config_json)["model"]``)."""
        names = tuple(f.name for f in fields(cls))
        rest = {k: v for k, v in d.items() if k != "mixer"} if isinstance(d, Mapping) else d
        values = _checked(cls, rest, "model", names)
        if "mixer" in d:
            m = d["mixer"]
            values["mixer"] = m if isinstance(m, MixerConfig) else MixerConfig.from_dict(m)
        return cls(**values)

    def to_dict(self) -> Dict[str, Any]:
        """The ``[model]`` table, with the mixer's."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "mixer"}
        out["mixer"] = self.mixer.to_dict()
        return out
