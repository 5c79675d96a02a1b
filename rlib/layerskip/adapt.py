"""LayerSkip on a pretrained model: continual pretraining and fine-tuning (paper 004, Sec. 5.1 with Table 1 and
Fig. 6; Sec. 5.3 with Fig. 10a).

The paper continually pretrains Llama2 7B and 13B on 52B tokens with LD+EE and reads every exit against the original
Llama2 (Table 1's baseline: not trained further). It fine-tunes Llama1 7B on 5.2B code tokens with LD, EE and LD+EE
against plain fine-tuning on the same data (Fig. 10a). Here the pretrained model is the book's embedded SmolLM2-135M
(30 layers; its embedding and head are tied, where the paper's Llamas are untied), and a *study* is one adaptation:

    continual   continual pretraining on natural-language text (the paper's 7B recipe: p_max 0.1, e_scale 0.2,
                rotational curriculum with R = 8)
    code        fine-tuning on the Python standard library (the paper's code recipe: p_max 0.1, e_scale 1.0, R = 16)

Every recipe of a study (`rlib.layerskip.grid.RECIPES`; "baseline" = plain training on the same windows, steps and
learning rate) starts from the same pretrained weights; "source" is the pretrained model untouched. Dropout has no
time curriculum here (S(t) = 1, Eq. 4: not from scratch). Each model is read at chosen exits: held-out perplexity
and top-1 accuracy on every evaluation corpus (Table 1's PPL rows: Wikipedia, Books and The Stack become the book's
corpora) and accuracy on the book's local tasks (`rlib.layerskip.exit_tasks`). Runs are cached and resumable under
the chapter's work folder, one folder per run, keyed on the run's own study, the shared settings and the code.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rlib import assets, corpora, data, experiments
from rlib.config import ConfigError, Preset
from rlib.layerskip.analysis import exit_metrics
from rlib.layerskip.exit_tasks import EXIT_TASKS, exit_task_accuracy
from rlib.layerskip.grid import RECIPES
from rlib.layerskip.schedules import CURRICULA
from rlib.layerskip.speculative import REUSE_MODES
from rlib.layerskip.training import LayerSkipDecoder, LayerSkipLoss
from rlib.model import Decoder, convert, from_transformers
from rlib.progress import progress
from rlib.train import TrainConfig, train

__all__ = ["SOURCE", "AdaptConfig", "AdaptRun", "Study", "load_model", "load_source", "run_grid", "runs"]

SOURCE = "source"  # the pretrained model, not trained further (Table 1's baseline)
CODE_MODULES = ("rlib.layerskip.adapt", "rlib.layerskip.training", "rlib.layerskip.schedules",
                "rlib.layerskip.analysis", "rlib.layerskip.exit_tasks", "rlib.eval", "rlib.tasks", "rlib.train",
                "rlib.data", "rlib.model.decoder", "rlib.model.layers", "rlib.model.convert")


def _check_corpus(corpus: str, where: str) -> None:
    try:
        corpora.check_corpus(corpus)
    except ValueError as error:
        raise ConfigError(f"{where}: {error}") from None


@dataclass(frozen=True)
class Study:
    """One adaptation of the pretrained model: its data, length and the LayerSkip settings of its recipes."""

    name: str
    corpus: str
    steps: int
    lr: float  # peak learning rate (cosine schedule), the same for every recipe
    recipes: tuple[str, ...]  # from rlib.layerskip.grid.RECIPES; "baseline" is plain training
    p_max: float  # layer dropout at the last layer (recipes with LD)
    e_scale: float  # early-exit loss scale (recipes with EE)
    curriculum: str
    rotation: int  # R of the rotational curriculum (0 = L - 1)

    def __post_init__(self) -> None:
        object.__setattr__(self, "recipes", tuple(self.recipes))
        unknown = [r for r in self.recipes if r not in RECIPES]
        if unknown or not self.recipes:
            raise ConfigError(f"study {self.name!r}: recipes {list(self.recipes)} must name some of {list(RECIPES)}")
        _check_corpus(self.corpus, f"study {self.name!r}")
        if self.steps < 1 or self.lr <= 0:
            raise ConfigError(f"study {self.name!r}: steps={self.steps} and lr={self.lr} must be positive")
        if self.curriculum not in CURRICULA:
            raise ConfigError(f"study {self.name!r}: curriculum={self.curriculum!r}; choose from {list(CURRICULA)}")
        if not 0 <= self.p_max <= 1 or self.e_scale < 0 or self.rotation < 0:
            raise ConfigError(f"study {self.name!r}: p_max={self.p_max} must lie in [0, 1], e_scale={self.e_scale} "
                              f"and rotation={self.rotation} must be >= 0")


@dataclass(frozen=True)
class AdaptConfig(Preset):
    """Chapter 05's studies on the pretrained model, per profile."""

    model: str  # an embedded pretrained checkpoint
    studies: tuple[Study, ...]
    seq_len: int
    batch_size: int
    micro_batch_size: int
    warmup_steps: int
    precision: str  # "bf16" (autocast) or "no"
    seed: int
    eval_corpora: tuple[str, ...]  # held-out perplexity per exit on each
    eval_windows: int
    exit_stride: int  # perplexity at exits stride, 2 stride, ..., the middle and the last; tasks at every other one
    tasks: tuple[str, ...]  # local tasks read per exit (rlib.layerskip.exit_tasks)
    task_items: int  # first test items of each task
    decode_exits: tuple[int, ...]  # E of the self-speculation tables
    decode_drafts: tuple[int, ...]  # d
    decode_reuses: tuple[str, ...]  # cache reuse modes (Table 6)
    decode_prompts: int  # HumanEval prompts (code study) or held-out windows (others)
    decode_prompt_len: int  # tokens of a held-out window's prompt
    decode_new_tokens: int
    decode_repeats: int
    probe_tokens: int  # greedy tokens generated after HumanEval's first prompt for Fig. 2's probe

    PRESETS = {
        "smoke": dict(
            model="smollm2-135m", seq_len=32, batch_size=2, micro_batch_size=2, warmup_steps=1, precision="bf16",
            seed=0, eval_corpora=("shakespeare",), eval_windows=2, exit_stride=10, tasks=("book_cloze",),
            task_items=2, decode_exits=(10,), decode_drafts=(2,), decode_reuses=("kvq",), decode_prompts=1,
            decode_prompt_len=8, decode_new_tokens=4, decode_repeats=1, probe_tokens=6,
            studies=(dict(name="continual", corpus="shakespeare", steps=2, lr=3e-4, recipes=("ld_ee",), p_max=0.1,
                          e_scale=0.2, curriculum="rotational", rotation=0),
                     dict(name="code", corpus="python-stdlib", steps=1, lr=3e-4, recipes=("ld_ee",), p_max=0.1,
                          e_scale=1.0, curriculum="rotational", rotation=0))),
        # about 35 min on 2 cores: 4 runs of 512-token steps at 3-5 s a step, and 5 models read exit by exit
        "cpu": dict(
            model="smollm2-135m", seq_len=128, batch_size=4, micro_batch_size=4, warmup_steps=8, precision="bf16",
            seed=0, eval_corpora=("gutenberg-poetry", "shakespeare", "python-stdlib"), eval_windows=16,
            exit_stride=3, tasks=EXIT_TASKS, task_items=40, decode_exits=(8, 15), decode_drafts=(2, 4),
            decode_reuses=("kvq",), decode_prompts=3, decode_prompt_len=32, decode_new_tokens=40, decode_repeats=1,
            probe_tokens=48,
            studies=(dict(name="continual", corpus="gutenberg-poetry", steps=160, lr=3e-4,
                          recipes=("baseline", "ld_ee"), p_max=0.1, e_scale=0.2, curriculum="rotational", rotation=8),
                     dict(name="code", corpus="python-stdlib", steps=100, lr=3e-4, recipes=("baseline", "ld_ee"),
                          p_max=0.1, e_scale=1.0, curriculum="rotational", rotation=16))),
        "gpu": dict(
            model="smollm2-135m", seq_len=512, batch_size=32, micro_batch_size=16, warmup_steps=50, precision="bf16",
            seed=0, eval_corpora=("gutenberg-poetry", "shakespeare", "python-stdlib"), eval_windows=128,
            exit_stride=1, tasks=EXIT_TASKS, task_items=200, decode_exits=(6, 10, 15, 20), decode_drafts=(2, 4, 8),
            decode_reuses=("kvq", "kv", "none"), decode_prompts=32, decode_prompt_len=64, decode_new_tokens=128,
            decode_repeats=3, probe_tokens=64,
            studies=(dict(name="continual", corpus="gutenberg-poetry", steps=2000, lr=3e-4,
                          recipes=("baseline", "ld_ee"), p_max=0.1, e_scale=0.2, curriculum="rotational", rotation=8),
                     dict(name="code", corpus="python-stdlib", steps=1000, lr=3e-4, recipes=("baseline", "ld", "ee",
                                                                                            "ld_ee"),
                          p_max=0.1, e_scale=1.0, curriculum="rotational", rotation=16))),
    }

    def __post_init__(self) -> None:
        studies = tuple(s if isinstance(s, Study) else Study(**s) for s in self.studies)
        object.__setattr__(self, "studies", studies)
        for name in ("eval_corpora", "tasks", "decode_exits", "decode_drafts", "decode_reuses"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        names = [s.name for s in studies]
        if not studies or len(set(names)) != len(names) or SOURCE in names:
            raise ConfigError(f"studies {names} must be one or more distinct names, none of them {SOURCE!r}")
        for corpus in self.eval_corpora:
            _check_corpus(corpus, "eval_corpora")
        unknown = [t for t in self.tasks if t not in EXIT_TASKS]
        if unknown:
            raise ConfigError(f"tasks {unknown} cannot be read per exit; choose from {list(EXIT_TASKS)}")
        if self.precision not in ("no", "bf16"):
            raise ConfigError(f"precision={self.precision!r}: use 'bf16' or 'no'")
        if min(self.exit_stride, self.eval_windows, self.task_items, self.batch_size) < 1:
            raise ConfigError("exit_stride, eval_windows, task_items and batch_size must be >= 1")
        unknown = [r for r in self.decode_reuses if r not in REUSE_MODES]
        if unknown or "kvq" not in self.decode_reuses:
            raise ConfigError(f"decode_reuses {list(self.decode_reuses)} must include 'kvq' and name only "
                              f"{list(REUSE_MODES)}")
        if not self.decode_exits or min(self.decode_exits) < 1 or min(self.decode_drafts, default=0) < 1:
            raise ConfigError(f"decode_exits {list(self.decode_exits)} and decode_drafts {list(self.decode_drafts)} "
                              "must be non-empty and >= 1")

    def study(self, name: str) -> Study:
        for study in self.studies:
            if study.name == name:
                return study
        raise ConfigError(f"no study {name!r}; this config has {[s.name for s in self.studies]}")

    def exits(self, n_layers: int, stride: int | None = None) -> tuple[int, ...]:
        """The exits read for perplexity: every `exit_stride`-th layer, the middle one (Table 1) and the last."""
        stride = stride or self.exit_stride
        return tuple(sorted({*range(stride, n_layers + 1, stride), n_layers // 2, n_layers}))

    def task_exits(self, n_layers: int) -> tuple[int, ...]:
        """The exits read for task accuracy: every 2 `exit_stride`-th layer, the middle and the last (each exit
        costs a vocabulary-sized head over every scored token)."""
        return self.exits(n_layers, 2 * self.exit_stride)

    def train_config(self, study: Study) -> TrainConfig:
        return TrainConfig(lr=study.lr, schedule="cosine", warmup_steps=min(self.warmup_steps, study.steps - 1),
                           max_steps=study.steps, batch_size=self.batch_size, micro_batch_size=self.micro_batch_size,
                           eval_every=0, checkpoint_every=0, checkpoint_final=False, seed=self.seed,
                           mixed_precision=self.precision)

    def eval_key(self) -> dict[str, Any]:
        """The settings every reading of a model depends on (not the decoding settings: decoding is never cached)."""
        return {k: v for k, v in self.to_dict().items()
                if k not in ("studies", "warmup_steps", "batch_size") and not k.startswith(("decode_", "probe_"))}


@dataclass(frozen=True)
class AdaptRun:
    study: str  # a Study name, or SOURCE for the pretrained model itself
    recipe: str = ""

    @property
    def name(self) -> str:
        return SOURCE if self.study == SOURCE else f"{self.study}-{self.recipe}"


def runs(cfg: AdaptConfig) -> list[AdaptRun]:
    """The pretrained model first, then every study's recipes."""
    return [AdaptRun(SOURCE)] + [AdaptRun(s.name, r) for s in cfg.studies for r in s.recipes]


# ---- one run ---------------------------------------------------------------------------------------------------


@functools.cache
def _heldout(corpus: str, tokenizer: str, seq_len: int, n: int) -> torch.Tensor:
    return data.heldout_windows(corpus, tokenizer, seq_len, n, split="test", seed=0)


def read_exits(model: Decoder, cfg: AdaptConfig, tokenizer) -> dict[str, list[dict[str, Any]]]:
    """Per-exit held-out perplexity on every evaluation corpus and per-exit task accuracy (long records)."""
    exits = cfg.exits(len(model.plan))
    frames = []
    for corpus in cfg.eval_corpora:
        windows = _heldout(corpus, cfg.model, cfg.seq_len, cfg.eval_windows)
        frame = exit_metrics(model, windows, batch_size=cfg.micro_batch_size, exits=exits)
        frame.insert(0, "corpus", corpus)
        frames.append(frame)
    tasks = exit_task_accuracy(model, tokenizer, cfg.task_exits(len(model.plan)), cfg.tasks, cfg.task_items,
                               batch_size=cfg.micro_batch_size)
    return {"exits": pd.concat(frames, ignore_index=True).to_dict("records"), "tasks": tasks.to_dict("records")}


def build(run: AdaptRun, cfg: AdaptConfig, source: Decoder) -> tuple[LayerSkipDecoder, LayerSkipLoss, TrainConfig]:
    """A fresh copy of the pretrained model wrapped for the run's recipe, its loss hook and trainer config."""
    study = cfg.study(run.study)
    dropout, exit_loss, overrides = RECIPES[run.recipe]
    tcfg = cfg.train_config(study)
    model = LayerSkipDecoder(copy.deepcopy(source).train(), p_max=study.p_max if dropout else 0.0,
                             time_schedule="constant", total_steps=study.steps,
                             accumulation_steps=tcfg.accumulation_steps(1), seed=cfg.seed,
                             layer_schedule=overrides.get("layer_schedule", "exp"))
    hook = LayerSkipLoss(model, e_scale=study.e_scale if exit_loss else 0.0,
                         curriculum=overrides.get("curriculum", study.curriculum), rotation=study.rotation or None)
    return model, hook, tcfg


def run_one(run: AdaptRun, cfg: AdaptConfig, source: Decoder, tokenizer, work: Path, key: str) -> dict[str, Any]:
    folder = work / run.name
    if run.study == SOURCE:
        return {"name": run.name, "study": SOURCE, "recipe": SOURCE, **read_exits(source, cfg, tokenizer)}
    train_dir = folder / f"train-{key}"
    for stale in folder.glob("train-*"):
        if stale != train_dir:
            shutil.rmtree(stale, ignore_errors=True)
    study = cfg.study(run.study)
    model, hook, tcfg = build(run, cfg, source)
    cache = data.token_cache(study.corpus, cfg.model, "train", progress=False)
    windows = data.PackedWindows(cache, cfg.seq_len, bos_id=cache.bos_id)
    result = train(model, windows, tcfg, train_dir, hooks=[hook])
    log = pd.read_csv(train_dir / "metrics.csv").dropna(subset=["loss"])
    decoder = model.decoder.eval()
    convert.save(decoder, folder / "model")
    shutil.rmtree(train_dir / "checkpoint", ignore_errors=True)
    return {"name": run.name, "study": run.study, "recipe": run.recipe, "corpus": study.corpus,
            "tokens": result.tokens, "seconds": result.seconds, "step_seconds": result.seconds / study.steps,
            "train_curve": {"step": log["step"].tolist(), "loss": log["loss"].tolist()},
            **read_exits(decoder, cfg, tokenizer)}


def load_source(cfg: AdaptConfig) -> Decoder:
    return from_transformers(assets.load_model(cfg.model)).eval()


def run_grid(cfg: AdaptConfig, work: Path, source: Decoder | None = None) -> list[dict[str, Any]]:
    """Run (or load from `work/<run>/result.json`) every run of `runs(cfg)`, in that order."""
    source = source if source is not None else load_source(cfg)
    tokenizer = assets.load_tokenizer(cfg.model)
    code = experiments.code_digest(*CODE_MODULES)
    results = []
    for run in progress(runs(cfg), desc="LayerSkip on the pretrained model", unit="run"):
        study = {} if run.study == SOURCE else dataclasses.asdict(cfg.study(run.study))
        shared = cfg.eval_key() if run.study == SOURCE else {**cfg.eval_key(), "warmup_steps": cfg.warmup_steps,
                                                            "batch_size": cfg.batch_size}
        key = experiments.digest(run, study, shared, code)
        folder = Path(work) / run.name
        results.append(experiments.cached(folder, key, lambda r=run, k=key: run_one(r, cfg, source, tokenizer,
                                                                                   Path(work), k)))
    return results


def load_model(work: Path, run_name: str, cfg: AdaptConfig | None = None) -> Decoder:
    """A trained run's model, or the pretrained model itself for SOURCE (needs `cfg`)."""
    if run_name == SOURCE:
        if cfg is None:
            raise ConfigError("loading the source model needs the config (its `model` field)")
        return load_source(cfg)
    folder = Path(work) / run_name / "model"
    if not folder.exists():
        raise FileNotFoundError(f"no trained model at {folder}; run rlib.layerskip.adapt.run_grid first")
    return convert.load(folder)
