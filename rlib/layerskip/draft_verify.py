"""Draft & Verify (Zhang et al. 2023), the self-speculative decoder paper 004 compares LayerSkip with (Sec. 3, Sec. 6.2,
Table 2: 13B CNN/DM 1.56x, XSUM 1.48x).

Draft & Verify needs no training: the *plain* model drafts with a set of its intermediate attention and MLP sublayers
skipped (a skipped sublayer passes its residual stream through), then the whole model verifies the drafts in one
pass. Because the drafter skips layers in the middle, its hidden states and keys/values differ from the full model's
in every layer after the first skipped one, so verification recomputes all L layers over the drafted positions:
unlike LayerSkip's prefix drafter (Sec. 4.3.3), it cannot reuse the draft's cache or activations (paper 004, Sec. 3).
Here the drafter appends to the same KV cache as the verifier (its non-skipped layers attend to the full model's
keys of the committed tokens, as in the official code), and its entries are cropped away before verification.

    SkipSet               which sublayers the drafter skips (attention and MLP apart, as the official search)
    DraftExit             adaptive draft-exiting: stop drafting once the draft token's probability falls below a
                          threshold that follows the acceptance rate (the official code's defaults)
    draft_verify_generate decoding: the output equals greedy decoding (or coupled sampling, `rlib.layerskip.sampling`)
                          token for token, whatever the skip set
    search_skip_set       the skip set that maximises measured tokens/s on some prompts, by Bayesian optimisation
                          over 2L variables in [0, 1] (a sublayer is skipped where its variable exceeds 0.5), as the
                          official `searching.py`; it runs 1000 iterations on a 13B model, the book a budget

Adaptive draft-exiting (D&V Sec. 3.3; the official `exact_self_speculative_generate`): drafting stops after
`max_drafts` drafts or once the chosen draft token's probability is below `threshold`. After each round with drafts,
m = 0.5 m + 0.5 (accepted / drafted); the target threshold is threshold + 0.01 when m < 0.9, threshold - 0.01 when
m >= 0.9 and the round stopped early (unchanged when it drafted max_drafts), and threshold moves to
0.9 threshold + 0.1 target. The first round is the prompt's prefill with the whole model, as in the official code.

The search's acquisition (ours, to fit a CPU budget): upper confidence bound over 10,000 random candidates without
the L-BFGS refinement bayes_opt adds by default: the objective is a step function of each variable (only which side
of 0.5 it lies on matters), so refining a candidate inside its cell changes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F

from rlib.config import ConfigError
from rlib.layerskip.sampling import Sampling
from rlib.layerskip.speculative import (
    SpeculativeStats,
    _check,
    _run,
    _trim,
    accept_drafts,
    stopping_and_choice,
)
from rlib.model import Decoder
from rlib.model.decode_matmul import fast_decoding
from rlib.progress import progress

__all__ = ["OFFICIAL_DRAFTING", "DraftExit", "SkipSearch", "SkipSet", "draft_verify_generate", "middle_probes",
           "search_skip_set"]


@dataclass(frozen=True)
class SkipSet:
    """The layers whose attention sublayer, and those whose MLP sublayer, the drafter skips (0-based)."""

    attention: tuple[int, ...] = ()
    mlp: tuple[int, ...] = ()

    def check(self, n_layers: int) -> None:
        for name, layers in (("attention", self.attention), ("mlp", self.mlp)):
            bad = [layer for layer in layers if not 0 <= layer < n_layers]
            if bad or len(set(layers)) != len(layers):
                raise ConfigError(f"SkipSet.{name}={list(layers)}: each layer once, in [0, {n_layers})")

    @property
    def label(self) -> str:
        return f"skip {len(self.attention)} attn + {len(self.mlp)} mlp"

    def text(self) -> str:
        """Both lists, for a table cell."""
        return f"attention {list(self.attention)}; mlp {list(self.mlp)}"

    @classmethod
    def from_values(cls, values: list[float], n_layers: int) -> SkipSet:
        """The official search's encoding: values [2L] in [0, 1], attention of layer i skipped where values[i] > 0.5
        and its MLP where values[L + i] > 0.5."""
        if len(values) != 2 * n_layers:
            raise ConfigError(f"{len(values)} values for {n_layers} layers: need 2 x n_layers")
        return cls(tuple(i for i in range(n_layers) if values[i] > 0.5),
                   tuple(i for i in range(n_layers) if values[n_layers + i] > 0.5))

    def values(self, n_layers: int) -> list[float]:
        """The inverse of `from_values`: 1.0 for a skipped sublayer, 0.0 otherwise."""
        return ([float(i in self.attention) for i in range(n_layers)]
                + [float(i in self.mlp) for i in range(n_layers)])

    def kept_share(self, model: Decoder) -> float:
        """The share of the blocks' weights the drafter reads per token (the head not counted)."""
        attention = [sum(p.numel() for p in block.attn.parameters()) for block in model.blocks]
        mlp = [sum(p.numel() for p in block.mlp.parameters()) for block in model.blocks]
        skipped = sum(attention[i] for i in self.attention) + sum(mlp[i] for i in self.mlp)
        return 1 - skipped / (sum(attention) + sum(mlp))


