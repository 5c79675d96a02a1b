"""The pretrained-model studies at Table 8's own learning rates (rlib.layerskip.paper_rate): the derived study changes
the rate alone, the table reads both rates' middle and last exits against the pretrained model and plain training, and
the last-exit claims' diagnosis follows the paper-rate reading (setup where the paper's rate keeps the bound). The
continual cases use the chapter's continual study as it trained until 2026-12-07 (3e-4), the set-up the study first
measured; the chapter trains it at Table 8's 3e-5 since."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from rlib.config import ConfigError
from rlib.layerskip import claims, config, paper_rate
from rlib.layerskip.adapt import _key

CORPORA = ("gutenberg-poetry", "shakespeare", "python-stdlib")
LONG = "cpu-long"
ACFG = config.AdaptConfig.preset(LONG)
# the chapter's continual study as it trained until 2026-12-07, at 3e-4: the set-up the study first measured
FORMER = ACFG.override(studies=tuple(replace(s, lr=3e-4) if s.name == "continual" else s for s in ACFG.studies))
CONTINUAL = paper_rate.PaperRateConfig(studies=("continual",))


def test_presets_and_the_derived_study_change_only_the_rate():
    rcfg = paper_rate.PaperRateConfig.preset(LONG)
    assert paper_rate.PaperRateConfig.preset("cpu").studies == () and rcfg.studies == ()
    # Table 8's rates, the chapter's own since 2026-12-07: continual pretraining (Llama2 7B) and the code fine-tune
    assert (ACFG.study("continual").lr, ACFG.study("code").lr) == (3e-5, 1e-4)
    assert config.AdaptConfig.preset("gpu").study("code").lr == 1e-4
    with pytest.raises(ConfigError, match="already trains at Table 8's rate 3e-05"):
        paper_rate.rate_config(ACFG, CONTINUAL)
    with pytest.raises(ConfigError, match="already trains at Table 8's rate 0.0001"):
        paper_rate.rate_config(ACFG, paper_rate.PaperRateConfig(studies=("code",)))
    # the code study as it trained until 2026-12-07 (3e-4), the set-up its measurement compared
    former_code = ACFG.override(studies=tuple(replace(s, lr=3e-4) if s.name == "code" else s for s in ACFG.studies))
    (code,) = paper_rate.rate_config(former_code, paper_rate.PaperRateConfig(studies=("code",))).studies
    assert (code.name, code.lr) == ("code_lr0.0001", 1e-4)
    assert "code 0.0001 (Table 8: 0.0001)" in paper_rate.rates_line(ACFG, config.ParseConfig.preset(LONG))
    assert "parsing 0.0003 (Table 8: 0.0001)" in paper_rate.rates_line(ACFG, config.ParseConfig.preset(LONG))
    rated = paper_rate.rate_config(FORMER, CONTINUAL)
    (study,) = rated.studies
    base = FORMER.study("continual")
    assert (study.name, study.lr, base.lr) == ("continual_lr3e-05", 3e-5, 3e-4)
    assert {k: v for k, v in vars(study).items() if k not in ("name", "lr")} == \
        {k: v for k, v in vars(base).items() if k not in ("name", "lr")}
    assert rated.tasks == () and rated.eval_corpora == ACFG.eval_corpora  # every corpus Table 1's rows span
    shared = _key(config.AdaptRun(study.name, "ld_ee"), rated)[1]
    base_shared = _key(config.AdaptRun("continual", "ld_ee"), FORMER)[1]
    assert {k: v for k, v in shared.items() if k != "tasks"} == {k: v for k, v in base_shared.items() if k != "tasks"}
    with pytest.raises(ConfigError, match=r"studies \['chat'\]"):
        paper_rate.PaperRateConfig(studies=("chat",))
    with pytest.raises(ConfigError, match="each once"):
        paper_rate.PaperRateConfig(studies=("code", "code"))
    with pytest.raises(ConfigError, match="trains no study"):
        paper_rate.rate_config(ACFG, paper_rate.PaperRateConfig.preset("cpu"))


def _result(study: str, recipe: str, last: dict[str, float], middle: float) -> dict:
    exits = [{"corpus": c, "exit_layer": e, "ppl": p} for c in CORPORA for e, p in ((15, middle), (30, last[c]))]
    return {"study": study, "recipe": recipe, "tokens": 81920, "exits": exits}


def _results(paper_last: float, paper_plain: float = 100.0) -> list[dict]:
    """The pretrained model (last exit 100 on every corpus, middle 1e6), the chapter's continual runs at 3e-4 (LD+EE's
    last exit +30 % over it) and the paper-rate twins: LD+EE's last exit at `paper_last`."""
    flat = dict.fromkeys(CORPORA, 100.0)
    return [_result(config.SOURCE, config.SOURCE, flat, 1e6),
            _result("continual", "baseline", dict.fromkeys(CORPORA, 90.0), 1e6),
            _result("continual", "ld_ee", dict.fromkeys(CORPORA, 130.0), 1e3),
            _result("continual_lr3e-05", "baseline", dict.fromkeys(CORPORA, paper_plain), 1e6),
            _result("continual_lr3e-05", "ld_ee", dict.fromkeys(CORPORA, paper_last), 2e4),
            _result("code", "ld_ee", dict.fromkeys(CORPORA, 5.0), 10.0)]


