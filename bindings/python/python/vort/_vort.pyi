"""Type stubs of the Rust extension vort._vort (see src/lib.rs for the implementations)."""

from os import PathLike
from typing import Any, Mapping, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

_Count = Union[int, float]  # an integer value such as 4096 or 1e5

def gl_weights(alpha: float, lags: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """GL weights w_j(alpha) at every lag of ``lags`` (float64, the shape of ``lags``)."""

class Soe:
    """A certified sum of exponentials of the GL kernel for one order."""

    @property
    def alpha(self) -> float: ...
    @property
    def horizon(self) -> int: ...
    @property
    def eps(self) -> float: ...
    @property
    def S(self) -> int: ...
    @property
    def c(self) -> npt.NDArray[np.float64]: ...
    @property
    def u(self) -> npt.NDArray[np.float64]: ...
    @property
    def max_rel_error(self) -> float: ...
    @property
    def argmax_lag(self) -> int: ...
    @property
    def step(self) -> float: ...
    def kernel(self, lags: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The SOE kernel sum_s c_s exp(-u_s j) at the lags given."""

def soe(alpha: float, horizon: _Count, eps: float) -> Soe:
    """The certified SOE of recipe R1 (as ``vort kernel soe``)."""

class SharedNodes:
    """One node set for every order in [delta, 1] (as ``vort kernel shared``)."""

    @property
    def delta(self) -> float: ...
    @property
    def horizon(self) -> int: ...
    @property
    def eps(self) -> float: ...
    @property
    def S(self) -> int: ...
    @property
    def u(self) -> npt.NDArray[np.float64]: ...
    @property
    def max_rel_error(self) -> float: ...
    def weights(self, alpha: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """c_s(alpha), float64 of shape alpha.shape + (S,); every alpha in [delta, 1]."""

def shared_nodes(delta: float, horizon: _Count, eps: float) -> SharedNodes:
    """The certified shared node set (as ``vort kernel shared``)."""

def retention(
    phi_q: npt.ArrayLike,
    phi_k: npt.ArrayLike,
    v: npt.ArrayLike,
    alpha: npt.ArrayLike,
    *,
    form: str = "chunked",
    mode: Optional[str] = None,
    memory: Optional[str] = None,
    delta: float = 0.1,
    eps: float = 1e-3,
    horizon: Optional[_Count] = None,
    eps_den: float = 1e-6,
    banks: Optional[int] = None,
    chunk: Optional[int] = None,
) -> npt.NDArray[Any]:
    """y [T, D] of ``vort retention`` on one head (float32 for chunked/fused, float64 else)."""

class State:
    """A streaming state of a Model (from Model.state(), advanced by Model.step)."""

    @property
    def bytes(self) -> int: ...
    @property
    def tokens(self) -> int: ...

class Model:
    """A trained model (a run directory or a ``vort export`` file)."""

    @property
    def vocab(self) -> int: ...
    @property
    def seq_len(self) -> int: ...
    @property
    def steps(self) -> int: ...
    @property
    def mixer(self) -> str: ...
    @property
    def horizon(self) -> Optional[int]: ...
    @property
    def config_json(self) -> str: ...
    @property
    def config_toml(self) -> str: ...
    def logits(self, tokens: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """Next-token logits [T, V] of one sequence (the training forward)."""
    def state(self) -> State:
        """An empty streaming state."""
    def step(self, token: int, state: State) -> Tuple[npt.NDArray[np.float32], State]:
        """Logits [V] after feeding ``token``, and the new state (``state`` is unchanged)."""
    def set_horizon(self, horizon: _Count) -> None:
        """Rebuilds the node tables for lags 1..=horizon."""
    def set_past_horizon(self, mode: str, tau: Optional[float] = None) -> None:
        """Past the tables' horizon: "refuse" (default), "soe-tail", or "tempered" (needs tau)."""
    def generate(self, prompt: bytes, n: int, temperature: float = 1.0, seed: Optional[int] = None) -> bytes:
        """n bytes sampled after ``prompt`` from a books model (as ``vort generate``)."""
    def _parameters(self) -> dict[str, npt.NDArray[np.float32]]: ...
    def _task_grads(
        self, tokens: npt.ArrayLike, labels: npt.ArrayLike
    ) -> Tuple[float, dict[str, npt.NDArray[np.float64]]]: ...
    def _buffers(self) -> list[dict[str, Any]]: ...

def load(path: Union[str, "PathLike[str]"]) -> Model:
    """A trained model from a run directory or a ``vort export`` file."""

def _node_table(mode: str, delta: float, horizon: _Count, eps: float, banks: int = 4) -> dict[str, Any]: ...
def _panic() -> None: ...
def _fused_chunk(
    q: npt.ArrayLike,
    k: npt.ArrayLike,
    vp: npt.ArrayLike,
    cw: npt.ArrayLike,
    u: npt.ArrayLike,
    chunk: int,
    dtype: str,
    grad_o: Optional[npt.ArrayLike] = None,
) -> Any: ...
def _init(config_toml: str) -> Model: ...
def _save_export(
    path: Union[str, "PathLike[str]"],
    config_toml: str,
    params: Mapping[str, npt.ArrayLike],
    step: int,
) -> None: ...
def _task_batch(
    config_toml: str, step: int, stream: str = "train", batch: Optional[int] = None
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32], npt.NDArray[np.bool_]]: ...
def _decayed_params(config_toml: str) -> list[str]: ...
def _check_memory(config_toml: str) -> None: ...
def _check_output(path: Union[str, "PathLike[str]"]) -> None: ...
def _write_atomic(path: Union[str, "PathLike[str]"], data: bytes) -> None: ...
