"""The pretrained-model studies again at Table 8's own learning rates (LayerSkip, paper 004, Sec. 5, Sec. 6.1, Table 1,
Fig. 10b, Table 8): is a study's last-exit cost the chapter's rate's?

Table 8 gives every experiment's initial learning rate: continual pretraining of Llama2 7B at 3e-5 (13B at 2e-5), the
code fine-tune of Llama1 7B at 1e-4, the task fine-tune of Llama 1.5B on TOPv2 at 1e-4. A study of SmolLM2-135M that
trains at another rate over some 1e-6 of the paper's tokens may lose more at its last exit than the paper's recipe
would, and the budget sweep (`rlib.layerskip.budget`) would read that as a budget. This module measures the rate
directly: each chosen study trains again at Table 8's rate (`PAPER_RATES`), everything else equal (steps, tokens,
recipes, warm-up and cosine schedule, seed), and both rates' models are read at the middle and last exits on every
evaluation corpus.

It first ran on the continual study, then at 3e-4 (benchmarks/results/ls_paper_rate_cpu_long.md, 2026-12-07): at 3e-5
plain training was better on every corpus and LD+EE's last exit lost 5-10x less on the corpora it did not train on,
so the chapter's continual study trains at Table 8's rate since. The code fine-tune then, at 3e-4 against Table 8's
1e-4 (benchmarks/results/ls_paper_rate_code_cpu_long.md, the same day), read alike: plain fine-tuning better at 1e-4 on
every corpus, LD+EE's last exit +6.6 / -2.5 / +4.4 % over the pretrained model's there against +24.7 / +8.8 / +27.5 %,
so the code study trains at 1e-4 since. The parsing study (`rlib.layerskip.parse_study`, Fig. 10b's TOPv2 analog,
3e-4 in cpu-long) trains again at Table 8's 1e-4 the same way (`parse_config`, `run_parse`), and `parse_rate_table`
reads both rates' exact match at every exit; its 1e-4 runs, read alone against the promoted 3e-4 run
(benchmarks/results/ls_paper_rate_parse_cpu_long.md), were worse for both recipes (last-exit EM plain 0.905 / LD+EE
0.615 against 0.965 / 0.825), so that study stays at 3e-4. A study already at Table 8's rate is refused: nothing to
compare.

Each paper-rate study is a study of its own (`<study>_lr<rate>`), trained and cached by `rlib.layerskip.adapt` like
the chapter's runs of the pretrained model (keyed on the study's own settings); the parsing runs at Table 8's rate are
`rlib.layerskip.parse_study`'s, in a folder of their own (`PARSE_FOLDER`). This module's source keys nothing.

    PaperRateConfig  which studies train again at Table 8's rate, per profile (cpu: none; cpu-long: parse)
    rate_config      the AdaptConfig whose studies are those paper-rate studies (no local tasks, no decoding)
    run_sweep        train (or read back) every paper-rate run
    rate_table       per (study, rate, recipe, corpus): middle and last exit perplexity, against the pretrained model
                     and plain training at the same rate
    rates_line       each study's rate beside Table 8's, for a profile that sweeps none of them
    parse_config     the ParseConfig at Table 8's rate; run_parse trains (or reads back) its recipes
    parse_rate_table per (rate, recipe, exit): the parsing study's exact match and token accuracy, against plain
                     fine-tuning at the same rate

`python -m rlib.layerskip.paper_rate --profile cpu-long` runs it alone (with the chapter's own runs of those studies,
read back where the chapter ran) and prints the tables and the verdicts of the claims that read them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from rlib.config import ConfigError, Preset
from rlib.layerskip.config import SOURCE, AdaptConfig, AdaptRun, ParseConfig, Study, adapt_runs

CHAPTER = "05_layerskip"

__all__ = ["CLAIMS", "PAPER_PARSE_RATE", "PAPER_RATES", "PARSE_FOLDER", "PaperRateConfig", "main", "paper_study",
           "parse_config", "parse_rate_table", "rate_config", "rate_table", "rates_line", "run_parse", "run_sweep"]

# Table 8's initial learning rate of each study's experiment: continual pretraining, Llama2 7B (13B: 2e-5); the code
# fine-tune, Llama1 7B (with and without layer dropout alike)
PAPER_RATES = {"continual": 3e-5, "code": 1e-4}
# Table 8's rate of the task fine-tune on TOPv2 (Llama 1.5B, with and without layer dropout alike): the parsing study's
PAPER_PARSE_RATE = 1e-4
PARSE_FOLDER = f"parse_lr{PAPER_PARSE_RATE:g}"  # the paper-rate parsing runs, beside the chapter's "parse" folder
# the claims whose diagnosis reads the rate tables (rlib.layerskip.claims.adapt, rlib.layerskip.claims.parse)
CLAIMS = ("ls.tab1.continual_last_ppl", "ls.tab1.continual_last_ppl.ours", "ls.fig10a.code_last.ours",
          "ls.fig10b.parse_middle_em", "ls.fig10b.parse_last_em", "ls.fig10b.parse_last_em.ours")


@dataclass(frozen=True)
class PaperRateConfig(Preset):
    """Which of the profile's pretrained-model studies train again at Table 8's rate."""

    studies: tuple[str, ...]  # names of the profile's AdaptConfig studies, each in PAPER_RATES; () = none
    parse: bool = False  # the parsing study's recipes again at PAPER_PARSE_RATE

    PRESETS = {
        # smoke: its code study's one recipe (smoke trains it at 3e-4) and its parsing study's, a step or two each.
        # cpu: none (the chapter takes its 40 minutes; it has no code or parsing study). cpu-long: the parsing study's
        # two recipes at 1e-4, 160 steps each (about 60 min). The continual and code studies train at Table 8's rates
        # themselves since 2026-12-07 (this study's measurements moved them); gpu's parsing study does too
        "smoke": dict(studies=("code",), parse=True),
        "cpu": dict(studies=(), parse=False),
        "cpu-long": dict(studies=(), parse=True),
        "gpu": dict(studies=(), parse=False),
    }

    def __post_init__(self) -> None:
        object.__setattr__(self, "studies", tuple(self.studies))
        unknown = [s for s in self.studies if s not in PAPER_RATES]
        if unknown or len(set(self.studies)) != len(self.studies):
            raise ConfigError(f"studies {list(self.studies)}: each once, from {sorted(PAPER_RATES)} (the studies "
                              "Table 8 gives a rate for)")


def paper_study(study: Study) -> Study:
    """`study` at Table 8's rate for its experiment, under a name of its own."""
    rate = PAPER_RATES[study.name]
    return replace(study, name=f"{study.name}_lr{rate:g}", lr=rate)