def _table(paper_last: float, paper_plain: float = 100.0) -> pd.DataFrame:
    return paper_rate.rate_table(_results(paper_last, paper_plain), FORMER, CONTINUAL, 30)


def test_the_table_reads_both_rates_against_the_pretrained_model_and_plain_training():
    table = _table(100.3)
    assert len(table) == 2 * 2 * 3 and set(table["study"]) == {"continual"}  # the code study is not swept
    assert table["lr"].tolist()[:6] == [3e-4] * 6 and table["paper_rate"].tolist() == [False] * 6 + [True] * 6
    ld = table[(table["recipe"] == "ld_ee")].set_index(["lr", "corpus"])
    assert ld.loc[(3e-4, "shakespeare"), "last_vs_source"] == pytest.approx(0.30)
    assert ld.loc[(3e-5, "shakespeare"), "last_vs_source"] == pytest.approx(0.003)
    assert ld.loc[(3e-4, "shakespeare"), "last_vs_plain"] == pytest.approx(130 / 90 - 1)
    assert ld.loc[(3e-5, "python-stdlib"), "middle_ratio"] == pytest.approx(50.0)
    with pytest.raises(ConfigError, match="pretrained model's exits"):
        paper_rate.rate_table(_results(100.3)[1:], FORMER, CONTINUAL, 30)
    with pytest.raises(ConfigError, match="no runs of the studies"):
        paper_rate.rate_table(_results(100.3)[:1], FORMER, CONTINUAL, 30)


def _judged(table: pd.DataFrame | None) -> pd.DataFrame:
    from rlib.layerskip import tables

    chapter = [r for r in _results(100.3) if r["study"] in (config.SOURCE, "continual")]
    found = {"pretrained_exits": tables.exit_long([{**r, "exits": [{**e, "nll": 0.0, "top1_acc": 0.0,
                                                                      "agree_last": 0.0} for e in r["exits"]]}
                                                   for r in chapter])}
    if table is not None:
        found["paper_rate"] = table
    configs = (config.LayerSkipConfig.preset(LONG), FORMER, config.ParseConfig.preset(LONG))
    return claims.judge(found, *configs, LONG).finish().set_index("id")


def test_the_last_exit_diagnosis_reads_the_paper_rate():
    paper, ours = "ls.tab1.continual_last_ppl", "ls.tab1.continual_last_ppl.ours"
    without = _judged(None)
    assert without.loc[[paper, ours], "verdict"].tolist() == ["not held"] * 2
    assert without.loc[[paper, ours], "diagnosis"].tolist() == ["budget"] * 2
    assert "Table 8" not in without.loc[paper, "evidence"]
    # at 3e-5 the last exit stays within Table 1's +0.5 % of the pretrained model: the chapter's rate is the cause
    kept = _judged(_table(100.3))
    assert kept.loc[paper, "diagnosis"] == "setup"
    assert ("LD+EE's last exit over the pretrained model's at Table 8's 3e-05: gutenberg-poetry +0.3%, python-stdlib "
            "+0.3%, shakespeare +0.3% (at the chapter's 0.0003: +30.0%, +30.0%, +30.0%)") in kept.loc[paper, "evidence"]
    assert "middle exit is 50x below the pretrained model's at least (Table 1: 17.7x" in kept.loc[paper, "evidence"]
    assert kept.loc[ours, "diagnosis"] == "setup"  # +0.3 % over plain at the same rate, within the book's 5 %
    # past the bound at the paper's rate too: still budget, the rate ruled out
    past = _judged(_table(110.0))
    assert past.loc[paper, "diagnosis"] == "budget"
    assert "+10.0%" in past.loc[paper, "evidence"] and "past the claim's bound at the paper's rate too" in \
        past.loc[paper, "evidence"]
    # the book's own posing reads plain training at the same rate: 110 over a plain 100 is +10 %, past its 5 %
    assert past.loc[ours, "diagnosis"] == "budget"
    near_plain = _judged(_table(110.0, paper_plain=108.0))
    assert near_plain.loc[ours, "diagnosis"] == "setup" and near_plain.loc[paper, "diagnosis"] == "budget"


def test_the_command_line_refuses_a_profile_without_the_study(capsys):
    with pytest.raises(SystemExit):
        paper_rate.main(["--profile", "cpu"])
    assert "has no runs for this study" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- the parsing study
PCFG = config.ParseConfig.preset(LONG)


