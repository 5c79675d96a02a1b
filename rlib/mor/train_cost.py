"""Sec. 3.1's fixed-token efficiency (Mixture-of-Recursions, paper 001): training time and peak memory of MoR-2
expert-choice against vanilla at equal tokens.

The paper, on its 360M models trained on 20B tokens at 2K context: "compared to the vanilla baseline, our model
reduces training time by 19% and cuts peak memory usage by 25%" (Table 3's fixed-token MoR-2 row). At equal tokens
both models take the same optimizer steps on batches of the same shape, so the ratio of training times is the ratio
of step times, and the peak is that of one training step: parameters, gradients, AdamW state and activations.

Both models are measured the same way as every training-cost comparison of the book (`rlib.train_cost`): each in a fresh
process that builds the model as the chapter's runs do (`experiments.make_model`) and trains it for `warmup + steps`
optimizer steps through `rlib.train.train` on the chapter's training windows with the chapter's recipe (precision, micro
batches, the MoR router-loss hook); the median timed step, the peak over the process's baseline and the training state's
bytes; every round measures each model once, the order alternating from round to round (vanilla then MoR, MoR then
vanilla, ...), and each ratio is over the same round's vanilla. `benchmarks/mor_train_speed.py` runs the same
measurement over more models:

    table = train_cost_table(cfg)            # one row per model and round, and the ratio columns
    summary = cost_summary(table)            # one row per model: medians and the per-round ratio spread
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from rlib import train_cost as cost
from rlib.mor.config import MoRConfig, MoRVariant
from rlib.mor.spec import MoRSpec

__all__ = ["MODELS", "PAPER_MEMORY_RATIO", "PAPER_TIME_RATIO", "MoRCostJob", "cost_summary", "measure_one",
           "step_seconds", "train_cost_table"]

# Sec. 3.1: "reduces training time by 19% and cuts peak memory usage by 25%"
PAPER_TIME_RATIO = 0.81
PAPER_MEMORY_RATIO = 0.75
MODELS: dict[str, MoRSpec | None] = {"Vanilla": None, "MoR-2 EC": MoRSpec.expert(2)}  # the paper's pair; vanilla first
REFERENCE = "vanilla"  # the ratio columns' name: "step_s / vanilla", ...


@dataclass(frozen=True)
class MoRCostJob:
    """One model of the chapter trained with the chapter's recipe (`rlib.train_cost.CostJob`); spec None: vanilla."""

    cfg: MoRConfig
    spec: MoRSpec | None

    def windows(self):
        return self.cfg.text().train_windows()

    def build(self, max_steps: int) -> tuple[Any, Any, list]:
        from rlib.mor.experiments import make_model, train_config
        from rlib.mor.model import MoRDecoder, MoRLoss

        variant = MoRVariant(self.spec, "tokens")
        model = make_model(variant, self.cfg, self.cfg.text().size)
        hooks = [MoRLoss()] if isinstance(model, MoRDecoder) else []
        return model, train_config(self.cfg, max_steps, variant.seed), hooks


def step_seconds(steps: int, cfg: MoRConfig, spec: MoRSpec | None) -> float:
    """Median seconds of `steps` training steps after one untimed step, in this process and its torch threads (for
    `rlib.grid_workers.layout_throughput`, which asks how a grid should share a CPU's cores)."""
    return cost.measure_in_process(MoRCostJob(cfg, spec), 1, steps)["step_s"]


def measure_one(cfg: MoRConfig, spec: MoRSpec | None, warmup: int, steps: int,
                timeout_s: int = 1800) -> dict[str, Any]:
    """One model's step time and peak memory in a fresh interpreter (`rlib.train_cost.measure_one`)."""
    what = "vanilla" if spec is None else spec.label()
    return cost.measure_one(MoRCostJob(cfg, spec), warmup, steps, what=what, timeout_s=timeout_s)


def train_cost_table(cfg: MoRConfig, rounds: int | None = None, warmup: int | None = None,
                     steps: int | None = None, models: dict[str, MoRSpec | None] | None = None) -> pd.DataFrame:
    """One row per model and round (the preset's `cost_rounds` rounds of `cost_warmup` untimed and `cost_steps` timed
    training steps, each in its own process, every model once a round, the order reversed every other round): step time,
    peak memory over the baseline, state memory, and each model's ratios to the same round's first model (`models`:
    label -> spec, None for vanilla; default `MODELS`, vanilla first)."""
    models = MODELS if models is None else models
    rounds = cfg.cost_rounds if rounds is None else rounds
    warmup = cfg.cost_warmup if warmup is None else warmup
    steps = cfg.cost_steps if steps is None else steps

    def columns(label: str) -> dict[str, Any]:
        spec = models[label]
        return {"nr": 0 if spec is None else spec.n_recursions, "batch_size": cfg.batch_size,
                "seq_len": cfg.seq_len, "tokens_per_step": cfg.tokens_per_step(), "warmup": warmup, "steps": steps}

    return cost.paired_rounds(list(models), lambda label: measure_one(cfg, models[label], warmup, steps), rounds,
                              REFERENCE, columns)


def cost_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per model: median step time and memory over rounds, and the median, min and max of its per-round ratios."""
    return cost.cost_summary(table, REFERENCE)
