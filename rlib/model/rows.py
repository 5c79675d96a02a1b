"""Running one shared block on rows that sit at different depths (continuous depth-wise batching).

Relaxed Recursive Transformers (Sec. 2.4, Fig. 3) batch tokens at different loops of the same shared block: row r
runs depth d_r = j_r K + k. The block's weights are the same for every row, but three things are per depth:

    adapters    the depth's LoRA on every linear map and its norm deltas (relaxation, Sec. 2.3)
    geometry    the depth's sliding window and rope theta (a looped Gemma 3 keeps the source's pattern per depth)
    keys/values the depth's own cache slot

`RowDepths` carries the first: passed as the step context's `depth`, it makes every `Projection` apply row r's
adapter through the depth-indexed multi-LoRA kernel (`kernels.lora_batch`) and every `RMSNorm` row r's delta.
`RowGeometry` precomputes the second per depth. The third is the serving engine's row-addressed KV store
(`rlib.serving.rows`). The decoder's own blocks then run unchanged: no second attention implementation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kernels.lora_batch import IMPLS, lora_batch, triton_available

__all__ = ["RowAdapters", "RowDepths", "RowGeometry"]


class RowAdapters:
    """Every per-depth adapter of a model, stacked once for row-wise use (inference; weights are detached).

    For a Projection with LoRA at some depths: A [n, R, in], B [n, out, R] over its adapters and a table depth ->
    adapter index (-1: none); with impl "stacked" (the default on a GPU) also [W; A_0; ...; A_n-1] for
    `kernels.lora_batch.triton_ops.lora_batch_stacked`. For an RMSNorm with deltas: deltas [n + 1, D] (row n is zero)
    and its table.
    """

    def __init__(self, model: nn.Module, n_depths: int, impl: str = "auto"):
        if impl not in (*IMPLS, "stacked"):
            raise ValueError(f"impl={impl!r}: choose from {(*IMPLS, 'stacked')}")
        if impl == "auto" and triton_available(next(model.parameters()).device):
            impl = "stacked"  # on a GPU: one GEMM for the base product and every depth's shrink, then the expand
        self.impl = impl
        self.loras: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.stacked: dict[int, object] = {}  # id(projection) -> StackedWeights, for impl "stacked"
        self.stacked_linear = None  # kernels.lora_batch.triton_ops.lora_batch_stacked, bound once (not per call)
        if impl == "stacked":
            from kernels.lora_batch.triton_ops import lora_batch_stacked, stack_weights

            self.stacked_linear = lora_batch_stacked
        self.norms: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for module in model.modules():
            if not len(getattr(module, "adapters", ())):
                continue
            depths = sorted(int(d) for d in module.adapters)
            device = next(module.parameters()).device
            table = torch.full((n_depths,), -1, dtype=torch.long, device=device)
            table[torch.tensor(depths, device=device)] = torch.arange(len(depths), device=device)
            first = module.adapters[str(depths[0])]
            if hasattr(first, "lora_a"):  # a Projection's depth-wise LoRA
                lora_a = torch.stack([module.adapters[str(d)].lora_a.detach() for d in depths])  # [n, R, in]
                lora_b = torch.stack([module.adapters[str(d)].lora_b.detach() for d in depths])  # [n, out, R]
                self.loras[id(module)] = (lora_a, lora_b, table)
                if impl == "stacked":
                    bias = None if module.bias is None else module.bias.detach()
                    self.stacked[id(module)] = stack_weights(module.weight.detach(), lora_a, bias)
            elif hasattr(first, "delta"):  # an RMSNorm's depth-wise delta
                deltas = [module.adapters[str(d)].delta.detach() for d in depths]
                zero = torch.zeros_like(deltas[0])
                table[table < 0] = len(depths)
                self.norms[id(module)] = (torch.stack([*deltas, zero]), table)  # [n + 1, D]

    def at(self, depths: torch.Tensor) -> RowDepths:
        return RowDepths(depths, self)


class RowDepths:
    """The `depth` of a step context whose rows sit at different depths: depths [b] (one per row)."""

    def __init__(self, depths: torch.Tensor, adapters: RowAdapters):
        self.depths, self.adapters = depths, adapters

    def linear(self, proj, x: torch.Tensor) -> torch.Tensor:
        """x [b, 1, in] -> [b, 1, out] with row r's adapter of depth depths[r]."""
        packed = self.adapters.loras.get(id(proj))
        if packed is None:
            return F.linear(x, proj.weight, proj.bias)
        lora_a, lora_b, table = packed
        rows = x.reshape(x.shape[0], -1)  # [b, in]
        stacked = self.adapters.stacked.get(id(proj))
        if stacked is not None:  # [b, out], a view into the stacked GEMM's [b, out + n R] output
            out = self.adapters.stacked_linear(rows.contiguous(), stacked, lora_b, table[self.depths],
                                               variant="per_row")
        else:
            out = lora_batch(rows, proj.weight, lora_a, lora_b, table[self.depths], proj.bias,
                             impl=self.adapters.impl)
        return out.view(*x.shape[:-1], -1)

    def norm(self, norm, x: torch.Tensor) -> torch.Tensor:
        """x [b, ...] normalised with row r's weight (the tied weight plus depth depths[r]'s delta)."""
        packed = self.adapters.norms.get(id(norm))
        if packed is None:
            return norm.scaled(x, norm.weight)
        deltas, table = packed
        weight = norm.weight + deltas[table[self.depths]]  # [b, D]
        return norm.scaled(x, weight.view(weight.shape[0], *([1] * (x.dim() - 2)), weight.shape[-1]))

    def __str__(self) -> str:  # never a key of a per-depth adapter dict
        return f"rows{tuple(self.depths.tolist())}"


class RowGeometry:
    """Per-depth rope tables and sliding windows of a decoder's plan, for rows at different depths and positions."""

    GLOBAL = 1 << 30  # the width of a global layer

    def __init__(self, decoder: nn.Module, max_len: int):
        param = next(decoder.parameters())
        device, dtype = param.device, param.dtype
        steps = decoder.plan.steps
        # a step's window is the block's own (a str marker), none (global) or a width
        windows = [decoder.blocks[s.block].attn.window if isinstance(s.window, str) else s.window for s in steps]
        thetas = [decoder.blocks[s.block].attn.theta if s.rope_theta is None else s.rope_theta for s in steps]
        distinct = sorted(set(thetas))
        self.has_windows = any(w is not None for w in windows)
        self.width = torch.tensor([self.GLOBAL if w is None else w for w in windows], device=device)  # [depths]
        self.theta_index = torch.tensor([distinct.index(t) for t in thetas], device=device)  # [depths]
        positions = torch.arange(max_len, device=device)[None]  # [1, T]
        tables = [decoder.rotary.cos_sin(positions, theta, dtype) for theta in distinct]  # [1, 1, T, D] each
        self.cos = torch.stack([cos[0, 0] for cos, _ in tables])  # [thetas, T, D]
        self.sin = torch.stack([sin[0, 0] for _, sin in tables])

    def rope(self, depths: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [b, 1, 1, D] for rows at depths [b] and positions [b]."""
        index = self.theta_index[depths]
        return self.cos[index, positions][:, None, None], self.sin[index, positions][:, None, None]

    def windows(self, depths: torch.Tensor) -> torch.Tensor | None:
        """Per-row sliding window widths [b], or None when every depth attends globally."""
        return self.width[depths] if self.has_windows else None
