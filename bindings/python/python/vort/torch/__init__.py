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

from .config import MixerConfig, NodeConfig, VortConfig
from .layers import KvState, VortAttention
from .model import LMState, VortLM
from .nodes import NodeWeights
from .ops import RetentionState, VortRetention, fused_chunk, retention_core

__all__ = [
    "KvState",
    "LMState",
    "MixerConfig",
    "NodeConfig",
    "NodeWeights",
    "RetentionState",
    "VortAttention",
    "VortConfig",
    "VortLM",
    "VortRetention",
    "fused_chunk",
    "retention_core",
]