@dataclass(frozen=True)
class DraftExit:
    """Adaptive draft-exiting (module docstring); the defaults are the official code's."""

    max_drafts: int = 8
    threshold: float = 0.8
    adaptive: bool = True
    ema: float = 0.5  # weight of the previous acceptance average
    target: float = 0.9  # acceptance the threshold steers to
    step: float = 0.01
    smoothing: float = 0.9  # weight of the previous threshold

    def __post_init__(self) -> None:
        if self.max_drafts < 1:
            raise ConfigError(f"max_drafts={self.max_drafts} must be >= 1")
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"threshold={self.threshold} must lie in [0, 1] (a probability)")


OFFICIAL_DRAFTING = DraftExit()  # the official code's draft-exiting


class _Threshold:
    """The moving stop threshold of one generation."""

    def __init__(self, rule: DraftExit):
        self.rule, self.value, self.matchness = rule, rule.threshold, 0.0

    def update(self, accepted: int, drafted: int) -> None:
        rule = self.rule
        if not rule.adaptive or drafted == 0:
            return
        self.matchness = rule.ema * self.matchness + (1 - rule.ema) * accepted / drafted
        if self.matchness < rule.target:
            goal = self.value + rule.step
        else:
            goal = self.value if drafted == rule.max_drafts else self.value - rule.step
        self.value = rule.smoothing * self.value + (1 - rule.smoothing) * goal


def _skipping_run(model: Decoder, skip: SkipSet, x: torch.Tensor, start: int, cache) -> torch.Tensor:
    """The drafter: every layer with its skipped sublayers passed through, x [B, T, D] at positions start.. ->
    [B, T, D] (non-skipped attention appends to cache)."""
    return _run(model, range(len(model.plan)), x, start, cache, frozenset(skip.attention), frozenset(skip.mlp))


def _chosen_probability(logits: torch.Tensor, chosen: torch.Tensor, sampling: Sampling | None) -> torch.Tensor:
    """The probability of each chosen token [B, 1] under the decoding distribution (softmax of logits [B, 1, V], at
    the sampling temperature if any): the official code's draft-exit signal."""
    scaled = logits.float() if sampling is None else logits.float() / sampling.temperature
    return F.softmax(scaled, dim=-1).gather(-1, chosen[..., None])[..., 0]


