"""Chapter 02's tables from the grid's results (Relaxed Recursive Transformers Fig. 6 / 7 / G.1-G.3, Table G.2,
Tables 3 / J.1, Table I.1), Fig. 4's full-size reference scored on the chapter's windows, and App. J's post-training
seed study (`rlib.relaxed.post_seeds`): its runs, and the seed-paired changes the claims judge.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pandas as pd

from rlib import counting
from rlib.config import ConfigError
from rlib.experiments import training_curves
from rlib.model import convert
from rlib.recursive import experiments as ch01
from rlib.relaxed.config import RelaxedConfig, RelaxedVariant, main_variants

__all__ = ["changes_table", "comparisons", "exit_table", "flat", "full_reference_table", "g1_rank", "init_curves",
           "kd_long_table", "main_grid", "module_rank_table", "paired", "relax_table", "seeds_table", "training_table"]


def flat(results: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for r in results:
        row = {"name": r["name"], **r["variant"], "unique_params": r["params"]["unique"],
               "non_embedding_params": r["params"]["non_embedding"], "tokens_per_s": r["train"]["tokens_per_s"],
               "trained_by": r.get("trained_by", "this chapter")}
        row.update({f"before {k}": v for k, v in r["before"].items()})
        row.update({f"after {k}": v for k, v in r["after"].items()})
        rows.append(row)
    return pd.DataFrame(rows)


def full_reference_table(cfg: RelaxedConfig, teacher_dir: Path | None) -> pd.DataFrame:
    """Fig. 4's full-size reference: chapter 01's uptrained full model (same source, corpus, steps and batches as
    this chapter's uptraining) scored on this chapter's windows, in the `runs` table's columns."""
    if teacher_dir is None or not (Path(teacher_dir) / convert.CONFIG_FILE).exists():
        raise ConfigError(f"Fig. 4's full-size reference is chapter 01's uptrained full model ({teacher_dir}); run "
                          "chapter 01 with the same profile first")
    model = convert.load(teacher_dir)
    scores = ch01.evaluate_model(model, cfg, ch01.eval_windows(cfg), tasks=False)
    counts = counting.count_parameters(model)
    return pd.DataFrame([{"model": "full (uptrained, chapter 01)", "unique_params": counts["unique"],
                          "non_embedding_params": counts["non_embedding"],
                          **{f"after {k}": v for k, v in scores.items()}}])


def _halved(df: pd.DataFrame) -> pd.Series:
    """Each row's Table G.1 halving ("" for none; results written before the field existed have none)."""
    return df["halved"].fillna("") if "halved" in df else pd.Series("", index=df.index)


def main_grid(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of `flat`'s table that the main grid's tables and claims read: Table G.1's halved-rank runs and their
    extra seeds are read by `module_rank_table` alone."""
    return df[(_halved(df) == "") & (df["seed"] == 0)]


def module_rank_table(results: list[dict[str, Any]], cfg: RelaxedConfig) -> pd.DataFrame:
    """Table G.1: the main relaxed model (Average, SVD, the largest rank) with each group's LoRA rank halved in turn
    ("" = every group at the full rank), per seed: after NLL on the uptraining corpus and its increase over the
    all-equal model of the same seed."""
    df = flat(results)
    main = main_variants(cfg)[1]
    sel = df[(df["init"] == main.init) & (df["rank"] == main.rank) & (df["lora_init"] == main.lora_init)
             & _plainly_uptrained(df) & (df["prefix"] == 0) & df["seed"].isin(cfg.halved_seeds)].assign(
        halved=_halved(df))
    if sel.empty or not cfg.halved_groups:
        return pd.DataFrame()
    nll = f"after nll[{cfg.train_corpus}]"
    reference = sel[sel["halved"] == ""].set_index("seed")[nll]
    out = sel[["halved", "seed", "non_embedding_params", nll]].copy()
    out["delta"] = out[nll] - out["seed"].map(reference)
    return out.sort_values(["halved", "seed"]).reset_index(drop=True)


def _plainly_uptrained(df: pd.DataFrame) -> pd.Series:
    """Rows of runs uptrained without exits, distillation or a longer schedule."""
    return (df["phase"] == "uptrain") & ~df["kd"] & (df["steps_factor"] == 1)


def relax_table(results: list[dict[str, Any]], cfg: RelaxedConfig) -> pd.DataFrame:
    """Fig. 6 / 7 / G.1-G.3 and Table G.2: every uptrained model without exits, before and after uptraining."""
    df = main_grid(flat(results))
    sel = df[_plainly_uptrained(df)]
    cols = ["init", "rank", "lora_init", "prefix", "non_embedding_params", f"before ppl[{cfg.train_corpus}]",
            *[f"after ppl[{c}]" for c in cfg.eval_corpora]]
    return sel[cols].sort_values(["init", "prefix", "lora_init", "rank"]).reset_index(drop=True)


def _curves(work: Path, results: list[dict[str, Any]], picked: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The logged training curves of the `picked` rows' runs, one row per step, with their `keys` columns."""
    curves = training_curves(work, [r for r in results if r["name"] in set(picked["name"])])
    if curves.empty:
        return curves
    runs = picked[["name", *keys]].rename(columns={"name": "variant"})
    return curves.merge(runs, on="variant")[[*keys, "step", "tokens", "loss", "val_loss", "variant"]]


def training_table(work: Path, results: list[dict[str, Any]]) -> pd.DataFrame:
    """Fig. G.1: the training curves of every plainly uptrained SVD run (no exits, distillation, longer schedule or
    prefix), one row per logged step (step, tokens, loss, val_loss) with the run's init and rank."""
    df = main_grid(flat(results))
    plain = df[_plainly_uptrained(df) & (df["prefix"] == 0) & (df["lora_init"] == "svd")]
    return _curves(work, results, plain, ["init", "rank"])


def init_curves(work: Path, results: list[dict[str, Any]], cfg: RelaxedConfig) -> pd.DataFrame:
    """§3.5's 'faster convergence' of the SVD init: for each init of `zero_inits`, the training curves of its
    relaxed model uptrained plainly at the largest rank with the SVD LoRA init and with the standard zero init (the
    same batches and steps), one row per logged step (init, lora_init, rank, step, tokens, loss, val_loss). Empty
    where the profile runs no zero init."""
    df = main_grid(flat(results))
    if df.empty or not cfg.zero_inits:
        return pd.DataFrame()
    pick = df[_plainly_uptrained(df) & (df["prefix"] == 0) & df["init"].isin(cfg.zero_inits)
              & (df["rank"] == max(cfg.ranks)) & df["lora_init"].isin(("svd", "zero"))]
    return _curves(work, results, pick, ["init", "lora_init", "rank"])


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
    df = main_grid(flat(results))
    mains = {m.name.rsplit("-s", 1)[0]: m for m in main_variants(cfg)}
    mains.update({RelaxedVariant("average", r).name.rsplit("-s", 1)[0]: None for r in cfg.served_ranks})
    rows = []
    for r in df.itertuples():
        coef = getattr(r, "coef", None)
        coef = None if coef is None or pd.isna(coef) else float(coef)
        freeze = getattr(r, "freeze_rank", 0)
        freeze = 0 if freeze is None or pd.isna(freeze) else int(freeze)
        v = RelaxedVariant(r.init, r.rank, r.lora_init, r.exit, r.phase, r.kd, r.steps_factor, r.seed, r.prefix, coef,
                           freeze)
        base = dataclasses.replace(v, exit="none", phase="uptrain", coef=None, freeze_rank=0)
        if base.name.rsplit("-s", 1)[0] not in mains or v.kd or v.steps_factor != 1:
            continue
        model = "recursive" if v.rank == 0 else f"relaxed r={v.rank}"
        if freeze:  # Table J.1's Freeze row: a model of its own, so no main-recipe lookup ever reads it
            model += f" frozen, head LoRA r={freeze}"
        row = {"model": model, "phase": v.phase, "exit": v.exit,
               "coef": (cfg.exit_coef if v.coef is None else v.coef) if v.exit.startswith("aggressive") else None,
               "sweep": v.coef is not None}  # True: a Table J.1 coefficient-sweep run beside the main recipe
        row.update({f"nll loop {j}": df.loc[r.Index, f"after nll_loop{j}"] for j in range(1, cfg.n_loops + 1)})
        rows.append(row)
    return pd.DataFrame(rows)


def kd_long_table(results: list[dict[str, Any]], cfg: RelaxedConfig) -> pd.DataFrame:
    """Table I.1's rows: the main recursive model (Stepwise, r = 0: the paper's longer-uptraining row) and the main
    relaxed model, each plain and with longer uptraining; the relaxed one also with distillation and with both
    (Fig. 7(b))."""
    df = main_grid(flat(results))
    picked = []
    for label, main in zip(("recursive", "relaxed"), main_variants(cfg), strict=True):
        sel = df[(df["init"] == main.init) & (df["rank"] == main.rank) & (df["lora_init"] == main.lora_init)
                 & (df["phase"] == "uptrain") & (df["prefix"] == 0)]
        picked.append(sel.assign(model=f"{label} ({main.init}, r={main.rank})"))
    cols = ["model", "kd", "steps_factor", *[f"after ppl[{c}]" for c in cfg.eval_corpora]]
    return pd.concat(picked)[cols].sort_values(["model", "kd", "steps_factor"], kind="stable").reset_index(drop=True)


def seeds_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run: exit, data, seed, its windows and how many the uptraining read, its training loss at the first
    step and over the last quarter, the static-exit NLL per loop."""
    rows = []
    for r in results:
        loops = {f"nll loop {k.removeprefix('nll_loop')}": v for k, v in r["after"].items() if k.startswith("nll_loop")}
        rows.append({"exit": r["exit"], "data": r["data"], "seed": r["seed"], "coef": r["coef"],
                     "train_seed": r["train_seed"], "windows": r["windows"],
                     "seen_in_uptraining": r["seen_in_uptraining"], "train loss first": r["train"]["loss_first"],
                     "train loss last": r["train"]["loss_last"], **loops})
    return pd.DataFrame(rows)


def paired(table: pd.DataFrame, column: str, vary: str, base: str, other: str, **fixed: str) -> pd.Series:
    """Per seed, `column` of the `other` run minus that of the `base` run, where the two differ only in `vary` (e.g.
    vary="exit", base="aggressive", other="aggressive_kd", data="overlapped"); seeds with both runs only."""
    keep = pd.Series(True, index=table.index)
    for name, wanted in fixed.items():
        keep &= table[name] == wanted
    by_seed = table[keep].pivot_table(index="seed", columns=vary, values=column)
    if base not in by_seed or other not in by_seed:
        return pd.Series(dtype=float)
    return (by_seed[other] - by_seed[base]).dropna()


def comparisons(n_loops: int) -> list[tuple[str, str, str, str, str, dict[str, str], float]]:
    """The seed-paired changes App. J speaks of: (label, column, vary, base, other, fixed, the paper's value in nats
    from Table J.1's SlimPajama perplexities, NaN where it has no such pair)."""
    final = f"nll loop {n_loops}"
    paper = {"kd_ovlp_1": math.log(14.11 / 14.55), "kd_ovlp_final": math.log(12.40 / 12.37),
             "data_1": math.log(14.55 / 14.49), "data_final": math.log(12.37 / 12.34)}
    kd = ("exit", "aggressive", "aggressive_kd")
    data = ("data", "new", "overlapped")
    return [("Agg+KD - Agg · overlapped · loop 1", "nll loop 1", *kd, {"data": "overlapped"}, paper["kd_ovlp_1"]),
            ("Agg+KD - Agg · overlapped · final", final, *kd, {"data": "overlapped"}, paper["kd_ovlp_final"]),
            ("Agg+KD - Agg · new · loop 1", "nll loop 1", *kd, {"data": "new"}, math.nan),
            ("Agg+KD - Agg · new · final", final, *kd, {"data": "new"}, math.nan),
            ("overlapped - new · Agg · loop 1", "nll loop 1", *data, {"exit": "aggressive"}, paper["data_1"]),
            ("overlapped - new · Agg · final", final, *data, {"exit": "aggressive"}, paper["data_final"])]


def changes_table(table: pd.DataFrame, n_loops: int) -> pd.DataFrame:
    """One row per comparison the study's runs allow (>= 2 seeds): the mean seed-paired change in nats, its 95 %
    t-interval, its s.d. and the paper's value."""
    from rlib.book.judging import mean_interval

    out = []
    for label, column, vary, base, other, fixed, paper in comparisons(n_loops):
        diffs = paired(table, column, vary, base, other, **fixed)
        if len(diffs) < 2:
            continue
        mean, lo, hi = mean_interval(diffs)
        out.append({"comparison": label, "seeds": len(diffs), "mean": mean, "lo": lo, "hi": hi, "sd": diffs.std(),
                    "paper": paper})
    return pd.DataFrame(out)
