"""Generation quality of the decoders: ROUGE-2 against a reference (paper 004, Sec. 6.2, Tables 2-4).

The paper scores every generation with torchmetrics' ROUGE-2 F-measure against its dataset's reference, the texts
lowercased and split at whitespace (the official benchmark's normalizer), and reports the mean over samples. Early
exit collapses it (Llama2 7B CNN/DM 0.012 vs 0.079 autoregressive; code Llama1 7B 0.0035 vs 0.0513); self-speculation
keeps it (0.078; 0.0513). Its "autoregressive" rows decode the baseline model; its early-exit and self-speculative
rows decode the LayerSkip model.

Our analog (ours): a decoding study's prompts are held-out windows of its corpus, and each one's reference is the
corpus's own continuation of the window (`rlib.data.heldout_continuations`), as many tokens as the decoders make;
HumanEval prompts take the problem's canonical solution. The same ROUGE-2 scores every decoder's output on every
prompt. A continuation is open-ended, so the values sit far below a summary's; decoders are compared on the same
prompts, paired.

    rouge2              per-sample ROUGE-2 F-measures (torchmetrics, the official normalizer)
    score_outputs       a `decoding.OutputLog` table -> one row per (model, case, prompt) with its ROUGE-2
    quality_summary     mean ROUGE-2 per (model, case), and its ratio to the baseline's autoregressive mean with a
                        paired bootstrap interval over prompts
    ratio_interval      that interval: mean(numerators) / mean(denominators), prompts resampled in pairs
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from rlib.config import ConfigError

__all__ = ["BASELINE", "quality_summary", "ratio_interval", "rouge2", "score_outputs"]

BASELINE = ("baseline", "autoregressive")  # (recipe, label) every ratio is taken against: the paper's AR row
BOOTSTRAP_DRAWS = 4000


def rouge2(predictions: Sequence[str], references: Sequence[str]) -> list[float]:
    """ROUGE-2 F-measure of each prediction against its reference (torchmetrics, texts lowercased as the official
    benchmark does; 0 where either side has fewer than two words)."""
    from torchmetrics.functional.text.rouge import rouge_score

    if len(predictions) != len(references):
        raise ConfigError(f"{len(predictions)} predictions but {len(references)} references")
    return [float(rouge_score(p, r, rouge_keys="rouge2", normalizer=str.lower)["rouge2_fmeasure"])
            for p, r in zip(predictions, references)]


def score_outputs(outputs: pd.DataFrame, references: Sequence[str],
                  decode: Callable[[list[int]], str]) -> pd.DataFrame:
    """One row per row of an `OutputLog` table (model, case, prompt): its columns without `tokens`, plus `new_tokens`
    and `rouge2` (the decoded new tokens against `references[prompt]`)."""
    if outputs.empty or "tokens" not in outputs:
        raise ConfigError("score_outputs needs a decoding.OutputLog table (benchmark_decoding(..., outputs=log))")
    far = int(outputs["prompt"].max())
    if far >= len(references):
        raise ConfigError(f"prompt {far} has no reference ({len(references)} given)")
    ids = [[int(t) for t in str(text).split()] for text in outputs["tokens"].fillna("")]
    table = outputs.drop(columns="tokens").reset_index(drop=True)
    table["new_tokens"] = [len(i) for i in ids]
    table["rouge2"] = rouge2([decode(i) for i in ids], [references[p] for p in outputs["prompt"]])
    return table


def ratio_interval(numerators: Sequence[float], denominators: Sequence[float], confidence: float = 0.95,
                   draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> tuple[float, float, float]:
    """(ratio, lo, hi): mean(numerators) / mean(denominators) over paired samples, and its percentile bootstrap
    interval (the pairs resampled together; nan bounds where a resample's denominator is 0)."""
    top, bottom = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    if top.shape != bottom.shape or top.size == 0:
        raise ConfigError(f"ratio_interval needs paired, non-empty samples (got {top.size} and {bottom.size})")
    if bottom.mean() == 0:
        return float("nan"), float("nan"), float("nan")
    ratio = float(top.mean() / bottom.mean())
    picks = np.random.default_rng(seed).integers(0, top.size, size=(draws, top.size))  # [draws, n]
    means = bottom[picks].mean(axis=1)  # [draws]
    if (means == 0).any():
        return ratio, float("nan"), float("nan")
    tail = (1 - confidence) / 2
    lo, hi = np.quantile(top[picks].mean(axis=1) / means, [tail, 1 - tail])
    return ratio, float(lo), float(hi)


def quality_summary(scored: pd.DataFrame, baseline: tuple[str, str] = BASELINE,
                    one_speculative: bool = False) -> pd.DataFrame:
    """One row per (recipe, label) of a `score_outputs` table: mean ROUGE-2 over its prompts, and that mean over the
    `baseline` (recipe, label)'s on the same prompts with its 95 % paired bootstrap interval (`ratio_interval`; nan
    where the baseline was not decoded). one_speculative: keep each model's first self-speculative row only (every
    one makes the model's own autoregressive output: exact, `ls.exact.*` checks it), for a short table to read."""
    recipe, label = baseline
    base = scored[(scored["recipe"] == recipe) & (scored["label"] == label)].set_index("prompt")["rouge2"]
    rows = []
    keys = ["recipe", "label", "method", "exit_layer", "n_draft"]
    if one_speculative:
        speculative = scored["method"] == "self_speculative"
        firsts = scored[speculative].groupby("recipe", sort=False)["label"].first()
        scored = scored[~speculative | (scored["label"] == scored["recipe"].map(firsts))]
    for key, group in scored.groupby(keys, sort=False):
        mine = group.set_index("prompt")["rouge2"]
        shared = mine.index.intersection(base.index)
        ratio, lo, hi = (ratio_interval(mine[shared].to_numpy(), base[shared].to_numpy()) if len(shared)
                         else (float("nan"),) * 3)  # no baseline run (a profile without one): no ratio
        rows.append({**dict(zip(keys, key)), "prompts": len(group), "rouge2": float(mine.mean()),
                     "ratio_to_baseline": ratio, "ratio_lo": lo, "ratio_hi": hi})
    return pd.DataFrame(rows)
