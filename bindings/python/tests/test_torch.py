"""vort.torch against the Rust core: VortRetention against vort.retention (outputs, and the
state carried across calls), gradients by gradcheck, VortLM.from_pretrained against
vort.load(...).logits for every mixer kind."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import vort  # noqa: E402
from vort.torch import MixerConfig, VortConfig, VortLM, VortRetention  # noqa: E402


def inputs(b, h, t, f, d, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.rand(b, h, t, f, generator=g, dtype=dtype),
        torch.rand(b, h, t, f, generator=g, dtype=dtype),
        torch.rand(b, h, t, d, generator=g, dtype=dtype) * 2 - 1,
        torch.rand(b, h, t, generator=g, dtype=dtype),
    )


@pytest.mark.parametrize("mode,chunk,t", [("shared", 16, 75), ("shared", 64, 37), ("banks", 8, 61)])
def test_retention_equals_vort_retention(mode, chunk, t):
    """Every head of a batch against the Rust core on that head: float64 against the f64
    recurrent form (same node table, same kernel), float32 against the f32 chunked form."""
    b, h, f, d = 2, 3, 6, 5
    opts = dict(mode=mode, delta=0.15, eps=1e-3, horizon=200, banks=3)
    q, k, v, a = inputs(b, h, t, f, d)
    ret = VortRetention(chunk=chunk, **opts)
    y64, _ = ret(q, k, v, a)
    y32, _ = ret(q.float(), k.float(), v.float(), a.float())
    assert y64.dtype == torch.float64 and y32.dtype == torch.float32
    worst64 = worst32 = 0.0
    for i in range(b):
        for j in range(h):
            args = [x[i, j].numpy() for x in (q, k, v, a)]
            r64 = vort.retention(*args, form="recurrent", **opts)
            r32 = vort.retention(*[x.astype(np.float32) for x in args], form="chunked", chunk=chunk, **opts)
            worst64 = max(worst64, np.abs(y64[i, j].numpy() - r64).max() / np.abs(r64).max())
            worst32 = max(worst32, np.abs(y32[i, j].numpy() - r32).max() / np.abs(r32).max())
    assert worst64 < 1e-13, worst64  # measured 5.8e-16
    assert worst32 < 2e-6, worst32  # measured 2.1e-7


def test_state_carries_across_calls():
    """Pieces of uneven length (none a multiple of the chunk) with the state carried give the
    one-call output and the same final state; token by token too."""
    b, h, t, f, d = 2, 2, 53, 4, 3
    q, k, v, a = inputs(b, h, t, f, d, seed=1)
    ret = VortRetention(chunk=8, horizon=64)
    y, s = ret(q, k, v, a)
    assert s.pos == t and s.g.shape == (b, h, ret.nodes.n, f, d + 1)
    for cuts in ([5, 1, 30, 17], [1] * t):
        state, ys, at = None, [], 0
        for n in cuts:
            yi, state = ret(
                q[:, :, at : at + n], k[:, :, at : at + n], v[:, :, at : at + n], a[:, :, at : at + n], state
            )
            ys.append(yi)
            at += n
        err = (torch.cat(ys, dim=2) - y).abs().max() / y.abs().max()
        assert err < 1e-12, err
        assert (state.g - s.g).abs().max() / s.g.abs().max() < 1e-12
        assert state.pos == t
    with pytest.raises(ValueError, match="certified horizon of 64"):
        ret(q[:, :, :12], k[:, :, :12], v[:, :, :12], a[:, :, :12], s)


def test_gradcheck_float64():
    b, h, t, f, d = 1, 2, 7, 3, 2
    ret = VortRetention(chunk=4, horizon=16, delta=0.1)
    q, k, v, _ = inputs(b, h, t, f, d, seed=2)
    # orders inside (δ, 1) away from the ends (where dc/dα is one-sided)
    a = 0.2 + 0.6 * torch.rand(b, h, t, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    xs = [x.clone().requires_grad_() for x in (q, k, v, a)]

    def fn(q, k, v, a):
        y, s = ret(q, k, v, a)
        return y, s.g

    assert torch.autograd.gradcheck(fn, xs, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_any_device_and_bad_shapes():
    ret = VortRetention(horizon=32)
    q, k, v, a = inputs(1, 1, 10, 3, 2, dtype=torch.float32)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    ret = ret.to(dev)
    y, _ = ret(q.to(dev), k.to(dev), v.to(dev), a.to(dev))
    assert y.device.type == dev
    with pytest.raises(ValueError, match="alpha"):
        ret(q, k, v, a[..., :-1])
    with pytest.raises(ValueError):
        VortRetention(delta=1.5)


from conftest import MIXERS  # noqa: E402


@pytest.mark.parametrize("name", sorted(MIXERS))
def test_vortlm_from_pretrained_equals_the_rust_model(runs, name):
    """Logits of the torch port against the Rust model on the same run: within 1e-4 relative
    to the largest logit (both float32; measured worst: see the README)."""
    run = runs(name)
    rust = vort.load(run)
    lm = VortLM.from_pretrained(run).eval()
    g = np.random.default_rng(0)
    tokens = g.integers(0, rust.vocab, size=(3, 32))
    with torch.no_grad():
        got = lm(torch.from_numpy(tokens)).numpy()
    assert got.shape == (3, 32, rust.vocab)
    for i in range(3):
        want = rust.logits(tokens[i])
        err = np.abs(got[i] - want).max() / np.abs(want).max()
        assert err < 1e-4, (name, err)
    # float64 on the torch side: the same within f32 rounding of the Rust side
    with torch.no_grad():
        got64 = lm.double()(torch.from_numpy(tokens)).numpy()
    want = rust.logits(tokens[0])
    assert np.abs(got64[0] - want).max() / np.abs(want).max() < 1e-4
    # the gradient reaches every parameter (the router's a, b through the entropy/probe too)
    lm = VortLM.from_pretrained(run).train()
    lm.zero_grad()
    out = lm(torch.from_numpy(tokens))
    torch.nn.functional.cross_entropy(
        out.reshape(-1, rust.vocab), torch.from_numpy(tokens).roll(-1, 1).reshape(-1)
    ).backward()
    # parameters the logits do not depend on: the bigram table (its entropy is a
    # stop-gradient; the Rust trainer fits it by its own loss), and the router terms a
    # routing turns off (entity-only: b; entropy-only: the probe and a)
    routing = lm.model_config.mixer.routing
    unused = {"bigram"}
    unused |= {f"blocks.{i}.mix.router.b" for i in range(2)} if routing == "entity-only" else set()
    if routing == "entropy-only":
        unused |= {f"blocks.{i}.mix.router.{n}" for i in range(2) for n in ("probe", "a")}
    for pname, p in lm.named_parameters():
        if pname in unused:
            assert p.grad is None or not p.grad.any(), pname
        else:
            assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.any(), pname


def test_vortlm_refuses_past_the_horizon(runs):
    lm = VortLM.from_pretrained(runs("vort-shared-full"))
    with pytest.raises(ValueError, match="certified horizon of 32"):
        lm(torch.zeros(1, 33, dtype=torch.long))
    with pytest.raises(ValueError, match="vocabulary"):
        lm(torch.full((1, 4), 48))


@pytest.mark.parametrize("mixer", ["vort", "exponential", "softmax"])
def test_vortlm_on_committed_recall_weights(mixer):
    """The committed weights of the quick recall reproduction (results/recall-quick), a whole
    training-length sequence (T = 256): torch float32 against the Rust model, within 1e-4
    relative to the largest logit (measured worst over every committed recall run: 7.4e-6)."""
    from conftest import REPO

    lr = "3.0e-3" if mixer == "softmax" else "1.0e-2"
    run = REPO / f"results/recall-quick/runs/L256-K16-d64/{mixer}/lr{lr}/seed0"
    rust = vort.load(run)
    tokens = np.random.default_rng(1).integers(0, rust.vocab, rust.seq_len)
    want = rust.logits(tokens)
    with torch.no_grad():
        got = VortLM.from_pretrained(run)(torch.from_numpy(tokens)[None])[0].numpy()
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-4


def test_rust_fused_op_through_torch():
    """vort::fused_chunk (the Rust op as a torch custom op) against the torch chunk form, and
    VortRetention(backend="rust") against backend="torch", pieces with a carried state too."""
    from vort.torch import fused_chunk, retention_core

    b, h, t, f, d = 2, 3, 45, 4, 3
    q, k, v, a = inputs(b, h, t, f, d, seed=4)
    ret_t = VortRetention(chunk=16, horizon=64)
    ret_r = VortRetention(chunk=16, horizon=64, backend="rust")
    cw = ret_t.nodes(a)
    vp = torch.cat([v, torch.ones_like(v[..., :1])], -1)
    u = ret_t.nodes.u[None, :]
    o_r = fused_chunk(q, k, vp, cw, u.expand(h, -1), 16)
    o_t, _ = retention_core(q, k, vp, cw, u, 16)
    assert (o_r - o_t).abs().max() / o_t.abs().max() < 1e-12
    for dtype, tol in ((torch.float64, 1e-13), (torch.float32, 2e-6)):  # measured 2.2e-16, 1.5e-7
        xs = [x.to(dtype) for x in (q, k, v, a)]
        y_t, s_t = ret_t(*xs)
        y1, s1 = ret_r(*(x[:, :, :20] for x in xs))
        y2, s2 = ret_r(*(x[:, :, 20:] for x in xs), state=s1)
        y_r = torch.cat([y1, y2], dim=2)
        assert y_r.dtype == dtype
        assert (y_r - y_t).abs().max() / y_t.abs().max() < tol
        assert (s2.g - s_t.g).abs().max() / s_t.g.abs().max() < tol
    torch.library.opcheck(fused_chunk, (q, k, vp, cw, u.expand(h, -1).contiguous(), 16))


def test_rust_fused_op_gradcheck_float64():
    from vort.torch import fused_chunk

    b, h, t, f, d, n = 1, 2, 9, 3, 2, 3
    g = torch.Generator().manual_seed(6)
    q, k = (
        torch.rand(b, h, t, f, generator=g, dtype=torch.float64),
        torch.rand(b, h, t, f, generator=g, dtype=torch.float64),
    )
    vp = torch.rand(b, h, t, d + 1, generator=g, dtype=torch.float64)
    cw = torch.rand(b, h, t, n, generator=g, dtype=torch.float64) / n
    u = torch.rand(h, n, generator=g, dtype=torch.float64) * 0.5 + 0.01
    xs = [x.requires_grad_() for x in (q, k, vp, cw, u)]
    assert torch.autograd.gradcheck(lambda *z: fused_chunk(*z, 4), xs, eps=1e-6, atol=1e-7, rtol=1e-6)
    # and through VortRetention with the Rust backend, α included
    ret = VortRetention(chunk=4, horizon=16, backend="rust")
    a = (0.2 + 0.6 * torch.rand(b, h, t, generator=g, dtype=torch.float64)).requires_grad_()
    v = torch.rand(b, h, t, d, generator=g, dtype=torch.float64).requires_grad_()
    qq, kk = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda *z: ret(*z)[0], [qq, kk, v, a], eps=1e-6, atol=1e-6, rtol=1e-5)


def test_trained_in_torch_saved_and_scored_by_vort_eval(cli, runs, tmp_path):
    """The formats go both ways: a model trained in torch (a few AdamW steps from a run), saved
    with save_pretrained, is what `vort eval --run` scores, and loads back to its logits."""
    from conftest import write_safetensors
    from test_model import labelled_set, log_softmax

    run = runs("vort-shared-full")
    lm = VortLM.from_pretrained(run)
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-2)
    g = np.random.default_rng(7)
    for _ in range(3):
        x = torch.from_numpy(g.integers(0, lm.vocab, size=(4, 32)))
        loss = torch.nn.functional.cross_entropy(lm(x)[:, :-1].reshape(-1, lm.vocab), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = tmp_path / "torch-trained.safetensors"
    lm.save_pretrained(out)
    inputs, labels = labelled_set(lm.vocab)
    data = tmp_path / "test.safetensors"
    write_safetensors(data, {"inputs": inputs, "labels": labels})
    ev = __import__("json").loads(cli("eval", "--run", out, "--data", data, "--json").stdout)
    with torch.no_grad():
        logits = lm(torch.from_numpy(inputs)).numpy()
    at = labels != -100
    lp = log_softmax(logits[at])
    nll = -lp[np.arange(at.sum()), labels[at]].mean()
    assert abs(nll - ev["loss"]) <= 1e-4 * ev["loss"]
    assert ev["step"] == 8  # the run's steps (save_pretrained keeps them unless given)
    back = vort.load(out).logits(inputs[0])
    assert np.abs(back - logits[0]).max() / np.abs(back).max() < 1e-4
    # a fresh model of a config, saved before any step, loads too
    fresh = VortLM.from_config(run / "config.toml")
    fresh.save_pretrained(tmp_path / "fresh.safetensors", step=0)
    assert vort.load(tmp_path / "fresh.safetensors").steps == 0
    # a parameter of the wrong shape is refused before anything is written
    bad = {k: v.detach().numpy() for k, v in lm.named_parameters()}
    bad["head"] = bad["head"][:, :3]
    with pytest.raises(ValueError, match="parameter `head` has shape"):
        vort._vort._save_export(str(tmp_path / "bad.safetensors"), lm.config_toml, bad, 0)
    assert not (tmp_path / "bad.safetensors").exists()


@pytest.mark.parametrize("name", ["vort-shared-full", "vort-banks-entity", "exponential", "mixture", "softmax"])
def test_gradients_equal_the_rust_trainers(runs, name):
    """The trainer's answer cross-entropy (mean over labelled positions) and its gradient with
    respect to every parameter: the torch port (autograd of the chunk form) against the Rust
    model (the fused op's hand-written backward), within 1e-4 of each gradient's largest
    entry (measured worst: 2.4e-6 vort shared, 1.0e-5 banks, 4.3e-6 exponential, 1.6e-5
    mixture, 3.5e-6 softmax)."""
    from test_model import labelled_set

    run = runs(name)
    rust = vort.load(run)
    inputs_, labels = labelled_set(rust.vocab, n=3)
    loss_r, grads_r = rust._task_grads(inputs_, labels)
    lm = VortLM.from_pretrained(run)
    logits = lm(torch.from_numpy(inputs_))
    at = torch.from_numpy(labels != -100)
    loss_t = torch.nn.functional.cross_entropy(logits[at], torch.from_numpy(labels)[at])
    loss_t.backward()
    assert abs(loss_t.item() - loss_r) <= 1e-5 * loss_r
    assert set(grads_r) == {n for n, _ in lm.named_parameters()}
    worst = 0.0
    for pname, p in lm.named_parameters():
        gr = grads_r[pname]
        gt = np.zeros_like(gr) if p.grad is None else p.grad.numpy()
        scale = np.abs(gr).max()
        if scale == 0:
            assert np.abs(gt).max() == 0, pname
            continue
        err = np.abs(gt - gr).max() / scale
        worst = max(worst, err)
        assert err < 1e-4, (pname, err)


# ----------------------------------------------------------------------------------------
# VortAttention: the public layer over hidden states

from vort.torch import KvState, RetentionState, VortAttention  # noqa: E402

ATTENTION_MIXERS = [
    "vort",
    {
        "kind": "vort",
        "routing": "full",
        "nodes": {"mode": "banks", "banks": 3, "delta": 0.2, "horizon": 0, "eps": 1e-3},
    },
    {"kind": "vort", "routing": "learned", "router_bias_init": 0.5},
    {"kind": "power-law", "alpha": 0.5},
    "exponential",
    "mixture",
    "softmax",
    {"kind": "softmax", "window": 5},
]


def hidden(b, t, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, t, d, generator=g)


@pytest.mark.parametrize("mixer", ATTENTION_MIXERS, ids=str)
def test_vort_attention_streams_in_pieces_like_one_call(mixer):
    """A sequence fed in pieces of uneven sizes with the returned state gives the output of
    one call (and the state is a retention state or a KV cache by the mixer)."""
    layer = VortAttention(16, 2, mixer=mixer, features=8, max_len=64, chunk=8, seed=3).eval()
    x = hidden(2, 37, 16)
    with torch.no_grad():
        whole, st = layer(x)
        parts, state, s = [], None, 0
        for n in (5, 1, 16, 15):
            y, state = layer(x[:, s : s + n], state)
            parts.append(y)
            s += n
    kind = mixer if isinstance(mixer, str) else mixer["kind"]
    assert isinstance(state, KvState if kind == "softmax" else RetentionState)
    err = (torch.cat(parts, 1) - whole).abs().max() / whole.abs().max()
    assert err < 1e-5, (mixer, float(err))
    assert whole.shape == (2, 37, 16)


def _layer_of(lm, mixer):
    """A VortAttention with the settings of `lm`'s layers and the given mixer."""
    mc = lm.model_config
    return VortAttention(
        mc.d_model,
        mc.heads,
        mc.head_dim,
        mixer=mixer,
        features=mc.features,
        feature_map=mc.feature_map,
        max_len=lm.config["task"]["seq_len"],
        chunk=mc.chunk,
        eps_den=mc.eps_den,
        qk_scale_init=mc.qk_scale_init,
        seed=lm.config["seed"],
    )


@pytest.mark.parametrize(
    "name", ["vort-shared-full", "vort-learned", "power-law-taylor", "exponential", "softmax-window"]
)
def test_vort_attention_is_vortlms_layer(runs, name):
    """VortAttention given a VortLM layer's state_dict computes that layer's output and the
    same gradients; its fresh parameters are the Rust core's Block::init draws; its buffers
    (FAVOR+ projection, node tables) are in state_dict."""
    run = runs(name)
    lm = VortLM.from_pretrained(run)
    mc = lm.model_config
    layer = _layer_of(lm, mc.mixer)
    assert layer.config.mixer == mc.mixer
    theirs = lm.blocks[0].mix
    buffers = {k for k, _ in layer.named_buffers()}
    if mc.feature_map == "favor" and mc.mixer.kind != "softmax":
        assert "mix.features.omega_t" in buffers
    if mc.mixer.kind in ("vort", "power-law"):
        assert "mix.nodes.u" in buffers
    assert set(layer.mix.state_dict()) == set(theirs.state_dict())
    layer.mix.load_state_dict(theirs.state_dict())
    x = hidden(2, 19, mc.d_model, seed=1).requires_grad_()
    ent = torch.rand(2, 19, generator=torch.Generator().manual_seed(2))
    y, _ = layer(x, entropy=ent)
    want = theirs(x, ent)
    assert torch.equal(y, want)
    (gx,) = torch.autograd.grad((y * y).sum(), x)
    (wx,) = torch.autograd.grad((want * want).sum(), x)
    assert torch.equal(gx, wx)
    # the same layer from the mixer's table as a dict: the same parameters and buffers
    same = _layer_of(lm, mc.mixer.to_dict())
    fresh = _layer_of(lm, mc.mixer)
    for (ka, a), (kb, b) in zip(same.state_dict().items(), fresh.state_dict().items()):
        assert ka == kb and torch.equal(a, b), ka


@pytest.mark.parametrize(
    "name", ["vort-shared-full", "vort-learned", "power-law-taylor", "exponential", "softmax-window"]
)
def test_the_typed_config_reads_and_writes_the_rust_tables(runs, name):
    """VortConfig.from_dict of a run's [model] table writes back the same table (to_dict),
    field for field, and VortLM carries it typed."""
    lm = VortLM.from_pretrained(runs(name))
    table = lm.config["model"]
    typed = VortConfig.from_dict(table)
    assert typed == lm.model_config
    assert typed.to_dict() == table
    assert MixerConfig.from_dict(table["mixer"]) == typed.mixer


def test_the_typed_config_refuses_what_rust_would_not_read():
    """A misspelt or foreign setting, a wrong type or an unknown kind is a ValueError naming
    it, where a dict would have been passed on and ignored."""
    cases = [
        (lambda: MixerConfig.from_dict({"kind": "exponential", "alpha": 0.5}), "alpha"),
        (lambda: MixerConfig.from_dict({"kind": "power-law", "routing": "full"}), "routing"),
        (lambda: MixerConfig.from_dict({"kind": "vort", "nodes": {"delt": 0.1}}), "delt"),
        (lambda: MixerConfig.from_dict({"kind": "mixture", "m": 2.5}), "whole number"),
        (lambda: MixerConfig.from_dict({"kind": "softmax", "window": "8"}), "number"),
        (lambda: MixerConfig.from_dict({"kind": "gru"}), "gru"),
        (lambda: MixerConfig(kind="gru"), "gru"),
        (lambda: VortConfig.from_dict({"d_model": 64, "dmodel": 3}), "dmodel"),
        (lambda: VortConfig.from_dict({"token_shift": 1}), "true or false"),
        (lambda: VortAttention(32, 4, mixer={"kind": "power-law", "alpah": 0.5}), "alpah"),
    ]
    for make, word in cases:
        with pytest.raises(ValueError, match=word):
            make()
    assert VortConfig.from_dict({"head_dim": 16.0}).head_dim == 16
    assert MixerConfig.from_dict("softmax") == MixerConfig(kind="softmax")


def test_vort_attention_starts_from_the_rust_init_and_drops_into_a_torch_model():
    """The fresh parameters are those of a Rust run seeded alike (VortLM.from_config's), and
    the layer trains inside a user's model: the loss falls, gradients reach the parameters and
    never the buffers."""
    layer = VortAttention(32, 4, features=16, max_len=128, chunk=16, seed=5)
    again = VortAttention(32, 4, features=16, max_len=128, chunk=16, seed=5)
    other = VortAttention(32, 4, features=16, max_len=128, chunk=16, seed=6)
    for (n, a), (_, b) in zip(layer.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), n
    assert not torch.equal(layer.mix.wq, other.mix.wq)
    assert not torch.equal(layer.mix.features.omega_t, other.mix.features.omega_t)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(12, 32)
            self.mem = layer
            self.out = torch.nn.Linear(32, 12)

        def forward(self, tokens):
            y, _ = self.mem(self.emb(tokens))
            return self.out(y)

    model = Tiny()
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 12, (8, 24), generator=g)
    target = tokens.roll(1, dims=1)  # copy the previous token: needs the memory
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2)
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(tokens).reshape(-1, 12), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses
    # every parameter but the entropy weight b, which an entity-only router does not read
    for name, p in layer.named_parameters():
        assert (p.grad is not None and p.grad.any()) == (name != "mix.router.b"), name
    assert all(not b.requires_grad for b in layer.buffers())


