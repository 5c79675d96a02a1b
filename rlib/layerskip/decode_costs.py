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

A round that drafts n tokens (n = drafts per round, measured) costs

    kvq        n (layers E x1 + draft head x1) + layers E x1 (the last draft's layers < E) + verify
    kv, none   n (layers E x1 + draft head x1) + verify           verify = layers E.. x(d+1) + head x(d+1),
                                                                          with E = 0 for kv and none

and a generation costs prefill + rounds x round - verify (the first round's verification is the prefill). The
autoregressive row is the same with n = 0 and E = L (one token a round); early exit is E layers and the head per
token after a prefill of E layers. What the model leaves out (the Python of the decoding loop: concatenations,
comparisons, cache crops; a longer KV cache late in a generation) shows as measured/predicted below 1.

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
from rlib.layerskip.speculative import _run, draft_head
from rlib.model import Decoder
from rlib.model.decode_matmul import fast_decoding

__all__ = ["head_in_layers", "measure_costs", "predict", "required_acceptance", "round_ms", "speedup_at"]


def _median_ms(call: Callable[[], object], repeats: int) -> float:
    call()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


@torch.inference_mode()
def measure_costs(model: Decoder, prompts: list[torch.Tensor], exits: tuple[int, ...], drafts: tuple[int, ...],
                  draft_vocab: torch.Tensor | None = None, repeats: int = 20, fast_matmul: bool = True) -> pd.DataFrame:
    """One row per component (module docstring): `component`, `exit_layer`, `tokens`, `ms`, and `layers` (ms over
    the ms of one layer on one token, from the E = L step: the head's cost in layers). The steps run after the first
    prompt, whose keys and values are cached. draft_vocab: the task vocabulary (the first prompt's ids are added, as
    `decoding.run_case` does); without it no vocab head row."""
    if not prompts or any(p.dim() != 2 or p.shape[0] != 1 for p in prompts):
        raise ConfigError("prompts must be a non-empty list of [1, T] id tensors (batch 1)")
    n_layers = len(model.plan)
    bad = [e for e in exits if not 1 <= e <= n_layers] + [d for d in drafts if d < 1]
    if bad or repeats < 1:
        raise ConfigError(f"exits must lie in [1, {n_layers}], drafts be >= 1 and repeats >= 1; got exits {exits}, "
                          f"drafts {drafts}, repeats {repeats}")
    model.eval()
    rows: list[dict] = []

    def add(component: str, exit_layer: int, tokens: int, call: Callable[[], object]) -> None:
        rows.append({"component": component, "exit_layer": exit_layer, "tokens": tokens,
                     "ms": _median_ms(call, repeats)})

    with fast_decoding(model, enabled=fast_matmul):
        def prefill(prompt: torch.Tensor) -> torch.Tensor:
            hidden = _run(model, range(n_layers), model.embed_tokens(prompt), 0, model.new_cache())
            return model.head(hidden[:, -1:]).argmax(-1)

        prefill_ms = [_median_ms(lambda p=p: prefill(p), max(1, repeats // 5)) for p in prompts]
        rows.append({"component": "prefill", "exit_layer": n_layers,
                     "tokens": round(sum(p.shape[1] for p in prompts) / len(prompts)),
                     "ms": sum(prefill_ms) / len(prompts)})
        context = prompts[0]
        cache = model.new_cache()
        _run(model, range(n_layers), model.embed_tokens(context), 0, cache)
        start = context.shape[1]
        token = context[:, -1:]  # [1, 1]

        def layers(depths: range, tokens: int) -> Callable[[], object]:
            ids = token.expand(1, tokens)  # [1, t]

            def call():
                hidden = _run(model, depths, model.embed_tokens(ids), start, cache)
                cache.crop(start)
                return hidden
            return call

        for exit_layer in sorted({*exits, n_layers}):
            add("layers", exit_layer, 1, layers(range(exit_layer), 1))
        hidden = _run(model, range(n_layers), model.embed_tokens(token), start, cache)  # [1, 1, D]
        cache.crop(start)
        add("head", 0, 1, lambda: model.head(hidden).argmax(-1))
        if draft_vocab is not None:
            vocab = torch.unique(torch.cat([draft_vocab.to(context.device), context[0]]))
            propose = draft_head(model, vocab)
            add("vocab head", 0, 1, lambda: propose(hidden))
        for n_draft in sorted(set(drafts)):
            wide = hidden.expand(1, n_draft + 1, -1)  # [1, d + 1, D]
            add("head", 0, n_draft + 1, lambda wide=wide: model.head(wide).argmax(-1))
            for exit_layer in sorted({*exits, 0}):
                late = range(exit_layer, n_layers)
                add("layers from", exit_layer, n_draft + 1,
                    lambda late=late, wide=wide: (_run(model, late, wide, start, cache), cache.crop(start)))
    table = pd.DataFrame(rows)
    one_layer = float(table.loc[(table["component"] == "layers") & (table["exit_layer"] == n_layers), "ms"].iloc[0])
    table["layers"] = table["ms"] / (one_layer / n_layers)
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
    return drafts_per_round * (early + propose) + last + verify, verify


def _autoregressive(costs: pd.DataFrame) -> tuple[int, float, float]:
    """(L, prefill ms, ms of one autoregressive token: L layers and the head on 1 token)."""
    n_layers = int(costs.loc[costs["component"] == "layers", "exit_layer"].max())
    prefill = _cost(costs, "prefill", n_layers, int(costs.loc[costs["component"] == "prefill", "tokens"].iloc[0]))
    return n_layers, prefill, _cost(costs, "layers", n_layers, 1) + _cost(costs, "head", 0, 1)


def predict(decoding: pd.DataFrame, costs: pd.DataFrame, prompts: int) -> pd.DataFrame:
    """`decoding` (a `decoding.benchmark_decoding` / `decode_study` table of one model, `prompts` prompts) with
    `predicted_ms`, `cost_model_speedup` (the autoregressive row's predicted ms over the row's) and `measured_over_cost`
    (measured speedup over cost-model speedup) for our decoders; NaN for the transformers peers."""
    n_layers, prefill, step = _autoregressive(costs)
    predicted = []
    for row in decoding.itertuples():
        tokens = row.new_tokens
        if row.method == "autoregressive":
            total = prompts * prefill + (tokens - prompts) * step
        elif row.method == "early_exit":
            per_token = _cost(costs, "layers", row.exit_layer, 1) + _cost(costs, "head", 0, 1)
            total = prompts * prefill * row.exit_layer / n_layers + (tokens - prompts) * per_token
        elif row.method == "self_speculative":
            rounds = tokens / row.tokens_per_round
            per_round = getattr(row, "drafts_per_round", row.n_draft)
            one_round, verify = round_ms(costs, row.exit_layer, row.n_draft, per_round, row.reuse,
                                         bool(getattr(row, "draft_vocab", False)))
            total = prompts * (prefill - verify) + rounds * one_round
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


def _totals(costs: pd.DataFrame, exit_layer: int, n_draft: int, new_tokens: int, prompts: int, reuse: str,
            vocab: bool) -> tuple[float, float, float]:
    """(autoregressive ms, self-speculation's fixed ms, ms of one round) for generations of `new_tokens` in all, d
    drafts every round: self-speculation takes fixed + rounds x round."""
    _, prefill, step = _autoregressive(costs)
    one_round, verify = round_ms(costs, exit_layer, n_draft, n_draft, reuse, vocab)
    return prompts * prefill + (new_tokens - prompts) * step, prompts * (prefill - verify), one_round


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


def head_in_layers(costs: pd.DataFrame) -> float:
    """The whole head on one token, in layers on one token (the cost table's `layers` column)."""
    return float(costs.loc[(costs["component"] == "head") & (costs["tokens"] == 1), "layers"].iloc[0])
