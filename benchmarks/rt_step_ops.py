"""Why a Recurrent Transformer trains slower than its Transformer twin on CPU (paper 002, Sec. 5-6: the tiled
forward and its reverse loop step the layer position by position): one training step of chapter 04's cpu task
model (one layer, d = 64, 4 heads, 64 positions, batch 64) timed for both blocks, with the ATen op calls the step
issues (torch.profiler; nested calls counted) and the wall time per call, measured in one run.

    .venv/bin/python benchmarks/rt_step_ops.py [--threads 1] [--steps 5]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from rlib.recurrent.config import RTConfig
from rlib.recurrent.synthetic import TaskModel
from rlib.recurrent.tasks import IGNORE, make_task


def measure(block: str, steps: int, seq_len: int = 64, batch: int = 64) -> dict[str, float]:
    data = make_task("fuzzy_recall", batch, seq_len, seed=0)
    ids, targets = data.inputs, data.train_targets  # [B, T] each
    config = RTConfig(vocab_size=data.vocab_size, d_model=64, n_layers=1, n_heads=4, block=block, alibi_max_bias=8.0)
    torch.manual_seed(0)
    model = TaskModel(config, data.head, seq_len, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def step() -> None:
        logits = model(ids)  # [B, T, V]
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for _ in range(2):  # warm-up
        step()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - started) / steps
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    calls = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
    return {"ms_per_step": seconds * 1e3, "aten_calls": calls, "calls_per_position": calls / seq_len,
            "us_per_call": seconds / calls * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = {block: measure(block, args.steps) for block in ("recurrent", "transformer")}
    for block, row in rows.items():
        print(f"{block:12s} {row['ms_per_step']:7.1f} ms/step  {row['aten_calls']:6d} ATen calls "
              f"({row['calls_per_position']:.0f} per position)  {row['us_per_call']:.1f} us per call")
    rt, tf = rows["recurrent"], rows["transformer"]
    print(f"recurrent / transformer: {rt['ms_per_step'] / tf['ms_per_step']:.2f}x the time, "
          f"{rt['aten_calls'] / tf['aten_calls']:.1f}x the op calls ({args.threads} thread(s))")


if __name__ == "__main__":
    main()
