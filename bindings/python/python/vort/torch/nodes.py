"""Node weights c_n(α) of a certified node table from the Rust core, differentiable in α."""

from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np
import torch
from torch import Tensor, nn


class NodeWeights(nn.Module):
    """c_n(α) [..., N] of a node table from the Rust core, differentiable in α.

    As in the Rust layer (``vort::retention::node_weights``), the value is the table's and its
    derivative the table's dc/dα: the shared memory's cubic Hermite table (value clamped at 0,
    derivative 0 outside [δ, 1]), the banks' linear split (derivative 0 outside the grid), a
    single order's constant weights.
    """

    # buffers (register_buffer), declared for the type checker
    u: Tensor
    grid: Tensor
    weights: Tensor
    hc: Tensor
    hdc: Tensor

    def __init__(self, table: Dict[str, Any]):
        super().__init__()
        self.kind = table["kind"]
        self.horizon = int(table["horizon"])
        self.max_rel_error = float(table["max_rel_error"])
        self.register_buffer("u", torch.as_tensor(np.asarray(table["u"]), dtype=torch.float64))
        grid = np.asarray(table["grid"], dtype=np.float64)
        self.register_buffer("grid", torch.as_tensor(grid))
        self.register_buffer("weights", torch.as_tensor(np.asarray(table["weights"], dtype=np.float64)))
        if self.kind == "shared":
            self.a0 = float(table["hermite_a0"])
            self.h = float(table["hermite_h"])
            self.register_buffer("hc", torch.as_tensor(np.asarray(table["hermite_c"])))
            self.register_buffer("hdc", torch.as_tensor(np.asarray(table["hermite_dc"])))

    @property
    def n(self) -> int:
        return int(self.u.shape[0])

    def _value_slope(self, a: Tensor) -> Tuple[Tensor, Tensor]:
        """Value and dc/dα at the orders a (no graph), in float64."""
        if self.kind == "shared":
            points = self.hc.shape[0]
            hi = self.a0 + self.h * (points - 1)
            inside = (a >= self.a0) & (a <= hi)
            ac = torch.nan_to_num(a, nan=self.a0).clamp(self.a0, hi)
            pos = (ac - self.a0) / self.h
            i = pos.floor().long().clamp(max=points - 2)
            s = (pos - i.to(pos.dtype)).unsqueeze(-1)
            s2, s3 = s * s, s * s * s
            h00, h10 = 2 * s3 - 3 * s2 + 1, s3 - 2 * s2 + s
            h01, h11 = -2 * s3 + 3 * s2, s3 - s2
            d00, d10 = 6 * s2 - 6 * s, 3 * s2 - 4 * s + 1
            d01, d11 = -6 * s2 + 6 * s, 3 * s2 - 2 * s
            hc, hdc = self.hc.to(torch.float64), self.hdc.to(torch.float64)
            c0, c1, g0, g1 = hc[i], hc[i + 1], hdc[i], hdc[i + 1]
            h = self.h
            val = (h00 * c0 + h10 * h * g0 + h01 * c1 + h11 * h * g1).clamp(min=0.0)
            der = (d00 * c0 + d01 * c1) / h + d10 * g0 + d11 * g1
            return val, der * inside.unsqueeze(-1).to(der.dtype)
        grid, weights = self.grid.to(torch.float64), self.weights.to(torch.float64)
        g = grid.shape[0]
        if g == 1:
            val = weights[0].expand(*a.shape, self.n)
            return val, torch.zeros_like(val)
        lo, hi = float(grid[0]), float(grid[-1])
        outside = (a < lo) | (a > hi) | torch.isnan(a)
        ac = torch.nan_to_num(a, nan=lo).clamp(lo, hi)
        i = (torch.searchsorted(grid, ac.contiguous(), right=True) - 1).clamp(0, g - 2)
        da = grid[i + 1] - grid[i]
        theta = ((ac - grid[i]) / da).unsqueeze(-1)
        wl, wr = weights[i], weights[i + 1]
        inv = torch.where(outside, torch.zeros_like(da), 1.0 / da).unsqueeze(-1)
        return wl + theta * (wr - wl), (wr - wl) * inv

    def forward(self, alpha: Tensor) -> Tensor:
        """c_n(α) [..., N] in α's dtype and device; the gradient w.r.t. α is dc/dα."""
        with torch.no_grad():
            val, der = self._value_slope(alpha.detach().to(torch.float64))
        val, der = val.to(alpha.dtype), der.to(alpha.dtype)
        # value of the table, first derivative dc/dα (the Rust layer's affine form)
        return val + (alpha - alpha.detach()).unsqueeze(-1) * der
