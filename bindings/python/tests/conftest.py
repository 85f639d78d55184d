"""Shared fixtures: the `vort` CLI binary, a safetensors reader/writer (numpy only), and tiny
runs trained by the CLI (a few steps, seconds each), made once per test session."""

import atexit
import json
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]

# The node tables this session certifies go to a directory of its own (read by the package at
# import and by every CLI the tests start), so the tests neither read nor fill the user's
# ~/.cache/vort/nodes: what a test times or interrupts is the same on every machine.
if "VORT_CACHE_DIR" not in os.environ:
    _nodes = tempfile.mkdtemp(prefix="vort-test-nodes-")
    atexit.register(shutil.rmtree, _nodes, True)
    os.environ["VORT_CACHE_DIR"] = _nodes


def vort_bin() -> Path:
    """The `vort` binary: $VORT_BIN, else target/release/vort of $CARGO_TARGET_DIR or the
    repository (`cargo build --release -p vort-cli` makes it)."""
    if os.environ.get("VORT_BIN"):
        return Path(os.environ["VORT_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "release" / "vort"


@pytest.fixture(scope="session")
def cli():
    exe = vort_bin()
    if not exe.is_file():
        pytest.fail(f"{exe} is missing: run `cargo build --release -p vort-cli` (or set VORT_BIN)")

    def run(*args, check=True, binary=False):
        p = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=not binary)
        if binary:
            p.stderr = p.stderr.decode(errors="replace")
        if check and p.returncode != 0:
            raise AssertionError(f"vort {' '.join(map(str, args))}: {p.stderr}")
        return p

    return run


def cli_error(p) -> str:
    """The CLI's one-line message: stderr's `error: ...` line without the prefix."""
    lines = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert len(lines) == 1, p.stderr
    return lines[0][len("error: ") :]


_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int64): "I64"}
_NP = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def write_safetensors(path: Path, tensors: dict) -> None:
    """The safetensors layout: u64 header length, JSON header, raw little-endian data."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        b = a.tobytes()
        header[name] = {"dtype": _DTYPES[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path: Path) -> dict:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a : 8 + n + b], dtype=_NP[e["dtype"]]).reshape(e["shape"])
    return out


# A tiny MQAR run: 2 layers, d_model 16, 8 training steps (seconds on 2 cores).
TINY_MQAR = """
seed = {seed}

[task]
kind = "mqar"
seq_len = 32
vocab_size = 48
num_kv_pairs = 4
power_a = 0.01
random_non_queries = true
train_examples = 256
test_examples = 32

[model]
d_model = 16
layers = 2
heads = 2
head_dim = 8
features = 8
feature_map = "{feature_map}"
mlp_mult = {mlp_mult}
chunk = 8
token_shift = {token_shift}
short_conv = {short_conv}

[model.mixer]
{mixer}

[train]
steps = 8
batch_size = 8
lr = 1e-2
warmup_steps = 0
checkpoint_every = 8
log_every = 4
eval_every = 0
"""

# every mixer kind of the Rust model, and the model's options around it
MIXERS = {
    "vort-shared-full": dict(mixer='kind = "vort"\nrouting = "full"', token_shift="true", short_conv=0, mlp_mult=2),
    "vort-banks-entity": dict(
        mixer=(
            'kind = "vort"\nrouting = "entity-only"\n'
            'nodes = { mode = "banks", banks = 3, delta = 0.2, horizon = 0, eps = 1e-3 }'
        ),
        token_shift="false",
        short_conv=4,
        mlp_mult=0,
    ),
    "vort-fixed": dict(
        mixer='kind = "vort"\nrouting = { fixed = { alpha = 0.6 } }', token_shift="true", short_conv=3, mlp_mult=1
    ),
    "vort-learned": dict(
        mixer='kind = "vort"\nrouting = "learned"\nrouter_bias_init = 0.5',
        token_shift="false",
        short_conv=4,
        mlp_mult=0,
    ),
    "vort-entropy-elu": dict(
        mixer='kind = "vort"\nrouting = "entropy-only"', token_shift="true", short_conv=0, mlp_mult=1, feature_map="elu"
    ),
    "power-law-taylor": dict(
        mixer='kind = "power-law"\nalpha = 0.7', token_shift="false", short_conv=2, mlp_mult=1, feature_map="taylor"
    ),
    "exponential": dict(mixer='kind = "exponential"', token_shift="true", short_conv=4, mlp_mult=0),
    "retnet": dict(mixer='kind = "retnet"', token_shift="true", short_conv=0, mlp_mult=2),
    "mixture": dict(mixer='kind = "mixture"\nm = 3\nmin_rate = 1e-2', token_shift="false", short_conv=4, mlp_mult=1),
    "softmax": dict(mixer='kind = "softmax"', token_shift="true", short_conv=4, mlp_mult=1),
    "softmax-window": dict(mixer='kind = "softmax"\nwindow = 5', token_shift="true", short_conv=0, mlp_mult=1),
}


@pytest.fixture(scope="session")
def runs(cli, tmp_path_factory):
    """name -> run directory, trained on demand (once per session)."""
    root = tmp_path_factory.mktemp("runs")
    made = {}

    def get(name: str, seed: int = 0) -> Path:
        key = (name, seed)
        if key not in made:
            spec = {"feature_map": "favor", **MIXERS[name]}
            cfg = root / f"{name}-{seed}.toml"
            cfg.write_text(TINY_MQAR.format(seed=seed, **spec))
            out = root / f"{name}-{seed}"
            cli("train", "--config", cfg, "--out", out)
            made[key] = out
        return made[key]

    yield get
    shutil.rmtree(root, ignore_errors=True)
