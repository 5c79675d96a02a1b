"""Judge every chapter's claims again from tables already written (`python -m rlib.book ledger`).

A ledger is a pure function of a chapter's tables and its config, so a finished run, or the promoted cpu results in
`figures/`, can be judged again by the current claims code without re-running anything: how a change to a claim's
test (or a new claim) reads on the numbers we have. Each chapter is judged with its profile's presets (the
parameters a promoted run used are in `figures/MANIFEST.json`; the book's runs use the presets). The result says
which code judged it, and a re-judged ledger is never written over a run's own `claims.csv`.

`with_extensions` completes a profile's ledger with the rows a profile extending it measured (the cpu ledger with
`cpu-long`'s rows where cpu did not measure a claim), each row naming its profile.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from rlib.book.claims import Ledger, load_tables
from rlib.book.layout import promoted_dir
from rlib.config import PROFILES


def _basemodels(tables: dict, profile: str) -> Ledger:
    from rlib.basemodels import claims, config

    return claims.judge(tables, config.ModelsDataConfig.preset(profile), profile)


def _recursive(tables: dict, profile: str) -> Ledger:
    from rlib.recursive import claims, config

    return claims.judge(tables, config.RecursiveConfig.preset(profile), profile)


def _relaxed(tables: dict, profile: str) -> Ledger:
    from rlib.relaxed import claims, config

    return claims.judge(tables, config.RelaxedConfig.preset(profile), profile)


def _mor(tables: dict, profile: str) -> Ledger:
    from rlib.mor import claims, config

    return claims.judge(tables, config.MoRConfig.preset(profile), profile)


def _recurrent(tables: dict, profile: str) -> Ledger:
    from rlib.recurrent import claims, config

    return claims.judge(tables, config.RecurrentConfig.preset(profile), profile)


def _layerskip(tables: dict, profile: str) -> Ledger:
    from rlib.layerskip import claims, config

    return claims.judge(tables, config.LayerSkipConfig.preset(profile), config.AdaptConfig.preset(profile),
                        config.ParseConfig.preset(profile), profile)


JUDGES: dict[str, Callable[[dict, str], Ledger]] = {
    "00_models_and_data": _basemodels,
    "01_recursive_conversion": _recursive,
    "02_relaxed_recursion": _relaxed,
    "03_mixture_of_recursions": _mor,
    "04_recurrent_transformer": _recurrent,
    "05_layerskip": _layerskip,
}


def rejudge(root: str | Path, profile: str, only: list[str] | None = None) -> pd.DataFrame:
    """Every chapter's ledger judged from the tables in `root/<chapter>/` (a run folder or `figures/`), in chapter
    order; chapters without tables are skipped."""
    frames = []
    for chapter, judge in JUDGES.items():
        folder = Path(root) / chapter
        if (only and not any(chapter.startswith(o) for o in only)) or not folder.is_dir():
            continue
        tables = {k: v for k, v in load_tables(folder).items() if k != "claims"}
        frames.append(judge(tables, profile).finish())
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def with_extensions(table: pd.DataFrame, profile: str, only: list[str] | None = None) -> pd.DataFrame:
    """`table`, a ledger of `profile`, with each "not measured" row replaced by the row of a profile that extends it
    (`cpu-long` for `cpu`, from its promoted folder `figures/cpu-long/`) wherever that profile measured the claim.
    The replaced rows keep their own `profile` column, so the ledger names the profile that measured each row; where
    both measured a claim and the extension's verdict differs, the row stays `profile`'s and its `measured` says what
    the extension found."""
    out = table.copy()
    for name, extension in PROFILES.items():
        folder = promoted_dir(name)
        if extension.runs_of != profile or out.empty or not folder.is_dir():
            continue
        other = rejudge(folder, name, only)
        if other.empty:
            continue
        measured = other[other["verdict"] != "not measured"].drop_duplicates("id").set_index("id")
        replace = (out["verdict"] == "not measured") & out["id"].isin(measured.index)
        for i in out.index[replace]:
            row = measured.loc[out.at[i, "id"]]
            for column in out.columns:
                if column in row.index:
                    out.at[i, column] = row[column]
        # measured by both with different verdicts (the extension has more runs): keep this profile's row and say
        # what the extension found, so the disagreement is on the page
        differs = ~replace & out["id"].isin(measured.index)
        for i in out.index[differs]:
            row = measured.loc[out.at[i, "id"]]
            if row["verdict"] != out.at[i, "verdict"] and "measured" in out.columns:
                out.at[i, "measured"] = f"{out.at[i, 'measured']} [{name}, with its added runs: {row['verdict']}: " \
                                        f"{row.get('measured', '')}]"
    return out
