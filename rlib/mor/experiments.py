"""Chapter 03's runs: Mixture-of-Recursions and its baselines pretrained from scratch (paper 001, Sec. 3-4, App. C, F).

`run_grid` trains every `MoRVariant` of `rlib.mor.config.variants` under its budget, scores it on held-out windows
(top-k and causal routing), records its routing metrics and test-time depth scaling, and saves the model. Runs are
cached and resumable like the other chapters' (`rlib.experiments.run_grid`); the missing ones train in one worker
process per core, one torch thread each (`rlib.grid_workers`: a MoR step at these widths is partly bound by op
dispatch, and two one-thread runs side by side did 1.12-1.19x the steps of one two-thread run,
`benchmarks/mor_train_speed.py --side-by-side 2`). Text is SmolLM2's tokenizer on the
poetry corpus with the compact vocabulary of `rlib.vocab` (the profile's `vocab_size`; 0 keeps all 49,152 ids).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rlib import eval as rl_eval
from rlib import experiments
from rlib.model import Decoder, convert
from rlib.mor import analysis, io
from rlib.mor.config import ROUTER_ABLATIONS, MoRConfig, MoRVariant, unrolled_layers, variants
from rlib.mor.flops import paper_flops_per_token
from rlib.mor.model import MoRDecoder, MoRLoss, build, vanilla
from rlib.mor.spec import MoRSpec
from rlib.train import TrainConfig, train

__all__ = ["CHAPTER", "CODE_MODULES", "MAIN", "fewshot_scores", "grid", "load_model", "main_model", "make_model",
           "run_grid", "run_steps", "test_nll", "variant_in_slot", "windows"]

CHAPTER = "03_mixture_of_recursions"
# every module that builds, trains or scores a run (tests/test_mor_keys.py); not rlib.mor.ablations, whose rows reach
# the key whole, as each run's MoRSpec
CODE_MODULES = ("rlib.mor.config", "rlib.mor.experiments", "rlib.mor.model", "rlib.mor.routers", "rlib.mor.spec",
                "rlib.mor.flops", "rlib.mor.analysis", "rlib.mor.relaxation", "rlib.train", "rlib.data", "rlib.vocab",
                "rlib.model.decoder", "rlib.model.layers", "rlib.model.init", "rlib.model.cache", "rlib.model.lora",
                "rlib.relax", "rlib.looping", "rlib.eval", "rlib.scratch_eval", "rlib.tasks")

# the main comparison's models by short name
MAIN = {
    "ec": lambda nr: MoRSpec.expert(nr),
    "tc": lambda nr: MoRSpec.token(nr),
    "rec": lambda nr: MoRSpec.recursive(nr),
    "ec-share": lambda nr: MoRSpec.expert(nr, kv="share"),
}


def windows(cfg: MoRConfig) -> dict[str, torch.Tensor]:
    """The validation and test windows every run is scored on (compact ids)."""
    text = cfg.text()
    return {"val": text.heldout("validation", cfg.val_windows, seed=1),
            "test": text.heldout("test", cfg.eval_windows, seed=0)}


def make_model(variant: MoRVariant, cfg: MoRConfig, vocab_size: int) -> MoRDecoder | Decoder:
    base = cfg.base_config(vocab_size)
    layers = unrolled_layers(variant.spec, cfg.n_layers)
    if variant.spec is None:
        return vanilla(base, layers, seed=variant.seed)
    return build(base, layers, variant.spec, seed=variant.seed)


def run_steps(variant: MoRVariant, cfg: MoRConfig) -> tuple[int, float]:
    """(optimizer steps, forward FLOPs per token) of a run under its budget."""
    per_token = paper_flops_per_token(cfg.d_model, cfg.d_ffn, cfg.seq_len,
                                      unrolled_layers(variant.spec, cfg.n_layers), variant.spec)
    if variant.budget == "flops":
        tokens = cfg.budget / per_token
    elif variant.budget == "tokens":
        tokens = cfg.budget / paper_flops_per_token(cfg.d_model, cfg.d_ffn, cfg.seq_len, cfg.n_layers)
    else:
        tokens = cfg.ablation_tokens
    return max(2, round(tokens / cfg.tokens_per_step())), per_token


def train_config(cfg: MoRConfig, steps: int, seed: int) -> TrainConfig:
    return TrainConfig(lr=cfg.lr, schedule="wsd", warmup_steps=max(1, round(cfg.warmup_frac * steps)),
                       max_steps=steps, batch_size=cfg.batch_size, micro_batch_size=cfg.micro_batch_size,
                       eval_every=max(1, steps // cfg.evals_per_run),
                       eval_batches=max(1, cfg.val_windows // cfg.batch_size),
                       checkpoint_every=0, checkpoint_final=False, seed=seed, mixed_precision=cfg.precision)


def test_nll(model, windows: torch.Tensor, cfg: MoRConfig, **kwargs) -> float:
    """Mean next-token NLL over `windows` (rlib.eval.perplexity); kwargs go to the MoR forward (e.g. mode)."""
    model.eval()
    dtype = torch.bfloat16 if cfg.precision == "bf16" else None
    scored = (lambda ids: model(ids, **kwargs)) if kwargs else model
    return rl_eval.perplexity(scored, windows, batch_size=cfg.micro_batch_size, dtype=dtype, progress=False)["nll"]


def fewshot_scores(model, cfg: MoRConfig) -> dict[str, dict[str, float]]:
    """Table 3's accuracy column on the local tasks (book_nextline, book_cloze; their standard 0 shots), through
    lm-eval (`rlib.scratch_eval`): a routed model decides causally (`mode="causal"`), since top-k over a padded
    window would read the future and the padding."""
    from rlib import data
    from rlib.scratch_eval import ScratchLM, downstream_scores

    model.eval()
    routed = isinstance(model, MoRDecoder) and bool(model.recursions)
    scored = (lambda ids: model(ids, mode="causal")) if routed else model
    lm = ScratchLM(scored, data.load_tokenizer(cfg.tokenizer), cfg.text().vocabulary(), max_length=cfg.seq_len,
                   batch_size=cfg.micro_batch_size)
    return {task: {key: value for key, value in score.items() if key != "gold_ce"}
            for task, score in downstream_scores(lm, limit=cfg.fewshot_items).items()}


def non_embedding_params(model) -> int:
    inner = model.decoder if isinstance(model, MoRDecoder) else model
    total = sum(p.numel() for p in model.parameters())
    return total - inner.embed.weight.numel()


def run_variant(variant: MoRVariant, cfg: MoRConfig, slot: experiments.RunSlot,
                held: dict[str, torch.Tensor]) -> dict[str, Any]:
    text = cfg.text()
    model = make_model(variant, cfg, text.size)
    steps, per_token = run_steps(variant, cfg)
    routed = isinstance(model, MoRDecoder)
    train_dir = slot.train_dir
    router_terms = MoRLoss()
    result = train(model, text.train_windows(), train_config(cfg, steps, variant.seed), train_dir,
                   val_windows=held["val"], hooks=[router_terms] if routed else [])
    log = pd.read_csv(train_dir / "metrics.csv")
    curve = log.dropna(subset=["val_loss"])[["step", "tokens", "val_loss"]]
    after: dict[str, Any] = {"nll": test_nll(model, held["test"], cfg)}
    if routed and model.recursions:  # sequence orders have no recursion to route or cap
        after["nll_causal"] = test_nll(model, held["test"], cfg, mode="causal")
        after["routing"] = analysis.routing_metrics(model, held["test"], cfg.micro_batch_size)
        scaling = analysis.depth_scaling(model, held["test"], cfg.micro_batch_size)
        after["depth_scaling"] = scaling["nll"].tolist()
        after["depth_scaling_se"] = {"step": scaling["step_se"].tolist(), "gain": scaling["gain_se"].tolist()}
    if cfg.fewshot_items and variant.tag == "" and variant.budget in ("flops", "tokens") and \
            variant.seed == cfg.seeds[0]:
        after["fewshot"] = fewshot_scores(model, cfg)
    (io.save if routed else convert.save)(model, slot.folder / "model")
    slot.drop_checkpoint()
    return {"name": variant.name, "label": variant.label, "tag": variant.tag, "budget": variant.budget,
            "seed": variant.seed, "spec": None if variant.spec is None else dataclasses.asdict(variant.spec),
            "n_layers": unrolled_layers(variant.spec, cfg.n_layers), "params": non_embedding_params(model),
            "steps": steps, "tokens": result.tokens, "flops_per_token": per_token,
            "train_flops": per_token * result.tokens, "seconds": result.seconds,
            "tokens_per_s": result.tokens / result.seconds, "after": after,
            "curve": {"tokens": curve["tokens"].tolist(), "val_loss": curve["val_loss"].tolist()},
            "load_trace": router_terms.load_trace()}


@functools.lru_cache(maxsize=4)
def _held(cfg: MoRConfig) -> dict[str, torch.Tensor]:
    return windows(cfg)  # once per process and config: a worker scores many runs on the same windows


def variant_in_slot(variant: MoRVariant, slot: experiments.RunSlot, cfg: MoRConfig) -> dict[str, Any]:
    """`run_variant` on the held-out windows of `cfg`, for a grid: a module-level function, so that
    `functools.partial(variant_in_slot, cfg=cfg)` reaches a worker process."""
    return run_variant(variant, cfg, slot, _held(cfg))


def grid(cfg: MoRConfig, work: Path, runs: list[MoRVariant] | None = None, desc: str = "runs") -> experiments.Grid:
    """The grid of `runs` (default: `variants(cfg)`) under `cfg` in `work`, for `rlib.experiments.run_grids`."""
    return experiments.Grid(variants(cfg) if runs is None else runs, work, functools.partial(variant_in_slot, cfg=cfg),
                            context=(cfg.grid_context(),), modules=CODE_MODULES, desc=desc)


def run_grid(cfg: MoRConfig, work: Path, runs: list[MoRVariant] | None = None,
             also: tuple[experiments.Grid, ...] = ()) -> list[dict[str, Any]]:
    """Run (or load) every variant (default: `variants(cfg)`), results in order, their missing runs in one worker per
    core. The missing runs of the grids `also` (e.g. `rlib.mor.budget_sweep.grids`, read back later by their own
    call) train in the same pool after them, so that their shorter runs fill the cores while this grid's last
    ones finish."""
    cfg.text().save_vocabulary(work)
    return experiments.run_grids([grid(cfg, work, runs), *also], workers="auto")[0]


def load_model(work: Path, variant_name: str) -> MoRDecoder | Decoder:
    """A trained run's model (MoR models through `rlib.mor.io`)."""
    folder = Path(work) / variant_name / "model"
    if (folder / io.SPEC_FILE).exists():
        return io.load(folder)
    return experiments.load_model(work, variant_name)


def main_model(cfg: MoRConfig, work: Path, kind: str, budget: str = "flops", tag: str = ""):
    """A trained model of the grid: kind in MAIN (the main Nr), at `budget`, first seed."""
    spec = MAIN[kind](cfg.n_recursions)
    if tag:
        spec = spec.replace(**ROUTER_ABLATIONS[tag][1])
    return load_model(work, MoRVariant(spec, budget, cfg.seeds[0], tag=tag).name)