def test_vort_attention_refuses_bad_input():
    layer = VortAttention(16, 2, features=8, max_len=32, chunk=8)
    with pytest.raises(ValueError, match=r"must be \[B, T, 16\]"):
        layer(torch.zeros(1, 4, 8))
    with pytest.raises(ValueError, match="entropy"):
        layer(torch.zeros(1, 4, 16), entropy=torch.zeros(1, 5))
    with pytest.raises(ValueError, match="horizon"):
        layer(torch.zeros(1, 33, 16))
    with pytest.raises(ValueError, match="multiple of num_heads"):
        VortAttention(15, 2)
    with pytest.raises(ValueError, match="mixer kind `lstm` is not one of"):
        VortAttention(16, 2, mixer="lstm")
    with pytest.raises(ValueError, match="softmax KV cache"):
        _, kv = VortAttention(16, 2, mixer="softmax")(torch.zeros(1, 4, 16))
        layer(torch.zeros(1, 4, 16), kv)


@pytest.mark.parametrize(
    "name",
    ["vort-shared-full", "vort-fixed", "power-law-taylor", "exponential", "mixture", "softmax", "softmax-window"],
)
def test_vortlm_streams_in_pieces_like_one_call(runs, name):
    """VortLM fed in pieces with its LMState gives the logits of one call (the short
    convolution's inputs, the previous token and every memory carried), and the streamed
    logits of a few tokens are the Rust model's `step` ones."""
    from vort.torch import LMState

    run = runs(name)
    lm = VortLM.from_pretrained(run).eval()
    g = np.random.default_rng(1)
    tokens = torch.from_numpy(g.integers(0, lm.vocab, size=(2, 31)))
    with torch.no_grad():
        whole = lm(tokens)
        parts, state, s = [], None, 0
        for n in (5, 1, 16, 9):
            y, state = lm(tokens[:, s : s + n], state, use_cache=True)
            parts.append(y)
            s += n
    assert isinstance(state, LMState)
    err = (torch.cat(parts, 1) - whole).abs().max() / whole.abs().max()
    assert err < 1e-5, (name, float(err))
    rust = vort.load(run)
    st = rust.state()
    for i in range(4):
        logit, st = rust.step(int(tokens[0, i]), st)
        e = np.abs(logit - whole[0, i].numpy()).max() / np.abs(logit).max()
        assert e < 1e-4, (name, i, e)
    with pytest.raises(ValueError, match="batch"):
        lm(tokens[:1, :3], state)


