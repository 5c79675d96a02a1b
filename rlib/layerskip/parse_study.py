"""LayerSkip task fine-tuning on a TOPv2-like semantic parsing task (paper 004, Sec. 5.3 "Finetuning on TOPv2":
Fig. 10b, Tables 5, 6 and 10).

The paper fine-tunes a pretrained Llama 1.5B (24 layers) on TOPv2 with LD+EE (p_max 0.2, e_scale 1.0, the gradual
curriculum, no time curriculum for dropout) and compares every exit's exact match (EM) of the generated parse with
the same model fine-tuned plainly: the plain model's early exits give 0 EM, LayerSkip's layer 12 gives 77 % at a 3 %
last-layer cost. Tables 5 and 10 then decode the test set with early exit and self-speculation at E = L/4, L/2, 3L/4.

Here the pretrained model is SmolLM2-135M (30 layers) and the task is `rlib.layerskip.parse_data` (templated
utterances -> JSON parses; TOPv2 cannot be fetched offline). Two recipes start from the same weights and see the
same examples, steps and learning rate: "baseline" (plain fine-tuning; "plain" in the tables) and "ld_ee". A model is
read at chosen exits by *teacher-forced* exact match: the shared head's argmax after E layers at every target
position, given the true prefix. An example counts when every target token (the parse and its EOS) is the argmax;
that is exactly when greedy early-exit generation at E reproduces the parse and stops (the first wrong argmax would
be the first wrong generated token), so it equals generation EM at a fraction of the cost (a test checks this).

Runs are cached under the chapter's work folder (one folder per recipe, keyed on the config's training fields and
the code), as in `rlib.layerskip.adapt`. Its config is `rlib.layerskip.config.ParseConfig`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rlib import assets
from rlib.config import ConfigError
from rlib.experiments import RunSlot
from rlib.experiments import load_model as load_trained
from rlib.experiments import run_grid as run_grid_of
from rlib.layerskip import parse_data
from rlib.layerskip.config import RECIPES, ParseConfig, ParseRun
from rlib.layerskip.training import LayerSkipDecoder, LayerSkipLoss, with_recipe
from rlib.model import Decoder, convert, from_transformers
from rlib.train import TrainConfig, train

__all__ = ["CODE_MODULES", "build", "exit_match", "exit_match_ids", "load_model", "load_source", "match_summary",
           "run_grid"]

CODE_MODULES = ("rlib.layerskip.parse_study", "rlib.layerskip.config", "rlib.layerskip.parse_data",
                "rlib.layerskip.training", "rlib.layerskip.schedules", "rlib.train", "rlib.model.decoder",
                "rlib.model.layers", "rlib.model.convert")


# ---- reading a model exit by exit -------------------------------------------------------------------------------


@torch.inference_mode()
def exit_match_ids(model: Decoder, pairs: list[tuple[list[int], list[int]]], exits: tuple[int, ...],
                   batch_size: int = 16, per_item: bool = False) -> pd.DataFrame:
    """pairs: (prompt ids, target ids) -> one row per exit: `em`, the share of pairs whose every target token is the
    head's argmax after `exit` layers given the true prefix, and `token_acc`, the share of target tokens that are.
    per_item: one row per (pair, exit) instead, `item` the pair's index, `exact` whether the whole target is the
    argmax, `right` / `tokens` its target tokens that are / all of them (two models read on the same pairs compare
    pair by pair: `rlib.layerskip.tables.parse_pairs`)."""
    n_layers = len(model.plan)
    if not exits or min(exits) < 1 or max(exits) > n_layers:
        raise ConfigError(f"exits {list(exits)} must name layers in [1, {n_layers}]")
    if not pairs or any(not prompt or not target for prompt, target in pairs):
        raise ConfigError("exit_match needs at least one (prompt, target) pair, neither of them empty")
    model.eval()
    rows = []
    for start in range(0, len(pairs), batch_size):
        batch = pairs[start:start + batch_size]
        ids = torch.zeros(len(batch), max(len(p) + len(t) for p, t in batch) - 1, dtype=torch.long)  # [b, T]
        for row, (prompt, target) in enumerate(batch):  # right padding: causal attention never reads it
            ids[row, :len(prompt) + len(target) - 1] = torch.tensor((prompt + target)[:-1])
        hidden = model(ids, return_hidden=True).hidden_states  # L x [b, T, D]
        for row, (prompt, target) in enumerate(batch):
            span = slice(len(prompt) - 1, len(prompt) - 1 + len(target))  # the positions predicting the target
            gold = torch.tensor(target)
            for e in exits:
                hits = model.head(hidden[e - 1][row, span]).argmax(-1) == gold  # [n]
                rows.append({"item": start + row, "exit_layer": e, "exact": bool(hits.all()),
                             "right": int(hits.sum()), "tokens": len(target)})
    items = pd.DataFrame(rows)
    return items if per_item else match_summary(items)


def match_summary(items: pd.DataFrame) -> pd.DataFrame:
    """`exit_match_ids(..., per_item=True)`'s rows -> its per-exit rows (`em`, `token_acc`)."""
    total = items.groupby("exit_layer")[["exact", "right", "tokens"]].agg("sum")
    pairs = items.groupby("exit_layer")["item"].count()
    return pd.DataFrame({"exit_layer": total.index, "em": (total["exact"] / pairs).to_numpy(),
                         "token_acc": (total["right"] / total["tokens"]).to_numpy()})


