"""Forward + backward of the `vort bench layer` shared case through vort.torch, two ways in one
process: VortRetention's torch chunk form (backend="torch") and the Rust fused op through the
torch custom op (backend="rust"). B=4, H=4, T=2048, F=D=64, chunk 64, the shared table at
delta 0.1, eps 1e-3, horizon 2048 (14 nodes); loss = sum(y * w) with y the normalised output;
the node weights are computed from alpha inside the timing, as vort does. float32, 2 threads,
median of 5 after one warm-up. Prints one JSON line. Run by bench/python/run.sh."""

import json
import os
import statistics
import time

import torch

from vort.torch import VortRetention


def load_avg():
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except OSError:
        return None


def main():
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    reps = int(os.environ.get("REPS", "5"))
    b, h, t, f, d, chunk = 4, 4, 2048, 64, 64, 64
    g = torch.Generator().manual_seed(7)
    sc = f**-0.5
    q = (torch.rand(b, h, t, f, generator=g) * sc).requires_grad_()
    k = (torch.rand(b, h, t, f, generator=g) * sc).requires_grad_()
    v = (torch.rand(b, h, t, d, generator=g) * 2 - 1).requires_grad_()
    a = torch.rand(b, h, t, generator=g).requires_grad_()
    w = torch.randn(b, h, t, d, generator=g)
    out = {"shape": {"b": b, "h": h, "t": t, "f": f, "d": d, "chunk": chunk}, "torch": torch.__version__,
           "threads": torch.get_num_threads(), "load_avg_before": load_avg()}
    for backend in ("torch", "rust"):
        ret = VortRetention(memory="shared", delta=0.1, eps=1e-3, horizon=t, chunk=chunk, backend=backend)
        out["nodes"] = ret.nodes.n

        def step():
            for x in (q, k, v, a):
                x.grad = None
            y, _ = ret(q, k, v, a)
            (y * w).sum().backward()

        step()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
        out[f"{backend}_fwd_bwd_ms"] = statistics.median(times)
    out["load_avg_after"] = load_avg()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
