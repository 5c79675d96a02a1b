"""Where an uptraining step of chapters 01-02 goes on a CPU, and what two changes to it would save (issue 27).

Chapters 01, 02, 03 (up-training) and 05 (continual pretraining) spend most of their time in one kind of step: a
SmolLM2-135M model, looped or not, trained under bf16 autocast at the cpu preset's shapes (4 x 128 tokens per step).
This script times that step as `rlib.train` takes it (accelerate's autocast, `_train_step`, AdamW over the book's
parameter groups) beside two variants, in paired rounds (each round runs every variant once, back to back, so a slow
spell of a shared machine hits all of a round alike), and prints each variant's median ratio to the current step
with its order-statistic interval (`rlib.rounds`; the smallest and largest round below 6 rounds):

    current           the step as the book trains today (`rlib.train.make_optimizer`: AdamW's fused kernel, one
                      update per parameter tensor; SDPA's own choice of CPU kernel: a flash kernel whose backward is
                      slow at T = 128)
    foreach_adamw     AdamW's multi-tensor "foreach" update (~10 ops over all tensors): the book's step until
                      2026-12-01, when the fused kernel measured 0.878x [0.69, 0.99] of its time here (4 rounds)
    math_attention    the current step with SDPA's math backend (two batched matrix products and a softmax)
                      instead of the flash kernel

It also prints the operator profile of the current step (self time per ATen op), which says where the rest goes.
Both variants change the numbers (the loss drift column says how far a few steps take them apart): adopting one
re-keys every chapter's runs (`rlib.train` and `rlib.model.layers` are in their code digests) and needs the book
re-run, as the fused AdamW did.

    .venv/bin/python benchmarks/uptrain_step.py                 # about 4 minutes on 2 cores
    .venv/bin/python benchmarks/uptrain_step.py --rounds 3 --steps 2 --profile-steps 0
    .venv/bin/python benchmarks/uptrain_step.py --side-by-side 2 --steps 4

`--side-by-side W` asks instead how a grid of these runs should share the CPU: the steps per second of the current
step in one process with W torch threads against W one-thread processes stepping at once (`rlib.grid_workers`'
layout, which chapter 04's grids use), measured in this invocation.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from rlib.rounds import coverage, median_interval  # noqa: E402

VARIANTS = ("current", "foreach_adamw", "math_attention")


def _build(variant: str, cfg, source):
    """A fresh model, optimizer and step closure for `variant`, set up as `rlib.recursive.experiments.run_variant`
    and `rlib.train.train` set up chapter 01's main run (recursive B = 2, Stepwise, `cfg`: the cpu preset)."""
    from rlib import train as training
    from rlib.recursive import experiments

    run = next(v for v in experiments.variants(cfg) if v.name == "recursive-B2-stepwise-s0")
    model = run.build(source)
    train_cfg = cfg.train_config(run)
    accelerator = training._accelerator(train_cfg)
    optimizer = training.make_optimizer(model, train_cfg, fused=False if variant == "foreach_adamw" else None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: training.lr_factor(step, train_cfg))
    model, optimizer = accelerator.prepare(model, optimizer)
    model.train()
    windows = experiments.train_windows(cfg, cfg.train_corpus)
    accumulation = train_cfg.accumulation_steps(1)
    math = variant == "math_attention"
    attention = (lambda: sdpa_kernel(SDPBackend.MATH)) if math else contextlib.nullcontext
    state = {"step": 0}

    def step() -> float:
        i = state["step"]
        state["step"] += 1
        batch = list(range(i * train_cfg.batch_size, (i + 1) * train_cfg.batch_size))
        with attention():
            terms = training._train_step(accelerator, model, optimizer, scheduler, windows, batch, train_cfg,
                                         accumulation, i, None, ())
        return terms["loss"]

    return step


def _timed_steps(steps: int) -> float:
    """Seconds per current step after two warm-up steps, on a model built here (in this process's torch threads)."""
    from rlib.recursive import experiments
    from rlib.recursive.config import RecursiveConfig

    cfg = RecursiveConfig.preset("cpu")
    step = _build("current", cfg, experiments.load_source(cfg))
    step(), step()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - started) / steps


def side_by_side(steps: int, workers: int) -> None:
    from rlib.grid_workers import layout_throughput

    row = layout_throughput(_timed_steps, steps, workers)
    print(f"uptraining step: one {workers}-thread process {row['threaded_steps_per_s']:.3f} steps/s "
          f"({row['threaded_s']:.2f} s/step); {workers} one-thread processes at once {row['workers_steps_per_s']:.3f} "
          f"steps/s (each {statistics.median(row['worker_s']):.2f} s/step): {row['ratio']:.2f}x the throughput")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds (every variant once per round)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per variant and round")
    parser.add_argument("--profile-steps", type=int, default=2, help="steps of the current step under the profiler")
    parser.add_argument("--side-by-side", type=int, default=0, metavar="WORKERS",
                        help="compare one WORKERS-thread process with WORKERS one-thread processes at once")
    args = parser.parse_args(argv)
    if min(args.rounds, args.steps) < 1 or args.profile_steps < 0:
        parser.error(f"--rounds {args.rounds} and --steps {args.steps} must be >= 1, --profile-steps >= 0")
    from rlib import threads
    from rlib.recursive import experiments
    from rlib.recursive.config import RecursiveConfig

    threads.configure()
    if args.side_by_side:
        side_by_side(args.steps, args.side_by_side)
        return
    cfg = RecursiveConfig.preset("cpu")
    source = experiments.load_source(cfg)  # once: every variant converts its own copy
    steps, losses = {}, {}
    for variant in VARIANTS:
        steps[variant] = _build(variant, cfg, source)
        losses[variant] = [steps[variant]() for _ in range(2)]  # warm-up: kernels picked, optimizer state made
    tokens = cfg.batch_size * cfg.seq_len
    seconds = {variant: [] for variant in VARIANTS}
    for _ in range(args.rounds):
        for variant in VARIANTS:
            started = time.perf_counter()
            for _ in range(args.steps):
                losses[variant].append(steps[variant]())
            seconds[variant].append((time.perf_counter() - started) / args.steps)
    print(f"uptraining step, chapter 01's recursive B = 2 model, {cfg.batch_size} x {cfg.seq_len} tokens, "
          f"{cfg.precision}, {torch.get_num_threads()} threads; {args.rounds} paired rounds of "
          f"{args.steps} steps")
    interval = f"[{100 * coverage(args.rounds):.0f} % interval]"
    print(f"{'variant':<16}{'s / step':>10}{'tokens/s':>10}{'vs current':>12}{interval:>18}{'loss drift':>12}")
    for variant in VARIANTS:
        ratio, lo, hi = median_interval([mine / now for mine, now in zip(seconds[variant], seconds["current"])])
        drift = max(abs(a - b) for a, b in zip(losses[variant], losses["current"]))  # same init, batches and lr
        median = statistics.median(seconds[variant])
        print(f"{variant:<16}{median:>10.3f}{tokens / median:>10.1f}{ratio:>12.3f}{f'[{lo:.3f}, {hi:.3f}]':>18}"
              f"{drift:>12.2e}")
    if args.profile_steps:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.profile_steps):
                steps["current"]()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