def exit_match(model: Decoder, tokenizer, items: list[parse_data.ParseExample], exits: tuple[int, ...],
               batch_size: int = 16, per_item: bool = False) -> pd.DataFrame:
    """`exit_match_ids` over parsing examples: the target is the parse and its EOS (module docstring)."""
    return exit_match_ids(model, [parse_data.target_ids(tokenizer, ex) for ex in items], exits, batch_size, per_item)


# ---- one run ------------------------------------------------------------------------------------------------------


def build(recipe: str, cfg: ParseConfig, source: Decoder) -> tuple[LayerSkipDecoder, LayerSkipLoss, TrainConfig]:
    """A fresh copy of the pretrained model wrapped for `recipe` (no time curriculum for dropout), its hook and trainer
    config."""
    tcfg = cfg.train_config()
    model, hook = with_recipe(copy.deepcopy(source).train(), *RECIPES[recipe], p_max=cfg.p_max, e_scale=cfg.e_scale,
                              curriculum=cfg.curriculum, rotation=cfg.rotation, time_schedule="constant",
                              total_steps=cfg.steps, accumulation_steps=tcfg.accumulation_steps(1), seed=cfg.seed)
    return model, hook, tcfg


def run_one(run: ParseRun, cfg: ParseConfig, source: Decoder, tokenizer, slot: RunSlot) -> dict[str, Any]:
    model, hook, tcfg = build(run.recipe, cfg, source)
    windows = parse_data.ParseWindows(tokenizer, parse_data.examples("train", cfg.train_examples, cfg.seed),
                                      cfg.seq_len)
    train_dir = slot.train_dir
    result = train(model, windows, tcfg, train_dir, hooks=[hook])
    log = pd.read_csv(train_dir / "metrics.csv").dropna(subset=["loss"])
    decoder = model.decoder.eval()
    convert.save(decoder, slot.folder / "model")
    slot.drop_checkpoint()
    test = parse_data.examples("test", cfg.test_examples, cfg.seed)
    items = exit_match(decoder, tokenizer, test, cfg.exits(len(decoder.plan)), batch_size=cfg.micro_batch_size * 4,
                       per_item=True)
    return {"name": run.name, "recipe": run.recipe, "tokens": result.tokens, "seconds": result.seconds,
            "step_seconds": result.seconds / cfg.steps, "epochs": cfg.steps * cfg.batch_size / len(windows),
            "train_curve": {"step": log["step"].tolist(), "loss": log["loss"].tolist()},
            "exits": match_summary(items).to_dict("records"),
            # per exit, "1" / "0" for each test utterance in order: whether the exit gives its whole parse
            "item_exact": {str(e): "".join("1" if x else "0" for x in part.sort_values("item")["exact"])
                           for e, part in items.groupby("exit_layer")}}


def load_source(cfg: ParseConfig) -> Decoder:
    return from_transformers(assets.load_model(cfg.model)).eval()


def run_grid(cfg: ParseConfig, work: Path, source: Decoder | None = None) -> list[dict[str, Any]]:
    """Run (or load from `work/<run>/result.json`) every recipe of `cfg`, in order."""
    source = source if source is not None else load_source(cfg)
    tokenizer = assets.load_tokenizer(cfg.model)
    return run_grid_of([ParseRun(r) for r in cfg.recipes], work,
                       lambda r, slot: run_one(r, cfg, source, tokenizer, slot), context=(cfg.training_key(),),
                       modules=CODE_MODULES, desc="parsing fine-tunes")


def load_model(work: Path, recipe: str) -> Decoder:
    """A trained recipe's model."""
    return load_trained(work, ParseRun(recipe).name, "run rlib.layerskip.parse_study.run_grid first")
