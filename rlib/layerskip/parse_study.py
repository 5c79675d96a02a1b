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
the code), as in `rlib.layerskip.adapt`.
"""

from __future__ import annotations

import copy
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rlib import assets, experiments
from rlib.config import ConfigError, Preset
from rlib.layerskip import parse_data
from rlib.layerskip.grid import RECIPES
from rlib.layerskip.schedules import CURRICULA
from rlib.layerskip.speculative import REUSE_MODES
from rlib.layerskip.training import LayerSkipDecoder, LayerSkipLoss
from rlib.model import Decoder, convert, from_transformers
from rlib.progress import progress
from rlib.train import TrainConfig, train

__all__ = ["ParseConfig", "ParseRun", "exit_match", "exit_match_ids", "load_model", "run_grid"]

CODE_MODULES = ("rlib.layerskip.parse_study", "rlib.layerskip.parse_data", "rlib.layerskip.training",
                "rlib.layerskip.schedules", "rlib.train", "rlib.model.decoder", "rlib.model.layers",
                "rlib.model.convert")
DECODE_FIELDS = ("decode_exits", "decode_drafts", "decode_reuses", "decode_prompts", "decode_new_tokens",
                 "decode_repeats", "decode_peers", "decode_draft_vocab")


@dataclass(frozen=True)
class ParseConfig(Preset):
    """The parsing study per profile: data, training (shared by both recipes), reading and decoding."""

    model: str  # an embedded pretrained checkpoint
    recipes: tuple[str, ...]  # from rlib.layerskip.grid.RECIPES; "baseline" is plain fine-tuning
    train_examples: int
    test_examples: int  # scored by teacher-forced EM at every read exit
    seq_len: int  # training windows pack whole examples one after another
    steps: int
    lr: float  # peak learning rate, cosine schedule
    batch_size: int
    micro_batch_size: int
    warmup_steps: int
    precision: str  # "bf16" (autocast) or "no"
    seed: int
    p_max: float  # layer dropout at the last layer (recipes with LD)
    e_scale: float  # early-exit loss scale (recipes with EE)
    curriculum: str
    rotation: int  # R of the rotational curriculum (0 = L - 1); unused by the gradual one
    exit_stride: int  # EM read at exits stride, 2 stride, ..., the middle and the last
    decode_exits: tuple[int, ...]  # E (Table 10: L/4, L/2, 3L/4)
    decode_drafts: tuple[int, ...]  # d (Table 10: 7)
    decode_reuses: tuple[str, ...]  # cache modes on the LayerSkip model (Table 6); the plain model gets "kvq"
    decode_prompts: int  # first test examples decoded (Table 10: the first 100)
    decode_new_tokens: int  # at most; decoding stops at EOS (Table 10: 50)
    decode_repeats: int
    decode_peers: bool  # also transformers' greedy and assistant_early_exit on the LayerSkip model
    decode_draft_vocab: bool  # also self-speculation drafting over the training parses' tokens + the prompt's only

    PRESETS = {
        "smoke": dict(
            model="smollm2-135m", recipes=("ld_ee",), train_examples=64, test_examples=4, seq_len=32, steps=2,
            lr=3e-4, batch_size=2, micro_batch_size=2, warmup_steps=1, precision="bf16", seed=0, p_max=0.2,
            e_scale=1.0, curriculum="gradual", rotation=0, exit_stride=10, decode_exits=(10,), decode_drafts=(3,),
            decode_reuses=("kvq",), decode_prompts=1, decode_new_tokens=8, decode_repeats=1, decode_peers=False,
            decode_draft_vocab=True),
        # about 45 min on 2 cores: two fine-tunes of 160 steps of 512 tokens, 0.9 epoch (LD+EE: every exit's loss
        # from step 80), EM at 16 exits, decoding until EOS
        "cpu": dict(
            model="smollm2-135m", recipes=("baseline", "ld_ee"), train_examples=2000, test_examples=200,
            seq_len=128, steps=160, lr=3e-4, batch_size=4, micro_batch_size=4, warmup_steps=8, precision="bf16",
            seed=0, p_max=0.2, e_scale=1.0, curriculum="gradual", rotation=0, exit_stride=2,
            decode_exits=(8, 15, 22), decode_drafts=(3, 7), decode_reuses=("kvq", "kv", "none"), decode_prompts=10,
            decode_new_tokens=50, decode_repeats=1, decode_peers=True, decode_draft_vocab=True),
        "gpu": dict(
            model="smollm2-135m", recipes=("baseline", "ld", "ee", "ld_ee"), train_examples=2200,
            test_examples=250, seq_len=256, steps=600, lr=1e-4, batch_size=32, micro_batch_size=16,
            warmup_steps=30, precision="bf16", seed=0, p_max=0.2, e_scale=1.0, curriculum="gradual", rotation=0,
            exit_stride=1, decode_exits=(8, 15, 22), decode_drafts=(3, 7), decode_reuses=("kvq", "kv", "none"),
            decode_prompts=100, decode_new_tokens=50, decode_repeats=3, decode_peers=True, decode_draft_vocab=True),
    }

    def __post_init__(self) -> None:
        for name in ("recipes", "decode_exits", "decode_drafts", "decode_reuses"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        unknown = [r for r in self.recipes if r not in RECIPES]
        if unknown or not self.recipes or len(set(self.recipes)) != len(self.recipes):
            raise ConfigError(f"recipes {list(self.recipes)} must name distinct entries of {list(RECIPES)}")
        if min(self.train_examples, self.test_examples, self.steps, self.batch_size, self.exit_stride,
               self.decode_prompts, self.decode_new_tokens, self.decode_repeats) < 1 or self.lr <= 0:
            raise ConfigError("train_examples, test_examples, steps, batch_size, exit_stride, decode_prompts, "
                              "decode_new_tokens, decode_repeats and lr must be positive")
        if self.decode_prompts > self.test_examples:
            raise ConfigError(f"decode_prompts={self.decode_prompts} must be <= test_examples={self.test_examples}")
        if self.curriculum not in CURRICULA:
            raise ConfigError(f"curriculum={self.curriculum!r}; choose from {list(CURRICULA)}")
        if not 0 <= self.p_max <= 1 or self.e_scale < 0 or self.rotation < 0:
            raise ConfigError(f"p_max={self.p_max} must lie in [0, 1], e_scale={self.e_scale} and "
                              f"rotation={self.rotation} must be >= 0")
        if self.precision not in ("no", "bf16"):
            raise ConfigError(f"precision={self.precision!r}: use 'bf16' or 'no'")
        unknown = [r for r in self.decode_reuses if r not in REUSE_MODES]
        if unknown or "kvq" not in self.decode_reuses:
            raise ConfigError(f"decode_reuses {list(self.decode_reuses)} must include 'kvq' and name only "
                              f"{list(REUSE_MODES)}")
        if not self.decode_exits or min(self.decode_exits) < 1 or not self.decode_drafts \
                or min(self.decode_drafts) < 1:
            raise ConfigError(f"decode_exits {list(self.decode_exits)} and decode_drafts {list(self.decode_drafts)} "
                              "must be non-empty and >= 1")

    def exits(self, n_layers: int) -> tuple[int, ...]:
        """The exits read: every `exit_stride`-th layer, the middle one and the last."""
        return tuple(sorted({*range(self.exit_stride, n_layers + 1, self.exit_stride), n_layers // 2, n_layers}))

    def train_config(self) -> TrainConfig:
        return TrainConfig(lr=self.lr, schedule="cosine", warmup_steps=min(self.warmup_steps, self.steps - 1),
                           max_steps=self.steps, batch_size=self.batch_size, micro_batch_size=self.micro_batch_size,
                           eval_every=0, checkpoint_every=0, checkpoint_final=False, seed=self.seed,
                           mixed_precision=self.precision)

    def training_key(self) -> dict[str, Any]:
        """Every field a trained model and its EM reading depend on (decoding is never cached)."""
        return {k: v for k, v in self.to_dict().items() if k not in DECODE_FIELDS + ("recipes",)}


@dataclass(frozen=True)
class ParseRun:
    recipe: str

    @property
    def name(self) -> str:
        return f"parse-{self.recipe}"


# ---- reading a model exit by exit -------------------------------------------------------------------------------


@torch.inference_mode()
def exit_match_ids(model: Decoder, pairs: list[tuple[list[int], list[int]]], exits: tuple[int, ...],
                   batch_size: int = 16) -> pd.DataFrame:
    """pairs: (prompt ids, target ids) -> one row per exit: `em`, the share of pairs whose every target token is the
    head's argmax after `exit` layers given the true prefix, and `token_acc`, the share of target tokens that are."""
    n_layers = len(model.plan)
    if not exits or min(exits) < 1 or max(exits) > n_layers:
        raise ConfigError(f"exits {list(exits)} must name layers in [1, {n_layers}]")
    if not pairs or any(not prompt or not target for prompt, target in pairs):
        raise ConfigError("exit_match needs at least one (prompt, target) pair, neither of them empty")
    model.eval()
    exact = dict.fromkeys(exits, 0)
    right = dict.fromkeys(exits, 0)
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
                exact[e] += int(hits.all())
                right[e] += int(hits.sum())
    total = sum(len(t) for _, t in pairs)
    return pd.DataFrame([{"exit_layer": e, "em": exact[e] / len(pairs), "token_acc": right[e] / total}
                         for e in exits])


