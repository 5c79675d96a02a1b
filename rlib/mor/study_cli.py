"""The command line shared by chapter 03's stand-alone studies (`python -m rlib.mor.gates`, `rlib.mor.vanilla_kv`):
read a profile, refuse one whose presets have no runs for the study, and print the study's table with the ledger's
verdict of the claim it measures (Mixture-of-Recursions, paper 001)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pandas as pd

from rlib.config import ConfigError
from rlib.mor.config import MoRConfig

__all__ = ["run_study"]


def run_study(argv: list[str] | None, prog: str, description: str, has_runs: Callable[[str], bool],
              table: Callable[[MoRConfig, str], pd.DataFrame], table_name: str, claim: str) -> int:
    """Parse `--profile`, check `has_runs(profile)` before any work, print `table(cfg, profile)` and `claim`'s verdict
    judged from it alone."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--profile", default="cpu-long",
                        help="the presets (smoke, cpu-long, gpu; the cpu profile leaves the study to cpu-long)")
    args = parser.parse_args(argv)
    from rlib import threads
    from rlib.mor import claims

    threads.configure()
    try:
        cfg = MoRConfig.preset(args.profile)
        runs = has_runs(args.profile)
    except ConfigError as err:
        parser.error(str(err))
    if not runs:
        parser.error(f"the {args.profile} preset has no runs for this study (the cpu profile leaves them to cpu-long: "
                     "--profile cpu-long)")
    result = table(cfg, args.profile)
    print(result.to_markdown(index=False))
    row = claims.judge({table_name: result}, cfg, args.profile).finish().set_index("id").loc[claim]
    print(f"\n{claim}: {row['verdict']}\n{row['measured']}\n{row['evidence'] or ''}".rstrip())
    return 0