def rate_config(acfg: AdaptConfig, rcfg: PaperRateConfig) -> AdaptConfig:
    """`acfg` with the paper-rate studies as its studies: read on every evaluation corpus (Table 1's perplexity rows
    span them), without the local tasks (about 8 min a model on 2 cores) and without decoding."""
    if not rcfg.studies:
        raise ConfigError("this profile trains no study at Table 8's rate (PaperRateConfig.studies is empty)")
    studies = []
    for name in rcfg.studies:
        study = acfg.study(name)
        if math.isclose(study.lr, PAPER_RATES[name]):
            raise ConfigError(f"study {name!r} already trains at Table 8's rate {study.lr:g}: nothing to compare")
        studies.append(paper_study(study))
    return replace(acfg, studies=tuple(studies), decode_sampled_studies=(), tasks=())


def run_sweep(acfg: AdaptConfig, rcfg: PaperRateConfig, work: Path, source=None) -> list[dict[str, Any]]:
    """Train (or read back from `work`, the pretrained-model studies' folder) every recipe of every paper-rate
    study."""
    from rlib.layerskip import adapt

    rated = rate_config(acfg, rcfg)
    return adapt.run_grid(rated, work, source=source, runs=_study_runs(rated))


def rates_line(acfg: AdaptConfig, pcfg: ParseConfig) -> str:
    """The line a chapter prints where its profile trains no study again at Table 8's rate: each study's rate beside
    Table 8's."""
    rates = [f"{s.name} {s.lr:g} (Table 8: {PAPER_RATES[s.name]:g})" for s in acfg.studies if s.name in PAPER_RATES]
    if pcfg.recipes:
        rates.append(f"parsing {pcfg.lr:g} (Table 8: {PAPER_PARSE_RATE:g})")
    return ("No study trains again at Table 8's rate in this profile; the studies' rates: " + ", ".join(rates)
            + " (benchmarks/results/ls_paper_rate_cpu_long.md and ls_paper_rate_code_cpu_long.md measured the "
            "continual and code studies at both rates, and moved them to Table 8's)")


