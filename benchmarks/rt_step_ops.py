"""Why a Recurrent Transformer trains slower than its Transformer twin on CPU (paper 002, Sec. 5-6: the tiled
forward and its reverse loop step the layer position by position): chapter 04's task training (`rlib.recurrent.
synthetic.fit` with the cpu preset's width, batch, learning rate and loss, on fuzzy recall) timed per step for both
blocks at each thread count, with the ATen op calls one step issues (torch.profiler; nested calls counted) and the
wall time per call; then the throughput of two one-thread processes stepping at once (how chapter 04's grids run,
`rlib.grid_workers`) against one two-thread process. Everything measured in one run.

    .venv/bin/python benchmarks/rt_step_ops.py [--threads 1 2] [--steps 5]
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from rlib.grid_workers import layout_throughput
from rlib.recurrent.config import RecurrentConfig, RTConfig
from rlib.recurrent.synthetic import FitConfig, TaskModel, fit
from rlib.recurrent.tasks import make_task

TASK = "fuzzy_recall"


def measure(block: str, steps: int, cfg: RecurrentConfig) -> dict[str, float]:
    seq_len = dict(cfg.tasks)[TASK]
    d_model, heads = cfg.task_width
    data = make_task(TASK, cfg.task_batch * steps, seq_len, seed=0)
    config = RTConfig(vocab_size=data.vocab_size, d_model=d_model, n_layers=1, n_heads=heads, block=block,
                      alibi_max_bias=cfg.task_alibi_max_bias)
    torch.manual_seed(0)
    model = TaskModel(config, data.head, seq_len, seed=0)
    one_batch = data.subset(slice(0, cfg.task_batch))

    def train(part, epochs: int = 1) -> dict:
        return fit(model, part, FitConfig(epochs, cfg.task_batch, cfg.task_lr, loss_on=cfg.task_loss), desc=block)

    train(one_batch, epochs=2)  # warm-up
    seconds = train(data)["seconds"] / steps
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        train(one_batch)
    calls = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
    return {"ms_per_step": seconds * 1e3, "aten_calls": calls, "calls_per_position": calls / seq_len,
            "us_per_call": seconds / calls * 1e6}


def _recurrent_step_seconds(steps: int) -> float:
    """Seconds per RT task step at the cpu preset (in this process's torch threads)."""
    return measure("recurrent", steps, RecurrentConfig.preset("cpu"))["ms_per_step"] / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="torch thread counts to time, in one run (default: 1 and 2)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--side-by-side", type=int, default=2, metavar="WORKERS",
                        help="also time WORKERS one-thread processes at once against one WORKERS-thread process "
                             "(0: skip)")
    args = parser.parse_args()
    cfg = RecurrentConfig.preset("cpu")
    by_threads = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        rows = {block: measure(block, args.steps, cfg) for block in ("recurrent", "transformer")}
        by_threads[threads] = rows
        for block, row in rows.items():
            print(f"{threads} thread(s)  {block:12s} {row['ms_per_step']:7.1f} ms/step  {row['aten_calls']:6d} ATen "
                  f"calls ({row['calls_per_position']:.0f} per position)  {row['us_per_call']:.1f} us per call")
        rt, tf = rows["recurrent"], rows["transformer"]
        print(f"{threads} thread(s)  recurrent / transformer: {rt['ms_per_step'] / tf['ms_per_step']:.2f}x the time, "
              f"{rt['aten_calls'] / tf['aten_calls']:.1f}x the op calls")
    if len(by_threads) > 1:
        first, *others = sorted(by_threads)
        for threads in others:
            for block in ("recurrent", "transformer"):
                ratio = by_threads[threads][block]["ms_per_step"] / by_threads[first][block]["ms_per_step"]
                print(f"{block}: {threads} threads take {ratio:.2f}x the time per step of {first} "
                      f"(below 1: the extra threads help)")
    if args.side_by_side > 1:
        row = layout_throughput(_recurrent_step_seconds, args.steps * 4, args.side_by_side)
        worker_ms = 1e3 * sum(row["worker_s"]) / args.side_by_side
        print(f"recurrent, {args.side_by_side} one-thread processes at once: {row['workers_steps_per_s']:.1f} steps/s "
              f"({worker_ms:.1f} ms/step each) vs one {args.side_by_side}-thread process "
              f"{row['threaded_steps_per_s']:.1f} steps/s ({1e3 * row['threaded_s']:.1f} ms/step): "
              f"{row['ratio']:.2f}x the throughput (chapter 04's grids use the first layout, `rlib.grid_workers`)")


if __name__ == "__main__":
    main()
