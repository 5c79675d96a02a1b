"""Chapter 00's tables: tokenizers side by side, perplexity per dtype, Table D.1's layout of the task suite."""

from __future__ import annotations

import pandas as pd

from rlib import assets, data
from rlib import eval as rl_eval
from rlib.basemodels.config import SAMPLES, ModelsDataConfig

__all__ = ["perplexity_summary", "task_suite_summary", "tokenizer_table"]


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
    """Wide view: one row per (model, corpus), perplexity per dtype and the bf16/fp32 ratio."""
    wide = ppl.pivot_table(index=["model", "corpus"], columns="dtype", values="ppl").reset_index()
    if {"float32", "bfloat16"} <= set(wide.columns):
        wide["bf16_over_fp32"] = wide["bfloat16"] / wide["float32"]
    return wide
