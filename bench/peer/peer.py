"""The VORT layer core written in PyTorch the way a competent user would: the fla-style chunk
form in float32 on 2 threads, eager and torch.compile. A benchmark peer for `vort bench layer`
(issue 12), not a test: run it through run.sh, which interleaves it with the vort bench.

Same problem as `vort bench layer`'s shared mode: B=4, H=4, T=2048, F=D=64, chunk 64, and the
rates u_n of the shared SOE table (N = 14 at eps 1e-3, delta 0.1, horizon 2048), which run.sh
reads from `vort kernel shared --json` and passes with --rates. The per-token node weights cw are an input with a
gradient (vort computes them from alpha inside its timing; the peer is spared that).

    M[t,s] = sum_n e^(-u_n (t-s)) cw[s,n] (t > s), 1 (t = s)
    o      = (M * Q K^T) V' + Qd G,        Qd[t,n,:] = e^(-u_n (t+1)) q_t
    G     <- e^(-u L) G + Kd^T V',         Kd[s,n,:] = e^(-u_n (L-1-s)) cw[s,n] k_s
    y      = o[..., :D] / (o[..., D] + 1e-6),   loss = sum(y * w)
"""

import argparse
import json
import os
import statistics
import time

import torch


def load_avg():
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except OSError:
        return None


def retention(q, k, v, cw, u, chunk):
    """Unnormalised o [B, H, T, D+1] of the chunk form, differentiable in q, k, v, cw."""
    b, h, t, f = q.shape
    n = u.shape[0]
    nc = t // chunk
    vp = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
    d1 = vp.shape[-1]
    lag = torch.arange(chunk, dtype=q.dtype)
    u = u.to(q.dtype)
    e = torch.exp(-u[None, :] * lag[:, None])  # [L, N]
    rel = (lag[:, None] - lag[None, :]).clamp(min=0).long()  # t - s
    strict = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool), diagonal=-1)
    eye = torch.eye(chunk, dtype=q.dtype)
    dq = torch.exp(-u[None, :] * (lag[:, None] + 1))  # [L, N]
    dk = torch.exp(-u[None, :] * (chunk - 1 - lag[:, None]))  # [L, N]
    lam = torch.exp(-u * chunk)  # [N]
    qc = q.view(b, h, nc, chunk, f)
    kc = k.view(b, h, nc, chunk, f)
    vc = vp.view(b, h, nc, chunk, d1)
    cwc = cw.view(b, h, nc, chunk, n)
    # intra-chunk: all chunks at once
    m = torch.einsum("tsn,bhcsn->bhcts", e[rel], cwc) * strict + eye
    o_intra = (m * (qc @ kc.transpose(-1, -2))) @ vc
    # inter-chunk: the state recurrence, one chunk at a time
    g = q.new_zeros(b, h, n, f, d1)
    outs = []
    for c in range(nc):
        qd = qc[:, :, c, :, None, :] * dq[None, None, :, :, None]
        outs.append(o_intra[:, :, c] + torch.einsum("bhlnf,bhnfd->bhld", qd, g))
        kd = kc[:, :, c, :, None, :] * (dk[None, None] * cwc[:, :, c])[..., None]
        g = lam[None, None, :, None, None] * g + torch.einsum("bhlnf,bhld->bhnfd", kd, vc[:, :, c])
    return torch.stack(outs, dim=2).reshape(b, h, t, d1)


def naive(q, k, v, cw, u):
    """The same o in O(T^2): K(t, s) = sum_n cw[s, n] e^(-u_n (t-s)) for t > s, 1 at t = s."""
    t = q.shape[2]
    vp = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
    lag = (torch.arange(t)[:, None] - torch.arange(t)[None, :]).to(q.dtype)
    kern = torch.einsum("bhsn,tsn->bhts", cw, torch.exp(-u[None, None, :] * lag.clamp(min=0)[..., None]))
    kern = kern * torch.tril(torch.ones(t, t), diagonal=-1) + torch.eye(t)
    return (kern * (q @ k.transpose(-1, -2))) @ vp


def check(u):
    """The chunk form against the quadratic one on a small problem (float64)."""
    torch.manual_seed(1)
    b, h, t, f, d, n = 2, 3, 96, 8, 5, u.shape[0]
    q, k = torch.rand(b, h, t, f, dtype=torch.float64), torch.rand(b, h, t, f, dtype=torch.float64)
    v = torch.rand(b, h, t, d, dtype=torch.float64) * 2 - 1
    cw = torch.rand(b, h, t, n, dtype=torch.float64) / n
    uu = u.to(torch.float64)
    a, r = retention(q, k, v, cw, uu, 32), naive(q, k, v, cw, uu)
    return ((a - r).norm() / r.norm()).item()


def step(fn, q, k, v, cw, u, w, chunk):
    for x in (q, k, v, cw):
        x.grad = None
    o = fn(q, k, v, cw, u, chunk)
    y = o[..., :-1] / (o[..., -1:] + 1e-6)
    (y * w).sum().backward()


def time_ms(fn, reps, *args):
    fn(*args)  # warm-up (and compilation)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", required=True, help="JSON list of the N shared rates u_n")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--check", action="store_true", help="only check the chunk form (float64)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(7)
    b, h, t, f, d, chunk = 4, 4, 2048, 64, 64, 64
    u = torch.tensor(json.loads(a.rates), dtype=torch.float32)
    if a.check:
        err = check(u)
        print(json.dumps({"chunk_vs_quadratic_rel_err": err}))
        raise SystemExit(0 if err < 1e-10 else 1)
    n = u.shape[0]
    sc = f ** -0.5
    q = (torch.rand(b, h, t, f) * sc).requires_grad_()
    k = (torch.rand(b, h, t, f) * sc).requires_grad_()
    v = (torch.rand(b, h, t, d) * 2 - 1).requires_grad_()
    cw = (torch.rand(b, h, t, n) / n).requires_grad_()
    w = torch.randn(b, h, t, d)
    before = load_avg()
    eager = time_ms(step, a.reps, retention, q, k, v, cw, u, w, chunk)
    compiled = None
    if not a.no_compile:
        fn = torch.compile(retention)
        compiled = time_ms(step, a.reps, fn, q, k, v, cw, u, w, chunk)
    print(json.dumps({
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "shape": {"b": b, "h": h, "t": t, "f": f, "d": d, "chunk": chunk, "nodes": n},
        "eager_fwd_bwd_ms": eager,
        "compile_fwd_bwd_ms": compiled,
        "load_avg_before": before,
        "load_avg_after": load_avg(),
        "pid": os.getpid(),
    }))


if __name__ == "__main__":
    main()