@torch.no_grad()
def draft_verify_generate(model: Decoder, input_ids: torch.Tensor, max_new_tokens: int, skip: SkipSet,
                          drafting: DraftExit = OFFICIAL_DRAFTING, eos_ids: tuple[int, ...] | None = None,
                          sampling: Sampling | None = None) -> tuple[torch.Tensor, SpeculativeStats]:
    """Draft & Verify decoding: prompt [B, T] -> ([B, T + n], stats); equal to greedy decoding (or, with `sampling`,
    to coupled sampling with the same noise). stats.drafted counts the drafts proposed, stats.accepted those
    committed."""
    n_layers = len(model.plan)
    _check(model, input_ids, max_new_tokens, n_layers)
    skip.check(n_layers)
    eos, fill, choose = stopping_and_choice(model, input_ids, max_new_tokens, eos_ids, sampling)
    seq, prompt_len = input_ids, input_ids.shape[1]
    threshold = _Threshold(drafting)
    cache = model.new_cache()
    cached = 0  # committed tokens whose keys/values the cache holds in every layer
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
    stats = SpeculativeStats()
    while seq.shape[1] - prompt_len < max_new_tokens and not bool(finished.all()):
        remaining = max_new_tokens - (seq.shape[1] - prompt_len)
        pending = seq[:, cached:]  # [B, p]: committed tokens the verifier has not seen
        drafts: list[torch.Tensor] = []
        if cached:  # the first round is the prompt's prefill by the whole model
            tokens, start = pending, cached
            for _ in range(min(drafting.max_drafts, remaining - 1)):
                logits = model.head(_skipping_run(model, skip, model.embed_tokens(tokens), start, cache)[:, -1:])
                draft = choose(logits, start + tokens.shape[1])  # [B, 1]
                drafts.append(draft)
                start, tokens = start + tokens.shape[1], draft
                live = ~(finished | torch.isin(draft[:, 0], eos))
                if not bool(live.any()):
                    break
                if float(_chosen_probability(logits, draft, sampling)[live].min()) < threshold.value:
                    break
            cache.crop(cached)  # the drafter's keys/values are not the full model's: verification recomputes them
        drafted = torch.cat(drafts, dim=1) if drafts else seq[:, :0]  # [B, n]
        verify_ids = torch.cat([pending, drafted], dim=1)  # [B, p + n]
        hidden = _run(model, range(n_layers), model.embed_tokens(verify_ids), cached, cache)
        verified = choose(model.head(hidden[:, pending.shape[1] - 1:]), seq.shape[1])  # [B, n + 1]
        commit, accepted, finished = accept_drafts(drafted, verified, finished, eos, fill)
        seq = torch.cat([seq, commit], dim=1)
        cached = seq.shape[1] - 1
        cache.crop(cached)
        threshold.update(accepted, len(drafts))
        stats.rounds += 1
        stats.drafted += len(drafts)
        stats.accepted += accepted
    new = _trim(seq[:, prompt_len:], eos, max_new_tokens)
    stats.new_tokens = new.shape[1]
    return torch.cat([input_ids, new], dim=1), stats


