"""One Recurrent Transformer layer's tiled prefill captured in one CUDA graph (paper 002, Sec. 6.2, Table 2).

The tiled forward (`rlib.recurrent.tiled.tiled_forward`, Algorithm 1) runs N sequential steps, each a handful of small
kernels (the post-attention block and the persistent projections on B tokens, then one UpdateTile); launched from
Python, the CPU's dispatch is the bottleneck (Table 2: 277 ms per layer eager vs 38.85 ms graphed at B = 32). Here
the whole layer's schedule (all N steps and every tile update) is captured once at fixed shapes and replayed with one
launch, as the paper's `cuda_graph: whole` does. The schedule has no data-dependent control flow and no host
synchronization, so the replay launches the same kernels in the same order as the eager call (tests compare the two,
and both with the naive loop; cuBLAS may choose another algorithm inside a capture, so they allow a few units in the
last place).

    prefill = GraphedPrefill(layer, batch=32, n=512, dtype=torch.bfloat16)   # warm-up + capture (CUDA only)
    out = prefill(x)            # x [B, N, D] copied into the static input; returns the static outputs (clone them)

Needs a CUDA device; on CPU the eager `tiled_forward` is the path (and is what the CPU tests check).
"""

from __future__ import annotations

import torch

from rlib.recurrent.layer import RTLayer
from rlib.recurrent.tiled import tiled_forward

__all__ = ["GraphedPrefill", "cuda_graphs_available"]


def cuda_graphs_available(device: torch.device | str) -> bool:
    """Whether `device` can capture CUDA graphs (a CUDA device that torch sees)."""
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


class GraphedPrefill:
    """`tiled_forward(layer, x, positions, impl)` for x [batch, n, D], captured once and replayed per call."""

    def __init__(self, layer: RTLayer, batch: int, n: int, dtype: torch.dtype | None = None,
                 positions: torch.Tensor | None = None, impl: str = "auto", warmup: int = 2):
        device = next(layer.parameters()).device
        if not cuda_graphs_available(device):
            raise RuntimeError(f"GraphedPrefill needs the layer on a CUDA device (it is on {device}); on CPU use "
                               "rlib.recurrent.tiled.tiled_forward")
        if batch < 1 or n < 1:
            raise ValueError(f"batch={batch} and n={n} must be >= 1")
        if layer.config.position == "rope":
            raise ValueError("GraphedPrefill captures ALiBi or position-free layers; the rotary table grows on the "
                             "host (position='rope'): use tiled_forward")
        self.layer, self.impl = layer, impl
        dtype = dtype or next(layer.parameters()).dtype
        self.x = torch.zeros(batch, n, layer.config.d_model, device=device, dtype=dtype)  # the static input
        self.positions = (torch.arange(n) if positions is None else positions).to(device).clone()
        if self.positions.shape != (n,):
            raise ValueError(f"positions must be [n={n}]; got {tuple(self.positions.shape)}")
        self.graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):  # compiles the kernels and settles the allocator outside the capture
            for _ in range(warmup):
                self._forward()
        torch.cuda.current_stream(device).wait_stream(stream)
        with torch.cuda.graph(self.graph):
            self.out = self._forward()  # the static outputs, rewritten by every replay

    def _forward(self) -> dict[str, torch.Tensor]:
        return tiled_forward(self.layer, self.x, self.positions, self.impl)

    def replay(self) -> dict[str, torch.Tensor]:
        """Run the captured schedule on whatever the static input `self.x` holds now."""
        self.graph.replay()
        return self.out

    def __call__(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """x [B, N, D] -> {z, k, v, a, lse} as `tiled_forward` (static buffers: the next call overwrites them)."""
        if x.shape != self.x.shape:
            raise ValueError(f"x has shape {tuple(x.shape)}; this graph was captured for {tuple(self.x.shape)} "
                             "(capture another GraphedPrefill for other shapes)")
        self.x.copy_(x)
        return self.replay()
