"""Chapter 00's ledger: the baselines every later chapter relies on (Relaxed Recursive Transformers, paper 000,
Table D.1 and App. E).

The paper measures its pretrained models before any conversion (Table D.1) and uptrains them in mixed precision
(App. E). The book cannot reproduce Table D.1's models offline, so every claim here is the book's own check that
its two small base models are usable baselines of the same kind (`ours=True`): above chance on the task suite,
unchanged by bf16, and ordered by pretraining tokens the way Table D.1's TinyLlama checkpoints are.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from rlib.basemodels.config import ModelsDataConfig
from rlib.book.claims import ClaimSpec, Ledger
from rlib.tasks import CHANCE_ACCURACY

CHAPTER = "00_models_and_data"
Z_SIGNIFICANT = 2.0  # standard errors a difference must exceed to count as more than noise (threshold ours)
BF16_MAX_REL_PPL = 0.01  # bf16 perplexity within 1 % of fp32 on every corpus (threshold ours)

SPECS = (
    ClaimSpec(
        "base.d1.above_chance.ours", "000", "Table D.1 (the pretrained models' few-shot accuracy before conversion)",
        "Table D.1 reports every source model well above chance before conversion (e.g. TinyLlama 3T: HellaSwag "
        "59.20, PIQA 73.29); every later table compares against these baselines.",
        f"every base model's primary accuracy on each task with a chance level is above chance by more than "
        f"{Z_SIGNIFICANT:g} standard errors (threshold ours)",
        artifact="task_suite", ours=True),
    ClaimSpec(
        "base.d1.more_tokens_higher_accuracy.ours", "000",
        "Table D.1 (TinyLlama 105B -> 3T tokens: avg 43.26 -> 53.13)",
        "Along TinyLlama's checkpoints, more pretraining tokens give higher few-shot accuracy (average 43.26 at 105B "
        "tokens, 53.13 at 3T).",
        "the base model pretrained on more tokens has the higher average accuracy, by more than "
        f"{Z_SIGNIFICANT:g} standard errors of the difference; within that it is not testable at this scale "
        "(two different models stand in for one model's checkpoints: ours)",
        artifact="task_suite", ours=True),
    ClaimSpec(
        "base.bf16_matches_fp32.ours", "000", "App. E (uptraining in mixed precision)",
        "The paper uptrains in mixed precision; its numbers assume half-precision compute does not change the model.",
        f"bf16 held-out perplexity within {BF16_MAX_REL_PPL:.0%} of fp32 for every model and corpus, both on the "
        "same windows (precision_check: the windows fp32 scored, paired; threshold ours)",
        artifact="precision_check", ours=True),
)


def judge(tables: Mapping[str, pd.DataFrame], cfg: ModelsDataConfig, profile: str) -> Ledger:
    """Judge chapter 00's claims from its tables (`task_suite`, `precision_check`, or `heldout_perplexity` where a run
    before the paired check scored every dtype on the same windows)."""
    ledger = Ledger(CHAPTER, profile, SPECS)
    suite, ppl = tables.get("task_suite"), tables.get("precision_check")
    if ppl is None:
        ppl = tables.get("heldout_perplexity")
    if suite is None:
        for spec in SPECS[:2]:
            ledger.not_measured(spec.id, "needs: the task_suite table")
    else:
        _judge_above_chance(ledger, suite)
        _judge_more_tokens(ledger, suite)
    if ppl is None:
        ledger.not_measured("base.bf16_matches_fp32.ours", "needs: the precision_check table")
    else:
        _judge_bf16(ledger, ppl)
    return ledger


def _accuracy_rows(suite: pd.DataFrame) -> pd.DataFrame:
    rows = suite[suite["primary"].astype(bool) & suite["task"].isin(list(CHANCE_ACCURACY))]
    rows = rows[rows["metric"].str.startswith("acc")].copy()
    rows["chance"] = rows["task"].map(CHANCE_ACCURACY) / 100.0
    rows["z"] = (rows["value"] - rows["chance"]) / rows["stderr"].clip(lower=1e-9)
    return rows


def _judge_above_chance(ledger: Ledger, suite: pd.DataFrame) -> None:
    rows = _accuracy_rows(suite)
    claim = "base.d1.above_chance.ours"
    if rows.empty:
        ledger.not_measured(claim, "needs: an accuracy task with a chance level in the task suite")
        return
    measured = "; ".join(f"{r.model} {r.task} {100 * r.value:.1f} vs chance {100 * r.chance:.0f} (z {r.z:.1f})"
                         for r in rows.itertuples())
    worst = rows.loc[rows["z"].idxmin()]
    ledger.judge(claim, bool((rows["z"] > Z_SIGNIFICANT).all()), measured, diagnosis=(
        "scale", f"{worst.model} on {worst.task} is {worst.z:.1f} standard errors above chance with "
                 f"n = {int(worst.n)} items: a 135M-270M model at the edge of this task"))


def _judge_more_tokens(ledger: Ledger, suite: pd.DataFrame) -> None:
    claim = "base.d1.more_tokens_higher_accuracy.ours"
    rows = _accuracy_rows(suite)
    per_model = rows.groupby("model").agg(acc=("value", "mean"), var=("stderr", lambda s: float((s ** 2).sum())),
                                          k=("value", "size"))
    tokens = suite.groupby("model")["pretraining_tokens"].first().map(_token_count)
    if len(per_model) < 2 or tokens.isna().any():
        ledger.not_measured(claim, "needs: two base models with known pretraining tokens on the task suite")
        return
    more, fewer = tokens.idxmax(), tokens.idxmin()
    diff = per_model.at[more, "acc"] - per_model.at[fewer, "acc"]
    se = ((per_model.at[more, "var"] / per_model.at[more, "k"] ** 2)
          + (per_model.at[fewer, "var"] / per_model.at[fewer, "k"] ** 2)) ** 0.5
    measured = (f"{more} ({tokens[more]:.0e} tokens) {100 * per_model.at[more, 'acc']:.1f} vs {fewer} "
                f"({tokens[fewer]:.0e}) {100 * per_model.at[fewer, 'acc']:.1f}: difference {100 * diff:+.1f} "
                f"+- {100 * se:.1f}")
    if abs(diff) <= Z_SIGNIFICANT * se:
        ledger.judge(claim, "not testable at this scale", measured)
    else:
        ledger.judge(claim, bool(diff > 0), measured, diagnosis=(
            "disagrees with the paper", f"the difference {100 * diff:+.1f} points is beyond {Z_SIGNIFICANT:g} "
                                        f"standard errors ({100 * se:.1f}); the two models differ in more than tokens"))


def _token_count(text: str) -> float:
    """'2T' -> 2e12, '105B' -> 1.05e11; NaN when unknown."""
    scale = {"T": 1e12, "B": 1e9, "M": 1e6}
    text = str(text).strip()
    try:
        return float(text[:-1]) * scale[text[-1]]
    except (KeyError, ValueError, IndexError):
        return float("nan")


def _judge_bf16(ledger: Ledger, ppl: pd.DataFrame) -> None:
    claim = "base.bf16_matches_fp32.ours"
    if "ratio" in ppl.columns:  # precision_check: paired on the windows fp32 scored
        rows = ppl[ppl["dtype"] == "bfloat16"].set_index(["model", "corpus"])
        if rows.empty:
            ledger.not_measured(claim, "needs: bf16 rows in precision_check")
            return
        rel = (rows["ratio"] - 1.0).abs()
        (model, corpus), worst = rel.idxmax(), rel.max()
        row = rows.loc[(model, corpus)]
        measured = (f"largest |bf16 / fp32 - 1| = {worst:.2%} ({model}, {corpus}: {int(row['n_windows'])} paired "
                    f"windows, NLL difference {row['diff_nll']:+.4f} +- {row['diff_nll_se']:.4f} nats)")
    else:  # heldout_perplexity of a run that scored both dtypes on every window
        wide = ppl.pivot_table(index=["model", "corpus"], columns="dtype", values="ppl")
        if not {"float32", "bfloat16"} <= set(wide.columns):
            ledger.not_measured(claim, "needs: fp32 and bf16 rows in precision_check")
            return
        rel = (wide["bfloat16"] / wide["float32"] - 1.0).abs()
        (model, corpus), worst = rel.idxmax(), rel.max()
        measured = f"largest |bf16 / fp32 - 1| = {worst:.2%} ({model}, {corpus})"
    ledger.judge(claim, bool(worst <= BF16_MAX_REL_PPL), measured,
                 diagnosis=("setup", f"bf16 moves {model}'s {corpus} perplexity by {worst:.2%}: the dequantized "
                                     "weights do not survive bf16 rounding"))
