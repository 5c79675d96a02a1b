"""Latency of one layer's prefill vs sequence length (paper 002, Fig. 4 analog): the naive per-position loop,
the tiled schedule with PyTorch tiles, the tiled schedule with the Triton kernel (CUDA only: the interpreter
times Python), and a standard Transformer layer of the same shape. Forward only, no autograd, median of
`--repeats` after one warm-up; ratios are taken within this one run.

Two GPU extras (the paper's Table 2 and its bandwidth question):

    --cuda-graphs    also time each mode replayed from one captured CUDA graph (Table 2: with vs without graphs);
                     a mode that cannot be captured gets NaN and the reason, not a crash
    --tile-updates   time the tile updates alone (every UpdateTile of the schedule on random inputs) and report the
                     bytes they must move per second, against a measured device-to-device copy: the achieved
                     fraction of usable memory bandwidth

    python -m kernels.tiled_prefill.bench --lengths 256 1024 4096 --out benchmarks/results/tiled_prefill_cpu.csv
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from kernels.tiled_prefill.reference import tile_traffic, tiles

MODES = ("naive", "tiled-reference", "tiled-triton", "transformer")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_layer(mode: str, n: int, d_model: int, heads: int, batch: int, device: torch.device, dtype: torch.dtype,
               repeats: int, cuda_graph: bool = False) -> float:
    """Median seconds of one forward of one layer over `n` positions (replayed from a CUDA graph if asked)."""
    from rlib.recurrent.config import RTConfig
    from rlib.recurrent.layer import RTLayer
    from rlib.recurrent.naive import naive_layer
    from rlib.recurrent.tiled import tiled_forward

    block = "transformer" if mode == "transformer" else "recurrent"
    layer = RTLayer(RTConfig(vocab_size=8, d_model=d_model, n_layers=1, n_heads=heads, block=block))
    layer = layer.to(device, dtype).eval()
    x = torch.randn(batch, n, d_model, device=device, dtype=dtype)
    positions = torch.arange(n, device=device)

    def once() -> None:
        if mode == "naive":
            naive_layer(layer, x, positions, cache="preallocated")
        elif mode == "transformer":
            layer.transformer_forward(x, positions)
        else:
            tiled_forward(layer, x, positions, impl=mode.split("-")[1])

    with torch.no_grad():  # the first call warms up (and compiles the kernel)
        return _timed(graphed(once, device) if cuda_graph else once, device, repeats)


def _timed(fn, device: torch.device, repeats: int) -> float:
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
                      impl: str, repeats: int) -> float:
    """Median seconds of every UpdateTile of the schedule for N = n on random inputs (no layer around them)."""
    from kernels.tiled_prefill import update_tile

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
        return _timed(once, device, repeats)


def copy_bandwidth(device: torch.device, megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes per second of a large device-to-device copy (read + write): the usable bandwidth reference."""
    src = torch.empty(megabytes * 2**20 // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    seconds = _timed(lambda: dst.copy_(src), device, repeats)
    return 2 * src.numel() * src.element_size() / seconds


def tile_update_table(lengths: list[int], d_model: int, heads: int, batch: int, device: str, dtype: str,
                      repeats: int, impls: list[str]) -> pd.DataFrame:
    """Per N and implementation: seconds of the tile updates, GB/s they must move, fraction of the copy bandwidth."""
    dev = torch.device(device)
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    reference_bps = copy_bandwidth(dev)
    rows = []
    for n in lengths:
        for impl in impls:
            seconds = time_tile_updates(n, d_model, heads, batch, dev, torch_dtype, impl, repeats)
            moved = batch * heads * tile_bytes(n, d_model // heads, torch.tensor([], dtype=torch_dtype).element_size())
            rows.append({"n": n, "impl": impl, "seconds": seconds, "gb_per_s": moved / seconds / 1e9,
                         "copy_gb_per_s": reference_bps / 1e9, "fraction_of_copy": moved / seconds / reference_bps,
                         "d_model": d_model, "heads": heads, "batch": batch, "dtype": dtype})
            print(f"tile updates n={n:>6} {impl:<10} {seconds * 1e3:10.2f} ms  {moved / seconds / 1e9:8.1f} GB/s "
                  f"({100 * moved / seconds / reference_bps:.0f} % of copy)", file=sys.stderr)
    return pd.DataFrame(rows)


def run(lengths: list[int], d_model: int, heads: int, batch: int, device: str, dtype: str, repeats: int,
        modes: list[str], cuda_graphs: bool = False) -> pd.DataFrame:
    dev = torch.device(device)
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    if "tiled-triton" in modes and dev.type != "cuda":
        print("tiled-triton needs CUDA (the CPU interpreter would time Python): skipped", file=sys.stderr)
        modes = [m for m in modes if m != "tiled-triton"]
    if cuda_graphs and dev.type != "cuda":
        print("--cuda-graphs needs CUDA: skipped", file=sys.stderr)
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
                print(f"n={n:>6} {label:<24} {seconds * 1e3:10.1f} ms {note}", file=sys.stderr)
    table = pd.DataFrame(rows)
    naive = table[(table["mode"] == "naive") & ~table["cuda_graph"]].set_index("n")["seconds"]
    table["speedup_vs_naive"] = [naive.get(n, float("nan")) / s for n, s in zip(table["n"], table["seconds"])]
    head_dim = d_model // heads
    table["naive_elements"] = [tile_traffic(n, head_dim, "naive")["elements"] for n in table["n"]]
    table["tiled_elements"] = [tile_traffic(n, head_dim, "tiled")["elements"] for n in table["n"]]
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--cuda-graphs", action="store_true", help="also time every mode replayed from a CUDA graph")
    parser.add_argument("--tile-updates", nargs="*", default=None, choices=["reference", "triton"],
                        help="also time the tile updates alone with these implementations (bandwidth table)")
    parser.add_argument("--out", type=Path, default=None, help="CSV to write (folders are created)")
    args = parser.parse_args(argv)
    bad = [n for n in args.lengths if n < 1]
    if bad:
        parser.error(f"--lengths {bad}: every length must be >= 1")
    table = run(args.lengths, args.d_model, args.heads, args.batch, args.device, args.dtype, args.repeats,
                args.modes, args.cuda_graphs)
    print(table.pivot_table(index="n", columns=["mode", "cuda_graph"], values="speedup_vs_naive").round(2).to_string())
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)
        print(f"wrote {args.out}")
    if args.tile_updates:
        updates = tile_update_table(args.lengths, args.d_model, args.heads, args.batch, args.device, args.dtype,
                                    args.repeats, args.tile_updates)
        print(updates[["n", "impl", "seconds", "gb_per_s", "fraction_of_copy"]].round(3).to_string(index=False))
        if args.out:
            path = args.out.with_name(args.out.stem + "_tile_updates.csv")
            updates.to_csv(path, index=False)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
