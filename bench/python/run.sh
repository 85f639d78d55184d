#!/usr/bin/env bash
# The three-way speed table of issue 24, in one run: forward + backward of the `vort bench
# layer` shared case (B=4, H=4, T=2048, F=D=64) by vort.torch's torch chunk form, by the Rust
# fused op through torch (vort::fused_chunk), and by `vort bench layer` itself, alternated
# ROUNDS times so that all three see the same machine. Usage (after scripts/test-python or
# any venv with vort[torch] installed):
#   PYTHON=path/to/venv/bin/python bench/python/run.sh ROUNDS OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-1}
out=${2:-results/bench/python}
py=${PYTHON:-python3}
vort=${VORT_BIN:-${CARGO_TARGET_DIR:-target}/release/vort}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  "$vort" bench layer --json > "$out/vort-$r.json"
  "$py" bench/python/layer.py > "$out/torch-$r.json"
  "$py" - "$out/vort-$r.json" "$out/torch-$r.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1])); p = json.load(open(sys.argv[2]))
shared = next(x for x in v["layer"] if x["memory"] == "shared")
print(f"vort bench layer (shared, {shared['nodes']} nodes): {shared['fwd_bwd_ms']:.0f} ms fwd+bwd, load {v['load_avg_before']}-{v['load_avg_after']}")
print(f"VortRetention torch: {p['torch_fwd_bwd_ms']:.0f} ms   Rust op via torch: {p['rust_fwd_bwd_ms']:.0f} ms  ({p['nodes']} nodes, load {p['load_avg_before']}-{p['load_avg_after']})")
PY
done
