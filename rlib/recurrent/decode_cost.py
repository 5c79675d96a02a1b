"""The cost of decoding one token with a Recurrent Transformer vs its Transformer twin (paper 002, abstract and
Sec. 7.3: RT "preserves standard autoregressive decoding cost"; the paper leaves measured decoding latency to future
work, so the book measures it here).

Per generated token, a recurrent layer does everything a Transformer layer does (queries and the temporary pair,
attention, MLP) and then projects its output to the persistent pair (Eq. 1-2): two more K/V projections and norms.
`decode_cost_table` measures both parts of that statement for the language models' deep shape:

    macs_per_token     multiply-accumulates of one `decode_step`, counted by torch's FlopCounterMode (so what ran,
                       not a formula), with and without the shared head
    ms_per_token       wall time of one decode step at a context of `context` tokens, the median over repeats of a
                       run of `steps` steps; the two blocks are timed alternately in one process so that machine
                       drift hits both
    ms_per_token_ratio the median over paired rounds of the round's RT / T time (each round times every model back
                       to back, so a slow spell of a shared machine hits both alike), with `ms_per_token_ratio_lo`
                       / `_hi` its distribution-free 95 % interval (`rlib.rounds.median_interval`: order
                       statistics; the smallest and largest round below 6 rounds), the spread a verdict must clear
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Mapping

import pandas as pd
import torch
from torch.utils.flop_counter import FlopCounterMode

from rlib.recurrent.config import RTConfig
from rlib.recurrent.model import RTCache, RTModel
from rlib.rounds import median_interval

__all__ = ["BLOCKS", "count_decode_macs", "decode_cost_table", "time_decode"]

BLOCKS = ("recurrent", "transformer")


def _prefilled(model: RTModel, batch: int, context: int, capacity: int) -> tuple[torch.Tensor, RTCache]:
    """A random prompt [batch, context] prefilled into a cache of `capacity` tokens; returns the next token ids."""
    ids = torch.randint(0, model.config.vocab_size, (batch, context), generator=torch.Generator().manual_seed(0))
    logits, cache = model(ids, return_cache=True, capacity=capacity)
    return logits[:, -1:].argmax(-1), cache  # [B, 1]


@torch.no_grad()
def count_decode_macs(model: RTModel, batch: int, context: int) -> dict[str, float]:
    """Multiply-accumulates per token of one decode step after `context` cached tokens: {"total", "head"} (the
    head is the shared output projection, the same for both blocks)."""
    token, cache = _prefilled(model, batch, context, context + 1)
    counter = FlopCounterMode(display=False)
    with counter:
        model.decode_step(token, cache)
    total = counter.get_total_flops() / 2 / batch
    head = model.config.d_model * model.config.vocab_size  # one [D] x [D, V] product per token
    return {"total": float(total), "head": float(head)}


@torch.no_grad()
def time_decode(model: RTModel, batch: int, context: int, steps: int) -> float:
    """Seconds per decode step, averaged over `steps` greedy steps after a prefill of `context` tokens."""
    token, cache = _prefilled(model, batch, context, context + steps)
    started = time.perf_counter()
    for _ in range(steps):
        token = model.decode_step(token, cache)[:, -1:].argmax(-1)
    return (time.perf_counter() - started) / steps


def decode_cost_table(configs: Mapping[str, RTConfig], batches: tuple[int, ...], context: int, steps: int = 32,
                      repeats: int = 5, seed: int = 0) -> pd.DataFrame:
    """One row per (shape, block, batch) of {shape label: RTConfig}: counted MACs per token and the median ms per
    token, with the ratio to the Transformer twin of the same shape (same parameters; random init, since the cost
    does not depend on the weights) and the ms ratio to the first shape's Transformer (the depth-for-width trade of
    Sec. 7.3: fewer, wider layers)."""
    if not configs or not batches or min(batches) < 1 or context < 1 or steps < 1 or repeats < 1:
        raise ValueError(f"configs={list(configs)}, batches={batches}, context={context}, steps={steps}, "
                         f"repeats={repeats}: name at least one shape, and every count must be >= 1")
    models = {(shape, block): RTModel(dataclasses.replace(config, block=block), seed=seed).eval()
              for shape, config in configs.items() for block in BLOCKS}
    rows = []
    for batch in batches:
        for model in models.values():  # warm-up: first calls allocate and pick kernels
            time_decode(model, batch, context, 2)
        times: dict[tuple[str, str], list[float]] = {key: [] for key in models}
        for _ in range(repeats):
            for key, model in models.items():
                times[key].append(time_decode(model, batch, context, steps))
        for (shape, block), model in models.items():
            macs = count_decode_macs(model, batch, context)
            seconds = times[(shape, block)]
            paired = [mine / twin for mine, twin in zip(seconds, times[(shape, "transformer")])]  # per round
            ratio, ratio_lo, ratio_hi = median_interval(paired)
            rows.append({"shape": shape, "block": block, "batch": batch, "context": context,
                         "n_layers": model.config.n_layers, "d_model": model.config.d_model,
                         "kv_floats_per_token": model.config.kv_floats_per_token(),
                         "macs_per_token": macs["total"], "macs_per_token_no_head": macs["total"] - macs["head"],
                         "ms_per_token": 1e3 * statistics.median(seconds) / batch,
                         "ms_per_step_spread": 1e3 * (max(seconds) - min(seconds)),
                         "ms_per_token_ratio": ratio, "ms_per_token_ratio_lo": ratio_lo,
                         "ms_per_token_ratio_hi": ratio_hi, "rounds": repeats})
    table = pd.DataFrame(rows)
    twin = table[table["block"] == "transformer"].set_index(["shape", "batch"])
    keys = pd.MultiIndex.from_frame(table[["shape", "batch"]])
    for column in ("macs_per_token", "macs_per_token_no_head"):
        table[f"{column}_ratio"] = table[column].to_numpy() / twin[column].reindex(keys).to_numpy()
    reference = twin.loc[next(iter(configs))]["ms_per_token"]
    table["ms_vs_first_transformer"] = table["ms_per_token"] / table["batch"].map(reference)
    return table