def exit_match(model: Decoder, tokenizer, items: list[parse_data.ParseExample], exits: tuple[int, ...],
               batch_size: int = 16) -> pd.DataFrame:
    """`exit_match_ids` over parsing examples: the target is the parse and its EOS (module docstring)."""
    return exit_match_ids(model, [parse_data.target_ids(tokenizer, ex) for ex in items], exits, batch_size)


# ---- one run ------------------------------------------------------------------------------------------------------


def build(recipe: str, cfg: ParseConfig, source: Decoder) -> tuple[LayerSkipDecoder, LayerSkipLoss, TrainConfig]:
    """A fresh copy of the pretrained model wrapped for `recipe` (dropout with S(t) = 1), its loss hook and trainer
    config."""
    dropout, exit_loss, overrides = RECIPES[recipe]
    tcfg = cfg.train_config()
    model = LayerSkipDecoder(copy.deepcopy(source).train(), p_max=cfg.p_max if dropout else 0.0,
                             time_schedule="constant", total_steps=cfg.steps,
                             accumulation_steps=tcfg.accumulation_steps(1), seed=cfg.seed,
                             layer_schedule=overrides.get("layer_schedule", "exp"))
    hook = LayerSkipLoss(model, e_scale=cfg.e_scale if exit_loss else 0.0,
                         curriculum=overrides.get("curriculum", cfg.curriculum), rotation=cfg.rotation or None)
    return model, hook, tcfg


