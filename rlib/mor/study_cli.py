"""The command line of chapter 03's stand-alone studies (`python -m rlib.mor.gates`, `rlib.mor.vanilla_kv`):
`rlib.study_cli.run_study` with the chapter's config and ledger (Mixture-of-Recursions, paper 001)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from rlib import study_cli
from rlib.mor.config import MoRConfig

__all__ = ["run_study"]


def run_study(argv: list[str] | None, prog: str, description: str, has_runs: Callable[[str], bool],
              table: Callable[[MoRConfig, str], pd.DataFrame], table_name: str, claim: str) -> int:
    """Print `table(cfg, profile)` as `table_name` and `claim`'s verdict judged from it alone."""
    from rlib.mor import claims

    def tables(profile: str) -> dict[str, pd.DataFrame]:
        return {table_name: table(MoRConfig.preset(profile), profile)}

    def judge(written, profile: str) -> pd.DataFrame:
        return claims.judge(dict(written), MoRConfig.preset(profile), profile).finish()

    def runs(profile: str) -> bool:
        MoRConfig.preset(profile)  # an unknown profile is a usage error before the study's own check
        return has_runs(profile)

    return study_cli.run_study(argv, prog, description, runs, tables, judge, (claim,))