def parse_config(pcfg: ParseConfig) -> ParseConfig:
    """`pcfg` at Table 8's rate for task fine-tuning, everything else equal (its runs are keyed on the rate)."""
    if not pcfg.recipes:
        raise ConfigError("this profile runs no parsing study (ParseConfig.recipes is empty), so none at Table 8's "
                          "rate either")
    if math.isclose(pcfg.lr, PAPER_PARSE_RATE):
        raise ConfigError(f"the parsing study already trains at Table 8's rate {pcfg.lr:g}: nothing to compare")
    return replace(pcfg, lr=PAPER_PARSE_RATE)


def run_parse(pcfg: ParseConfig, work: Path, source=None) -> list[dict[str, Any]]:
    """Train (or read back from `work / PARSE_FOLDER`, `work` the chapter's folder) every parsing recipe at Table 8's
    rate."""
    from rlib.layerskip import parse_study

    return parse_study.run_grid(parse_config(pcfg), work / PARSE_FOLDER, source=source)


def parse_rate_table(own: list[dict[str, Any]], paper: list[dict[str, Any]], pcfg: ParseConfig) -> pd.DataFrame:
    """own: the chapter's parsing runs (at `pcfg.lr`), paper: `run_parse`'s. One row per (rate, recipe, exit): the
    teacher-forced exact match `em` and `token_acc` (`rlib.layerskip.parse_study.exit_match`), and `em_vs_plain`,
    the exact match minus plain fine-tuning's at the same rate and exit (Fig. 10b's last-layer cost at the last exit;
    NaN without a plain run)."""
    from rlib.layerskip import tables

    if not own or not paper:
        raise ConfigError("parse_rate_table needs the parsing study's runs at both rates (the chapter's and "
                          "run_parse's)")
    table = pd.concat([tables.parse_exits(runs).assign(lr=lr, paper_rate=at_paper)
                       for runs, lr, at_paper in ((own, pcfg.lr, False), (paper, PAPER_PARSE_RATE, True))],
                      ignore_index=True)
    plain = table[table["recipe"] == "baseline"].set_index(["lr", "exit_layer"])["em"]
    keys = list(zip(table["lr"], table["exit_layer"]))
    table["em_vs_plain"] = [em - plain[k] if k in plain.index else math.nan for k, em in zip(keys, table["em"])]
    return table[["lr", "paper_rate", "recipe", "exit_layer", "em", "token_acc", "em_vs_plain"]].sort_values(
        ["lr", "recipe", "exit_layer"], ascending=[False, True, True]).reset_index(drop=True)


def _study_runs(rated: AdaptConfig) -> list[AdaptRun]:
    """`adapt_runs` without the pretrained model's read (the chapter's own run gives it)."""
    return [r for r in adapt_runs(rated) if r.study != SOURCE]


