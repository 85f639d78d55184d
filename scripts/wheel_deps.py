#!/usr/bin/env python3
"""The Python wheel's dependency tree stays slim (issue #42): the default build of
bindings/python links vort, vort-math, vort-lab's trainer and loaders, candle, pyo3 and numpy,
and none of the report stack: no plotters, tar, regex, compressors, clap or vort-cli.

candle-core itself depends on tokenizers, which pulls regex; that edge is candle's, so the tree
is read with tokenizers pruned. Run by .ci/run; exit status 1 names each crate that came back
and the path that pulls it (`cargo tree -i`).
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "bindings" / "python" / "Cargo.toml"
BANNED = [
    "plotters", "tar", "regex", "bzip2", "liblzma", "zstd", "ppmd-rust", "lzma-rs", "flate2",
    "clap", "vort-cli",
]


def tree(*args):
    cmd = ["cargo", "tree", "--manifest-path", str(MANIFEST), "-e", "normal,build", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    names = {
        line.split(" ")[0]
        for line in tree("--prefix", "none", "--prune", "tokenizers").splitlines()
        if line.strip()
    }
    found = [b for b in BANNED if b in names]
    if not found:
        print(f"wheel_deps: {len(names)} crates in the wheel's tree, none of {', '.join(BANNED)}")
        return 0
    for b in found:
        print(f"wheel_deps: `{b}` is in the Python wheel's dependency tree:", file=sys.stderr)
        print(tree("-i", b, "--prune", "tokenizers"), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
