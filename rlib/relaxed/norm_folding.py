"""The full-rank relaxed model that reproduces the source (Relaxed Recursive Transformers, Sec. 3.5 and Eq. 5).

Sec. 3.5: "At full rank, relaxed models can perfectly match full-size pretrained models." The paper ties every
layer parameter, RMSNorm gains included (Sec. 2.1), and puts the depth-wise LoRA on the linear maps only (Eq. 5).
So the statement is about capacity: is there a full-rank LoRA per depth that, with the norms tied, gives the
source's function? The SVD initialization of Eq. 4 (`rlib.relax`, residual W_l - W') is not that LoRA: it
restores W_l but leaves the shared norm gain s' in front of it where the source had s_l.

A pre-norm's gain multiplies the input of the maps it feeds, W_l (s_l * x^) = (W_l diag(s_l / s')) (s' * x^).
So with the residual taken against W_l diag(s_l / s') for Q, K, V (after the attention norm) and gate, up (after
the MLP norm), and W_l for O and down (no norm in front), the full-rank SVD LoRA reproduces every layer exactly,
norms tied. `fold_tied_norms` builds that target as a model: a copy of the source whose pre-norm gains are the
looped model's shared ones and whose maps absorb the ratio, the same function as the source up to rounding.
`relax(looped, fold_tied_norms(source, looped), Relaxation(full_rank))` is then the paper's full-rank relaxed model.

The fold is exact for blocks whose only norms are RMSNorm pre-norms (Llama and TinyLlama, SmolLM2, the paper's
Gemma 2B). It cannot absorb a norm that follows a map (the sublayer output norms of Gemma 2 and 3, Gemma 3's
query/key norms: a gain inside a normalization does not commute with it), a LayerNorm's bias (Pythia) or any other
bias: where the looped model's shared value of such a parameter differs from the source layer's, `fold_tied_norms`
raises, naming it, rather than build a model that is not the source.

    folded = fold_tied_norms(source, looped)          # same logits as source, norms = looped's tied norms
    table = step0_folded_table(cfg, source)           # perplexity of the folded full-rank model, per init
"""

from __future__ import annotations

import copy

import pandas as pd
import torch

from rlib import looping, relax
from rlib.config import ConfigError
from rlib.looping import Looping
from rlib.model import Decoder
from rlib.model.layers import RMSNorm
from rlib.recursive import experiments as ch01
from rlib.relax import Relaxation
from rlib.relaxed.config import RelaxedConfig

__all__ = ["FOLDED_MAPS", "fold_tied_norms", "largest_gain_ratio", "norm_scale", "step0_folded_table"]

# pre-norm -> the linear maps whose input it scales
FOLDED_MAPS = {"attn_norm": ("attn.q_proj", "attn.k_proj", "attn.v_proj"),
               "mlp_norm": ("mlp.gate_proj", "mlp.up_proj")}


def norm_scale(norm: RMSNorm) -> torch.Tensor:
    """The gain an RMSNorm multiplies the normalized input by (fp32 [D]): w, or 1 + w for Gemma's form."""
    weight = norm.weight.detach().float()
    return 1.0 + weight if norm.plus_one else weight


def _unfoldable(original: torch.nn.Module, shared: torch.nn.Module) -> list[str]:
    """Parameters of a source layer that neither the LoRA (the 7 projections' weights) nor the fold (the pre-norm
    gains) can restore, and whose shared value differs."""
    restorable = {f"{p}.weight" for p in relax.PROJECTIONS} | {f"{n}.weight" for n in FOLDED_MAPS}
    shared_params = dict(shared.named_parameters())
    return [name for name, p in original.named_parameters()
            if name not in restorable and ".adapters." not in name
            and not torch.equal(p.detach(), shared_params[name].detach())]


