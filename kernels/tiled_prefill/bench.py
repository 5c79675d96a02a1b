"""Latency of one layer's prefill vs sequence length (paper 002, Fig. 4 analog): the naive per-position loop,
the tiled schedule with PyTorch tiles, the tiled schedule with the Triton kernel (CUDA only: the interpreter
times Python), and a standard Transformer layer of the same shape. Forward only, no autograd, median of
`--repeats` after one warm-up; ratios are taken within this one run.

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

from kernels.tiled_prefill.reference import tile_traffic

MODES = ("naive", "tiled-reference", "tiled-triton", "transformer")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_layer(mode: str, n: int, d_model: int, heads: int, batch: int, device: torch.device, dtype: torch.dtype,
               repeats: int) -> float:
    """Median seconds of one forward of one layer over `n` positions."""
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

    times = []
    with torch.no_grad():
        for i in range(repeats + 1):
            _sync(device)
            start = time.perf_counter()
            once()
            _sync(device)
            if i:  # the first call warms up (and compiles the kernel)
                times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(lengths: list[int], d_model: int, heads: int, batch: int, device: str, dtype: str, repeats: int,
        modes: list[str]) -> pd.DataFrame:
    dev = torch.device(device)
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    if "tiled-triton" in modes and dev.type != "cuda":
        print("tiled-triton needs CUDA (the CPU interpreter would time Python): skipped", file=sys.stderr)
        modes = [m for m in modes if m != "tiled-triton"]
    rows = []
    for n in lengths:
        for mode in modes:
            seconds = time_layer(mode, n, d_model, heads, batch, dev, torch_dtype, repeats)
            rows.append({"n": n, "mode": mode, "seconds": seconds, "tokens_per_s": batch * n / seconds,
                         "d_model": d_model, "heads": heads, "batch": batch, "dtype": dtype,
                         "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                         "threads": torch.get_num_threads()})
            print(f"n={n:>6} {mode:<16} {seconds * 1e3:10.1f} ms", file=sys.stderr)
    table = pd.DataFrame(rows)
    naive = table[table["mode"] == "naive"].set_index("n")["seconds"]
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
    parser.add_argument("--out", type=Path, default=None, help="CSV to write (folders are created)")
    args = parser.parse_args(argv)
    bad = [n for n in args.lengths if n < 1]
    if bad:
        parser.error(f"--lengths {bad}: every length must be >= 1")
    table = run(args.lengths, args.d_model, args.heads, args.batch, args.device, args.dtype, args.repeats,
                args.modes)
    print(table.pivot(index="n", columns="mode", values="speedup_vs_naive").round(2).to_string())
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
