"""Fig. 4a's measurement (Mixture-of-Recursions, paper 001, Sec. 3.3, Fig. 4a, Table 2): decode throughput of the
vanilla model (continuous sequence-wise batching) and the MoR / Recursive models (continuous depth-wise batching),
all through the book's one serving engine (`rlib.serving`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rlib.mor.config import MoRConfig, MoRVariant
from rlib.mor.experiments import MAIN, load_model
from rlib.mor.flops import relative_max_batch
from rlib.serving import Request, make_engine
from rlib.serving.workload import normal_lengths

__all__ = ["LENGTH_SD", "throughput_table"]

# App. D draws each request's generation length from a normal distribution with a mean of 256 and gives no spread:
# the book's spread is ours, a quarter of the mean (64 tokens at the paper's 256)
LENGTH_SD = 0.25


def throughput_table(cfg: MoRConfig, work: Path, results: list[dict],
                     repeats: int = 6, length_sd: float = LENGTH_SD) -> pd.DataFrame:
    """Fig. 4a's measurement: decode tokens/s of vanilla (continuous sequence-wise batching) and the MoR /
    Recursive models (continuous depth-wise batching), one engine (`rlib.serving`), on held-out prompts, at a fixed
    batch B and at the paper's "relative maximum batch" B / KV-memory ratio (Table 2).

    Measured in `repeats` rounds (6: the claims decide from `rlib.rounds.DECIDING_ROUNDS` = 5 rounds up, and the
    [min, max] of 6 holds the median with 96.9 %; 3 until 2026-12-07), each round running every model once back to
    back, so that a slow spell of a shared machine hits all models of a round alike: `speedup_vs_vanilla` is the
    median over rounds of the round's ratio to vanilla, `speedup_lo` / `speedup_hi` its smallest and largest (the
    spread a verdict must clear); throughputs are medians over rounds.

    Derived from the preset: 4 x `decode_windows` requests, each prompted with seq_len / 8 held-out tokens and
    generating a length drawn from a normal distribution with mean seq_len / 8 (App. D's 256 of a 2,048 context) and
    standard deviation `length_sd` x the mean (`LENGTH_SD`, ours: the paper gives none; 0 gives every request
    the same length), the same requests for every model;
    B = batch_size / 2. MoR EC runs at the main Nr ("MoR EC") and at each of `extra_recursions` ("MoR-<Nr> EC"), as
    Fig. 4a compares Nr = 2, 3, 4; `nr` is each row's recursion count (0 for vanilla)."""
    if repeats < 1:
        raise ValueError(f"repeats={repeats} must be >= 1")
    n_req, length, batch = 4 * cfg.decode_windows, max(2, cfg.seq_len // 8), max(1, cfg.batch_size // 2)
    prompts = cfg.text().heldout("test", n_req, seed=3)[:, :length]  # [n_req, length]
    new_tokens = normal_lengths(n_req, length, length_sd * length, seed=3)
    requests = [Request(i, prompts[i].tolist(), new_tokens[i]) for i in range(n_req)]
    max_len = length + max(new_tokens) + 1
    nll = {r["name"]: r["after"]["nll"] for r in results}
    specs = {"Vanilla": None, "Recursive": MAIN["rec"](cfg.n_recursions), "MoR EC": MAIN["ec"](cfg.n_recursions),
             "MoR EC KV share": MAIN["ec-share"](cfg.n_recursions), "MoR TC": MAIN["tc"](cfg.n_recursions),
             **{f"MoR-{nr} EC": MAIN["ec"](nr) for nr in cfg.extra_recursions}}  # Fig. 4a's other depths
    engines = []  # (label, setting, max_batch, name, engine), vanilla first
    for label, spec in specs.items():
        name = MoRVariant(spec, "flops", cfg.seeds[0]).name
        model = load_model(work, name)
        settings = [("B", batch)] + ([("B = Max", relative_max_batch(spec, batch))] if spec is not None else [])
        engines += [(label, setting, max_batch, name, make_engine(model, max_batch, max_len))
                    for setting, max_batch in settings]
    rounds = [[engine.run(requests) for *_, engine in engines] for _ in range(repeats)]  # [repeats][engines]
    rows = []
    for i, (label, setting, max_batch, name, _) in enumerate(engines):
        runs = [r[i] for r in rounds]
        ratios = [r[i].decode_tokens_per_s / r[0].decode_tokens_per_s for r in rounds]
        spec = specs[label]
        rows.append({"model": label, "nr": 0 if spec is None else spec.n_recursions, "setting": setting,
                     "max_batch": max_batch, "nll": nll[name],
                     "decode_tokens_per_s": float(np.median([x.decode_tokens_per_s for x in runs])),
                     "tokens_per_s": float(np.median([x.tokens_per_s for x in runs])),
                     "mean_depth": runs[0].mean_exit_loop, "mean_busy": runs[0].mean_busy,
                     "speedup_vs_vanilla": float(np.median(ratios)), "speedup_lo": min(ratios),
                     "speedup_hi": max(ratios), "rounds": repeats, "requests": n_req,
                     "new_tokens_mean": float(np.mean(new_tokens)), "new_tokens_sd": float(np.std(new_tokens))})
    return pd.DataFrame(rows)
