"""The paper's hypothetical throughput of continuous depth-wise batching (Relaxed Recursive Transformers, Sec. 3.8,
App. E and K, Tables K.1 / K.2), as a scheduler simulation and in closed form, checked against the paper's numbers.

The paper did not run a batching engine: it timed one pass of the transformer blocks per token at batch 1 and at the
largest batch that fits (Table K.1), recorded at which loop every token of held-out text could exit (oracle: the
first loop whose argmax equals the last loop's), and simulated three schedulers (App. K):

    static   batches of M requests run until the longest one ends (finished rows still occupy their slot)
    csb      continuous sequence-wise batching: a finished request's slot is refilled at once (Orca / vLLM)
    cdb      continuous depth-wise batching: the slot unit is one pass through the shared block; a token leaves
             after its exit loop and the slot takes the next token or the next request, whatever its depth

With every slot busy, CDB's throughput is 1 / (t_block(M) * E[exit loop]) and CSB's is 1 / t_token(M). That closed
form reproduces the paper's CSB rows exactly, and inverting it on the CDB rows gives the mean exit loop the paper's
oracle must have produced (`paper_check`). The chapter then runs the same simulation on our measured block times
and our models' exit loops, next to the throughput the real engine (`rlib.serving`) measures.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

SCHEDULERS = ("static", "csb", "cdb")

# Table K.1 (A100 40GB, prefix 512 / decode 2048): transformer-block ms per token at the largest batch, and that
# batch; recursive and relaxed rows are per *block pass*. Transcribed from the paper (our inventory, A.11).
PAPER_K1 = pd.DataFrame(
    [("Gemma", 0, 0, 43, 0.616), ("Gemma", 2, 0, 43, 0.265), ("Gemma", 2, 64, 41, 0.323),
     ("Gemma", 2, 128, 41, 0.324), ("Gemma", 2, 256, 39, 0.372), ("Gemma", 2, 512, 39, 0.422),
     ("Gemma", 3, 0, 43, 0.182), ("TinyLlama", 0, 0, 329, 0.815), ("TinyLlama", 2, 0, 233, 0.413),
     ("TinyLlama", 2, 64, 211, 0.421), ("TinyLlama", 2, 512, 209, 0.428), ("Pythia", 0, 0, 53, 1.206),
     ("Pythia", 2, 0, 61, 0.606), ("Pythia", 2, 64, 63, 0.626), ("Pythia", 2, 512, 53, 0.702)],
    columns=["family", "blocks", "rank", "max_batch", "ms_per_token"])

# Table K.2: throughput (tokens/s) per dataset; blocks 0 = the vanilla full-size model; Agg(0.1) early-exit rows.
PAPER_K2 = pd.DataFrame(
    [("Gemma", 0, 0, "static", 655, 1228, 1357), ("Gemma", 0, 0, "csb", 1622, 1604, 1357),
     ("Gemma", 2, 0, "cdb", 3159, 3050, 2421), ("Gemma", 2, 64, "cdb", 2357, 2255, 1858),
     ("Gemma", 2, 128, "cdb", 2355, 2250, 1844), ("Gemma", 2, 256, "cdb", 2047, 1976, 1740),
     ("Gemma", 2, 512, "cdb", 1806, 1754, 1598), ("Gemma", 3, 0, "cdb", 3120, 3041, 2729),
     ("TinyLlama", 0, 0, "static", 1205, 1220, 1194), ("TinyLlama", 0, 0, "csb", 1227, 1225, 1194),
     ("TinyLlama", 2, 0, "cdb", 2038, 2023, 1933), ("TinyLlama", 2, 64, "cdb", 1733, 1719, 1617),
     ("TinyLlama", 2, 512, "cdb", 1716, 1702, 1581), ("Pythia", 0, 0, "static", 702, 785, 822),
     ("Pythia", 0, 0, "csb", 829, 827, 822), ("Pythia", 2, 0, "cdb", 1339, 1333, 1281),
     ("Pythia", 2, 64, "cdb", 1205, 1203, 1140), ("Pythia", 2, 512, "cdb", 1051, 1077, 1021)],
    columns=["family", "blocks", "rank", "batching", "SlimPajama", "RedPajama", "PG19"])
PAPER_DATASETS = ("SlimPajama", "RedPajama", "PG19")


def closed_form(ms_per_pass: float, mean_passes: float = 1.0) -> float:
    """Tokens/s with every slot busy: 1000 / (ms per token-pass x passes per token)."""
    return 1000.0 / (ms_per_pass * mean_passes)


def paper_check() -> pd.DataFrame:
    """Per K.2 row and dataset: the closed form's prediction (CSB: 1 / t_token) or the mean exit loop implied by the
    paper's number (CDB), with the K.1 timing it uses. Static rows need the length distribution and are listed
    without a prediction."""
    rows = []
    for r in PAPER_K2.itertuples():
        timing = PAPER_K1[(PAPER_K1.family == r.family) & (PAPER_K1.blocks == r.blocks) & (PAPER_K1["rank"] == r.rank)]
        ms = float(timing.ms_per_token.iloc[0])
        for dataset in PAPER_DATASETS:
            paper = float(getattr(r, dataset))
            row = {"family": r.family, "blocks": r.blocks, "rank": r.rank, "batching": r.batching,
                   "dataset": dataset, "ms_per_pass": ms, "paper_tok_s": paper}
            if r.batching == "csb":
                row["closed_form_tok_s"] = closed_form(ms)
                row["relative_error"] = row["closed_form_tok_s"] / paper - 1
            elif r.batching == "cdb":
                row["implied_mean_exit_loop"] = closed_form(ms) / paper
            rows.append(row)
    return pd.DataFrame(rows)


@dataclass
class SimResult:
    scheduler: str
    tokens: int
    seconds: float
    passes: int  # block passes (cdb) or full-model steps (static, csb)
    mean_busy: float  # average occupied slots per pass

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def simulate(exit_loops: Sequence[Sequence[int]], max_batch: int, pass_seconds: Callable[[int], float],
             scheduler: str, n_loops: int = 1) -> SimResult:
    """Run one scheduler over a queue of requests (all queued at time 0, as in the paper).

    exit_loops[i][t] is the loop (1..n_loops) after which token t of request i exits; for `static` and `csb` only
    the lengths matter and every token costs one full-model step. `pass_seconds(b)` is the time of one pass at
    batch b: one full-model step for static/csb, one pass of the shared block for cdb.
    """
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler={scheduler!r}: choose from {SCHEDULERS}")
    if max_batch < 1:
        raise ValueError(f"max_batch={max_batch} must be >= 1")
    lengths = [len(r) for r in exit_loops]
    if any(n == 0 for n in lengths):
        raise ValueError("every request needs at least one token")
    if scheduler == "static":
        seconds, passes, busy = 0.0, 0, 0
        for start in range(0, len(lengths), max_batch):
            group = lengths[start:start + max_batch]
            steps = max(group)
            seconds += steps * pass_seconds(len(group))  # finished rows still ride along (padding)
            passes += steps
            busy += steps * len(group)
        return SimResult(scheduler, sum(lengths), seconds, passes, busy / passes)
    loops_of = [list(r) for r in exit_loops] if scheduler == "cdb" else [[1] * n for n in lengths]
    if scheduler == "cdb" and any(not 1 <= j <= n_loops for r in loops_of for j in r):
        raise ValueError(f"exit loops must lie in 1..n_loops={n_loops}")
    queue = deque(range(len(loops_of)))
    slots: list[list[int] | None] = [None] * max_batch  # [request, token index, loops done]
    seconds, passes, busy_sum, emitted = 0.0, 0, 0, 0
    while queue or any(slots):
        for s in range(max_batch):
            if slots[s] is None and queue:
                slots[s] = [queue.popleft(), 0, 0]
        busy = [s for s in range(max_batch) if slots[s] is not None]
        seconds += pass_seconds(len(busy))
        passes += 1
        busy_sum += len(busy)
        for s in busy:
            req, tok, done = slots[s]
            done += 1
            if done == loops_of[req][tok]:
                emitted += 1
                tok, done = tok + 1, 0
            slots[s] = None if tok == len(loops_of[req]) else [req, tok, done]
    return SimResult(scheduler, emitted, seconds, passes, busy_sum / passes)


def per_batch_timing(batches: Sequence[int], seconds: Sequence[float]) -> Callable[[int], float]:
    """pass_seconds(b) from measured (batch, seconds per pass) points, linear in between, flat beyond the ends."""
    xs, ys = np.asarray(batches, dtype=float), np.asarray(seconds, dtype=float)
    order = np.argsort(xs)
    xs, ys = xs[order], ys[order]
    return lambda b: float(np.interp(b, xs, ys))
