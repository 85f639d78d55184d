"""Reliability III (issue #43), A and C: every size is checked before anything is copied or
allocated, so work too large for this process is a ValueError (it aborted the interpreter,
exit 134), and Ctrl-C stops a long `generate` with KeyboardInterrupt (it kept running).

The huge inputs are broadcast views: free to make, terabytes to copy."""

import os
import subprocess
import sys

import numpy as np
import pytest
import vort
from test_model import BOOKS_TINY

HUGE = 10**12  # rows: 8 TB as float64


def huge(*cols: int, value: float = 1.0) -> np.ndarray:
    return np.broadcast_to(np.full(cols, value), (HUGE, *cols))


def test_kernel_inputs_are_sized_before_they_are_copied():
    with pytest.raises(ValueError, match="gl_weights needs about"):
        vort.gl_weights(0.5, huge())
    with pytest.raises(ValueError, match="Soe.kernel needs about"):
        vort.soe(0.5, 1000, 1e-3).kernel(huge())
    with pytest.raises(ValueError, match="SharedNodes.weights needs about"):
        vort.shared_nodes(0.1, 1000, 1e-2).weights(huge(value=0.5))
    q = huge(8)
    with pytest.raises(ValueError, match="retention needs about .* GB, more than the"):
        vort.retention(q, q, q[:, :4], q[:, 0])
    # the ordinary sizes still run
    assert vort.gl_weights(0.5, np.ones(1000)).shape == (1000,)


@pytest.fixture(scope="module")
def books_model(tmp_path_factory):
    torch = pytest.importorskip("torch")  # noqa: F841
    from vort.torch import VortLM

    path = tmp_path_factory.mktemp("limits") / "books.safetensors"
    VortLM.from_config(BOOKS_TINY).save_pretrained(path, step=0)
    return path


def test_model_calls_are_sized_before_they_allocate(books_model):
    m = vort.load(books_model)
    with pytest.raises(ValueError, match="Model.logits needs about"):
        m.logits(huge())
    with pytest.raises(ValueError, match="generate needs about"):
        m.generate(b"hi", 10**13)
    # and the model still works after the refusals
    assert m.logits(np.arange(30) % 256).shape == (30, 256)
    assert len(m.generate(b"hi", 3, seed=0)) == 3


# Python's own SIGINT handling in the child. A child started from a background job of a shell
# without job control inherits SIGINT ignored, and Python then installs no handler (and ours
# stays off too, by design): the tests would see no Ctrl-C at all.
PYTHON_SIGINT = "signal.signal(signal.SIGINT, signal.default_int_handler)"


def run_child(script: str) -> subprocess.CompletedProcess:
    """`script` in a new Python, with no disk cache of node tables: a table that an earlier
    run certified (in ~/.cache/vort/nodes) would load in milliseconds, and the build these
    tests interrupt would be over before the signal. The timeout only guards against the old
    behaviour, a run of tens of minutes."""
    env = {**os.environ, "VORT_CACHE_DIR": ""}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env)


def test_ctrl_c_stops_a_long_generate(books_model):
    """SIGINT one second into a generate of 10^7 bytes (tens of minutes): it raises
    KeyboardInterrupt in the caller, and the model is usable afterwards."""
    script = f"""
import os, signal, threading, vort
{PYTHON_SIGINT}
m = vort.load({str(books_model)!r})
threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
try:
    m.generate(b"hi", 10**7)
    print("finished")
except KeyboardInterrupt:
    print("interrupted")
print(len(m.generate(b"hi", 5, seed=0)))
"""
    p = run_child(script)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["interrupted", "5"], p.stdout


def test_ctrl_c_stops_a_long_node_table_build(books_model):
    """SIGINT one second into builds that ran for minutes and ignored it (the certified node
    set at δ = 1e-12, horizon 1e12: 166 s; a model's tables for 10^12 lags): each raises
    KeyboardInterrupt, the next call works, and Python's own SIGINT handling is back."""
    script = f"""
import os, signal, threading, time, vort
{PYTHON_SIGINT}

def sigint_in(s):
    threading.Timer(s, os.kill, (os.getpid(), signal.SIGINT)).start()

m = vort.load({str(books_model)!r})
for name, call in [("shared_nodes", lambda: vort.shared_nodes(1e-12, 1e12, 1e-12)),
                   ("set_horizon", lambda: m.set_horizon(10**12))]:
    sigint_in(1.0)
    try:
        call()
        print(name, "finished")
    except KeyboardInterrupt:
        print(name, "interrupted")
print("works", vort.shared_nodes(0.2, 1000, 1e-2).S > 0, len(m.generate(b"hi", 3, seed=0)))
sigint_in(0.5)
try:
    time.sleep(60)
    print("slept")
except KeyboardInterrupt:
    print("python")
"""
    p = run_child(script)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "shared_nodes interrupted",
        "set_horizon interrupted",
        "works True 3",
        "python",
    ], p.stdout