def run_one(run: ParseRun, cfg: ParseConfig, source: Decoder, tokenizer, work: Path, key: str) -> dict[str, Any]:
    folder = Path(work) / run.name
    train_dir = folder / f"train-{key}"
    for stale in folder.glob("train-*"):
        if stale != train_dir:
            shutil.rmtree(stale, ignore_errors=True)
    model, hook, tcfg = build(run.recipe, cfg, source)
    windows = parse_data.ParseWindows(tokenizer, parse_data.examples("train", cfg.train_examples, cfg.seed),
                                      cfg.seq_len)
    result = train(model, windows, tcfg, train_dir, hooks=[hook])
    log = pd.read_csv(train_dir / "metrics.csv").dropna(subset=["loss"])
    decoder = model.decoder.eval()
    convert.save(decoder, folder / "model")
    shutil.rmtree(train_dir / "checkpoint", ignore_errors=True)
    test = parse_data.examples("test", cfg.test_examples, cfg.seed)
    match = exit_match(decoder, tokenizer, test, cfg.exits(len(decoder.plan)), batch_size=cfg.micro_batch_size * 4)
    return {"name": run.name, "recipe": run.recipe, "tokens": result.tokens, "seconds": result.seconds,
            "step_seconds": result.seconds / cfg.steps, "epochs": cfg.steps * cfg.batch_size / len(windows),
            "train_curve": {"step": log["step"].tolist(), "loss": log["loss"].tolist()},
            "exits": match.to_dict("records")}


def load_source(cfg: ParseConfig) -> Decoder:
    return from_transformers(assets.load_model(cfg.model)).eval()


def run_grid(cfg: ParseConfig, work: Path, source: Decoder | None = None) -> list[dict[str, Any]]:
    """Run (or load from `work/<run>/result.json`) every recipe of `cfg`, in order."""
    source = source if source is not None else load_source(cfg)
    tokenizer = assets.load_tokenizer(cfg.model)
    code = experiments.code_digest(*CODE_MODULES)
    results = []
    for run in progress([ParseRun(r) for r in cfg.recipes], desc="parsing fine-tunes", unit="run"):
        key = experiments.digest(run, cfg.training_key(), code)
        results.append(experiments.cached(Path(work) / run.name, key,
                                          lambda r=run, k=key: run_one(r, cfg, source, tokenizer, Path(work), k)))
    return results


def load_model(work: Path, recipe: str) -> Decoder:
    """A trained recipe's model."""
    folder = Path(work) / ParseRun(recipe).name / "model"
    if not folder.exists():
        raise FileNotFoundError(f"no trained model at {folder}; run rlib.layerskip.parse_study.run_grid first")
    return convert.load(folder)