def test_the_parsing_study_at_table_8s_rate_changes_only_the_rate():
    assert paper_rate.PaperRateConfig.preset(LONG).parse and not paper_rate.PaperRateConfig.preset("cpu").parse
    rated = paper_rate.parse_config(PCFG)
    assert (PCFG.lr, rated.lr, paper_rate.PARSE_FOLDER) == (3e-4, 1e-4, "parse_lr0.0001")  # Table 8: TOPv2 at 1e-4
    own, paper = PCFG.training_key(), rated.training_key()
    assert {k for k in own if own[k] != paper[k]} == {"lr"}  # the runs are keyed apart on the rate alone
    with pytest.raises(ConfigError, match="already trains at Table 8's rate 0.0001"):
        paper_rate.parse_config(config.ParseConfig.preset("gpu"))
    with pytest.raises(ConfigError, match="runs no parsing study"):
        paper_rate.parse_config(config.ParseConfig.preset("cpu"))


def _parse_run(recipe: str, middle: float, last: float) -> dict:
    return {"recipe": recipe, "exits": [{"exit_layer": e, "em": em, "token_acc": 0.9} for e, em in ((15, middle),
                                                                                                     (30, last))]}


def _parse_table(paper_plain: float, paper_ld: tuple[float, float]) -> pd.DataFrame:
    """The chapter's parsing runs at 3e-4 (plain 0 / 0.965, LD+EE 0.01 / 0.825 at exits 15 / 30, cpu-long's promoted
    reading) and the paper-rate twins."""
    own = [_parse_run("baseline", 0.0, 0.965), _parse_run("ld_ee", 0.01, 0.825)]
    return paper_rate.parse_rate_table(own, [_parse_run("baseline", 0.0, paper_plain), _parse_run("ld_ee", *paper_ld)],
                                       PCFG)


def test_the_parse_rate_table_reads_both_rates_against_plain_fine_tuning():
    table = _parse_table(0.95, (0.5, 0.93))
    assert table["lr"].tolist() == [3e-4] * 4 + [1e-4] * 4 and table["paper_rate"].tolist() == [False] * 4 + [True] * 4
    ld = table[table["recipe"] == "ld_ee"].set_index(["lr", "exit_layer"])["em_vs_plain"]
    assert ld[3e-4, 30] == pytest.approx(0.825 - 0.965) and ld[1e-4, 30] == pytest.approx(0.93 - 0.95)
    assert ld[1e-4, 15] == pytest.approx(0.5)
    assert (table.loc[table["recipe"] == "baseline", "em_vs_plain"] == 0).all()
    with pytest.raises(ConfigError, match="both rates"):
        paper_rate.parse_rate_table([], [_parse_run("ld_ee", 0.1, 0.9)], PCFG)


def _parse_judged(table: pd.DataFrame | None) -> pd.DataFrame:
    from rlib.layerskip import tables

    found = {"parse_exits": tables.parse_exits([_parse_run("baseline", 0.0, 0.965), _parse_run("ld_ee", 0.01, 0.825)])}
    if table is not None:
        found["parse_paper_rate"] = table
    configs = (config.LayerSkipConfig.preset(LONG), ACFG, PCFG)
    return claims.judge(found, *configs, LONG).finish().set_index("id")


def test_the_fig10b_diagnoses_read_the_paper_rate():
    middle, last, ours = "ls.fig10b.parse_middle_em", "ls.fig10b.parse_last_em", "ls.fig10b.parse_last_em.ours"
    without = _parse_judged(None)
    assert without.loc[[middle, last, ours], "verdict"].tolist() == ["not held"] * 3
    assert without.loc[[middle, last, ours], "diagnosis"].tolist() == ["budget"] * 3
    assert "Table 8" not in without.loc[last, "evidence"]
    # at 1e-4 LD+EE's last exit is 2 points below plain's (within Fig. 10b's 3) but its middle exit 43 points below its
    # last (past 5.9): the last-exit claims read setup, the middle-exit claim stays budget with the reading beside it
    kept = _parse_judged(_parse_table(0.95, (0.5, 0.93)))
    assert kept.loc[[last, ours], "diagnosis"].tolist() == ["setup"] * 2
    assert ("at Table 8's 0.0001: last exit EM plain 0.950, LD+EE 0.930 (-2.0 [") in kept.loc[last, "evidence"]
    assert ("exit 15 EM plain 0.000, LD+EE 0.500 (at the chapter's 0.0003: last 0.965 / 0.825, exit 15 0.000 / "
            "0.010)") in kept.loc[last, "evidence"]
    assert kept.loc[middle, "diagnosis"] == "budget"
    assert "not held at the paper's rate either" in kept.loc[middle, "evidence"]
    # within 5.9 points of its last exit at 1e-4, plain's middle exit at 0: the middle-exit claim reads setup too
    assert _parse_judged(_parse_table(0.95, (0.88, 0.93))).loc[middle, "diagnosis"] == "setup"
    # 10 points below plain at 1e-4 too: the rate ruled out, still budget
    past = _parse_judged(_parse_table(0.95, (0.5, 0.85)))
    assert past.loc[[last, ours], "diagnosis"].tolist() == ["budget"] * 2
    evidence = past.loc[last, "evidence"]
    assert "-10.0 [" in evidence and "not held at the paper's rate either" in evidence
