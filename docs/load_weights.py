"""Load a vort checkpoint or exported weights file in Python and verify its checksum.

    pip install safetensors numpy
    python docs/load_weights.py model.safetensors        # from `vort export`
    python docs/load_weights.py runs/.../checkpoint.safetensors

The layout is documented in docs/checkpoint.md. Format v2's checksum is FNV-1a 64 over the
format tag, then step, adam_t and config (each as a u64 little-endian length followed by its
bytes; step and adam_t as u64 little-endian), then every tensor in name order: the name, each
dimension as u64 little-endian, and the f32 data little-endian.
"""

import sys

import numpy as np
from safetensors import safe_open

FNV_OFFSET, FNV_PRIME, MASK = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1


def fnv(h, data: bytes):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK
    return h


def load(path):
    """(metadata dict, {name: float32 array}); raises if the checksum does not match."""
    with safe_open(path, "np") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    assert meta["format"] == "vort-lab-checkpoint-v2", meta["format"]
    h = fnv(FNV_OFFSET, meta["format"].encode())
    for field in (
        int(meta["step"]).to_bytes(8, "little"),
        int(meta["adam_t"]).to_bytes(8, "little"),
        meta["config"].encode(),
    ):
        h = fnv(fnv(h, len(field).to_bytes(8, "little")), field)
    for name in sorted(tensors):  # byte order of the UTF-8 names, as Rust's BTreeMap
        t = tensors[name]
        h = fnv(h, name.encode())
        for d in t.shape:
            h = fnv(h, d.to_bytes(8, "little"))
        h = fnv(h, t.astype("<f4").tobytes())
    if f"{h:016x}" != meta["checksum"]:
        raise ValueError(f"{path}: checksum {h:016x}, metadata says {meta['checksum']}")
    return meta, tensors


if __name__ == "__main__":
    meta, tensors = load(sys.argv[1])
    print(f"step {meta['step']}, {len(tensors)} tensors, checksum ok")
    for name, t in sorted(tensors.items()):
        print(f"  {name} {list(t.shape)} mean {np.mean(t):+.4f}")
    print(meta["config"].split("[train]")[0].strip())
