"""The command line of a chapter's stand-alone studies (e.g. `python -m rlib.mor.vanilla_kv`,
`python -m rlib.layerskip.lr_study`): read a profile, refuse one whose presets have no runs for the study before any
work, run the study, print its tables and the ledger's verdicts of the claims it measures, judged from those tables
alone."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence

import pandas as pd

from rlib.config import ConfigError

__all__ = ["run_study"]


def run_study(argv: list[str] | None, prog: str, description: str, has_runs: Callable[[str], bool],
              tables: Callable[[str], Mapping[str, pd.DataFrame]],
              judge: Callable[[Mapping[str, pd.DataFrame], str], pd.DataFrame], claim_ids: Sequence[str]) -> int:
    """Parse `--profile`, check `has_runs(profile)` (a ConfigError there is a usage error), print every table of
    `tables(profile)` and the rows `claim_ids` of `judge(tables, profile)` (a finished ledger: id, verdict, measured,
    evidence)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--profile", default="cpu-long",
                        help="the presets (smoke, cpu-long, gpu; the cpu profile leaves the study to cpu-long)")
    args = parser.parse_args(argv)
    from rlib import threads

    threads.configure()
    try:
        runs = has_runs(args.profile)
    except ConfigError as err:
        parser.error(str(err))
    if not runs:
        parser.error(f"the {args.profile} preset has no runs for this study (the cpu profile leaves them to cpu-long: "
                     "--profile cpu-long)")
    written = dict(tables(args.profile))
    for name, table in written.items():
        print(f"{name}:\n{table.to_markdown(index=False)}\n")
    ledger = judge(written, args.profile).set_index("id")
    for claim in claim_ids:
        row = ledger.loc[claim]
        print(f"{claim}: {row['verdict']}\n{row['measured']}\n{row['evidence'] or ''}".rstrip() + "\n")
    return 0
