#!/usr/bin/env python3
"""Re-scores every committed run that carries its weights and diffs the result against the
committed eval.json: a refactor must leave every number bit-identical (the issue's rule).

    python3 scripts/rescore.py [--vort target/release/vort] [ROOT ...]   (default ROOT: results)

A run is a directory with config.toml, eval.json and weights.safetensors (`vort export`).
`vort eval --run` writes eval.json into the run, so each run is scored in a temporary copy
and the committed files are never touched.
Floats are compared exactly (Python's json round-trips f64, and vort writes them with
serde_json's float_roundtrip). Exit status 1 when any run differs, with the differing keys.
Key names are not numbers: a committed file's older key `memory` is read as `mixer`, its
current name (vort reads both), and nothing else is renamed.
"""
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def diff(a, b, path=""):
    """Paths at which two JSON values differ."""
    if type(a) is not type(b):
        return [path or "."]
    if isinstance(a, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += diff(a.get(k), b.get(k), f"{path}.{k}") if k in a and k in b else [f"{path}.{k}"]
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}[len]"]
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [path or "."]


RENAMED = {"memory": "mixer"}  # older key -> current key (serde aliases in vort)


def current_keys(v):
    """The JSON value `v` with older key names replaced by their current ones."""
    if isinstance(v, dict):
        return {RENAMED.get(k, k): current_keys(x) for k, x in v.items()}
    if isinstance(v, list):
        return [current_keys(x) for x in v]
    return v


def main():
    args = sys.argv[1:]
    vort = "target/release/vort"
    if args[:1] == ["--vort"]:
        vort, args = args[1], args[2:]
    roots = [Path(r) for r in (args or ["results"])]
    runs = sorted(p.parent for r in roots for p in r.rglob("weights.safetensors")
                  if (p.parent / "eval.json").exists())
    bad = 0
    for run in runs:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "run"
            shutil.copytree(run, copy, ignore=shutil.ignore_patterns("checkpoint*", "*.lock"))
            got = subprocess.run([vort, "eval", "--run", str(copy), "--json"],
                                 capture_output=True, text=True)
        if got.returncode != 0:
            print(f"FAIL {run}: exit {got.returncode}: {got.stderr.strip()}")
            bad += 1
            continue
        committed = current_keys(json.loads((run / "eval.json").read_text()))
        d = diff(current_keys(json.loads(got.stdout)), committed)
        print(f"{'same' if not d else 'DIFF'} {run}" + (f": {d[:5]}" if d else ""))
        bad += bool(d)
    print(f"{len(runs) - bad} of {len(runs)} runs re-score bit-identically")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
