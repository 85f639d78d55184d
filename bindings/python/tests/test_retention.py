"""vort.retention against `vort retention` on the same inputs: the same Rust computation, so
the outputs are equal (the CLI writes f32: the f64 forms are compared after rounding to f32,
which is what the CLI's file holds)."""

import numpy as np
import pytest
import vort
from conftest import cli_error, read_safetensors, write_safetensors


def head(t=75, f=6, d=5, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return dict(
        phi_q=rng.random((t, f)).astype(dtype),
        phi_k=rng.random((t, f)).astype(dtype),
        v=(rng.random((t, d)) * 2 - 1).astype(dtype),
        alpha=rng.random(t).astype(dtype),
    )


CASES = [
    # form, node mode, extra options (as keyword arguments and as CLI flags)
    ("chunked", "shared", dict(eps=1e-3, delta=0.1, chunk=16)),
    ("fused", "shared", dict(eps=1e-4, delta=0.2, chunk=8)),
    ("recurrent", "shared", dict(eps=1e-3, delta=0.1, horizon=200)),
    ("naive", "shared", dict(eps=1e-3, delta=0.1)),
    ("chunked", "banks", dict(eps=1e-3, delta=0.15, banks=3, chunk=32)),
    ("fused_chunk", "banks", dict(eps=1e-3, delta=0.1, banks=4, chunk=64)),
]


@pytest.mark.parametrize("form,mode,opts", CASES)
def test_retention_equals_the_cli(cli, tmp_path, form, mode, opts):
    x = head(seed=len(form) + len(mode))
    inp, out = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    write_safetensors(inp, x)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in opts.items()]
    cli("retention", "--input", inp, "--output", out, "--form", form, "--mode", mode, *flags)
    want = read_safetensors(out)["y"]
    got = vort.retention(x["phi_q"], x["phi_k"], x["v"], x["alpha"], form=form, mode=mode, **opts)
    f32 = form in ("chunked", "fused", "chunk", "fused_chunk")
    assert got.dtype == (np.float32 if f32 else np.float64)
    assert got.shape == want.shape == (75, 5)
    np.testing.assert_array_equal(got.astype(np.float32), want)


def test_retention_takes_float64_and_lists_and_is_a_weighted_mean():
    x = head(t=20, dtype=np.float64)
    y = vort.retention(x["phi_q"], x["phi_k"], x["v"], x["alpha"], form="recurrent", eps_den=1e-15)
    y2 = vort.retention(
        x["phi_q"].tolist(), x["phi_k"].tolist(), x["v"].tolist(), x["alpha"].tolist(), form="recurrent", eps_den=1e-15
    )
    np.testing.assert_array_equal(y, y2)
    # every node weight is >= 0, so y is a weighted mean of the values seen so far (up to the
    # eps_den term, 1e-15 here): inside their running min and max
    lo = np.minimum.accumulate(x["v"], axis=0)
    hi = np.maximum.accumulate(x["v"], axis=0)
    assert (y >= lo - 1e-12).all() and (y <= hi + 1e-12).all()


def test_committed_pair(tmp_path):
    """The committed input/output pair of the CLI's tests (crates/vort-cli/tests/data)."""
    from conftest import REPO

    d = REPO / "crates/vort-cli/tests/data/retention_pair"
    x = read_safetensors(d / "in.safetensors")
    want = read_safetensors(d / "out.safetensors")["y"]
    raw = (d / "out.safetensors").read_bytes()
    meta = raw[8 : 8 + int.from_bytes(raw[:8], "little")].decode()
    opts = dict(kv.split("=") for kv in meta.split('"opts":"')[1].split('"')[0].split())
    got = vort.retention(
        x["phi_q"],
        x["phi_k"],
        x["v"],
        x["alpha"],
        form=opts["form"].lower(),
        mode=opts.get("mode", opts.get("memory", "")).lower(),  # `memory=` in older files
        eps=float(opts["eps"]),
        delta=float(opts["delta"]),
        chunk=int(opts["chunk"]),
        eps_den=float(opts["eps_den"]),
        horizon=None if opts["horizon"] == "T" else int(opts["horizon"]),
    )
    np.testing.assert_array_equal(got.astype(np.float32), want)


BAD = [
    ("negative feature", dict(phi_q=lambda x: x.__setitem__((3, 1), -0.5)), {}),
    ("alpha above 1", dict(alpha=lambda x: x.__setitem__(7, 1.5)), {}),
    ("nan in v", dict(v=lambda x: x.__setitem__((2, 2), np.nan)), {}),
    ("beyond the horizon", {}, dict(horizon=50)),
    ("bad eps", {}, dict(eps=0.9)),
    ("bad delta", {}, dict(delta=1.5)),
    ("bad form", {}, dict(form="quadratic")),
]


@pytest.mark.parametrize("what,edits,opts", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_value_error_with_the_cli_message(cli, tmp_path, what, edits, opts):
    x = {k: v.copy() for k, v in head().items()}
    for name, edit in edits.items():
        edit(x[name])
    inp, out = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    write_safetensors(inp, x)
    flags = [f"--{k}={v}" for k, v in opts.items()]
    p = (
        cli("retention", "--input", inp, "--output", out, *flags, "--eps=1e-3", check=False)
        if "eps" not in opts
        else cli("retention", "--input", inp, "--output", out, *flags, check=False)
    )
    kw = dict(eps=1e-3, **opts) if "eps" not in opts else opts
    with pytest.raises(ValueError) as e:
        vort.retention(x["phi_q"], x["phi_k"], x["v"], x["alpha"], **kw)
    if what == "bad form":
        # clap's parser words it as `invalid value ... for '--form <FORM>': ...`
        assert str(e.value) in p.stderr
    else:
        assert str(e.value) == cli_error(p)
    assert not out.exists()


def test_shapes_are_checked():
    x = head()
    with pytest.raises(ValueError, match="phi_k"):
        vort.retention(x["phi_q"], x["phi_k"][:-1], x["v"], x["alpha"])
    with pytest.raises(ValueError, match="alpha"):
        vort.retention(x["phi_q"], x["phi_k"], x["v"], x["alpha"][:-1])


def test_the_node_mode_keeps_its_older_name():
    """`memory=` is the older name of `mode=` (memory means RAM elsewhere): the same table, and
    both at once is a ValueError."""
    x = head(seed=3)
    args = (x["phi_q"], x["phi_k"], x["v"], x["alpha"])
    new = vort.retention(*args, mode="banks", banks=3)
    old = vort.retention(*args, memory="banks", banks=3)
    np.testing.assert_array_equal(new, old)
    assert not np.array_equal(new, vort.retention(*args))
    with pytest.raises(ValueError, match="not both"):
        vort.retention(*args, mode="banks", memory="banks")
