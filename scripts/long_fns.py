#!/usr/bin/env python3
"""Lists Rust functions longer than a limit (default 80 lines), longest first.

    python3 scripts/long_fns.py [--limit 80] [PATH ...]   (default PATH: crates)

A function runs from its `fn` line to the line of its matching closing brace; braces inside
strings, chars and comments are skipped. Tests (files under tests/ or after #[cfg(test)]) count too.
"""
import re
import sys
from pathlib import Path

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+|async\s+|unsafe\s+|extern\s+\"C\"\s+)*fn\s+(\w+)")


def strip(line, state):
    """The line without strings, chars and comments; state carries a block comment."""
    out, i = [], 0
    while i < len(line):
        if state["block"]:
            j = line.find("*/", i)
            if j < 0:
                return "".join(out)
            state["block"], i = False, j + 2
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"], i = True, i + 2
            continue
        if c == '"':
            j = i + 1
            while j < len(line) and line[j] != '"':
                j += 2 if line[j] == "\\" else 1
            i = j + 1
            continue
        if c == "'" and re.match(r"'(\\.|[^\\'])'", line[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", line[i:]).group(0))
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    lines = path.read_text().splitlines()
    state, stack, depth, found = {"block": False}, [], 0, []
    for n, raw in enumerate(lines, 1):
        m = FN.match(raw)
        code = strip(raw, state)
        if m and "{" in code or (m and not code.rstrip().endswith(";")):
            stack.append((m.group(4), n, depth))
        for c in code:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if stack and depth == stack[-1][2]:
                    name, start, _ = stack.pop()
                    found.append((n - start + 1, f"{path}:{start}", name))
        if m and code.rstrip().endswith(";") and stack and stack[-1][1] == n:
            stack.pop()
    return found


def main():
    args, limit = sys.argv[1:], 80
    if args[:1] == ["--limit"]:
        limit, args = int(args[1]), args[2:]
    roots = [Path(a) for a in (args or ["crates"])]
    files = [p for r in roots for p in ([r] if r.is_file() else sorted(r.rglob("*.rs")))]
    long = sorted((f for p in files for f in functions(p) if f[0] > limit), reverse=True)
    for length, where, name in long:
        print(f"{length:5} {name:32} {where}")
    print(f"{len(long)} functions over {limit} lines")


if __name__ == "__main__":
    main()
