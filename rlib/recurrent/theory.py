"""Theorem 4.1 of the Recurrent Transformer paper (002, Sec. 4, App. B): gradients of a uniform-attention RT layer.

The simplified layer has no MLP and no norms, residual scale alpha, value matrix V, and attends uniformly to the
t - 1 persistent pairs before position t and its own temporary pair:

    z_t = x_t + (alpha / t) (V x_t + sum_{s < t} V z_s)

Then dz_1/dx_1 = I + alpha V and, for t >= 2,

    dz_t/dx_1 = (1 / t!) sum_{k=1..t} c(t, k) (alpha V)^k

with c(t, k) the unsigned Stirling numbers of the first kind. Since sum_k c(t, k) = t!, the gradient is a convex
combination of powers of alpha V: it cannot explode when alpha V's spectral radius is below 1, and its k = 1 term
alpha V / t is the one-hop path a Transformer layer has, so it does not vanish faster either. `jacobian_table`
checks the closed form against autograd through the layer itself.
"""

from __future__ import annotations

import math

import pandas as pd
import torch

__all__ = ["closed_form", "jacobian_table", "stirling_first", "uniform_layer"]


def stirling_first(t: int) -> list[int]:
    """[c(t, 0), ..., c(t, t)]: permutations of t elements with exactly k cycles (c(t+1, k) = t c(t, k) + c(t, k-1))."""
    row = [1]
    for n in range(t):
        row = [(n * (row[k] if k < len(row) else 0)) + (row[k - 1] if k >= 1 else 0) for k in range(n + 2)]
    return row


def uniform_layer(x: torch.Tensor, value: torch.Tensor, alpha: float) -> torch.Tensor:
    """x [N, D] -> z [N, D] by the recurrence in the module docstring (positions 1-indexed there)."""
    outputs: list[torch.Tensor] = []
    for t in range(x.shape[0]):
        earlier = torch.stack(outputs).sum(0) if outputs else torch.zeros_like(x[0])
        outputs.append(x[t] + alpha / (t + 1) * (value @ x[t] + value @ earlier))
    return torch.stack(outputs)


def closed_form(t: int, value: torch.Tensor, alpha: float) -> torch.Tensor:
    """dz_t/dx_1 [D, D] by Theorem 4.1 (t >= 1, 1-indexed)."""
    eye = torch.eye(value.shape[0], dtype=value.dtype)
    if t == 1:
        return eye + alpha * value
    scaled, power, total = alpha * value, eye, torch.zeros_like(value)
    for k, count in enumerate(stirling_first(t)):
        if k:
            power = power @ scaled
            total = total + count * power
    return total / math.factorial(t)


def jacobian_table(dim: int = 6, n: int = 12, radii: tuple[float, ...] = (0.5, 0.9, 1.5),
                   seed: int = 0) -> pd.DataFrame:
    """For alpha V with each spectral radius (an orthogonal V scaled): ||closed form - autograd|| and the
    Frobenius norm of dz_t/dx_1 per position, fp64."""
    gen = torch.Generator().manual_seed(seed)
    orthogonal, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
    x = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    rows, alpha = [], 1.0  # the radius goes into V: the spectral radius of alpha V is `radius`
    for radius in radii:
        value = orthogonal * radius
        jac = torch.autograd.functional.jacobian(lambda inp, v=value: uniform_layer(inp, v, alpha), x)  # [N, D, N, D]
        for t in range(1, n + 1):
            auto = jac[t - 1, :, 0, :]
            error = float((closed_form(t, value, alpha) - auto).abs().max())
            rows.append({"radius": radius, "t": t, "max_abs_err": error, "grad_norm": float(auto.norm()),
                         "one_hop_norm": float((alpha * value / t).norm())})
    return pd.DataFrame(rows)
