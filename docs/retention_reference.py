"""NumPy reference of `vort retention --form naive --memory shared` (docs/retention.md: "What `vort
retention` computes"). Usage: python3 retention_reference.py IN.safetensors OUT.safetensors
[--delta 0.1] [--eps-den 1e-6]; exits 0 when OUT's y matches to 1e-6 relative (max-norm)."""
import json, struct, sys
import numpy as np

def read(path):  # safetensors without the safetensors package: u64 header size, JSON, bytes
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head, data = json.loads(b[8 : 8 + n]), b[8 + n :]
    dt = {"F32": "<f4", "F64": "<f8"}
    return {k: np.frombuffer(data[m["data_offsets"][0] : m["data_offsets"][1]], dt[m["dtype"]])
            .reshape(m["shape"]).astype(np.float64) for k, m in head.items() if k != "__metadata__"}

def gl_weights(a, n):  # w_0 = 1, w_j = w_(j-1) (j - 1 + a) / j  =  Γ(j + a) / (Γ(a) Γ(j + 1))
    j = np.arange(1, n)
    return np.concatenate([[1.0], np.cumprod((j - 1 + a) / j)])

def retention(phi_q, phi_k, v, alpha, delta=0.1, eps_den=1e-6):
    t = len(alpha)
    a = np.maximum(alpha, delta)                     # orders below δ are clamped to δ
    K = np.zeros((t, t))                             # K[s, i] = w_(s-i)(α_i) for i <= s
    for i in range(t):
        K[i:, i] = gl_weights(a[i], t - i)           # lag 0 counts, with w_0 = 1
    A = K * (phi_q @ phi_k.T)                        # causal: K is lower triangular
    return (A @ v) / (A.sum(axis=1, keepdims=True) + eps_den)

if __name__ == "__main__":
    opt = dict(zip(sys.argv[3::2], map(float, sys.argv[4::2])))
    x, y = read(sys.argv[1]), read(sys.argv[2])["y"]
    ref = retention(x["phi_q"], x["phi_k"], x["v"], x["alpha"],
                    opt.get("--delta", 0.1), opt.get("--eps-den", 1e-6))
    err = np.abs(ref - y).max() / max(np.abs(ref).max(), 1e-300)
    print(f"max |y_ref - y| / max |y_ref| = {err:.2e}")
    sys.exit(0 if err < 1e-6 else 1)
