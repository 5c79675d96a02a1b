"""A measured cost model of LayerSkip's decoders (paper 004, Sec. 4.3 and Table 10; inventory Sec. 5.2-5.3).

The inventory's layer-count model (`decoding.predicted_speedup`) counts layers only and ignores the LM head. That is
fair for the paper's models (Llama 1.5B: a 32,000 x 2,048 head is about one of its 24 layers' bytes) but not for
SmolLM2-135M, whose 49,152 x 576 head holds as many weights as 8 of its 30 layers: every drafted token pays it, and
drafting is where self-speculation saves. This module times each piece of a decoding round on this machine, as the
decoders run them (inside `fast_decoding`, the same KV cache code, batch 1), and predicts every row of a decoding
table from those times and the row's own counts (new tokens, rounds, drafts per round):

    component        what is timed (median of `repeats` calls, ms)
    prefill          all L layers over a prompt and the head on its last position (mean over the prompts)
    layers E x1      embedding + the first E layers on 1 token (a draft step; E = L: an autoregressive step)
    layers E.. x(d+1)  layers E..L-1 on d + 1 tokens (kvq's verification; E = 0: all L, what kv and none rerun)
    head x1, x(d+1)  final norm, the whole head and the argmax on 1 and on d + 1 tokens
    vocab head x1    the task-vocabulary draft head on 1 token (`speculative.draft_head`)
    round overhead   the decoding loop's own work per round (concatenations, comparisons, cache crops): an
                     autoregressive generation of 16 tokens after the first prompt, less its prefill and 15 x (layers
                     L x1 + head x1), over its 15 rounds

A round that drafts n tokens (n = drafts per round, measured) costs

    kvq        n (layers E x1 + draft head x1) + layers E x1 (the last draft's layers < E) + verify + overhead
    kv, none   n (layers E x1 + draft head x1) + verify + overhead   verify = layers E.. x(d+1) + head x(d+1),
                                                                             with E = 0 for kv and none

and a generation costs prefill + rounds x round - verify (the first round's verification is the prefill). The
autoregressive row is the same with n = 0 and E = L (one token a round); early exit is E layers, the head and the
overhead per token after a prefill of E layers. The overhead is calibrated on the autoregressive decoder (the first
prompt only), so that row is fitted in part; the self-speculative rows are not. What the model still leaves out (a
round's extra work for its drafts, a KV cache longer than the first prompt's, BLAS speeds at verify widths between
2 and d + 1) shows as measured over predicted speedup away from 1.

`speedup_at` gives the model's speedup at any acceptance (a d + 1 tokens a round) and `required_acceptance` inverts
it: the acceptance a self-speculative setting needs for a target speedup at its E, d and drafting head.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import pandas as pd
import torch

from rlib.config import ConfigError
from rlib.layerskip.speculative import _run, draft_head, self_speculative_generate
from rlib.model import Decoder
from rlib.model.decode_matmul import fast_decoding
from rlib.progress import progress

LOOP_TOKENS = 16  # tokens of the autoregressive generation that calibrates the round overhead

__all__ = ["head_in_layers", "measure_costs", "n_layers_of", "predict", "required_acceptance", "round_ms", "speedup_at"]


@torch.inference_mode()
def measure_costs(model: Decoder, prompts: list[torch.Tensor], exits: tuple[int, ...], drafts: tuple[int, ...],
                  draft_vocab: torch.Tensor | None = None, repeats: int = 20, fast_matmul: bool = True) -> pd.DataFrame:
    """One row per component (module docstring): `component`, `exit_layer`, `tokens`, `ms`, and `layers` (ms over
    the ms of one layer on one token, from the E = L step: the head's cost in layers). The steps run after the first
    prompt, whose keys and values are cached. draft_vocab: the task vocabulary (the first prompt's ids are added, as
    `decoding.run_case` does); without it no vocab head row. Each component is warmed up once, then every component
    is called once per sweep (round-robin, so a slow spell of the machine falls on all alike), `repeats` sweeps; the
    median counts, and the prefill is the mean over prompts of each prompt's median."""
    if not prompts or any(p.dim() != 2 or p.shape[0] != 1 for p in prompts):
        raise ConfigError("prompts must be a non-empty list of [1, T] id tensors (batch 1)")
    n_layers = len(model.plan)
    bad = [e for e in exits if not 1 <= e <= n_layers] + [d for d in drafts if d < 1]
    if bad or repeats < 1:
        raise ConfigError(f"exits must lie in [1, {n_layers}], drafts be >= 1 and repeats >= 1; got exits {exits}, "
                          f"drafts {drafts}, repeats {repeats}")
    model.eval()
    calls: dict[tuple[str, int, int], Callable[[], object]] = {}  # (component, E, tokens or prompt) -> call
    with fast_decoding(model, enabled=fast_matmul):
        def prefill(prompt: torch.Tensor) -> torch.Tensor:
            hidden = _run(model, range(n_layers), model.embed_tokens(prompt), 0, model.new_cache())
            return model.head(hidden[:, -1:]).argmax(-1)

        for index, prompt in enumerate(prompts):
            calls["prefill", n_layers, index] = lambda prompt=prompt: prefill(prompt)
        context = prompts[0]
        cache = model.new_cache()
        _run(model, range(n_layers), model.embed_tokens(context), 0, cache)
        start = context.shape[1]
        token = context[:, -1:]  # [1, 1]

        def layers(depths: range, x: torch.Tensor | None = None) -> Callable[[], object]:
            def call():  # the steps after the cached prompt, then forget them
                hidden = _run(model, depths, model.embed_tokens(token) if x is None else x, start, cache)
                cache.crop(start)
                return hidden
            return call

        for exit_layer in sorted({*exits, n_layers}):
            calls["layers", exit_layer, 1] = layers(range(exit_layer))
        hidden = layers(range(n_layers))()  # [1, 1, D]
        calls["head", 0, 1] = lambda: model.head(hidden).argmax(-1)
        if draft_vocab is not None:
            propose = draft_head(model, torch.unique(torch.cat([draft_vocab.to(context.device), context[0]])))
            calls["vocab head", 0, 1] = lambda: propose(hidden, 0)
        for n_draft in sorted(set(drafts)):
            wide = hidden.repeat(1, n_draft + 1, 1)  # [1, d + 1, D], contiguous as the decoders' (an expanded view
            # with stride 0 takes slower BLAS paths)
            calls["head", 0, n_draft + 1] = lambda wide=wide: model.head(wide).argmax(-1)
            for exit_layer in sorted({*exits, 0}):
                calls["layers from", exit_layer, n_draft + 1] = layers(range(exit_layer, n_layers), wide)
        calls["loop", n_layers, LOOP_TOKENS] = lambda: self_speculative_generate(model, context, LOOP_TOKENS,
                                                                                n_layers, 0, eos_ids=())
        for call in calls.values():
            call()  # warm-up
        times: dict[tuple[str, int, int], list[float]] = {key: [] for key in calls}
        for _ in progress(range(repeats), desc="decoding costs", unit="sweep"):
            for key, call in calls.items():
                started = time.perf_counter()
                call()
                times[key].append(time.perf_counter() - started)
    median = {key: 1000 * statistics.median(values) for key, values in times.items()}
    rows = [{"component": "prefill", "exit_layer": n_layers,
             "tokens": round(sum(p.shape[1] for p in prompts) / len(prompts)),
             "ms": sum(ms for key, ms in median.items() if key[0] == "prefill") / len(prompts)}]
    rows += [{"component": component, "exit_layer": exit_layer, "tokens": tokens, "ms": ms}
             for (component, exit_layer, tokens), ms in median.items() if component not in ("prefill", "loop")]
    step = median["layers", n_layers, 1] + median["head", 0, 1]
    loop = median["loop", n_layers, LOOP_TOKENS] - median["prefill", n_layers, 0] - (LOOP_TOKENS - 1) * step
    rows.append({"component": "round overhead", "exit_layer": 0, "tokens": 1, "ms": max(0.0, loop / (LOOP_TOKENS - 1))})
    table = pd.DataFrame(rows)
    one_layer = median["layers", n_layers, 1] / n_layers
    table["layers"] = table["ms"] / one_layer
    return table


def _cost(costs: pd.DataFrame, component: str, exit_layer: int, tokens: int) -> float:
    hit = costs[(costs["component"] == component) & (costs["exit_layer"] == exit_layer) & (costs["tokens"] == tokens)]
    if hit.empty:
        raise ConfigError(f"the cost table has no {component!r} row at E={exit_layer}, {tokens} token(s); measure "
                          "it with measure_costs(..., exits, drafts) covering the decoding table's E and d")
    return float(hit["ms"].iloc[0])


def round_ms(costs: pd.DataFrame, exit_layer: int, n_draft: int, drafts_per_round: float, reuse: str,
             vocab: bool) -> tuple[float, float]:
    """(ms of one self-speculation round, ms of its verification) at E, d, drafting `drafts_per_round` tokens (fewer
    than d when a draft is an EOS), reuse "kvq" | "kv" | "none", drafting with the task-vocabulary head or not."""
    early = _cost(costs, "layers", exit_layer, 1)
    propose = _cost(costs, "vocab head" if vocab else "head", 0, 1)
    verify = _cost(costs, "layers from", exit_layer if reuse == "kvq" else 0, n_draft + 1) \
        + _cost(costs, "head", 0, n_draft + 1)
    last = early if reuse == "kvq" else 0.0
    return drafts_per_round * (early + propose) + last + verify + _overhead(costs), verify


def _overhead(costs: pd.DataFrame) -> float:
    """The round overhead's ms (0 for a cost table without it)."""
    hit = costs.loc[costs["component"] == "round overhead", "ms"]
    return float(hit.iloc[0]) if len(hit) else 0.0


def _autoregressive(costs: pd.DataFrame) -> tuple[int, float, float]:
    """(L, prefill ms, ms of one autoregressive token: L layers, the head on 1 token and the round overhead)."""
    n_layers = n_layers_of(costs)
    prefill = _cost(costs, "prefill", n_layers, int(costs.loc[costs["component"] == "prefill", "tokens"].iloc[0]))
    return n_layers, prefill, _cost(costs, "layers", n_layers, 1) + _cost(costs, "head", 0, 1) + _overhead(costs)


def predict(decoding: pd.DataFrame, costs: pd.DataFrame, prompts: int) -> pd.DataFrame:
    """`decoding` (a `decoding.benchmark_decoding` / `decode_study` table of one model, `prompts` prompts) with
    `predicted_ms`, `cost_model_speedup` (the autoregressive row's predicted ms over the row's) and `measured_over_cost`
    (measured speedup over cost-model speedup) for our decoders; NaN for the transformers peers."""
    n_layers, prefill, _ = _autoregressive(costs)
    predicted = []
    for row in decoding.itertuples():
        tokens = row.new_tokens
        if row.method == "autoregressive":
            total = _autoregressive_total(costs, tokens, prompts)
        elif row.method == "early_exit":
            per_token = _cost(costs, "layers", row.exit_layer, 1) + _cost(costs, "head", 0, 1) + _overhead(costs)
            total = prompts * prefill * row.exit_layer / n_layers + (tokens - prompts) * per_token
        elif row.method == "self_speculative":
            _, fixed, one_round = _totals(costs, row.exit_layer, row.n_draft, tokens, prompts, row.reuse,
                                          bool(getattr(row, "draft_vocab", False)),
                                          getattr(row, "drafts_per_round", row.n_draft))
            total = fixed + tokens / row.tokens_per_round * one_round
        else:
            total = float("nan")
        predicted.append(total / tokens)
    out = decoding.assign(predicted_ms=predicted)
    base = out.loc[out["method"] == "autoregressive", "predicted_ms"]
    if base.empty:
        raise ConfigError("the decoding table needs its autoregressive row (the speedups are relative to it)")
    out["cost_model_speedup"] = float(base.iloc[0]) / out["predicted_ms"]
    out["measured_over_cost"] = out["speedup"] / out["cost_model_speedup"]
    return out


def _autoregressive_total(costs: pd.DataFrame, new_tokens: int, prompts: int) -> float:
    """ms of `prompts` autoregressive generations of `new_tokens` in all: each prefill makes a generation's first."""
    _, prefill, step = _autoregressive(costs)
    return prompts * prefill + (new_tokens - prompts) * step


def _totals(costs: pd.DataFrame, exit_layer: int, n_draft: int, new_tokens: int, prompts: int, reuse: str,
            vocab: bool, drafts_per_round: float | None = None) -> tuple[float, float, float]:
    """(autoregressive ms, self-speculation's fixed ms, ms of one round) for generations of `new_tokens` in all,
    `drafts_per_round` drafts a round (default d): self-speculation takes fixed + rounds x round."""
    _, prefill, _ = _autoregressive(costs)
    per_round = n_draft if drafts_per_round is None else drafts_per_round
    one_round, verify = round_ms(costs, exit_layer, n_draft, per_round, reuse, vocab)
    return _autoregressive_total(costs, new_tokens, prompts), prompts * (prefill - verify), one_round


def speedup_at(costs: pd.DataFrame, acceptance: float, exit_layer: int, n_draft: int, new_tokens: int, prompts: int,
               reuse: str = "kvq", vocab: bool = False) -> float:
    """The cost model's speedup over autoregressive decoding at an acceptance (accepted / drafted, d drafts a round,
    so a * d + 1 tokens a round), for `prompts` generations of `new_tokens` tokens in all."""
    autoregressive, fixed, one_round = _totals(costs, exit_layer, n_draft, new_tokens, prompts, reuse, vocab)
    return autoregressive / (fixed + new_tokens / (acceptance * n_draft + 1) * one_round)


def required_acceptance(costs: pd.DataFrame, exit_layer: int, n_draft: int, target: float, new_tokens: int,
                        prompts: int, reuse: str = "kvq", vocab: bool = False) -> float:
    """The acceptance at which `speedup_at` gives `target`x; above 1: out of reach at this E and d."""
    autoregressive, fixed, one_round = _totals(costs, exit_layer, n_draft, new_tokens, prompts, reuse, vocab)
    rounds = (autoregressive / target - fixed) / one_round
    if rounds <= 0:
        return float("inf")
    return (new_tokens / rounds - 1) / n_draft


def n_layers_of(costs: pd.DataFrame) -> int:
    """L: the deepest `layers` row of a cost table."""
    return int(costs.loc[costs["component"] == "layers", "exit_layer"].max())


def head_in_layers(costs: pd.DataFrame) -> float:
    """The whole head on one token, in layers on one token (the cost table's `layers` column)."""
    return float(costs.loc[(costs["component"] == "head") & (costs["tokens"] == 1), "layers"].iloc[0])
