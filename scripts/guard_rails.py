#!/usr/bin/env python3
"""Guard rails against decay, run by .ci/run (issue #42): each count may not grow.

    python3 scripts/guard_rails.py

- functions over 80 lines in crates/*/src (scripts/long_fns.py): at most LONG_FNS, and none
  in the lab's reproduce/ and theory_report/;
- comment lines (`//`, `///`, `//!`) over 100 characters in the Rust sources: at most
  LONG_COMMENTS;
- `#[allow(clippy::too_many_arguments)]`: at most TOO_MANY_ARGUMENTS.

A change that lowers a count lowers its limit here in the same commit, so the limits only go
down (the end state is no long function outside the kernels). Exit status 1 names each rail
that failed and what is over it.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from long_fns import functions  # noqa: E402

LONG_FNS = 22
LONG_COMMENTS = 0
TOO_MANY_ARGUMENTS = 13
NO_LONG_FNS_UNDER = ["crates/vort-lab/src/reproduce", "crates/vort-lab/src/theory_report"]
LIMIT_LINES = 80
LIMIT_COLUMNS = 100


def rust_files(*roots):
    return [p for r in roots for p in sorted(Path(r).rglob("*.rs")) if "target" not in p.parts]


def main():
    root = Path(__file__).resolve().parent.parent
    failures = []
    src = [str(p) for p in sorted(root.glob("crates/*/src"))]
    long = [f for p in rust_files(*src) for f in functions(p) if f[0] > LIMIT_LINES]
    if len(long) > LONG_FNS:
        failures.append(
            f"{len(long)} functions over {LIMIT_LINES} lines (limit {LONG_FNS}); "
            "split one, or list them with scripts/long_fns.py crates/*/src"
        )
    for d in NO_LONG_FNS_UNDER:
        inside = [f for f in long if f[1].startswith(str(root / d))]
        for length, where, name in inside:
            failures.append(f"{name} ({where}) has {length} lines; none may exceed "
                            f"{LIMIT_LINES} under {d}")
    sources = rust_files(root / "crates", root / "bindings/python/src")
    wide, allows = [], 0
    for p in sources:
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if line.lstrip().startswith("//") and len(line) > LIMIT_COLUMNS:
                wide.append(f"{p.relative_to(root)}:{n}")
            allows += "clippy::too_many_arguments" in line
    if len(wide) > LONG_COMMENTS:
        failures.append(
            f"{len(wide)} comment lines over {LIMIT_COLUMNS} characters (limit "
            f"{LONG_COMMENTS}): {', '.join(wide[:10])}"
        )
    if allows > TOO_MANY_ARGUMENTS:
        failures.append(
            f"{allows} allows of clippy::too_many_arguments (limit {TOO_MANY_ARGUMENTS}): "
            "group arguments into a struct instead"
        )
    for f in failures:
        print(f"guard rail: {f}", file=sys.stderr)
    if failures:
        return 1
    print(f"guard rails hold: {len(long)} long functions (<= {LONG_FNS}), {len(wide)} wide "
          f"comment lines (<= {LONG_COMMENTS}), {allows} too_many_arguments allows "
          f"(<= {TOO_MANY_ARGUMENTS})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
