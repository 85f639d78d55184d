"""gl_weights, soe and shared_nodes against the `vort kernel` CLI's JSON (the same Rust code:
the values must be equal, not close; serde_json prints floats that round-trip exactly)."""

import json

import numpy as np
import pytest
import vort
from conftest import cli_error


def test_gl_weights_equal_the_cli(cli):
    lags = [0, 1, 2, 10, 1000, 123456]
    for alpha in (0.05, 0.35, 0.5, 1.0):
        got = vort.gl_weights(alpha, lags)
        assert got.dtype == np.float64 and got.shape == (len(lags),)
        out = json.loads(
            cli("kernel", "weights", "--alpha", alpha, "--lags", ",".join(map(str, lags)), "--json").stdout
        )
        want = np.array([w["w"] for w in out["weights"]])
        np.testing.assert_array_equal(got, want)
    # the shape of lags is kept, and w_0 = 1, w_1 = alpha
    w = vort.gl_weights(0.35, np.array([[0, 1], [2, 3]]))
    assert w.shape == (2, 2) and w[0, 0] == 1.0 and abs(w[0, 1] - 0.35) < 1e-15


def test_soe_equals_the_cli_and_is_certified(cli):
    for alpha, horizon, eps in [(0.35, 100000, 1e-4), (0.8, 4096, 1e-3), (0.1, 1e6, 1e-2)]:
        s = vort.soe(alpha, horizon, eps)
        out = json.loads(
            cli("kernel", "soe", "--alpha", alpha, "--horizon", int(horizon), "--eps", eps, "--json").stdout
        )
        assert s.S == out["S"] == len(s.c) == len(s.u)
        np.testing.assert_array_equal(s.c, [t["c"] for t in out["terms"]])
        np.testing.assert_array_equal(s.u, [t["u"] for t in out["terms"]])
        assert s.max_rel_error == out["max_rel_error"] <= eps
        assert s.horizon == int(horizon)
        # the certificate holds on lags we check here (float64 sums)
        lags = np.unique(np.geomspace(1, horizon, 400).astype(np.int64))
        rel = np.abs(s.kernel(lags) / vort.gl_weights(alpha, lags) - 1)
        assert rel.max() <= s.max_rel_error * (1 + 1e-9)


def test_shared_nodes_equal_the_cli(cli):
    sh = vort.shared_nodes(0.2, 100000, 1e-3)
    out = json.loads(
        cli("kernel", "shared", "--delta", 0.2, "--horizon", 100000, "--eps", 1e-3, "--alpha", 0.35, "--json").stdout
    )
    assert sh.S == out["S"]
    np.testing.assert_array_equal(sh.u, [n["u"] for n in out["nodes"]])
    assert sh.max_rel_error == out["max_rel_error"] <= 1e-3
    np.testing.assert_array_equal(sh.weights(0.35), out["at_alpha"]["c"])
    # vectorised over any array of orders: alpha.shape + (S,), each row the scalar's
    grid = np.array([[0.2, 0.35], [0.7, 1.0]])
    w = sh.weights(grid)
    assert w.shape == (2, 2, sh.S)
    np.testing.assert_array_equal(w[0, 1], sh.weights(0.35))
    assert (w >= 0).all()


def test_bad_input_is_a_value_error_with_the_cli_message(cli):
    with pytest.raises(ValueError) as e:
        vort.soe(1.5, 1000, 1e-3)
    want = cli_error(cli("kernel", "soe", "--alpha", 1.5, "--horizon", 1000, "--eps", 1e-3, check=False))
    assert str(e.value) == want
    with pytest.raises(ValueError) as e:
        vort.shared_nodes(0.2, 1000, 0.9)
    want = cli_error(cli("kernel", "shared", "--delta", 0.2, "--horizon", 1000, "--eps", 0.9, check=False))
    assert str(e.value) == want
    with pytest.raises(ValueError) as e:
        vort.gl_weights(-0.5, [1, 2])
    want = cli_error(cli("kernel", "weights", "--alpha=-0.5", "--lags", "1,2", check=False))
    assert str(e.value) == want
    with pytest.raises(ValueError, match="must be >= 0"):
        vort.gl_weights(0.5, [-1])
    with pytest.raises(ValueError, match="integer >= 1"):
        vort.soe(0.5, 0, 1e-3)
    with pytest.raises(ValueError, match=r"must be in \[delta"):
        vort.shared_nodes(0.2, 1000, 1e-3).weights([0.1])


def test_a_panic_is_a_runtime_error_not_an_abort():
    with pytest.raises(RuntimeError, match="internal error: deliberate panic"):
        vort._vort._panic()
    # and the module still works afterwards
    assert vort.gl_weights(0.5, [0])[0] == 1.0


def test_lags_and_tokens_are_whole_numbers_or_a_value_error(runs):
    """Reliability III, I and J: a lag or token with a fraction is refused (1.7 was read as
    1), and one too large for an exact integer is a ValueError (10**30 and 2**64 were
    OverflowErrors)."""
    import numpy as np
    import pytest

    for bad in ([1.7], 10**30, [2**64], [float("nan")]):
        with pytest.raises(ValueError, match="whole number"):
            vort.gl_weights(0.3, bad)
    assert vort.gl_weights(0.3, np.array([1.0, 2.0])).shape == (2,)
    with pytest.raises(ValueError, match="whole number"):
        vort.soe(0.3, 100, 1e-3).kernel([0.5])
    m = vort.load(runs("exponential"))
    for bad in ([1.7], [2**64]):
        with pytest.raises(ValueError, match="whole number"):
            m.logits(bad)
    assert m.logits([1, 2, 3]).shape == (3, m.vocab)
