"""Reliability III (issue #43), I and J: user errors are ValueError with words, never a raw
torch error, an OverflowError or a silent coercion."""

import tempfile

import numpy as np
import pytest
import vort
from test_model import BOOKS_TINY

torch = pytest.importorskip("torch")
from vort.torch import VortAttention, VortLM, VortRetention  # noqa: E402


def test_complex_input_is_refused_not_cast():
    """numpy's cast dropped the imaginary part with a warning at most."""
    with pytest.raises(ValueError, match="lags holds complex numbers"):
        vort.gl_weights(0.3, np.array([1 + 1j]))
    q = np.ones((4, 2))
    with pytest.raises(ValueError, match="phi_q holds complex numbers"):
        vort.retention(q + 1j, q, q, np.full(4, 0.5))
    with pytest.raises(ValueError, match="alpha holds complex numbers"):
        vort.shared_nodes(0.2, 1000, 1e-2).weights([0.5 + 0j])


def test_the_torch_layers_check_their_inputs():
    lm = VortLM.from_config(BOOKS_TINY)
    for bad, words in [
        (torch.tensor([[1.0, 2.0]]), "integer tensor"),
        (torch.tensor([[1 + 0j]]), "integer tensor"),
        (torch.zeros((1, 0), dtype=torch.long), "no position"),
    ]:
        with pytest.raises(ValueError, match=words):
            lm(bad)
    with pytest.raises(ValueError, match="chunk = 1.5 must be a whole number"):
        VortRetention(chunk=1.5)
    r = VortRetention()
    q, v, a = torch.rand(1, 2, 8, 8), torch.rand(1, 2, 8, 4), torch.rand(1, 2, 8) * 0.8 + 0.2
    with pytest.raises(ValueError, match="share one dtype"):
        r(q, q.double(), v, a)
    with pytest.raises(ValueError, match="real floating"):
        r(q.to(torch.complex64), q.to(torch.complex64), v, a)
    with pytest.raises(ValueError, match="no position"):
        r(q[:, :, :0], q[:, :, :0], v[:, :, :0], a[:, :, :0])
    layer = VortAttention(16, 2, features=8, max_len=64, seed=0)
    with pytest.raises(ValueError, match="real floating"):
        layer(torch.ones(1, 4, 16, dtype=torch.long))
    with pytest.raises(ValueError, match="the path is empty"):
        lm.save_pretrained("")
    # a refused target is named once, as the CLI names it (it read "D: D is a directory")
    with tempfile.TemporaryDirectory() as d:
        with pytest.raises(ValueError) as e:
            lm.save_pretrained(d)
        assert str(e.value).count(d) == 1 and "is a directory" in str(e.value), e.value
    # the good inputs still run
    assert lm(torch.tensor([[1, 2, 3]])).shape == (1, 3, 256)
    assert r(q, q, v, a)[0].shape == (1, 2, 8, 4)
