"""The Python entry points under a fuzz (issue #43, 4): fuzz_entry_points.py throws 300
mutated inputs at each public function in a subprocess (60-100 at the model's stateful
ones); every call returns or raises ValueError or RuntimeError (TypeError only for a value of
the wrong type), and the interpreter never crashes (exit 134 was the old answer to a huge
array)."""

import subprocess
import sys
from pathlib import Path

import pytest
from test_model import BOOKS_TINY


def test_every_entry_point_returns_or_raises_a_python_error(tmp_path):
    pytest.importorskip("torch")
    from vort.torch import VortLM

    path = tmp_path / "books.safetensors"
    VortLM.from_config(BOOKS_TINY).save_pretrained(path, step=0)
    script = Path(__file__).with_name("fuzz_entry_points.py")
    p = subprocess.run([sys.executable, str(script), str(path), "300"], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    lines = p.stdout.splitlines()
    assert len(lines) == 11 and all(" calls, " in ln for ln in lines), p.stdout
    # the fuzz reaches the code, not only the argument parsers: some calls of each return
    for ln in lines:
        assert "'returned'" in ln, ln
