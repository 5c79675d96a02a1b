"""Chapter 05's decoding studies on their own (paper 004, Tables 2, 3 and 6; Figs. 7 and 9; issue 25 item 1):
`python -m rlib.layerskip.decode_check --profile cpu --studies scratch continual`.

Trains (or reads back) only the models the chosen decoding studies decode, in the chapter's own work folder, so a
later chapter run reuses them: the from-scratch grid's first-seed baseline and LD+EE runs (`scratch`), and a
pretrained-model study's baseline and LD+EE runs (`continual`, `code`). Then it decodes them as the chapter does
(greedy, or by coupled sampling where the profile says so: `rlib.layerskip.sampling`), writes the decoding and
generation tables beside the runs (`<work>/decode_check/`) and prints them with the ledger's verdicts of every claim
that reads them.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pandas as pd

from rlib.config import ConfigError

__all__ = ["STUDIES", "main", "study_tables"]

CHAPTER = "05_layerskip"
STUDIES = ("scratch", "continual", "code")


def study_tables(study: str, profile: str, work: Path) -> dict[str, pd.DataFrame]:
    """Train or read back what `study` decodes, then decode it: {table name as the chapter writes it: table}."""
    from rlib.layerskip import adapt, config, decode_study, experiments

    if study == "scratch":
        cfg = config.LayerSkipConfig.preset(profile)
        first = replace(cfg, recipes=("baseline", "ld_ee"), seeds=cfg.seeds[:1], spread_recipes=())
        experiments.run_grid(first, work)  # runs keyed on their own recipe and seed: the chapter's grid reuses them
        summary, tokens = decode_study.scratch_generations(cfg, work)
        out = {"decoding": decode_study.scratch_decoding(cfg, work), "generations_scratch": summary,
               "generations_scratch_tokens": tokens}
        if cfg.decode_temperature > 0:  # sampled: the greedy output's diversity says why
            out["greedy_check"] = decode_study.scratch_greedy_check(cfg, work)
        return out
    acfg = config.AdaptConfig.preset(profile)
    chosen = acfg.study(study)
    recipes = tuple(r for r in ("baseline", "ld_ee") if r in chosen.recipes)
    only = replace(acfg, studies=(chosen,),
                   decode_sampled_studies=tuple(s for s in acfg.decode_sampled_studies if s == study))
    runs = [config.AdaptRun(study, r) for r in recipes]
    adapt.run_grid(only, work / "pretrained", runs=runs)
    out = {f"decoding_{study}": decode_study.adapt_decoding(only, work / "pretrained", study, recipes)}
    if only.decode_sampling(study) is not None and "ld_ee" in recipes:
        out[f"greedy_check_{study}"] = decode_study.adapt_greedy_check(only, work / "pretrained", study, recipes)
    if study == acfg.studies[0].name:  # the chapter's Fig. 7 reads its first study
        summary, tokens = decode_study.adapt_generations(only, work / "pretrained", study, recipes)
        out.update({f"generations_{study}": summary, f"generations_{study}_tokens": tokens})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlib.layerskip.decode_check",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu", help="the chapter's presets (smoke, cpu, gpu)")
    parser.add_argument("--studies", nargs="+", default=["scratch"], choices=STUDIES)
    args = parser.parse_args(argv)
    from rlib import threads
    from rlib.experiments import work_dir
    from rlib.layerskip import claims, config

    threads.configure()
    try:
        cfg, acfg, pcfg = (kind.preset(args.profile) for kind in (config.LayerSkipConfig, config.AdaptConfig,
                                                                    config.ParseConfig))
    except ConfigError as err:
        parser.error(str(err))
    work = work_dir(args.profile, CHAPTER)
    out = work / "decode_check"
    out.mkdir(parents=True, exist_ok=True)
    tables: dict[str, pd.DataFrame] = {}
    for study in args.studies:
        for name, table in study_tables(study, args.profile, work).items():
            table.to_csv(out / f"{name}.csv", index=False)
            tables[name] = table
            if not name.endswith("_tokens"):
                print(f"\n## {name}\n{table.to_markdown(index=False, floatfmt='.3g')}")
    ledger = claims.judge(tables, cfg, acfg, pcfg, args.profile).finish()
    read = ledger[ledger["verdict"] != "not measured"]
    read.to_csv(out / "claims.csv", index=False)
    print(f"\n## claims that read these tables ({out})")
    for _, row in read.iterrows():
        print(f"\n{row['id']}: {row['verdict']}\n  measured: {row['measured']}"
              + (f"\n  evidence: {row['evidence']}" if isinstance(row.get("evidence"), str) and row["evidence"]
                 else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
