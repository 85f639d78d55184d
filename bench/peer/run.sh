#!/usr/bin/env bash
# The PyTorch peer interleaved with `vort bench layer` (issue 12): ROUNDS rounds of (vort,
# peer), then the per-round and median ratios of forward+backward time, shared mode, same
# shape. Run on a quiet machine; both record the 1-minute load average.
#
#   bench/peer/run.sh [ROUNDS] [OUT_DIR]
#
# Needs the release binary (cargo build --release -p vort-cli) and a Python with the pinned
# requirements (python3 -m venv .venv-peer && .venv-peer/bin/pip install -r
# bench/peer/requirements.txt; then PYTHON=.venv-peer/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
OUT=${2:-$(mktemp -d)}
VORT=${VORT:-target/release/vort}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
RATES=$("$VORT" kernel shared --delta 0.1 --horizon 2048 --eps 1e-3 --json |
  "$PY" -c 'import json,sys; print(json.dumps([n["u"] for n in json.load(sys.stdin)["nodes"]]))')
for r in $(seq "$ROUNDS"); do
  echo "round $r/$ROUNDS: vort bench layer" >&2
  "$VORT" bench layer --json >"$OUT/vort-$r.json"
  echo "round $r/$ROUNDS: torch peer (eager, torch.compile)" >&2
  "$PY" bench/peer/peer.py --rates "$RATES" >"$OUT/peer-$r.json"
done
"$PY" - "$OUT" "$ROUNDS" <<'PYEOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = []
for r in range(1, rounds + 1):
    v = json.load(open(f"{out}/vort-{r}.json"))
    p = json.load(open(f"{out}/peer-{r}.json"))
    shared = next(x for x in v["layer"] if x["memory"] == "shared")
    rows.append((shared["fwd_bwd_ms"], p["eager_fwd_bwd_ms"], p["compile_fwd_bwd_ms"],
                 v["sgemm"]["gflops"], v.get("load_avg_before"), p["load_avg_before"]))
print(f"torch {p['torch']}, {p['threads']} threads; shape {p['shape']}")
print("round  vort ms  eager ms  compile ms  eager/vort  compile/vort  sgemm GF/s  load (vort, peer)")
for i, (vm, em, cm, sg, lv, lp) in enumerate(rows, 1):
    c = f"{cm:10.1f}" if cm else "         -"
    cr = f"{cm / vm:12.2f}" if cm else "           -"
    print(f"{i:5d} {vm:8.1f} {em:9.1f} {c}  {em / vm:10.2f}  {cr} {sg:11.0f}  {lv}, {lp}")
med = lambda xs: statistics.median(xs)
print(f"median ratio: eager/vort {med([r[1] / r[0] for r in rows]):.2f}", end="")
if all(r[2] for r in rows):
    print(f", compile/vort {med([r[2] / r[0] for r in rows]):.2f}")
else:
    print()
PYEOF
echo "raw JSON in $OUT" >&2
