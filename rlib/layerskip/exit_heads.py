"""One shared exit head against a head per layer: the cost to train and to serve each (LayerSkip, paper 004, Sec. 2.1).

The paper: "While most papers that explored early exit ... trained a dedicated LM head for each transformer layer ...
we chose to have a shared LM head for all transformer layers in the model. This makes training faster, require less
memory consumption for both training and inference, and eases deployment and maintenance." (Sec. 2.1; Sec. 3 and 4.1.2
repeat that no head or module is added.) The paper gives no measurement; this module makes one on the chapter's
model and recipe.

`DedicatedExitHeads` is the alternative the sentence names (Elbayad et al. 2020; Schuster et al. 2022): a
`LayerSkipDecoder` whose early exits 0 .. L-2 each unembed through a head of their own (an untied V x D matrix,
initialized as a copy of the model's head, after the shared final norm); the last layer keeps the model's head.
Everything else (layer dropout, the early-exit loss and its curriculum, the trainer) is the chapter's LD+EE recipe,
so the head is the only difference. Eq. 6 weighs layer 0's exit by e(0) = 0, so its head gets no gradient and no
AdamW state; it still counts among the weights a server of every exit holds.

`head_cost_table(cfg)` measures both in paired rounds, each model's training steps in a fresh process
(`rlib.train_cost`): step time, peak memory over the process baseline, training-state bytes and parameters (the
weights a server of every exit holds). It does so under the chapter's curriculum (rotational: one early exit and
the last layer get a loss per step) and under Sec. 4.1.2's `all` curriculum (every exit every step), which bounds
how much a per-layer head can cost per step:

    table = head_cost_table(cfg)           # one row per (curriculum, head, round), ratios to the round's shared head
    summary = head_cost_summary(table)     # per (curriculum, head): medians and the per-round ratio spread
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from rlib import train_cost as cost
from rlib.layerskip.config import RECIPES, LayerSkipConfig
from rlib.layerskip.training import LayerSkipDecoder, with_recipe

__all__ = ["HEADS", "RECIPE", "DedicatedExitHeads", "HeadCostJob", "head_cost_summary", "head_cost_table"]

RECIPE = "ld_ee"  # LayerSkip's training recipe: layer dropout and the early-exit loss
HEADS = ("shared", "dedicated")  # the paper's design first: every ratio is over the same round's shared head
REFERENCE = "shared"


class DedicatedExitHeads(LayerSkipDecoder):
    """A LayerSkipDecoder whose early exits (layers 0 .. L-2) have heads of their own (module docstring)."""

    def __init__(self, decoder, **kwargs):
        super().__init__(decoder, **kwargs)
        weight = decoder.embed.weight if decoder.lm_head is None else decoder.lm_head.weight  # [V, D]
        self.exit_heads = nn.ParameterList(nn.Parameter(weight.detach().clone()) for _ in range(self.n_layers - 1))

    def exit_head(self, layer: int, hidden: torch.Tensor) -> torch.Tensor:
        if layer == self.n_layers - 1:
            return self.head(hidden)
        logits = F.linear(self.decoder.final_norm(hidden), self.exit_heads[layer])  # [B, T, V]
        cap = self.decoder.config.logit_softcap
        return logits if cap is None else cap * torch.tanh(logits / cap)


@dataclass(frozen=True)
class HeadCostJob:
    """The chapter's LD+EE model with a shared or a dedicated exit head, for `rlib.train_cost`."""

    cfg: LayerSkipConfig
    head: str  # one of HEADS
    curriculum: str  # the early-exit loss's curriculum

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"head={self.head!r}: choose from {list(HEADS)}")

    def windows(self):
        return self.cfg.text().train_windows()

    def build(self, max_steps: int) -> tuple[Any, Any, list]:
        from rlib.layerskip.experiments import train_config
        from rlib.model import Decoder
        from rlib.model.init import init_weights

        cfg = self.cfg.override(curriculum=self.curriculum, steps=max_steps)
        recipe = train_config(cfg, cfg.seeds[0])
        decoder = init_weights(Decoder(cfg.model_config(cfg.text().size)), seed=cfg.seeds[0])
        dropout, exit_loss, overrides = RECIPES[RECIPE]
        model, hook = with_recipe(decoder, dropout, exit_loss, overrides, p_max=cfg.p_max, e_scale=cfg.e_scale,
                                  curriculum=cfg.curriculum, rotation=cfg.rotation, time_schedule=cfg.time_schedule,
                                  total_steps=max_steps, accumulation_steps=recipe.accumulation_steps(1),
                                  seed=cfg.seeds[0],
                                  wrapper=DedicatedExitHeads if self.head == "dedicated" else LayerSkipDecoder)
        return model, recipe, [hook]


def head_cost_table(cfg: LayerSkipConfig, rounds: int | None = None,
                    curricula: tuple[str, ...] | None = None) -> pd.DataFrame:
    """One row per (curriculum, head, round): the preset's `cost_rounds` paired rounds of `cost_warmup` untimed and
    `cost_steps` timed steps, each head in its own process, shared then dedicated in even rounds and the reverse in odd
    ones; the ratio columns ("step_s / shared", ...) are over the same round's shared head. Curricula: the chapter's,
    then `all`."""
    rounds = cfg.cost_rounds if rounds is None else rounds
    curricula = tuple(dict.fromkeys((cfg.curriculum, "all"))) if curricula is None else curricula
    vocab = cfg.text().size
    frames = []
    for curriculum in curricula:
        def measure(head: str, curriculum: str = curriculum) -> dict[str, Any]:
            job = HeadCostJob(cfg, head, curriculum)
            return cost.measure_one(job, cfg.cost_warmup, cfg.cost_steps, what=f"the {head} head ({curriculum})")

        columns = {"curriculum": curriculum, "recipe": RECIPE, "n_layers": cfg.n_layers, "vocab": vocab,
                   "d_model": cfg.d_model, "tokens_per_step": cfg.batch_size * cfg.seq_len,
                   "warmup": cfg.cost_warmup, "steps": cfg.cost_steps}
        frames.append(cost.paired_rounds(list(HEADS), measure, rounds, REFERENCE, columns,
                                         desc=f"exit heads, {curriculum} curriculum"))
    return pd.concat(frames, ignore_index=True)


def head_cost_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per (curriculum, head): medians over rounds and the median, min and max of the per-round ratios."""
    frames = []
    for curriculum, part in table.groupby("curriculum", sort=False):
        summary = cost.cost_summary(part, REFERENCE)
        summary.insert(0, "curriculum", curriculum)
        summary["params"] = part.groupby("model", sort=False)["params"].first().to_numpy()
        frames.append(summary)
    return pd.concat(frames, ignore_index=True)
