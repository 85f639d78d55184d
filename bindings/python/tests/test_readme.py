"""The Python examples run as written: docs/python.md's prints what the page shows (the lines
computed by the Rust core exactly; the two float errors within their bounds), the README's
runs, and the package README's checks hold."""

import re
import subprocess
import sys

from conftest import REPO


def test_readme_example_runs_as_written():
    section = (REPO / "docs" / "python.md").read_text()
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"```text\n(.*?)```", section, re.S).group(1).splitlines()
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert len(out) == len(shown) == 6
    assert out[:4] == shown[:4]
    assert float(out[4]) < 1e-6  # torch in two calls against vort.retention
    assert out[5].rsplit(" ", 1)[0] == shown[5].rsplit(" ", 1)[0]
    assert float(out[5].rsplit(" ", 1)[1]) < 1e-4  # torch port against the Rust model


def test_package_readme_examples_run_as_written():
    """Each example of the package's README (bindings/python/README.md) runs from the
    repository root, and every check it prints holds (its lines end in True)."""
    text = (REPO / "bindings" / "python" / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 3
    for code in blocks:
        p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
        assert p.returncode == 0, (code, p.stderr)
        lines = p.stdout.splitlines()
        assert lines, code
        checks = [line for line in lines if line.endswith(("True", "False"))]
        assert checks and all(line.endswith("True") for line in checks), (code, p.stdout)


def test_front_readme_python_example_runs():
    """The README's "Use from Python" example runs from the repository root."""
    section = (REPO / "README.md").read_text().split("## Use from Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    p = subprocess.run(
        [sys.executable, "-c", code + "\nprint(y.shape, state.pos)"], cwd=REPO, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "torch.Size([2, 100, 64]) 100"
