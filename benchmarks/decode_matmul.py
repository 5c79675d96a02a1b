"""Few-token products on CPU: F.linear vs the products of `rlib.model.decode_matmul`, for one model's weight shapes.

Each weight shape is timed on enough distinct matrices to fill `--megabytes`, cycled, so the weights come from
memory as in decoding (a model's layers do not fit in the cache). Paths, for x [M, in] and W [out, in]:

    linear        F.linear(x, W)                          what nn.Linear does
    transposed    x @ W^T, with W^T a contiguous copy       decode_linear's path at M = 1
    weight_major  (W @ x^T)^T                             decode_linear's path at small M > 1
    decode        decode_linear (the path it picks)

Prints ms per product, GB/s of weight read, and each path's speedup over linear, measured in one run; --out writes
the table as CSV.

    .venv/bin/python benchmarks/decode_matmul.py --model smollm2-135m --out benchmarks/results/decode_matmul_cpu.csv
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from rlib.model.decode_matmul import decode_linear

SHAPES = {  # name -> (out, in) of each product in one layer, and the tied head
    "smollm2-135m": {"q/o": (576, 576), "k/v": (192, 576), "gate/up": (1536, 576), "down": (576, 1536),
                     "head": (49152, 576)},
}


def time_path(fn, weights, transposed, x, repeats: int) -> float:
    """Median seconds of one product over `repeats` passes through every copy."""
    times = []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        for w, wt in zip(weights, transposed):
            fn(x, w, wt)
        times.append((time.perf_counter() - started) / len(weights))
    return statistics.median(times[1:])


PATHS = {
    "linear": lambda x, w, wt: F.linear(x, w),
    "transposed": lambda x, w, wt: x @ wt,
    "weight_major": lambda x, w, wt: (w @ x.t()).t(),
    "decode": lambda x, w, wt: decode_linear(x, w, wt),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", choices=sorted(SHAPES))
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 2, 3, 4, 8, 16])
    parser.add_argument("--megabytes", type=float, default=256, help="weights cycled per shape (beyond the cache)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name, (out_features, in_features) in SHAPES[args.model].items():
        copies = max(1, int(args.megabytes * 2**20 / (4 * out_features * in_features)))
        weights = [torch.randn(out_features, in_features) for _ in range(copies)]
        transposed = [w.t().contiguous() for w in weights]
        for tokens in args.tokens:
            x = torch.randn(tokens, in_features)
            row = {"shape": name, "out": out_features, "in": in_features, "tokens": tokens}
            for path, fn in PATHS.items():
                row[f"{path}_ms"] = 1000 * time_path(fn, weights, transposed, x, args.repeats)
            row["decode_gb_s"] = 4 * out_features * in_features / row["decode_ms"] / 1e6
            for path in ("transposed", "weight_major", "decode"):
                row[f"{path}_speedup"] = row["linear_ms"] / row[f"{path}_ms"]
            rows.append(row)
            print(f"{name:8} M={tokens:<3} linear {row['linear_ms']:.3f} ms  transposed "
                  f"{row['transposed_speedup']:.2f}x  weight_major {row['weight_major_speedup']:.2f}x  decode "
                  f"{row['decode_speedup']:.2f}x ({row['decode_gb_s']:.1f} GB/s)", flush=True)
    table = pd.DataFrame(rows)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False, float_format="%.4g")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