def _gain_ratios(source: Decoder, looped: Decoder):
    """(depth, pre-norm path, s_l / s' [D]) for every folded norm; 0 where both gains are 0. Raises where the shared
    gain is 0 and the source's is not."""
    for depth, step in enumerate(looped.plan.steps):
        for norm_path in FOLDED_MAPS:
            s_own = norm_scale(source.blocks[depth].get_submodule(norm_path))  # [D]
            s_tied = norm_scale(looped.blocks[step.block].get_submodule(norm_path))  # [D]
            if bool(((s_tied == 0) & (s_own != 0)).any()):
                raise ConfigError(f"depth {depth}: the shared {norm_path} gain is 0 where the source's is not; no "
                                  "fold reproduces the source")
            yield depth, norm_path, torch.where(s_tied == 0, torch.zeros_like(s_own), s_own / s_tied)


def fold_tied_norms(source: Decoder, looped: Decoder) -> Decoder:
    """A copy of `source` whose layer l has the pre-norm gains of the looped model's depth l (its shared block's)
    and the ratio s_l / s' folded into the columns of the maps they feed (module docstring). Raises if a parameter
    the fold cannot absorb differs, or a shared gain is 0 where the source's is not."""
    if len(looped.plan.steps) != len(source.blocks):
        raise ConfigError(f"the looped model has {len(looped.plan.steps)} depths but the source {len(source.blocks)} "
                          "layers: fold a source into its own recursive conversion")
    for depth, step in enumerate(looped.plan.steps):
        bad = _unfoldable(source.blocks[depth], looped.blocks[step.block])
        if bad:
            raise ConfigError(f"depth {depth}: {bad} differ between the source layer and the shared block, and "
                              "neither a LoRA on the linear maps nor a pre-norm fold can restore them")
    folded = copy.deepcopy(source)
    with torch.no_grad():
        for depth, norm_path, ratio in _gain_ratios(source, looped):  # ratio [D]
            layer = folded.blocks[depth]
            for path in FOLDED_MAPS[norm_path]:
                proj = layer.get_submodule(path)
                proj.weight.copy_((proj.weight.float() * ratio[None, :]).to(proj.weight.dtype))  # [out, D]
            tied = looped.blocks[looped.plan.steps[depth].block].get_submodule(norm_path)
            layer.get_submodule(norm_path).weight.copy_(tied.weight)
    return folded


def largest_gain_ratio(source: Decoder, looped: Decoder) -> float:
    """max |s_l / s'| over every folded gain: how far the fold stretches a column (the SVD's conditioning)."""
    return max(float(ratio.abs().max()) for _, _, ratio in _gain_ratios(source, looped))


def step0_folded_table(cfg: RelaxedConfig, source: Decoder) -> pd.DataFrame:
    """Held-out perplexity before training of each init's recursive model relaxed at full rank with the norms
    tied, its SVD LoRA taken against the norm-folded source (`fold_tied_norms`): Sec. 3.5's 'perfectly match', on
    the same windows and in fp32 as `rlib.relaxed.experiments.step0_table`. Also the largest |logit| difference
    from the source on the first window and the largest gain ratio the fold applied. One row per init."""
    windows = ch01.eval_windows(cfg)[cfg.train_corpus]  # [N, T]
    windows = {cfg.train_corpus: windows[: cfg.step0_windows or len(windows)]}
    key = f"ppl[{cfg.train_corpus}]"
    cfg = cfg.override(precision="no")  # fp32, as the step-0 curve
    full = relax.full_rank(source)
    first = windows[cfg.train_corpus][:1]  # [1, T]
    with torch.no_grad():
        reference = source(first).float()  # [1, T, V]
    rows = []
    for init in cfg.inits:
        looped = looping.convert(source, Looping(cfg.n_loops, init=init))
        model = relax.relax(looped, fold_tied_norms(source, looped), Relaxation(full))
        with torch.no_grad():
            gap = float((model(first).float() - reference).abs().max())
        rows.append({"init": init, "rank": full, "ppl": ch01.evaluate_model(model, cfg, windows, tasks=False)[key],
                     "max_logit_gap": gap, "logit_scale": float(reference.abs().max()),
                     "largest_gain_ratio": largest_gain_ratio(source, looped)})
    return pd.DataFrame(rows)
