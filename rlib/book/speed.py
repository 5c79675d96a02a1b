"""How fast this machine is right now, against the reference machine the budgets were set on.

Cell timeouts are budgets, and budgets were measured on a quiet 2-core machine. On a machine that is
slower, or busy with other work, a chapter takes longer without being wrong; the runner therefore
scales every cell's timeout by a *speed factor*: the time of a fixed, short matrix-multiply workload
(on torch's configured threads, the way the chapters compute) divided by its time on the reference.
It is measured right before each chapter, so load that starts mid-book is seen at the next chapter.

`python -m rlib.book speed` prints the measurement; to re-calibrate on a new reference machine, run it
there, quiet, and put its `seconds` into `REFERENCE_S`.
"""

from __future__ import annotations

import statistics
import time

# median seconds of one block below on the reference machine (the 2-core machine of the README's timings, torch
# threads 2, quiet; with two busy loops on its two cores the same block took 0.3-1 s)
REFERENCE_S = 0.031
_SIZE, _REPEATS, _BLOCKS = 384, 48, 7


def block_seconds() -> float:
    """The median time of identical blocks of float32 matrix products (about a quarter of a second in all, quiet)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(_SIZE, _SIZE, generator=gen)
    b = torch.randn(_SIZE, _SIZE, generator=gen)
    out = torch.empty(_SIZE, _SIZE)
    times = []
    with torch.inference_mode():
        a @ b  # warm-up: thread pool and caches
        for _ in range(_BLOCKS):
            t0 = time.perf_counter()
            for _ in range(_REPEATS):
                torch.mm(a, b, out=out)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def speed_factor() -> tuple[float, float]:
    """(factor, seconds): how many times slower than the reference this machine is now (never below 1)."""
    seconds = block_seconds()
    return max(1.0, seconds / REFERENCE_S), seconds
