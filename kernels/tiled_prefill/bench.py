"""Benchmark of the UpdateTile step alone (paper 002, Sec. 5-6): every tile update of one layer's schedule on random
inputs, PyTorch tiles vs the Triton kernel, eager or replayed from one CUDA graph, and the bytes the updates must move
per second against a measured device-to-device copy: the achieved fraction of usable memory bandwidth.

The whole layer (the per-position MLP and projections around the tiles, the naive loop, the Transformer layer) is
timed by `rlib.recurrent.latency`, which builds the layer; this module imports nothing from `rlib`.

    python -m kernels.tiled_prefill.bench --lengths 512 2048 --d-model 1024 --heads 16 --batch 32 --dtype bf16
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from kernels.tiled_prefill import update_tile
from kernels.tiled_prefill.reference import tiles

__all__ = ["DTYPES", "copy_bandwidth", "graphed", "parse_shape_args", "shape_parser", "tile_bytes", "tile_update_table",
           "time_tile_updates", "timed", "write_table"]

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, repeats: int) -> float:
    """Median seconds of fn() over `repeats` calls after one warm-up."""
    times = []
    for i in range(repeats + 1):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def graphed(fn, device: torch.device):
    """fn captured once into a CUDA graph -> a function replaying it (static inputs, as fn closes over them)."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm up allocations and kernel compilation outside the capture
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def tile_bytes(n: int, head_dim: int, element_size: int, accumulator_size: int = 4) -> int:
    """Bytes one (sequence, head) must move in the tile updates: per tile, T_q query rows, T key and T value rows in
    the input dtype, and T_q accumulator rows (d, plus the running max and denominator) read and written in fp32."""
    total = 0
    for q0, q1, k0, k1 in tiles(n):
        rows = q1 - q0
        total += element_size * (rows + 2 * (k1 - k0)) * head_dim + accumulator_size * 2 * rows * (head_dim + 2)
    return total


def time_tile_updates(n: int, d_model: int, heads: int, batch: int, device: torch.device, dtype: torch.dtype,
                      impl: str, repeats: int, cuda_graph: bool = False) -> float:
    """Median seconds of every UpdateTile of the schedule for N = n on random inputs (no layer around them)."""
    head_dim = d_model // heads
    gen = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(batch, heads, n, head_dim, generator=gen).to(device, dtype) for _ in range(3))
    acc = torch.zeros(batch, heads, n, head_dim, device=device)
    m = torch.zeros(batch, heads, n, device=device)
    den = torch.ones(batch, heads, n, device=device)
    schedule = tiles(n)

    def once() -> None:
        for q0, q1, k0, k1 in schedule:
            update_tile(q, k, v, acc, m, den, q0, q1, k0, k1, impl=impl)

    with torch.no_grad():
        return timed(graphed(once, device) if cuda_graph else once, device, repeats)


def copy_bandwidth(device: torch.device, megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes per second of a large device-to-device copy (read + write): the usable bandwidth reference."""
    src = torch.empty(megabytes * 2**20 // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    seconds = timed(lambda: dst.copy_(src), device, repeats)
    return 2 * src.numel() * src.element_size() / seconds


def tile_update_table(lengths: list[int], d_model: int, heads: int, batch: int, device: str, dtype: str,
                      repeats: int, impls: list[str], cuda_graphs: bool = False, copy_megabytes: int = 256,
                      log=print) -> pd.DataFrame:
    """Per N, implementation and graph setting: seconds of the tile updates, GB/s they must move, and the fraction
    of the measured copy bandwidth."""
    dev = torch.device(device)
    torch_dtype = DTYPES[dtype]
    if cuda_graphs and dev.type != "cuda":
        log("cuda graphs need CUDA: skipped")
        cuda_graphs = False
    reference_bps = copy_bandwidth(dev, copy_megabytes)
    element_size = torch.tensor([], dtype=torch_dtype).element_size()
    rows = []
    for n in lengths:
        moved = batch * heads * tile_bytes(n, d_model // heads, element_size)
        for impl in impls:
            for graph in (False, True) if cuda_graphs else (False,):
                seconds = time_tile_updates(n, d_model, heads, batch, dev, torch_dtype, impl, repeats, graph)
                rows.append({"n": n, "impl": impl, "cuda_graph": graph, "seconds": seconds,
                             "gb_per_s": moved / seconds / 1e9, "copy_gb_per_s": reference_bps / 1e9,
                             "fraction_of_copy": moved / seconds / reference_bps, "d_model": d_model, "heads": heads,
                             "batch": batch, "dtype": dtype})
                log(f"tile updates n={n:>6} {impl:<10}{' (graph)' if graph else '':8} {seconds * 1e3:10.2f} ms  "
                    f"{moved / seconds / 1e9:8.1f} GB/s ({100 * moved / seconds / reference_bps:.0f} % of copy)")
    return pd.DataFrame(rows)


def shape_parser(description: str) -> argparse.ArgumentParser:
    """The arguments of a prefill benchmark: lengths, one layer's shape, device, dtype, repeats, graphs, output."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="fp32", choices=list(DTYPES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cuda-graphs", action="store_true", help="also time each case replayed from a CUDA graph")
    parser.add_argument("--out", type=Path, default=None, help="CSV to write (folders are created)")
    return parser


def parse_shape_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    bad = [n for n in args.lengths if n < 1]
    if bad:
        parser.error(f"--lengths {bad}: every length must be >= 1")
    return args


def write_table(table: pd.DataFrame, out: Path | None) -> None:
    """The table as CSV at `out` (folders created; written under a temporary name, then renamed), if given."""
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    table.to_csv(tmp, index=False)
    os.replace(tmp, out)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    parser = shape_parser(__doc__.splitlines()[0])
    parser.add_argument("--impls", nargs="+", default=["reference", "triton"], choices=["reference", "triton"])
    args = parse_shape_args(parser, argv)
    impls = args.impls
    if "triton" in impls and args.device == "cpu":
        print("triton needs CUDA (the CPU interpreter would time Python): skipped", file=sys.stderr)
        impls = [i for i in impls if i != "triton"]
    table = tile_update_table(args.lengths, args.d_model, args.heads, args.batch, args.device, args.dtype,
                              args.repeats, impls, args.cuda_graphs, log=lambda line: print(line, file=sys.stderr))
    print(table[["n", "impl", "cuda_graph", "seconds", "gb_per_s", "fraction_of_copy"]].round(4).to_string(index=False))
    write_table(table, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
