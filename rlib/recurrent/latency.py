"""Latency of one Recurrent Transformer layer's prefill vs sequence length (paper 002, Fig. 4 and Table 2 analogs).

Modes, each timed in the same run (forward only, no autograd, median of `repeats` after one warm-up):

    naive             the per-position loop with a preallocated cache (`rlib.recurrent.naive`)
    tiled-reference   the exact tiled schedule with PyTorch tiles (`rlib.recurrent.tiled`)
    tiled-triton      the same schedule with the Triton UpdateTile (CUDA only: the interpreter times Python)
    transformer       a standard causal layer of the same shape (the parallel reference cost)

With `cuda_graphs=True` (CUDA only) every mode is also replayed from one captured CUDA graph: the tiled modes
through `GraphedPrefill` (the whole layer's schedule in one graph, Table 2's setting), the others by capturing
their call. A mode that cannot be captured gets NaN and the reason, not a crash.

    python -m rlib.recurrent.latency --lengths 512 2048 --d-model 1024 --heads 16 --batch 32 --dtype bf16 --cuda-graphs
"""

from __future__ import annotations

import sys

import pandas as pd
import torch

from kernels.lora_batch import triton_available
from kernels.tiled_prefill.bench import DTYPES, graphed, parse_shape_args, shape_parser, timed, write_table
from kernels.tiled_prefill.reference import tile_traffic
from rlib.recurrent.config import RTConfig
from rlib.recurrent.graphed import GraphedPrefill
from rlib.recurrent.layer import RTLayer
from rlib.recurrent.naive import naive_layer
from rlib.recurrent.tiled import tiled_forward

__all__ = ["MODES", "layer_for", "run", "time_layer"]

MODES = ("naive", "tiled-reference", "tiled-triton", "transformer")


def layer_for(mode: str, d_model: int, heads: int, device: torch.device, dtype: torch.dtype, seed: int = 0) -> RTLayer:
    """A random one-layer model of this shape (ALiBi, the paper's MLP 4D) for `mode`."""
    torch.manual_seed(seed)
    block = "transformer" if mode == "transformer" else "recurrent"
    layer = RTLayer(RTConfig(vocab_size=8, d_model=d_model, n_layers=1, n_heads=heads, block=block))
    return layer.to(device, dtype).eval()


def _call(mode: str, layer: RTLayer, x: torch.Tensor, positions: torch.Tensor):
    """One forward of `mode` -> a zero-argument callable."""
    if mode == "naive":
        return lambda: naive_layer(layer, x, positions, cache="preallocated")
    if mode == "transformer":
        return lambda: layer.transformer_forward(x, positions)
    return lambda: tiled_forward(layer, x, positions, impl=mode.split("-")[1])


def time_layer(mode: str, n: int, d_model: int, heads: int, batch: int, device: torch.device, dtype: torch.dtype,
               repeats: int, cuda_graph: bool = False) -> float:
    """Median seconds of one forward of one layer over `n` positions (replayed from a CUDA graph if asked)."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: choose from {MODES}")
    layer = layer_for(mode, d_model, heads, device, dtype)
    x = torch.randn(batch, n, d_model, device=device, dtype=dtype)
    positions = torch.arange(n, device=device)
    with torch.no_grad():  # the first call warms up (and compiles the kernel)
        if cuda_graph and mode.startswith("tiled"):
            prefill = GraphedPrefill(layer, batch, n, dtype, positions, impl=mode.split("-")[1])
            prefill.x.copy_(x)
            return timed(prefill.replay, device, repeats)
        fn = _call(mode, layer, x, positions)
        return timed(graphed(fn, device) if cuda_graph else fn, device, repeats)


def run(lengths: list[int], d_model: int, heads: int, batch: int, device: str, dtype: str, repeats: int,
        modes: list[str], cuda_graphs: bool = False, log=print, interpreted: bool = False) -> pd.DataFrame:
    """Per N, mode and graph setting: seconds, tokens/s and the speedup over the eager naive loop of the same N.

    `interpreted=True` keeps tiled-triton on CPU under TRITON_INTERPRET=1 (a dry run of the code path; its time
    measures the interpreter, not the kernel)."""
    dev = torch.device(device)
    torch_dtype = DTYPES[dtype]
    if "tiled-triton" in modes and dev.type != "cuda" and not (interpreted and triton_available(dev)):
        log("tiled-triton needs CUDA (the CPU interpreter would time Python): skipped")
        modes = [m for m in modes if m != "tiled-triton"]
    if cuda_graphs and dev.type != "cuda":
        log("--cuda-graphs needs CUDA: skipped")
        cuda_graphs = False
    rows = []
    for n in lengths:
        for mode in modes:
            for graph in (False, True) if cuda_graphs else (False,):
                try:
                    seconds, note = time_layer(mode, n, d_model, heads, batch, dev, torch_dtype, repeats, graph), ""
                except RuntimeError as error:  # a mode whose Python control flow cannot be captured
                    seconds, note = float("nan"), str(error).splitlines()[0][:200]
                rows.append({"n": n, "mode": mode, "cuda_graph": graph, "seconds": seconds,
                             "tokens_per_s": batch * n / seconds, "d_model": d_model, "heads": heads, "batch": batch,
                             "dtype": dtype, "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                             "threads": torch.get_num_threads(), "note": note})
                label = f"{mode}{' (graph)' if graph else ''}"
                log(f"n={n:>6} {label:<24} {seconds * 1e3:10.1f} ms {note}")
    table = pd.DataFrame(rows)
    naive = table[(table["mode"] == "naive") & ~table["cuda_graph"]].set_index("n")["seconds"]
    table["speedup_vs_naive"] = [naive.get(n, float("nan")) / s for n, s in zip(table["n"], table["seconds"])]
    head_dim = d_model // heads
    table["naive_elements"] = [tile_traffic(n, head_dim, "naive")["elements"] for n in table["n"]]
    table["tiled_elements"] = [tile_traffic(n, head_dim, "tiled")["elements"] for n in table["n"]]
    return table


def main(argv: list[str] | None = None) -> int:
    parser = shape_parser(__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    args = parse_shape_args(parser, argv)
    table = run(args.lengths, args.d_model, args.heads, args.batch, args.device, args.dtype, args.repeats,
                args.modes, args.cuda_graphs, log=lambda line: print(line, file=sys.stderr))
    print(table.pivot_table(index="n", columns=["mode", "cuda_graph"], values="speedup_vs_naive").round(2).to_string())
    write_table(table, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
