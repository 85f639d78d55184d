"""vort.load on tiny runs trained by the CLI in the test: the logits score the same accuracy
and loss as `vort eval` on the same labelled file, an export loads to the same logits, and
streaming with step() follows the training forward."""

import json

import numpy as np
import pytest
import vort
from conftest import cli_error, write_safetensors


def labelled_set(vocab, n=6, length=32, seed=3):
    """MQAR-like sequences with every other position labelled with the next token."""
    rng = np.random.default_rng(seed)
    inputs = rng.integers(0, vocab, size=(n, length), dtype=np.int64)
    labels = np.full((n, length), -100, dtype=np.int64)
    labels[:, :-1:2] = inputs[:, 1::2]
    return inputs, labels


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


@pytest.mark.parametrize("name", ["vort-shared-full", "softmax"])
def test_logits_score_what_vort_eval_scores(cli, runs, tmp_path, name):
    run = runs(name)
    m = vort.load(run)
    assert m.vocab == 48 and m.seq_len == 32 and m.steps == 8
    inputs, labels = labelled_set(m.vocab)
    data = tmp_path / "test.safetensors"
    write_safetensors(data, {"inputs": inputs, "labels": labels})
    ev = json.loads(cli("eval", "--run", run, "--data", data, "--json").stdout)
    correct, nll, positions = 0, 0.0, 0
    for x, y in zip(inputs, labels):
        lg = m.logits(x)
        assert lg.shape == (32, 48) and lg.dtype == np.float32
        at = y != -100
        correct += int((lg[at].argmax(-1) == y[at]).sum())
        nll -= log_softmax(lg[at])[np.arange(at.sum()), y[at]].sum()
        positions += int(at.sum())
    assert positions == ev["positions"]
    assert correct / positions == ev["accuracy"]
    # eval scores the batch in one f32 forward, we score one sequence at a time: the mean
    # cross-entropy agrees to f32 rounding
    assert abs(nll / positions - ev["loss"]) <= 1e-5 * ev["loss"]


def test_an_export_loads_to_the_same_logits(cli, runs, tmp_path):
    run = runs("vort-shared-full")
    out = tmp_path / "model.safetensors"
    cli("export", "--run", run, "--out", out)
    tokens = np.arange(32) % 48
    a, b = vort.load(run).logits(tokens), vort.load(out).logits(tokens)
    np.testing.assert_array_equal(a, b)
    assert json.loads(vort.load(out).config_json) == json.loads(vort.load(run).config_json)


@pytest.mark.parametrize("name", ["vort-shared-full", "exponential", "softmax-window"])
def test_step_streams_the_training_forward(runs, name):
    m = vort.load(runs(name))
    tokens = (np.arange(20) * 7) % 48
    full = m.logits(tokens)
    state = m.state()
    worst = 0.0
    for t, tok in enumerate(tokens):
        lg, new = m.step(int(tok), state)
        assert new.tokens == t + 1 and state.tokens == t  # the state given is not changed
        state = new
        worst = max(worst, float(np.abs(lg - full[t]).max() / np.abs(full[t]).max()))
    # the recurrent form (decode) against the fused chunked form, both f32
    assert worst < 1e-4, worst
    assert state.bytes > 0


def test_load_errors_are_value_errors_with_the_cli_message(cli, runs, tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ValueError) as e:
        vort.load(missing)
    assert str(e.value) == cli_error(cli("eval", "--run", missing, check=False))
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError) as e:
        vort.load(bad)
    assert str(e.value) == cli_error(cli("eval", "--run", bad, check=False))
    m = vort.load(runs("vort-shared-full"))
    with pytest.raises(ValueError, match="outside the vocabulary of 48"):
        m.logits([1, 2, 48])
    with pytest.raises(ValueError, match="certified horizon of 32"):
        m.logits(np.zeros(33, dtype=np.int64))
    with pytest.raises(ValueError) as e:
        m.generate(b"It was", 10)
    assert "generate needs a books model" in str(e.value)


def test_past_horizon_modes_stream_past_the_tables(runs):
    """set_past_horizon: the tiny VORT run's tables end at 32 lags. Refused past them by
    default; the tables' own tail continues the trained kernel; tempering by e^(-j/tau) tends
    to that tail as tau grows, and changes the in-window logits at a small tau."""
    m = vort.load(runs("vort-shared-full"))
    assert m.horizon == 32
    tokens = (np.arange(40) * 7) % 48

    def stream():
        state, out = m.state(), []
        for tok in tokens:
            lg, state = m.step(int(tok), state)
            out.append(lg)
        return np.stack(out)

    with pytest.raises(ValueError, match="horizon"):
        stream()
    m.set_past_horizon("soe-tail")
    tail = stream()
    assert tail.shape == (40, 48) and np.isfinite(tail).all()
    # within the horizon it is the trained model: the training forward's logits
    full = m.logits(tokens[:32])
    assert float(np.abs(tail[:32] - full).max() / np.abs(full).max()) < 1e-4
    m.set_past_horizon("tempered", tau=1e9)
    np.testing.assert_allclose(stream(), tail, rtol=1e-4, atol=1e-4)
    m.set_past_horizon("tempered", tau=4.0)
    tempered = stream()
    assert np.isfinite(tempered).all()
    assert float(np.abs(tempered[8:32] - full[8:32]).max()) > 1e-3
    m.set_past_horizon("refuse")
    with pytest.raises(ValueError, match="horizon"):
        stream()
    for args, kw, msg in [
        (("tempered",), {}, "needs tau"),
        (("refuse",), {"tau": 8.0}, "tempered"),
        (("forever",), {}, "not one of"),
        (("tempered",), {"tau": 0.0}, "finite and > 0"),
        (("tempered",), {"tau": float("nan")}, "finite and > 0"),
    ]:
        with pytest.raises(ValueError, match=msg):
            m.set_past_horizon(*args, **kw)


def test_a_state_of_another_model_is_a_value_error(runs):
    """Reliability III, K: a state from another model (here: 15 shared nodes against one
    exponential rate per head) is refused as a ValueError naming the mismatch, not an
    internal error."""
    m, other = vort.load(runs("vort-shared-full")), vort.load(runs("exponential"))
    _, st = other.step(1, other.state())
    with pytest.raises(ValueError, match="state does not match"):
        m.step(1, st)
    # its own state still works
    _, mine = m.step(1, m.state())
    m.step(2, mine)


BOOKS_TINY = """
seed = 0

[task]
kind = "books"
seq_len = 32

[model]
d_model = 16
layers = 1
heads = 2
head_dim = 8
features = 8
chunk = 16

[train]
steps = 1
"""


def test_generate_keeps_the_horizon_the_caller_set(tmp_path):
    """Reliability III, L: generate rebuilds the node tables for its stream and then puts
    back the horizon the caller set with set_horizon (it put back the load-time one, so a
    later 10,000-token logits was refused)."""
    from vort.torch import VortLM

    path = tmp_path / "books.safetensors"
    VortLM.from_config(BOOKS_TINY).save_pretrained(path, step=0)
    m = vort.load(path)
    assert m.horizon == 32
    m.set_horizon(20000)
    assert len(m.generate(b"abc", 5, seed=1)) == 5
    assert m.horizon == 20000
    assert m.logits(np.arange(10000) % 256).shape == (10000, 256)