def test_from_config_says_a_missing_file_is_missing(tmp_path):
    """Reliability III, O: a config path that does not exist is named as missing (it was
    parsed as TOML: "TOML parse error at line 1")."""
    with pytest.raises(ValueError, match="no such file"):
        VortLM.from_config("nope.toml")
    with pytest.raises(ValueError, match="no such file"):
        VortLM.from_config(tmp_path / "nope.toml")


def test_vort_retention_checks_its_state():
    """Reliability III, H: a state of another batch or configuration, or a negative
    position, is a ValueError (a B = 1 state was broadcast over B = 2; another config's was
    a raw einsum error; a negative position skipped the horizon check)."""
    from vort.torch import RetentionState

    ret = VortRetention(chunk=4, horizon=64)
    q, k, v, a = inputs(1, 2, 8, 3, 2)
    _, st = ret(q, k, v, a)
    q2, k2, v2, a2 = inputs(2, 2, 8, 3, 2)
    with pytest.raises(ValueError, match="does not match"):
        ret(q2, k2, v2, a2, state=st)
    q3, k3, v3, a3 = inputs(1, 2, 8, 5, 2)
    with pytest.raises(ValueError, match="does not match"):
        ret(q3, k3, v3, a3, state=st)
    with pytest.raises(ValueError, match="position"):
        ret(q, k, v, a, state=RetentionState(st.g, -(10**6)))
    y, st2 = ret(q, k, v, a, state=st)
    assert st2.pos == 16


def test_config_errors_name_the_config_once():
    """Reliability III: the trainer's config errors read `config <config>: ...` once (the
    prefix was doubled)."""
    from test_model import BOOKS_TINY

    with pytest.raises(ValueError) as e:
        VortLM.from_config(BOOKS_TINY.replace("steps = 1", "steps = 0"))
    msg = str(e.value)
    assert msg.count("<config>") == 1 and "train.steps" in msg, msg