def middle_probes(n_layers: int) -> list[SkipSet]:
    """Starting points of the search (ours; the official search takes hand-given points the same way, `probe`):
    the attention of every layer in the second half but the last, both sublayers of the middle quarter, and the
    attention of every other layer but the first and last."""
    half = tuple(range(n_layers // 2, n_layers - 1))
    quarter = tuple(range(3 * n_layers // 8, 5 * n_layers // 8))
    alternate = tuple(range(1, n_layers - 1, 2))
    probes = [SkipSet(half), SkipSet(quarter, quarter), SkipSet(alternate)]
    return [p for p in probes if p.attention or p.mlp]


@dataclass
class SkipSearch:
    best: SkipSet
    trace: pd.DataFrame  # one row per evaluated skip set


def _tokens_per_second(model: Decoder, prompts: list[torch.Tensor], new_tokens: int, skip: SkipSet,
                       drafting: DraftExit, sampling: Sampling | None) -> tuple[float, float]:
    """(tokens/s, acceptance) of Draft & Verify with `skip` over the prompts, one timing each."""
    seconds = tokens = drafted = accepted = 0
    for index, prompt in enumerate(prompts):
        noise = None if sampling is None else Sampling(sampling.temperature, sampling.seed + index)
        started = time.perf_counter()
        out, stats = draft_verify_generate(model, prompt, new_tokens, skip, drafting, eos_ids=(), sampling=noise)
        seconds += time.perf_counter() - started
        tokens += out.shape[1] - prompt.shape[1]
        drafted, accepted = drafted + stats.drafted, accepted + stats.accepted
    return tokens / seconds, accepted / drafted if drafted else float("nan")


@torch.inference_mode()
def search_skip_set(model: Decoder, prompts: list[torch.Tensor], new_tokens: int, n_iter: int,
                    probes: list[SkipSet] | None = None, drafting: DraftExit = OFFICIAL_DRAFTING,
                    sampling: Sampling | None = None, seed: int = 1, fast_matmul: bool = True,
                    desc: str = "Draft & Verify search") -> SkipSearch:
    """The skip set with the highest measured tokens/s of `draft_verify_generate` on `prompts` (`new_tokens` each,
    EOS ignored): the `probes` first (default `middle_probes`), then `n_iter` points the Bayesian optimiser suggests
    (module docstring). The trace has one row per evaluated set: `iteration`, `source` (probe / suggested),
    `attention_skipped`, `mlp_skipped`, `kept_share`, `tokens_per_s`, `acceptance`, `skip` (the lists)."""
    from bayes_opt import BayesianOptimization, acquisition

    if not prompts or any(p.dim() != 2 or p.shape[0] != 1 for p in prompts):
        raise ConfigError("prompts must be a non-empty list of [1, T] id tensors")
    if n_iter < 0 or new_tokens < 2:
        raise ConfigError(f"n_iter={n_iter} must be >= 0 and new_tokens={new_tokens} >= 2")
    n_layers = len(model.plan)
    probes = middle_probes(n_layers) if probes is None else probes
    for probe in probes:  # a bad probe is refused before any timing
        probe.check(n_layers)
    if not probes and n_iter == 0:
        raise ConfigError("nothing to evaluate: give probes or n_iter >= 1")
    names = [f"x{i:03d}" for i in range(2 * n_layers)]

    class RandomCandidatesUCB(acquisition.UpperConfidenceBound):  # module docstring: no L-BFGS refinement
        def suggest(self, gp, target_space, n_random=10_000, n_smart=10, fit_gp=True, random_state=None):
            return super().suggest(gp, target_space, n_random=n_random, n_smart=0, fit_gp=fit_gp,
                                   random_state=random_state)

    optimizer = BayesianOptimization(f=None, pbounds={name: (0.0, 1.0) for name in names}, random_state=seed,
                                     acquisition_function=RandomCandidatesUCB(random_state=seed), verbose=0,
                                     allow_duplicate_points=True)
    optimizer.set_gp_params(alpha=1e-2)  # the official search's noise level
    model.eval()
    rows, tried = [], []
    with fast_decoding(model, enabled=fast_matmul):
        _tokens_per_second(model, prompts[:1], 2, SkipSet(), drafting, sampling)  # warm-up
        for iteration in progress(range(len(probes) + n_iter), desc=desc, unit="set"):
            if iteration < len(probes):
                source, skip = "probe", probes[iteration]
                point = dict(zip(names, skip.values(n_layers)))
            else:
                source, point = "suggested", optimizer.suggest()
                skip = SkipSet.from_values([float(point[name]) for name in names], n_layers)
            tried.append(skip)
            speed, acceptance = _tokens_per_second(model, prompts, new_tokens, skip, drafting, sampling)
            optimizer.register(params=point, target=speed)
            rows.append({"iteration": iteration, "source": source, "attention_skipped": len(skip.attention),
                         "mlp_skipped": len(skip.mlp), "kept_share": skip.kept_share(model), "tokens_per_s": speed,
                         "acceptance": acceptance, "skip": skip.text()})
    trace = pd.DataFrame(rows)
    best = int(trace["tokens_per_s"].idxmax())  # the first of any equally fast sets
    trace["best"] = trace.index == best
    return SkipSearch(tried[best], trace)
