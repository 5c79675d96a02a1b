"""Chapter 00's tables: tokenizers side by side, perplexity per dtype, Table D.1's layout of the task suite."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from rlib import assets, data
from rlib import eval as rl_eval
from rlib.basemodels.config import SAMPLES, ModelsDataConfig

__all__ = ["perplexity_summary", "precision_check", "task_suite_summary", "tokenizer_table"]

REFERENCE_DTYPE = "float32"


def tokenizer_table(cfg: ModelsDataConfig, stats: pd.DataFrame) -> pd.DataFrame:
    """One row per tokenizer: vocabulary, special tokens, fertility per corpus, a sample segmentation."""
    rows = []
    for name in cfg.models:
        tok = assets.load_tokenizer(name)
        row = {"tokenizer": name, "vocab_size": len(tok), "adds_bos": data.bos_id_for(tok) is not None,
               "bos": tok.bos_token, "eos": tok.eos_token}
        col = f"tokens_{name}"
        for corpus, group in stats.groupby("corpus", sort=False):
            row[f"chars_per_token[{corpus}]"] = round(group["characters"].sum() / max(group[col].sum(), 1), 3)
        for kind, text in SAMPLES.items():
            pieces = tok.convert_ids_to_tokens(tok(text, add_special_tokens=False)["input_ids"])
            row[f"tokens[{kind}]"] = len(pieces)
            row[f"segmentation[{kind}]"] = "·".join(pieces[:16]) + ("·…" if len(pieces) > 16 else "")
        rows.append(row)
    return pd.DataFrame(rows)


def task_suite_summary(long: pd.DataFrame) -> pd.DataFrame:
    """Table D.1's layout: model, non-embedding parameters, pretraining data and tokens, one column per task, Avg."""
    wide = rl_eval.suite_summary(long)
    meta = long.groupby("model", sort=False)[["non_embedding_params", "pretraining_data", "pretraining_tokens"]].first()
    meta["non_embedding_params"] = (meta["non_embedding_params"] / 1e6).round(1).astype(str) + "M"
    return meta.reset_index().merge(wide, on="model")


def perplexity_summary(ppl: pd.DataFrame) -> pd.DataFrame:
    """Wide view: one row per (model, corpus), perplexity and window count per dtype (the bf16 / fp32 comparison
    on the same windows is `precision_check`'s)."""
    wide = ppl.pivot_table(index=["model", "corpus"], columns="dtype", values=["ppl", "n_windows"], sort=False)
    wide.columns = [f"{value}[{dtype}]" for value, dtype in wide.columns]
    counts = [c for c in wide.columns if c.startswith("n_windows[")]
    return wide.astype({c: int for c in counts}).reset_index()


def precision_check(per_window: Mapping[tuple[str, str, str], Sequence[float]]) -> pd.DataFrame:
    """Every dtype against fp32 on the windows fp32 scored, paired window by window.

    `per_window[(model, corpus, dtype)]` is each window's mean NLL per predicted token (`rlib.eval.perplexity(...,
    per_window=True)`); the fp32 list covers the first windows of the other dtypes' lists. Every window predicts the
    same number of tokens, so the perplexity of a set of windows is exp of the mean of their NLLs.
    One row per (model, corpus, dtype): n_windows (paired), ppl_fp32, ppl (this dtype, the same windows),
    ratio = ppl / ppl_fp32, diff_nll = mean per-window NLL difference and diff_nll_se its standard error over the
    windows, max_abs_diff_nll = the largest per-window |difference|.
    """
    rows = []
    for (model, corpus, dtype), values in per_window.items():
        reference = per_window.get((model, corpus, REFERENCE_DTYPE))
        if dtype == REFERENCE_DTYPE or reference is None:
            continue
        n = len(reference)
        if len(values) < n:
            raise ValueError(f"{model} / {corpus}: {dtype} scored {len(values)} windows, fewer than fp32's {n}")
        diff = np.asarray(values[:n], dtype=np.float64) - np.asarray(reference, dtype=np.float64)  # [n]
        se = float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
        rows.append({"model": model, "corpus": corpus, "dtype": dtype, "n_windows": n,
                     "ppl_fp32": math.exp(float(np.mean(reference))), "ppl": math.exp(float(np.mean(values[:n]))),
                     "ratio": math.exp(float(diff.mean())), "diff_nll": float(diff.mean()), "diff_nll_se": se,
                     "max_abs_diff_nll": float(np.abs(diff).max())})
    return pd.DataFrame(rows, columns=["model", "corpus", "dtype", "n_windows", "ppl_fp32", "ppl", "ratio", "diff_nll",
                                       "diff_nll_se", "max_abs_diff_nll"])