def rate_table(results: list[dict[str, Any]], acfg: AdaptConfig, rcfg: PaperRateConfig, n_layers: int
               ) -> pd.DataFrame:
    """results: the chapter's pretrained-model runs (its studies and the pretrained model, recipe "source") plus
    `run_sweep`'s. One row per (study, lr, recipe, corpus) of each swept study at the chapter's rate and at Table 8's:
    the middle and last exit's perplexity, `last_vs_source` (the last exit's perplexity over the pretrained model's,
    minus 1: Table 1's last-layer column), `middle_ratio` (the pretrained model's middle-exit perplexity over this
    model's: Table 1's middle-layer gain) and `last_vs_plain` (over plain training's at the same rate, minus 1)."""
    source = next((r for r in results if r["recipe"] == SOURCE), None)
    if source is None:
        raise ConfigError("rate_table needs the pretrained model's exits among the results (recipe 'source')")
    middle = n_layers // 2

    def read(result: dict[str, Any]) -> pd.Series:  # (corpus, exit layer) -> perplexity
        return pd.DataFrame(result["exits"]).set_index(["corpus", "exit_layer"])["ppl"]

    base = read(source)
    rows = []
    for name in rcfg.studies:
        own, paper = acfg.study(name), paper_study(acfg.study(name))
        for study, paper_rate in ((own, False), (paper, True)):
            for result in results:
                if result["study"] != study.name:
                    continue
                ppl = read(result)
                for corpus in dict.fromkeys(c for c, _ in ppl.index):
                    rows.append({"study": name, "lr": study.lr, "paper_rate": paper_rate, "recipe": result["recipe"],
                                 "tokens": result.get("tokens"), "corpus": corpus,
                                 "ppl_middle": float(ppl[corpus, middle]), "ppl_last": float(ppl[corpus, n_layers]),
                                 "last_vs_source": float(ppl[corpus, n_layers] / base[corpus, n_layers] - 1),
                                 "middle_ratio": float(base[corpus, middle] / ppl[corpus, middle])})
    if not rows:
        raise ConfigError(f"no runs of the studies {list(rcfg.studies)} or their paper-rate twins among the results")
    table = pd.DataFrame(rows)
    plain = table[table["recipe"] == "baseline"].set_index(["study", "lr", "corpus"])["ppl_last"]
    keys = list(zip(table["study"], table["lr"], table["corpus"]))
    table["last_vs_plain"] = [p / plain[k] - 1 if k in plain.index else math.nan for k, p in zip(keys,
                                                                                                 table["ppl_last"])]
    return table.sort_values(["study", "lr", "recipe", "corpus"], ascending=[True, False, True, True]).reset_index(
        drop=True)


def main(argv: list[str] | None = None) -> int:
    from rlib import experiments as run_cache
    from rlib.layerskip import adapt, claims, parse_study, tables
    from rlib.layerskip.config import LayerSkipConfig
    from rlib.study_cli import run_study

    def written(profile: str) -> dict[str, pd.DataFrame]:
        # the chapter's runs of the swept studies and the pretrained model (read back where the chapter ran), then the
        # paper-rate runs, all in the chapter's folder of pretrained-model runs; then the parsing study at both rates
        acfg, rcfg, pcfg = AdaptConfig.preset(profile), PaperRateConfig.preset(profile), ParseConfig.preset(profile)
        chapter_dir = run_cache.work_dir(profile, CHAPTER)
        found: dict[str, pd.DataFrame] = {}
        if rcfg.studies:
            work = chapter_dir / "pretrained"
            at_paper = rate_config(acfg, rcfg)
            own = [r for r in adapt_runs(acfg) if r.study in {SOURCE, *rcfg.studies}]
            # one pool for both grids, costliest runs first (`rlib.experiments.run_grids`)
            chapter, rated = run_cache.run_grids([adapt.grid(acfg, work, own),
                                                  adapt.grid(at_paper, work, _study_runs(at_paper))], workers="auto")
            exits = tables.exit_long(chapter)
            found |= {"pretrained_exits": exits,
                      "paper_rate": rate_table(chapter + rated, acfg, rcfg, int(exits["exit_layer"].max()))}
        if rcfg.parse:
            source = parse_study.load_source(pcfg)
            own_parse = parse_study.run_grid(pcfg, chapter_dir / "parse", source=source)
            found |= {"parse_exits": tables.parse_exits(own_parse), "parse_pairs": tables.parse_pairs(own_parse),
                      "parse_paper_rate": parse_rate_table(own_parse, run_parse(pcfg, chapter_dir, source=source),
                                                           pcfg)}
        return found

    def judge(written: dict[str, pd.DataFrame], profile: str) -> pd.DataFrame:
        configs = (LayerSkipConfig.preset(profile), AdaptConfig.preset(profile), ParseConfig.preset(profile))
        return claims.judge(written, *configs, profile).finish()

    def has_runs(profile: str) -> bool:  # a profile the study cannot run is refused here, before any training
        rcfg = PaperRateConfig.preset(profile)
        if rcfg.studies:
            rate_config(AdaptConfig.preset(profile), rcfg)
        if rcfg.parse:
            parse_config(ParseConfig.preset(profile))
        return bool(rcfg.studies) or rcfg.parse

    return run_study(argv, "python -m rlib.layerskip.paper_rate", __doc__.splitlines()[0], has_runs, written, judge,
                     CLAIMS)

if __name__ == "__main__":
    raise SystemExit(main())
