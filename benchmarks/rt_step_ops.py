"""Why a Recurrent Transformer trains slower than its Transformer twin on CPU (paper 002, Sec. 5-6: the tiled
forward and its reverse loop step the layer position by position): chapter 04's task training (`rlib.recurrent.
synthetic.fit` with the cpu preset's width, batch, learning rate and loss, on fuzzy recall) timed per step for both
blocks, with the ATen op calls one step issues (torch.profiler; nested calls counted) and the wall time per call,
measured in one run.

    .venv/bin/python benchmarks/rt_step_ops.py [--threads 1] [--steps 5]
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = RecurrentConfig.preset("cpu")
    rows = {block: measure(block, args.steps, cfg) for block in ("recurrent", "transformer")}
    for block, row in rows.items():
        print(f"{block:12s} {row['ms_per_step']:7.1f} ms/step  {row['aten_calls']:6d} ATen calls "
              f"({row['calls_per_position']:.0f} per position)  {row['us_per_call']:.1f} us per call")
    rt, tf = rows["recurrent"], rows["transformer"]
    print(f"recurrent / transformer: {rt['ms_per_step'] / tf['ms_per_step']:.2f}x the time, "
          f"{rt['aten_calls'] / tf['aten_calls']:.1f}x the op calls ({args.threads} thread(s))")


if __name__ == "__main__":
    main()
