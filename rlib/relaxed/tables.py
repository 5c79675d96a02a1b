"""Chapter 02's tables from the grid's results (Relaxed Recursive Transformers Fig. 6 / 7 / G.1-G.3, Table G.2,
Tables 3 / J.1, Table I.1).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd

from rlib.experiments import training_curves
from rlib.relaxed.config import RelaxedConfig, RelaxedVariant, main_variants

__all__ = ["exit_table", "flat", "g1_rank", "kd_long_table", "relax_table", "training_table"]


def flat(results: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for r in results:
        row = {"name": r["name"], **r["variant"], "unique_params": r["params"]["unique"],
               "non_embedding_params": r["params"]["non_embedding"], "tokens_per_s": r["train"]["tokens_per_s"]}
        row.update({f"before {k}": v for k, v in r["before"].items()})
        row.update({f"after {k}": v for k, v in r["after"].items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _plainly_uptrained(df: pd.DataFrame) -> pd.Series:
    """Rows of runs uptrained without exits, distillation or a longer schedule."""
    return (df["phase"] == "uptrain") & ~df["kd"] & (df["steps_factor"] == 1)


def relax_table(results: list[dict[str, Any]], cfg: RelaxedConfig) -> pd.DataFrame:
    """Fig. 6 / 7 / G.1-G.3 and Table G.2: every uptrained model without exits, before and after uptraining."""
    df = flat(results)
    sel = df[_plainly_uptrained(df)]
    cols = ["init", "rank", "lora_init", "prefix", "non_embedding_params", f"before ppl[{cfg.train_corpus}]",
            *[f"after ppl[{c}]" for c in cfg.eval_corpora]]
    return sel[cols].sort_values(["init", "prefix", "lora_init", "rank"]).reset_index(drop=True)


def training_table(work: Path, results: list[dict[str, Any]]) -> pd.DataFrame:
    """Fig. G.1: the training curves of every plainly uptrained SVD run (no exits, distillation, longer schedule or
    prefix), one row per logged step (step, tokens, loss, val_loss) with the run's init and rank."""
    df = flat(results)
    plain = df[_plainly_uptrained(df) & (df["prefix"] == 0) & (df["lora_init"] == "svd")]
    curves = training_curves(work, [r for r in results if r["name"] in set(plain["name"])])
    if curves.empty:
        return curves
    runs = plain[["name", "init", "rank"]].rename(columns={"name": "variant"})
    return curves.merge(runs, on="variant")[["init", "rank", "step", "tokens", "loss", "val_loss", "variant"]]


def g1_rank(curves: pd.DataFrame, inits: tuple[str, ...], full_rank: int) -> int | None:
    """The rank Fig. G.1 compares with rank 0: the smallest rank uptrained for every init that is at least a quarter
    of full rank (the paper's 512 of 2048), else the largest rank every init has (None when there is none)."""
    common = set.intersection(*[set(curves.loc[curves["init"] == i, "rank"].astype(int)) for i in inits]) - {0}
    if not common:
        return None
    high = sorted(r for r in common if 4 * r >= full_rank)
    return high[0] if high else max(common)


def exit_table(results: list[dict[str, Any]], cfg: RelaxedConfig) -> pd.DataFrame:
    """Tables 3 / J.1: static-exit NLL of every loop after each early-exit schedule, for both main models."""
    df = flat(results)
    mains = {m.name.rsplit("-s", 1)[0]: m for m in main_variants(cfg)}
    mains.update({RelaxedVariant("average", r).name.rsplit("-s", 1)[0]: None for r in cfg.served_ranks})
    rows = []
    for r in df.itertuples():
        coef = getattr(r, "coef", None)
        coef = None if coef is None or pd.isna(coef) else float(coef)
        v = RelaxedVariant(r.init, r.rank, r.lora_init, r.exit, r.phase, r.kd, r.steps_factor, r.seed, r.prefix, coef)
        base = dataclasses.replace(v, exit="none", phase="uptrain", coef=None)
        if base.name.rsplit("-s", 1)[0] not in mains or v.kd or v.steps_factor != 1:
            continue
        row = {"model": "recursive" if v.rank == 0 else f"relaxed r={v.rank}", "phase": v.phase, "exit": v.exit,
               "coef": (cfg.exit_coef if v.coef is None else v.coef) if v.exit.startswith("aggressive") else None,
               "sweep": v.coef is not None}  # True: a Table J.1 coefficient-sweep run beside the main recipe
        row.update({f"nll loop {j}": df.loc[r.Index, f"after nll_loop{j}"] for j in range(1, cfg.n_loops + 1)})
        rows.append(row)
    return pd.DataFrame(rows)


def kd_long_table(results: list[dict[str, Any]], cfg: RelaxedConfig) -> pd.DataFrame:
    """Table I.1's rows: the main relaxed model plain, with distillation, with longer uptraining, and with both
    (Fig. 7(b))."""
    df = flat(results)
    main = main_variants(cfg)[1]
    sel = df[(df["init"] == main.init) & (df["rank"] == main.rank) & (df["lora_init"] == "svd")
             & (df["phase"] == "uptrain") & (df["prefix"] == 0)]
    cols = ["kd", "steps_factor", *[f"after ppl[{c}]" for c in cfg.eval_corpora]]
    return sel[cols].reset_index(drop=True)
