"""Chapter 05's claims ledger (rlib.layerskip.claims): the committed cpu tables give the catalogue's verdicts with a
diagnosis for every "not held", the book's earlier claims keep their verdicts, moving one number flips a verdict, and
missing tables leave claims not measured."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from rlib.book.claims import check_ledger, load_tables
from rlib.layerskip import claims, tables
from rlib.layerskip.claims.specs import NEEDS, SPECS
from rlib.layerskip.config import AdaptConfig, LayerSkipConfig, ParseConfig
from rlib.layerskip.decode_costs import predict, required_acceptance
from tests.test_layerskip_costs import decoding_rows, synthetic_costs
from tests.test_layerskip_tables import record, results

FIGURES = Path(__file__).resolve().parents[1] / "figures" / "05_layerskip"
H, N, M, T = "held", "not held", "not measured", "not testable at this scale"

# The committed cpu tables' verdicts (the 2026-12-05 cpu run at 810fb70, models trained in fp32 on an AVX2 host: the
# from-scratch baseline and LD+EE, decoded by coupled sampling, and the continual study with its Draft & Verify row;
# code fine-tuning, the parsing study and the other from-scratch recipes are left to cpu-long, so their claims are not
# measured here, each saying so). The from-scratch and continual studies decode by coupled sampling, so their paper
# decoding claims (greedy in the paper) are not testable here and their `.sampled` twins (ours) carry the reading.
# Fig. 8's early-exit claim reads not held here: the cpu profile trains one seed per recipe, so the middle-exit gap has
# no seed s.d. to clear (its claims.csv, judged when one seed's s.d. still read as 0, says held). The run of
# 2026-12-07 evening (continual study at Table 8's 3e-5): the continual LD+EE model's acceptance is flat from E = 8 to
# 15 (0.04), its last-exit task drops' intervals reach -2.9 points, and the from-scratch baseline's self-speculation
# timed 1.13x (0.96x the run before) where Sec. 8 says it gains nothing without the recipe.
EXPECTED_CPU = {
    "ls.fig2.pretrained_layers_needed": H, "ls.ours.fig2_probe_after_layerskip": N,
    "ls.fig8.scratch_early_exits_better": N, "ls.fig8.scratch_early_exits_better.ours": N,
    "ls.fig8.scratch_last_exit_slight_drop": H, "ls.ours.teacher_forced_acceptance": H,
    "ls.fig11.ee_prevents_ld_reduces": M, "ls.fig11.ee_prevents_ld_reduces.ours": M, "ls.fig11.baseline_middle_rises":
    M, "ls.fig11.baseline_middle_rises.ours": M, "ls.fig12.exp_vs_const_dropout": M,
    "ls.s411.exp_time_curriculum_from_scratch": M,
    "ls.s412.all_layers_slows_training": M, "ls.s412.all_layers_hurts_last": M, "ls.s412.all_layers_every_step.ours": M,
    "ls.concl.large_r_minimal_overhead": M, "ls.concl.ld_training_speed": M, "ls.tab8.ld_needs_higher_lr": M,
    "ls.ours.tab8_lr_gain_is_ld_own": M, "ls.tab1.continual_middle_ppl": H, "ls.tab1.continual_middle_ppl.ours": H,
    "ls.fig6.continual_every_early_exit": H, "ls.tab1.continual_last_ppl": N, "ls.tab1.continual_last_ppl.ours": N,
    "ls.tab1.continual_middle_tasks": T, "ls.tab1.continual_middle_tasks.ours": N, "ls.tab1.continual_last_tasks": T,
    "ls.tab1.classification_vs_generation": N, "ls.ours.last_exit_cost_vs_budget": M,
    "ls.new.fig7_continual_generations": T, "ls.new.fig7_continual_generations.sampled": H, "ls.fig10a.code_middle_ppl":
    M, "ls.fig10a.code_middle_ppl.ours": M, "ls.fig10a.code_middle_tasks": M, "ls.fig10a.code_middle_tasks.ours": M,
    "ls.fig10a.code_last": M, "ls.fig10a.code_last.ours": M, "ls.fig10a.ld_ee_vs_variants": M,
    "ls.fig10b.parse_middle_em": M, "ls.fig10b.parse_middle_em.ours": M, "ls.fig10b.parse_last_em": M,
    "ls.fig10b.parse_last_em.ours": M, "ls.tab10.early_exit_em": M, "ls.abstract.single_model_memory": H,
    "ls.tab10.early_exit_time": N, "ls.exact.scratch": T, "ls.exact.scratch.sampled": H,
    "ls.tab10.acceptance_rises_with_e.scratch": T, "ls.tab10.acceptance_rises_with_e.scratch.sampled": N,
    "ls.tab10.acceptance_rises_with_e.scratch.ours": H, "ls.s8.recipe_required.scratch": T,
    # 16 paired rounds (2026-12-07 run): baseline 0.96x, LayerSkip 1.22x, intervals apart (they overlapped the run
    # before: these timings move between runs on this shared host)
    "ls.s8.recipe_required.scratch.sampled": N, "ls.s8.recipe_required.scratch.ours": N, "ls.exact.continual": T,
    "ls.exact.continual.sampled": H, "ls.tab10.acceptance_rises_with_e.continual": T,
    "ls.tab10.acceptance_rises_with_e.continual.sampled": N, "ls.tab10.acceptance_rises_with_e.continual.ours": H,
    "ls.s8.recipe_required.continual": T, "ls.s8.recipe_required.continual.sampled": T,
    "ls.s8.recipe_required.continual.ours": T, "ls.exact.code": M, "ls.exact.code.sampled": M,
    "ls.tab10.acceptance_rises_with_e.code": M, "ls.tab10.acceptance_rises_with_e.code.sampled": M,
    "ls.tab10.acceptance_rises_with_e.code.ours": M, "ls.s8.recipe_required.code": M,
    "ls.s8.recipe_required.code.sampled": M, "ls.s8.recipe_required.code.ours": M, "ls.exact.parse": M,
    "ls.exact.parse.sampled": M, "ls.tab10.acceptance_rises_with_e.parse": M,
    "ls.tab10.acceptance_rises_with_e.parse.sampled": M, "ls.tab10.acceptance_rises_with_e.parse.ours": M,
    "ls.s8.recipe_required.parse": M, "ls.s8.recipe_required.parse.sampled": M, "ls.s8.recipe_required.parse.ours": M,
    "ls.tab10.acceptance_levels.parse": M, "ls.tab10.acceptance_levels.parse.sampled": M, "ls.tab6.kvq_reuse.scratch":
    T, "ls.tab6.kvq_reuse.scratch.sampled": H, "ls.tab6.kvq_reuse.scratch.ours": H, "ls.ours.vs_transformers.scratch":
    M, "ls.tab6.kvq_reuse.parse": M, "ls.tab6.kvq_reuse.parse.sampled": M, "ls.tab6.kvq_reuse.parse.ours": M,
    "ls.ours.vs_transformers.parse": M, "ls.tab3.scratch_speedup": T, "ls.tab3.scratch_speedup.sampled": N,
    "ls.tab3.scratch_speedup.ours": N, "ls.tab2.continual_speedup": T, "ls.tab2.continual_speedup.sampled": N,
    "ls.tab2.continual_speedup.ours": N, "ls.tab4.code_speedup": M, "ls.tab4.code_speedup.sampled": M,
    "ls.tab4.code_speedup.ours": M, "ls.tab10.parse_speedup": M, "ls.tab10.parse_speedup.sampled": M,
    "ls.tab10.parse_speedup.ours": M, "ls.new.tab2_generation_quality": T, "ls.new.tab2_generation_quality.sampled": N,
    "ls.tab3.generation_quality.scratch": T, "ls.tab3.generation_quality.scratch.sampled": N,
    "ls.tab4.generation_quality.code": M, "ls.tab4.generation_quality.code.sampled": M,
    "ls.new.fig9_scratch_generations": T, "ls.new.fig9_scratch_generations.sampled": H, "ls.tab23.model_size_trends": T,
    "ls.tab23.model_size_trends.sampled": T, "ls.tab2.vs_draft_and_verify": T,
    "ls.tab2.vs_draft_and_verify.sampled": T,  # decided by paired rounds since 2026-12-07: 3 here (75 % coverage)
    "ls.ours.task_vocabulary_drafting": M, "ls.ours.fast_decoding": M, "ls.ours.cost_model": M,
    "ls.ours.whole_head_cost": M, "ls.s21.shared_head_cheaper": N,
}


def judged(found: dict[str, pd.DataFrame], cfg: LayerSkipConfig | None = None, acfg: AdaptConfig | None = None,
           pcfg: ParseConfig | None = None) -> pd.DataFrame:
    """The ledger of `found` tables (cpu presets unless given), indexed by claim id."""
    ledger = claims.judge(found, cfg or LayerSkipConfig.preset("cpu"), acfg or AdaptConfig.preset("cpu"),
                          pcfg or ParseConfig.preset("cpu"), "cpu")
    table = ledger.finish()
    assert check_ledger(table) == []  # every "not held" has a diagnosis and its evidence
    return table.set_index("id")


def test_committed_cpu_tables_give_the_catalogue_verdicts():
    ledger = judged(load_tables(FIGURES))
    assert ledger["verdict"].to_dict() == EXPECTED_CPU
    not_held = ledger[ledger["verdict"] == N]
    assert not_held["evidence"].str.len().min() > 40
    assert ledger.loc["ls.fig12.exp_vs_const_dropout", "measured"].startswith("train_curves has no ld run: the cpu "
                                                                              "profile leaves it to cpu-long")
    assert "n = 100" in ledger.loc["ls.tab1.continual_middle_tasks", "measured"]  # issue 25 item 2's item count
    assert "identical to the sampled output (T=1)" in ledger.loc["ls.exact.scratch", "measured"]
    # the not-testable reason quotes the run's own greedy check: the LD+EE model's greedy output loops (0.12 in the
    # AVX512-BF16 EPYC's bf16 run of 2026-12-07 evening, 0.09 in the AMX Xeon's bf16 run before it)
    assert "LD+EE 0.12 over 8 prompts of 64 tokens (greedy_check), below the 0.5 gate" in \
        ledger.loc["ls.exact.scratch", "measured"]
    assert "(greedy_check_continual), below the 0.5 gate" in ledger.loc["ls.exact.continual", "measured"]


def test_specs_are_unique_placed_and_each_has_a_check():
    ids = [s.id for s in SPECS]
    assert len(ids) == len(set(ids)) == len(EXPECTED_CPU)
    assert all(s.where.strip() and s.paper == "004" and s.artifact for s in SPECS)
    assert set(ids) == set(claims.CHECKS) | set(NEEDS) and not set(claims.CHECKS) & set(NEEDS)
    assert all(s.ours for s in SPECS if s.id.endswith(".ours") or s.id.startswith("ls.ours."))
    assert sum(not s.ours for s in SPECS) + sum(s.ours for s in SPECS if s.id.startswith("ls.ours.")) == 64


def test_no_tables_leave_every_claim_not_measured():
    ledger = judged({})
    assert (ledger["verdict"] == M).all() and len(ledger) == len(SPECS)
    assert ledger.loc["ls.exact.continual", "measured"] == ("needs table 'decoding_continual', which this run did "
                                                            "not write")
    # a table the profile leaves to cpu-long (book.toml's skip.cpu) says where it is measured
    assert ledger.loc["ls.exact.parse", "measured"].startswith("the cpu profile leaves 'decoding_parse' to cpu-long")


# ------------------------------------------------------------------------------------------------ from scratch
SCRATCH = LayerSkipConfig.preset("cpu").override(n_layers=4, decode_exits=(2,))  # middle exit 2 of 4


def scratch_tables(runs: list[dict]) -> dict[str, pd.DataFrame]:
    return {"exits": tables.exit_table(runs), "middle_vs_last": tables.mid_last_table(runs, 2, 4),
            "curricula": tables.curriculum_table(runs, 2, 4), "probe_curves": tables.probe_curves(runs),
            "train_curves": tables.train_curves(runs), "step_times": tables.step_times(runs)}


BOOK_TRAINING = ["ls.fig8.scratch_early_exits_better.ours", "ls.ours.teacher_forced_acceptance",
                 "ls.fig11.ee_prevents_ld_reduces.ours", "ls.fig12.exp_vs_const_dropout",
                 "ls.s412.all_layers_every_step.ours", "ls.fig11.baseline_middle_rises.ours"]


def test_training_claims_follow_the_numbers():
    ledger = judged(scratch_tables(results()), SCRATCH)
    assert ledger.loc[BOOK_TRAINING, "verdict"].tolist() == [H] * 6  # the book's six training claims, as before
    assert "baseline 0.500" in ledger.loc["ls.ours.teacher_forced_acceptance", "measured"]
    assert "LD+EE 0.650" in ledger.loc["ls.ours.teacher_forced_acceptance", "measured"]
    worse = [r for r in results() if r["recipe"] != "ld_ee"] + [record("ld_ee", 0, 5.9, 3.5, agree_mid=0.4)]
    ledger = judged(scratch_tables(worse), SCRATCH)
    assert ledger.loc[BOOK_TRAINING[:2], "verdict"].tolist() == [N, N]


def test_scratch_paper_claims_flip_with_one_number():
    found = scratch_tables(results())
    assert judged(found, SCRATCH).loc["ls.fig8.scratch_early_exits_better", "verdict"] == N  # top-1 ties
    exits = found["exits"].copy()
    exits.loc[(exits["recipe"] == "ld_ee") & (exits["exit_layer"] == 2), "top1_acc"] = 0.25
    assert judged({**found, "exits": exits}, SCRATCH).loc["ls.fig8.scratch_early_exits_better", "verdict"] == H

    speed = judged(found, SCRATCH).loc["ls.concl.ld_training_speed"]
    assert speed["verdict"] == N and speed["diagnosis"] == "scale" and "mean dropout" not in speed["evidence"]
    times = found["step_times"].copy()
    times.loc[times["recipe"] == "ld", "step_seconds"] = 0.05
    assert judged({**found, "step_times": times}, SCRATCH).loc["ls.concl.ld_training_speed", "verdict"] == H

    curves = found["train_curves"].copy()
    curves.loc[curves["recipe"] == "ld_const", "loss"] -= 0.5  # Const now trains lower than Exp
    flipped = judged({**found, "train_curves": curves}, SCRATCH).loc["ls.fig12.exp_vs_const_dropout"]
    assert flipped["verdict"] == N and "opposite sign" in flipped["evidence"]

    rises = judged(found, SCRATCH).loc["ls.fig11.baseline_middle_rises"]
    assert rises["verdict"] == H and "baseline +0.500" in rises["measured"]
    assert "the baseline's last exit 3.400 -> 3.000 nats" in rises["measured"]
    flat_last = [r for r in results() if r["recipe"] != "baseline"] + [  # the last layer stops improving
        record("baseline", s, 6.0, 3.0, probe_mid=(5.0, 4.0, 4.5), probe_last=(3.0, 3.1, 3.2)) for s in (0, 1)]
    assert judged(scratch_tables(flat_last), SCRATCH).loc["ls.fig11.baseline_middle_rises", "verdict"] == N
    fig11 = judged(found, SCRATCH).loc["ls.fig11.ee_prevents_ld_reduces"]
    assert fig11["verdict"] == H and "baseline +0.500, LD +0.000, EE +0.000 nats" in fig11["measured"]
    rising = [r for r in results() if r["recipe"] != "ld"] + [record("ld", s, 5.5, 3.0, probe_mid=(5.0, 4.0, 4.6))
                                                              for s in (0, 1)]  # LD rises more than the baseline
    assert judged(scratch_tables(rising), SCRATCH).loc["ls.fig11.ee_prevents_ld_reduces", "verdict"] == N


def test_a_missing_table_names_itself():
    found = scratch_tables(results())
    del found["probe_curves"]
    ledger = judged(found, SCRATCH)
    assert ledger.loc["ls.fig11.baseline_middle_rises.ours", "verdict"] == M
    assert "probe_curves" in ledger.loc["ls.fig11.baseline_middle_rises.ours", "measured"]
    assert ledger.loc["ls.fig11.ee_prevents_ld_reduces", "verdict"] == M  # Fig. 11 is read on the rise


def test_probe_claim_reads_layers_needed():
    probes = {"pretrained": pd.DataFrame({"first": [20, 30], "stable": [28, 30]}),
              "continual LD+EE": pd.DataFrame({"first": [10, 20], "stable": [20, 26]})}
    found = {"layers_needed": tables.probe_summary(probes, n_layers=30)}
    assert judged(found).loc["ls.ours.fig2_probe_after_layerskip", "verdict"] == H
    probes["continual LD+EE"]["stable"] = [30, 30]
    worse = judged({"layers_needed": tables.probe_summary(probes, n_layers=30)}).loc[
        "ls.ours.fig2_probe_after_layerskip"]
    assert worse["verdict"] == N and "gutenberg-poetry" in worse["evidence"]


def test_fig2_claim_names_how_repetitive_the_probed_continuation_was():
    looping = pd.DataFrame({"token": [5, 6] * 4, "first": [20, 21] * 4, "stable": [25, 26] * 4})
    found = {"layers_needed": tables.probe_summary({"pretrained": looping}, n_layers=30)}
    assert "the greedy continuation's distinct-2 0.29" in judged(found).loc["ls.fig2.pretrained_layers_needed",
                                                                             "measured"]  # 2 of 7 bigrams
    # a table written before the column (no tokens): the claim reads as before
    found = {"layers_needed": tables.probe_summary({"pretrained": looping.drop(columns="token")}, n_layers=30)}
    assert "distinct-2" not in judged(found).loc["ls.fig2.pretrained_layers_needed", "measured"]


# ------------------------------------------------------------------------------------------ pretrained studies
def _study_run(study: str, recipe: str, ppl: dict[int, float], acc: dict[int, float]) -> dict:
    return {"name": f"{study}-{recipe}", "study": study, "recipe": recipe,
            "exits": [{"corpus": "gutenberg-poetry", "exit_layer": e, "nll": math.log(p), "ppl": p, "top1_acc": 0.1,
                       "agree_last": 0.5} for e, p in ppl.items()],
            "tasks": [{"task": "book_cloze", "exit_layer": e, "metric": "acc", "value": a, "n": 200}
                      for e, a in acc.items()]}


def adapt_tables(runs: list[dict]) -> dict[str, pd.DataFrame]:
    return {"pretrained_exits": tables.exit_long(runs), "pretrained_tasks": tables.task_long(runs)}


BOOK_CONTINUAL = ["ls.tab1.continual_middle_ppl.ours", "ls.tab1.continual_last_ppl.ours",
                  "ls.tab1.continual_middle_tasks.ours"]


def test_adapt_claims_read_the_middle_and_last_exits():
    source = _study_run("source", "source", {2: 1e6, 4: 20.0}, {2: 0.0, 4: 0.5})
    plain = _study_run("continual", "baseline", {2: 1e4, 4: 18.0}, {2: 0.0, 4: 0.5})
    good = [source, plain, _study_run("continual", "ld_ee", {2: 100.0, 4: 18.5}, {2: 0.3, 4: 0.5})]
    ledger = judged(adapt_tables(good))
    assert ledger.loc[BOOK_CONTINUAL, "verdict"].tolist() == [H, H, H]
    assert "1e+04x" in ledger.loc["ls.tab1.continual_middle_ppl.ours", "measured"]
    costly = [source, plain, _study_run("continual", "ld_ee", {2: 100.0, 4: 19.5}, {2: 0.0, 4: 0.5})]
    ledger = judged(adapt_tables(costly))
    assert ledger.loc[BOOK_CONTINUAL, "verdict"].tolist() == [H, N, N]  # +8.3 % at the last exit; no task gain
    assert ledger.loc["ls.tab1.continual_last_ppl.ours", "diagnosis"] == "budget"
    missing = judged(adapt_tables([source, good[2]]))
    assert (missing.loc[BOOK_CONTINUAL, "verdict"] == M).all()


def test_adapt_paper_claims_flip_with_one_number():
    source = _study_run("source", "source", {2: 1e6, 4: 20.0}, {2: 0.0, 4: 0.5})
    plain = _study_run("continual", "baseline", {2: 1e4, 4: 18.0}, {2: 0.0, 4: 0.5})
    ledger = judged(adapt_tables([source, plain, _study_run("continual", "ld_ee", {2: 100.0, 4: 19.9},
                                                            {2: 0.3, 4: 0.49})]))
    assert ledger.loc[["ls.tab1.continual_middle_ppl", "ls.tab1.continual_last_ppl",
                       "ls.tab1.continual_middle_tasks", "ls.tab1.continual_last_tasks"], "verdict"].tolist() == [H] * 4
    ledger = judged(adapt_tables([source, plain, _study_run("continual", "ld_ee", {2: 1e5, 4: 20.2},
                                                            {2: 0.0, 4: 0.30})]))
    assert ledger.loc[["ls.tab1.continual_middle_ppl", "ls.tab1.continual_last_ppl",
                       "ls.tab1.continual_middle_tasks", "ls.tab1.continual_last_tasks"], "verdict"].tolist() == [N] * 4


def test_task_claims_without_the_power_to_separate_are_not_testable():
    """Issue 25 item 2: an interval that reaches 0 (or the last exit's -2.9 point bound) and is wider than the effect
    Table 1 asserts cannot decide the claim."""
    from rlib.layerskip.claims.adapt import TABLE1_MIDDLE_GAIN

    assert round(100 * TABLE1_MIDDLE_GAIN["multiple_choice"], 1) == 10.3  # Table 1's 7B median middle-layer gains
    assert round(100 * TABLE1_MIDDLE_GAIN["generation"], 1) == 4.4
    source = _study_run("source", "source", {2: 1e6, 4: 20.0}, {2: 0.10, 4: 0.5})
    plain = _study_run("continual", "baseline", {2: 1e4, 4: 18.0}, {2: 0.10, 4: 0.5})
    # book_cloze (generation) at n = 200: middle 0.10 -> 0.12 is +2 [-4.0, +8.0] pts, wider than +4.4: not testable
    ledger = judged(adapt_tables([source, plain, _study_run("continual", "ld_ee", {2: 100.0, 4: 19.9},
                                                            {2: 0.12, 4: 0.46})]))
    assert ledger.loc["ls.tab1.continual_middle_tasks", "verdict"] == T
    assert "interval width vs Table 1's median middle-layer gain" in ledger.loc["ls.tab1.continual_middle_tasks",
                                                                                "measured"]
    assert ledger.loc["ls.tab1.continual_last_tasks", "verdict"] == T  # -4 [-13.8, +5.8] pts reaches -2.9


# ----------------------------------------------------------------------------------------------------- decoding
def decode_table(ls_acceptance: dict[int, float], plain_acceptance: dict[int, float], distinct: float = 0.9,
                 plain_distinct: float = 0.9, saving: float = 0.10, n_layers: int = 8) -> pd.DataFrame:
    """A decoding table of the shape `decode_study` writes: a round's time follows the layer count, kvq saves
    `saving` of the other cache modes' time, transformers' early exit is twice as slow as ours."""
    nan, tokens, rows = float("nan"), 400, []
    models = (("baseline", plain_acceptance, plain_distinct), ("ld_ee", ls_acceptance, distinct))
    for recipe, accepted, fluent in models:
        common = {"recipe": recipe, "new_tokens": tokens, "distinct_2": fluent, "draft_vocab": False, "reuse": nan}
        rows.append({**common, "method": "autoregressive", "label": "autoregressive", "exit_layer": n_layers,
                     "n_draft": 0, "ms_per_token": 10.0, "acceptance": nan, "tokens_per_round": 1.0,
                     "drafts_per_round": 0.0, "identical_to_greedy": True, "speedup": 1.0})
        for exit_layer, acceptance in accepted.items():
            rows.append({**common, "method": "early_exit", "label": f"early_exit E={exit_layer}",
                         "exit_layer": exit_layer, "n_draft": 0, "ms_per_token": 10.0 * exit_layer / n_layers,
                         "identical_to_greedy": False, "speedup": n_layers / exit_layer})
            for n_draft in (2, 4):
                ms = 10.0 * (exit_layer / n_layers * n_draft + 1) / (acceptance * n_draft + 1)
                for reuse in ("kvq", "kv", "none") if recipe == "ld_ee" else ("kvq",):
                    timed = ms if reuse == "kvq" else ms / (1 - saving)
                    rows.append({**common, "method": "self_speculative", "reuse": reuse, "exit_layer": exit_layer,
                                 "label": f"self_speculative E={exit_layer} d={n_draft} {reuse}", "n_draft": n_draft,
                                 "ms_per_token": timed, "acceptance": acceptance,
                                 "tokens_per_round": acceptance * n_draft + 1, "drafts_per_round": float(n_draft),
                                 "identical_to_greedy": True, "speedup": 10.0 / timed, "predicted_speedup": 1.5})
                if recipe == "ld_ee":
                    rows.append({**common, "method": "hf_early_exit", "exit_layer": exit_layer, "n_draft": n_draft,
                                 "label": f"hf_early_exit E={exit_layer} d={n_draft}", "ms_per_token": 2 * ms,
                                 "identical_to_greedy": True, "speedup": 5.0 / ms})
    rows.append({**common, "method": "hf_greedy", "label": "hf_greedy", "exit_layer": n_layers, "n_draft": 0,
                 "ms_per_token": 12.0, "identical_to_greedy": True, "speedup": 10 / 12})
    return pd.DataFrame(rows)


def scratch_decoding(**changes) -> pd.DataFrame:
    return decode_table(**{"ls_acceptance": {1: 0.7, 2: 0.9}, "plain_acceptance": {1: 0.05, 2: 0.05}, **changes})


PAPER_DECODING = ["ls.exact.scratch", "ls.tab10.acceptance_rises_with_e.scratch", "ls.s8.recipe_required.scratch",
                  "ls.tab3.scratch_speedup", "ls.ours.vs_transformers.scratch"]


def deep_decoding(**changes) -> pd.DataFrame:
    """`scratch_decoding` on a 4-layer model: E = 2 is at Table 6's depth share (E >= L/2), E = 1 below it."""
    return scratch_decoding(n_layers=4, **changes)
BOOK_DECODING = ["ls.tab10.acceptance_rises_with_e.scratch.ours", "ls.s8.recipe_required.scratch.ours",
                 "ls.tab6.kvq_reuse.scratch.ours", "ls.tab3.scratch_speedup.ours"]


def test_decoding_claims_follow_the_numbers():
    ledger = judged({"decoding": scratch_decoding()})
    assert ledger.loc[PAPER_DECODING + BOOK_DECODING, "verdict"].tolist() == [H] * 9
    # Table 6 times its exits at E >= L/2 against no reuse: exits 1 and 2 of 8 are shallower, so it reads nothing
    assert ledger.loc["ls.tab6.kvq_reuse.scratch", "verdict"] == M
    assert "E >= L/2" in ledger.loc["ls.tab6.kvq_reuse.scratch", "measured"]
    assert judged({"decoding": deep_decoding()}).loc["ls.tab6.kvq_reuse.scratch", "verdict"] == H
    assert "distinct-2 baseline 0.90, LayerSkip 0.90" in ledger.loc["ls.s8.recipe_required.scratch", "measured"]

    table = scratch_decoding()
    table.loc[table.index[table["method"] == "hf_early_exit"][0], "identical_to_greedy"] = False
    exact = judged({"decoding": table}).loc["ls.exact.scratch"]
    assert exact["verdict"] == N and "hf_early_exit E=1 d=2" in exact["evidence"]

    copying = judged({"decoding": scratch_decoding(plain_acceptance={1: 0.9, 2: 0.95})})  # the baseline drafts well
    assert copying.loc[["ls.s8.recipe_required.scratch", "ls.s8.recipe_required.scratch.ours"], "verdict"].tolist() \
        == [N, N]
    assert copying.loc["ls.s8.recipe_required.scratch", "diagnosis"] == "disagrees with the paper"


def test_recipe_claim_failing_on_the_order_of_two_timings_says_what_orders_them_without_a_clock():
    table = scratch_decoding()
    spec = table["method"] == "self_speculative"
    table.loc[spec & (table["recipe"] == "baseline"), "speedup"] = 0.68  # neither gains, the baseline's a hair ahead
    table.loc[spec & (table["recipe"] == "ld_ee"), "speedup"] = 0.67
    row = judged({"decoding": table}).loc["ls.s8.recipe_required.scratch"]
    assert row["verdict"] == N and row["diagnosis"] == "budget"
    assert "the order rests on two timings 1.5% apart" in row["evidence"]
    assert "acceptance LayerSkip 0.70-0.90 vs baseline 0.05-0.05" in row["evidence"]
    assert "predicted speed-up LayerSkip 1.50x vs baseline 1.50x" in row["evidence"]
    assert "paired per-round" not in row["measured"]  # no rounds table: nothing paired to report

    rounds = decode_rounds(scratch_decoding(), [0.1])  # each round's times as the rows' ms/token, drifting together
    paired = judged({"decoding": table, "decoding_rounds": rounds}).loc["ls.s8.recipe_required.scratch"]
    text = ("paired per-round speedup at each model's best (E, d), median [order-statistic interval, coverage 98% at "
            "16 rounds]: baseline 0.88x [0.88, 0.88], LayerSkip 1.92x [1.92, 1.92]")  # E=1 d=2: the first best of each
    assert text in paired["measured"] and paired["verdict"] == H  # the rounds order what one timing each did not

    close = rounds.copy()  # LayerSkip's best setting (E=1 d=4, 2.53x) at 0.79x in half the rounds: intervals overlap
    best = close["label"] == "self_speculative E=1 d=4 kvq"
    close.loc[(close["recipe"] == "ld_ee") & best & (close["prompt"] % 2 == 0), "seconds"] *= 3.2
    overlap = judged({"decoding": scratch_decoding(), "decoding_rounds": close}).loc["ls.s8.recipe_required.scratch"]
    assert overlap["verdict"] == N and overlap["diagnosis"] == "budget"
    assert "but the rounds do not order it below LayerSkip" in overlap["evidence"]
    assert "and the intervals overlap" in overlap["evidence"]

    noisy = rounds.copy()  # the baseline's best setting (E=1 d=2, 0.88x) at 1.2x in half the rounds: straddles 1.1x
    fast = (noisy["recipe"] == "baseline") & (noisy["label"] == "self_speculative E=1 d=2 kvq")
    noisy.loc[fast & (noisy["prompt"] % 2 == 0), "seconds"] *= 0.88 / 1.2
    straddle = judged({"decoding": scratch_decoding(), "decoding_rounds": noisy}).loc["ls.s8.recipe_required.scratch"]
    assert straddle["verdict"] == N and straddle["diagnosis"] == "budget"
    assert "the baseline's best 0.88x is undecided against 1.1x" in straddle["evidence"]
    few = rounds[rounds["prompt"] < 2]  # 4 rounds: their range holds the median with 87.5 % only, deciding nothing
    undecided = judged({"decoding": table, "decoding_rounds": few}).loc["ls.s8.recipe_required.scratch"]
    assert undecided["verdict"] == "not testable at this scale"
    assert "coverage 88% at 4 rounds]: baseline 0.88x [0.88, 0.88], LayerSkip 1.92x" in undecided["measured"]
    assert "4 round(s) hold the median with 87.5% only: the rounds decide from 5" in undecided["measured"]
    same = judged({"decoding": scratch_decoding(), "decoding_rounds": rounds}).loc["ls.tab3.scratch_speedup.ours"]
    assert "there, the paired per-round speedup 2.53x [2.53, 2.53] (median and order-statistic interval" in \
        same["measured"]


def test_decoding_gate_and_intervals_decide_the_paper_claims():
    looping = judged({"decoding": scratch_decoding(distinct=0.2)})  # the same numbers on a greedy loop
    assert looping.loc[["ls.tab10.acceptance_rises_with_e.scratch", "ls.tab3.scratch_speedup",
                        "ls.tab3.scratch_speedup.ours"], "verdict"].tolist() == [N] * 3
    assert judged({"decoding": deep_decoding(distinct=0.2)}).loc["ls.tab6.kvq_reuse.scratch", "verdict"] == N
    assert "fails the gate (distinct-2 0.20" in looping.loc["ls.tab3.scratch_speedup", "evidence"]
    assert looping.loc["ls.tab10.acceptance_rises_with_e.scratch.ours", "verdict"] == H  # the book's had no gate

    close = judged({"decoding": scratch_decoding(ls_acceptance={1: 0.70, 2: 0.72})})  # +0.02: within the interval
    assert close.loc["ls.tab10.acceptance_rises_with_e.scratch", "verdict"] == N
    assert "include 0" in close.loc["ls.tab10.acceptance_rises_with_e.scratch", "evidence"]
    assert close.loc["ls.tab10.acceptance_rises_with_e.scratch.ours", "verdict"] == H

    small = judged({"decoding": deep_decoding(saving=0.03)})  # kvq faster, but by less than Table 6's 5.45 %
    assert small.loc[["ls.tab6.kvq_reuse.scratch", "ls.tab6.kvq_reuse.scratch.ours"], "verdict"].tolist() == [N, H]
    assert small.loc["ls.tab6.kvq_reuse.scratch", "diagnosis"] == "setup"  # unpaired timings


def decode_rounds(table: pd.DataFrame, savings: list[float], rounds: int = 16) -> pd.DataFrame:
    """A `decoding_rounds` table for `table`: per round r the LD+EE model's kvq decode takes 1 - savings[r % n] of
    each other mode's time in the same round; every round's times also drift, as a shared machine's do."""
    rows = []
    for r in range(rounds):
        drift = 1 + 0.3 * (r % 3)  # a slow spell hits every case of the round alike
        for row in table.itertuples():
            seconds = row.ms_per_token * drift / 1000
            if row.method == "self_speculative" and row.recipe == "ld_ee" and row.reuse != "kvq":
                kvq = table[(table["recipe"] == "ld_ee") & (table["label"] == row.label.replace(row.reuse, "kvq"))]
                seconds = float(kvq["ms_per_token"].iloc[0]) * drift / 1000 / (1 - savings[r % len(savings)])
            rows.append({"recipe": row.recipe, "label": row.label, "prompt": r // 2, "repeat": r % 2,
                         "position": 0, "seconds": seconds, "new_tokens": 64})
    return pd.DataFrame(rows)


def test_cache_reuse_is_judged_on_paired_rounds_with_intervals():
    table = deep_decoding(saving=0.0)  # the rows' medians alone say kvq saves nothing
    paired = judged({"decoding": table, "decoding_rounds": decode_rounds(table, [0.06, 0.07, 0.08, 0.09])})
    row = paired.loc["ls.tab6.kvq_reuse.scratch"]
    assert row["verdict"] == H, row["measured"]
    assert row["measured"].startswith("Table 6's set-up (vs none, E >= L/2): paired saving vs none per (E, d), "
                                      "median % [95 % interval] over 16 rounds: E=2 d=2 7.5 [6.0, 9.0]")
    assert "(2 of 2 >= 5.45 %); beside Table 6's set-up: paired saving vs kv" in row["measured"]
    assert paired.loc["ls.tab6.kvq_reuse.scratch.ours", "verdict"] == H

    below = judged({"decoding": table, "decoding_rounds": decode_rounds(table, [0.01, 0.02, 0.03])})
    assert below.loc["ls.tab6.kvq_reuse.scratch", "verdict"] == N
    # every interval in Table 6's set-up lies below 5.45 %, at its own depth share: reuse saves less on this model
    assert below.loc["ls.tab6.kvq_reuse.scratch", "diagnosis"] == "scale"
    assert "at Table 6's depth (E >= L/2: E=2 d=2 vs none 2.0 %" in below.loc["ls.tab6.kvq_reuse.scratch", "evidence"]
    assert below.loc["ls.tab6.kvq_reuse.scratch.ours", "verdict"] == H  # faster, by less
    # the shallow exits fail alone: they are reported, Table 6's set-up decides
    shallow = decode_rounds(table, [0.06, 0.07, 0.08, 0.09])
    cut = shallow["label"].str.contains("E=1 ") & shallow["label"].str.contains(" none")
    shallow.loc[cut, "seconds"] *= 0.95
    assert judged({"decoding": table, "decoding_rounds": shallow}).loc["ls.tab6.kvq_reuse.scratch", "verdict"] == H
    spec = table[(table["recipe"] == "ld_ee") & (table["method"] == "self_speculative")]
    model = spec[["label"]].assign(predicted_ms=[9.9 if "kvq" in label else 10.0 for label in spec["label"]])
    costed = judged({"decoding": table, "decoding_rounds": decode_rounds(table, [0.01, 0.02, 0.03]),
                     "cost_model_scratch": model})
    evidence = costed.loc["ls.tab6.kvq_reuse.scratch", "evidence"]
    assert ("the cost model (cost_model_scratch: this machine's component times) predicts kvq saves 1.0-1.0 % over "
            "none: kvq and kv run the same layer calls") in evidence

    spread = judged({"decoding": table, "decoding_rounds": decode_rounds(table, [-0.02, 0.0, 0.04, 0.09, 0.12])})
    assert spread.loc["ls.tab6.kvq_reuse.scratch", "verdict"] == N  # median 4 %, its interval reaches 5.45 %
    assert spread.loc["ls.tab6.kvq_reuse.scratch", "diagnosis"] == "budget"
    assert "has an interval that reaches 5.45 %; needs more rounds (16 here)" in spread.loc["ls.tab6.kvq_reuse.scratch",
                                                                                         "evidence"]

    unpaired = judged({"decoding": table})  # a run that predates the rounds: the rows' ratio, said so
    assert unpaired.loc["ls.tab6.kvq_reuse.scratch", "verdict"] == N
    assert "(unpaired: no rounds table)" in unpaired.loc["ls.tab6.kvq_reuse.scratch", "measured"]


PARSE_DECODING = ["ls.tab10.acceptance_rises_with_e.parse", "ls.tab10.acceptance_rises_with_e.parse.ours",
                  "ls.s8.recipe_required.parse", "ls.s8.recipe_required.parse.ours", "ls.tab10.parse_speedup",
                  "ls.tab10.parse_speedup.ours", "ls.tab6.kvq_reuse.parse", "ls.tab6.kvq_reuse.parse.ours",
                  "ls.ours.vs_transformers.parse"]


def test_vocabulary_rows_get_their_own_claim_and_leave_the_papers_alone():
    paper = scratch_decoding()
    narrow = paper[(paper["method"] == "self_speculative") & (paper["recipe"] == "ld_ee") & (paper["reuse"] == "kvq")]
    # faster, but acceptance falling with E: counted in the paper's claims, these rows would flip some of them
    narrow = narrow.assign(draft_vocab=True, ms_per_token=narrow["ms_per_token"] / 3, speedup=narrow["speedup"] * 3,
                           acceptance=1.0 - 0.1 * narrow["exit_layer"], label=narrow["label"] + " vocab")
    both = pd.concat([paper, narrow], ignore_index=True)
    alone, mixed = judged({"decoding_parse": paper}), judged({"decoding_parse": both})
    assert mixed.loc[PARSE_DECODING].equals(alone.loc[PARSE_DECODING])
    assert mixed.loc["ls.ours.task_vocabulary_drafting", "verdict"] == H
    assert alone.loc["ls.ours.task_vocabulary_drafting", "verdict"] == M  # no vocabulary rows: nothing to read
    assert "21 of 21" in alone.loc["ls.exact.parse", "measured"]
    assert "25 of 25" in mixed.loc["ls.exact.parse", "measured"]
    both.loc[both.index[both["draft_vocab"]][0], "identical_to_greedy"] = False
    assert judged({"decoding_parse": both}).loc["ls.ours.task_vocabulary_drafting", "verdict"] == N


# -------------------------------------------------------------------------------------------------------- parsing
def parse_tables(plain: tuple[float, float], layerskip: tuple[float, float]) -> dict[str, pd.DataFrame]:
    def run(recipe, ems):
        return {"recipe": recipe, "exits": [{"exit_layer": e, "em": em, "token_acc": 0.9} for e, em in zip((15, 30),
                                                                                                          ems)]}

    return {"parse_exits": tables.parse_exits([run("baseline", plain), run("ld_ee", layerskip)])}


def test_parse_claims_read_the_middle_and_last_exits():
    ledger = judged(parse_tables((0.0, 0.9), (0.5, 0.88)))
    assert ledger.loc[["ls.fig10b.parse_middle_em.ours", "ls.fig10b.parse_last_em.ours"], "verdict"].tolist() == [H, H]
    assert ledger.loc[["ls.fig10b.parse_middle_em", "ls.fig10b.parse_last_em"], "verdict"].tolist() == [N, H]
    ledger = judged(parse_tables((0.0, 0.9), (0.1, 0.7)))
    assert ledger.loc[["ls.fig10b.parse_middle_em.ours", "ls.fig10b.parse_last_em.ours"], "verdict"].tolist() == [N, N]
    assert "0.100" in ledger.loc["ls.fig10b.parse_middle_em.ours", "measured"]
    assert "0.700" in ledger.loc["ls.fig10b.parse_last_em.ours", "measured"]
    assert judged(parse_tables((0.0, 0.9), (0.85, 0.88))).loc["ls.fig10b.parse_middle_em", "verdict"] == H


def test_parse_pairs_count_utterances_and_pair_the_last_exit_interval():
    from rlib.layerskip.claims.base import paired_diff_ci

    plain = {"15": "0" * 10, "30": "1111111110"}
    layerskip = {"15": "1100000000", "30": "1111111001"}
    results = [{"recipe": "baseline", "item_exact": plain}, {"recipe": "ld_ee", "item_exact": layerskip}]
    pairs = tables.parse_pairs(results)
    assert pairs.to_dict("records") == [
        {"recipe": "ld_ee", "exit_layer": 15, "n": 10, "both": 0, "plain_only": 0, "other_only": 2, "neither": 8},
        {"recipe": "ld_ee", "exit_layer": 30, "n": 10, "both": 7, "plain_only": 2, "other_only": 1, "neither": 0}]
    assert tables.parse_pairs(results[1:]).empty  # no plain run: nothing to pair
    # by hand: d = (1 - 2) / 10 = -0.1; variance ((2 + 1) / 10 - 0.01) / 10 = 0.029
    diff, lo, hi = paired_diff_ci(2, 1, 10)
    assert (diff, hi - diff) == (pytest.approx(-0.1), pytest.approx(1.959964 * 0.029 ** 0.5))
    # the same utterances move together: the paired interval is narrower than the unpaired one of the same rates
    found = parse_tables((0.0, 0.9), (0.1, 0.8))
    unpaired = judged(found).loc["ls.fig10b.parse_last_em", "measured"]
    n = ParseConfig.preset("cpu").test_examples
    def parsed(share: float) -> dict[str, str]:  # the first share of the utterances parsed, the rest not
        return {"30": "1" * round(share * n) + "0" * (n - round(share * n))}

    paired = tables.parse_pairs([{"recipe": "baseline", "item_exact": parsed(0.9)},
                                 {"recipe": "ld_ee", "item_exact": parsed(0.8)}])
    measured = judged({**found, "parse_pairs": paired}).loc["ls.fig10b.parse_last_em", "measured"]
    assert f"paired over the {n} utterances: {n // 10} parsed by plain alone, 0 by LD+EE alone" in measured
    width = {k: float(m.split("[")[1].split(",")[1].split("]")[0]) - float(m.split("[")[1].split(",")[0])
             for k, m in (("paired", measured), ("unpaired", unpaired))}
    assert width["paired"] < width["unpaired"]


def test_parse_last_em_names_the_generated_vs_teacher_forced_gap():
    found = parse_tables((0.0, 0.9), (0.1, 0.8))
    decoding = scratch_decoding()
    decoding["exit_layer"] = decoding["exit_layer"].replace({8: 30})
    decoding["score"] = decoding["recipe"].map({"baseline": 0.7, "ld_ee": 0.3})
    evidence = judged({**found, "decoding_parse": decoding}).loc["ls.fig10b.parse_last_em", "evidence"]
    assert "P(<= 3 of 10 | 0.800)" in evidence and "parse_em_identity" in evidence
    assert "needs: the parsing study trained again" in evidence
    assert "P(<=" not in judged(found).loc["ls.fig10b.parse_last_em", "evidence"]


# -------------------------------------------------------------------------------------------- beyond the paper
def cost_tables(speedups: tuple[float, float], acceptance: float = 0.6) -> dict[str, pd.DataFrame]:
    """decoding_parse, cost_model and decoding_costs of the synthetic costs of tests.test_layerskip_costs: one
    whole-head and one task-vocabulary row at E=2, d=3 with measured speedups `speedups`."""
    counts = {"tokens_per_round": 3 * acceptance + 1, "drafts_per_round": 3.0, "acceptance": acceptance,
              "identical_to_greedy": True}
    decoding = decoding_rows([
        {"method": "autoregressive", "exit_layer": 8, "label": "autoregressive", "ms_per_token": 10.0,
         "identical_to_greedy": True},
        {"method": "self_speculative", "exit_layer": 2, "n_draft": 3, "reuse": "kvq", "speedup": speedups[0],
         "label": "self_speculative E=2 d=3 kvq", "ms_per_token": 10 / speedups[0], **counts},
        {"method": "self_speculative", "exit_layer": 2, "n_draft": 3, "reuse": "kvq", "draft_vocab": True,
         "speedup": speedups[1], "label": "self_speculative E=2 d=3 kvq vocab", "ms_per_token": 10 / speedups[1],
         **counts}])
    decoding["predicted_speedup"] = [float("nan"), 1.5, 1.5]
    predicted = predict(decoding, synthetic_costs(), prompts=4)
    return {"decoding_parse": decoding, "cost_model": tables.cost_table(predicted), "decoding_costs": synthetic_costs()}


PROMPTS4 = ParseConfig.preset("cpu").override(decode_prompts=4)


def test_cost_claims_follow_the_numbers():
    model = tables.cost_table(predict(cost_tables((1.0, 1.0))["decoding_parse"], synthetic_costs(), 4))
    exact = model["cost_model_speedup"].tolist()
    held = judged(cost_tables((exact[1], exact[2])), pcfg=PROMPTS4).loc["ls.ours.cost_model"]
    assert held["verdict"] == H and "1.00 to 1.00" in held["measured"]
    off = judged(cost_tables((exact[1] * 1.3, exact[2])), pcfg=PROMPTS4).loc["ls.ours.cost_model"]
    assert off["verdict"] == N and "1.30" in off["evidence"]
    need = {v: required_acceptance(synthetic_costs(), 2, 3, 1.5, 40, 4, vocab=v) for v in (False, True)}
    between = (need[True] + need[False]) / 2
    assert judged(cost_tables((1.2, 1.5), between), pcfg=PROMPTS4).loc["ls.ours.whole_head_cost", "verdict"] == H
    above = judged(cost_tables((1.6, 1.8), need[False] + 0.01), pcfg=PROMPTS4).loc["ls.ours.whole_head_cost"]
    assert above["verdict"] == N and "at or above the whole head's" in above["evidence"]


def _ablation(ar_off: float, ar_on: float, exact: bool = True) -> pd.DataFrame:
    rows = []
    for fast, ar in ((False, ar_off), (True, ar_on)):
        rows.append({"recipe": "ld_ee", "method": "autoregressive", "label": "autoregressive", "ms_per_token": ar,
                     "speedup": 1.0, "identical_to_greedy": True, "fast_matmul": fast, "score": 0.5})
        rows.append({"recipe": "ld_ee", "method": "self_speculative", "label": "self_speculative E=8 d=3 kvq",
                     "ms_per_token": ar / 1.2, "speedup": 1.2 if not fast else 1.4, "identical_to_greedy": exact,
                     "fast_matmul": fast, "score": 0.5})
    return pd.DataFrame(rows)


@pytest.mark.parametrize(("off", "on", "exact", "verdict"), [(60.0, 50.0, True, H), (50.0, 60.0, True, N),
                                                                (60.0, 50.0, False, N)])
def test_fast_decoding_claim_follows_the_numbers(off, on, exact, verdict):
    row = judged({"decoding_matmul": _ablation(off, on, exact)}).loc["ls.ours.fast_decoding"]
    assert row["verdict"] == verdict
    assert f"{off:.2f} ms/token off vs {on:.2f} on" in row["measured"] and "1.20x off, 1.40x on" in row["measured"]


def figure_table(model: str, wrong: list[int], distinct: list[float], exact: bool = True) -> pd.DataFrame:
    return pd.DataFrame([{"model": model, "prompt": i, "exit_layer": 19, "wrong_tokens": w, "new_tokens": 40,
                          "greedy_distinct_2": d, "passes_gate": d >= 0.5, "self_speculative_equals_greedy": exact}
                         for i, (w, d) in enumerate(zip(wrong, distinct))])


def test_figure_7_and_9_claims_need_five_gate_passing_prompts_with_marked_errors():
    fig7 = "ls.new.fig7_continual_generations"
    good = figure_table("continual ld_ee", [3, 1, 5, 2, 4, 0], [0.9, 0.8, 0.7, 0.9, 0.6, 0.2])  # the loop is excluded
    ledger = judged({"generations_continual": good})
    assert ledger.loc[fig7, "verdict"] == H and "5 of 6 prompts pass the gate" in ledger.loc[fig7, "measured"]
    # a prompt on which the exit makes no error has nothing to fix: reported, and no contradiction of the figure
    one_clean = figure_table("continual ld_ee", [3, 0, 5, 2, 4], [0.9] * 5)
    ledger = judged({"generations_continual": one_clean})
    assert ledger.loc[fig7, "verdict"] == H and "[0.07, 0.00, 0.12, 0.05, 0.10]" in ledger.loc[fig7, "measured"]
    # an exit that never errs on any prompt: the figure's premise fails at this depth
    clean = figure_table("continual ld_ee", [0] * 5, [0.9] * 5)
    ledger = judged({"generations_continual": clean})
    assert ledger.loc[fig7, "verdict"] == N and ledger.loc[fig7, "diagnosis"] == "disagrees with the paper"
    assert "continual ld_ee: 5 of 5" in ledger.loc[fig7, "evidence"]
    few = figure_table("continual ld_ee", [3, 1, 5], [0.9, 0.1, 0.9])
    assert judged({"generations_continual": few}).loc[fig7, "verdict"] == T
    inexact = figure_table("continual ld_ee", [3, 1, 5, 2, 4], [0.9] * 5, exact=False)
    assert judged({"generations_continual": inexact}).loc[fig7, "diagnosis"] == "setup"
    fig9 = "ls.new.fig9_scratch_generations"
    loops = pd.concat([figure_table("scratch baseline", [1] * 8, [0.12] * 8),
                       figure_table("scratch ld_ee", [1] * 8, [0.9] * 8)])
    ledger = judged({"generations_scratch": loops})
    assert ledger.loc[fig9, "verdict"] == T and "0 of 8 prompts pass" in ledger.loc[fig9, "measured"]


def quality_rows(decoding: pd.DataFrame, prompts: int = 12, exit_share: float = 0.03,
                 speculative: list[float] | None = None) -> pd.DataFrame:
    """A `<decoding table>_quality` table for `decoding`'s rows: the baseline scores 0.08-0.12 per prompt, early exit
    `exit_share` of it, the LD+EE model's own output (autoregressive and every self-speculative row) `speculative[p]`
    of it (default 1.1 everywhere)."""
    speculative = speculative or [1.1] * prompts
    rows = []
    for row in decoding.itertuples():
        for p in range(prompts):
            base = 0.08 + 0.04 * p / max(1, prompts - 1)
            share = (exit_share if row.method == "early_exit" else 1.0 if row.recipe == "baseline"
                     else speculative[p])
            rows.append({"recipe": row.recipe, "label": row.label, "method": row.method,
                         "exit_layer": row.exit_layer, "n_draft": row.n_draft, "prompt": p, "new_tokens": 40,
                         "rouge2": base * share})
    return pd.DataFrame(rows)


def test_generation_quality_claims_need_each_interval_wholly_on_its_side():
    decoding = scratch_decoding()  # 8 layers, exits 1 and 2: both at or under 0.375 L
    quality = "ls.tab3.generation_quality.scratch", "ls.new.tab2_generation_quality"
    found = {"decoding": decoding, "decoding_quality": quality_rows(decoding),
             "decoding_continual": decoding.assign(study="continual"),
             "decoding_continual_quality": quality_rows(decoding)}
    ledger = judged(found)
    assert ledger.loc[list(quality), "verdict"].tolist() == [H, H]
    assert "early_exit E=1 0.030 [0.030, 0.030] (at most 0.163)" in ledger.loc[quality[1], "measured"]

    found["decoding_continual_quality"] = quality_rows(decoding, exit_share=0.4)  # early exit keeps too much
    row = judged(found).loc[quality[1]]
    assert row["verdict"] == N and row["diagnosis"] == "scale" and "early_exit E=1 0.400" in row["evidence"]

    wobbly = [0.8, 1.2] * 6  # self-speculation's share straddles 0.987
    found["decoding_continual_quality"] = quality_rows(decoding, speculative=wobbly)
    row = judged(found).loc[quality[1]]
    assert row["verdict"] == N and row["diagnosis"] == "budget"
    assert "across 0.987 on 12 prompts (about" in row["evidence"]

    found["decoding_continual_quality"] = quality_rows(decoding, prompts=3)
    row = judged(found).loc[quality[1]]
    assert row["verdict"] == N and row["diagnosis"] == "budget" and "3 prompts" in row["evidence"]

    no_overlap = quality_rows(decoding).assign(rouge2=0.0)  # no output shares a bigram with its reference
    row = judged({"decoding": decoding, "decoding_quality": no_overlap}).loc[quality[0]]
    assert row["verdict"] == N and row["diagnosis"] == "setup"
    assert "on 0 of 12 prompts (ROUGE-2 0.0000), so no share of it is defined" in row["evidence"]
    # one accidental bigram on one prompt: a share exists but a resample without that prompt has no baseline
    one_bigram = no_overlap.copy()
    one_bigram.loc[(one_bigram["recipe"] == "baseline") & (one_bigram["prompt"] == 0), "rouge2"] = 0.09
    row = judged({"decoding": decoding, "decoding_quality": one_bigram}).loc[quality[0]]
    assert row["verdict"] == N and row["diagnosis"] == "setup"
    assert "on 1 of 12 prompts (ROUGE-2 0.0075), so a share of it has no interval" in row["evidence"]

    plain_loops = scratch_decoding(plain_distinct=0.2)
    row = judged({"decoding": plain_loops, "decoding_quality": quality_rows(plain_loops)}).loc[quality[0]]
    assert row["verdict"] == N and row["diagnosis"] == "setup"
    assert judged({"decoding": decoding}).loc[quality[0], "verdict"] == M  # no quality table


def continual_with_draft_verify(dv_ms: float | None, acceptance: float = 0.7) -> pd.DataFrame:
    """A continual decoding table (LayerSkip's best: 10 ms autoregressive over `decode_table`'s E=1 d=4 rows) with a
    Draft & Verify row of the baseline model at dv_ms per token."""
    table = decode_table({1: 0.7, 2: 0.9}, {1: 0.05, 2: 0.05})
    if dv_ms is None:
        return table
    row = {"recipe": "baseline", "method": "draft_verify", "label": "draft_verify skip 2 attn + 1 mlp d<=8",
           "exit_layer": 8, "n_draft": 8, "reuse": float("nan"), "draft_vocab": False, "new_tokens": 400,
           "distinct_2": 0.9, "ms_per_token": dv_ms, "acceptance": acceptance, "tokens_per_round": 3.0,
           "drafts_per_round": 4.0, "identical_to_greedy": True, "speedup": 10.0 / dv_ms}
    return pd.concat([table, pd.DataFrame([row])], ignore_index=True)


def test_draft_and_verify_claim_reads_layerskip_over_dv_against_table_2s_xsum_ratio():
    layerskip = continual_with_draft_verify(None).query("recipe == 'ld_ee' and method == 'self_speculative' and "
                                                        "reuse == 'kvq'")
    best = 10.0 / float(layerskip["ms_per_token"].min())  # LayerSkip's best speedup over the baseline's 10 ms
    claim = "ls.tab2.vs_draft_and_verify"
    missing = judged({"decoding_continual": continual_with_draft_verify(None)}).loc[claim]
    assert missing["verdict"] == M and "no Draft & Verify row" in missing["measured"]
    # D&V as fast as LayerSkip / 0.95: LayerSkip's ratio 0.95 >= XSUM's 0.905 -> held
    close = judged({"decoding_continual": continual_with_draft_verify(10.0 / (best / 0.95))}).loc[claim]
    assert close["verdict"] == H and "LayerSkip / D&V 0.95" in close["measured"]
    # D&V 1.25x LayerSkip's speedup: ratio 0.80 < 0.905 -> not held, with the acceptances that explain it
    ahead = judged({"decoding_continual": continual_with_draft_verify(10.0 / (best * 1.25))}).loc[claim]
    assert ahead["verdict"] == N and ahead["diagnosis"] == "budget" and "LayerSkip / D&V 0.80" in ahead["measured"]
    assert "Draft & Verify's drafter keeps most of the plain model (0.70 accepted)" in ahead["evidence"]
    wrong = continual_with_draft_verify(1.0)
    wrong.loc[wrong["method"] == "draft_verify", "identical_to_greedy"] = False  # D&V is checked for exactness too
    exact = judged({"decoding_continual": wrong}).loc["ls.exact.continual"]
    assert exact["verdict"] == N and "draft_verify skip 2 attn + 1 mlp d<=8" in exact["evidence"]


def _dv_rounds(table: pd.DataFrame, ratios: list[float]) -> pd.DataFrame:
    """A `decoding_continual_rounds` table: in round r D&V takes ratios[r] x LayerSkip's best setting's time."""
    layerskip = table[(table["recipe"] == "ld_ee") & (table["method"] == "self_speculative")]
    best = layerskip.loc[layerskip["ms_per_token"].idxmin()]
    dv = table[table["method"] == "draft_verify"].iloc[0]
    rows = []
    for r, ratio in enumerate(ratios):
        t = float(best["ms_per_token"]) * 64 / 1000
        rows += [{"recipe": "ld_ee", "label": best["label"], "prompt": r, "repeat": 0, "position": 0, "seconds": t,
                  "new_tokens": 64},
                 {"recipe": "baseline", "label": dv["label"], "prompt": r, "repeat": 0, "position": 1,
                  "seconds": t * ratio, "new_tokens": 64}]
    return pd.DataFrame(rows)


def test_draft_and_verify_is_decided_by_paired_rounds_where_the_run_logged_them():
    claim = "ls.tab2.vs_draft_and_verify"
    table = continual_with_draft_verify(1.0)
    few = judged({"decoding_continual": table, "decoding_continual_rounds": _dv_rounds(table, [1.0, 0.8, 0.95])})
    assert few.loc[claim, "verdict"] == "not testable at this scale"  # 3 rounds: their range holds the median 75 %
    assert "coverage 75% at 3 rounds" in few.loc[claim, "measured"]
    ahead = judged({"decoding_continual": table, "decoding_continual_rounds": _dv_rounds(table, [1.0, 0.98] * 3)})
    assert ahead.loc[claim, "verdict"] == H  # every round at or above 0.905, whatever the rows' one timing says
    behind = judged({"decoding_continual": table, "decoding_continual_rounds": _dv_rounds(table, [0.8, 0.85] * 3)})
    assert behind.loc[claim, "verdict"] == N and behind.loc[claim, "diagnosis"] == "budget"
    noisy = judged({"decoding_continual": table, "decoding_continual_rounds": _dv_rounds(table, [0.8, 1.0] * 3)})
    assert noisy.loc[claim, "verdict"] == "not testable at this scale"
    assert "straddles Table 2's 0.905" in noisy.loc[claim, "evidence"] + noisy.loc[claim, "measured"]


def _memory(extra_kv: float = 0.25) -> pd.DataFrame:
    rows = []
    for exit_layer in (2, 3):
        kv = 1000.0
        for decoder, kv_bytes, extra in (("kvq", kv, 0), ("kv", kv, 0), ("none", kv * (1 + extra_kv), 0),
                                         ("two-model", kv * (1 + extra_kv), 5000)):
            rows.append({"exit_layer": exit_layer, "n_draft": 2, "decoder": decoder, "weight_bytes": 10000,
                         "extra_weight_bytes": extra, "kv_bytes": kv_bytes, "exit_query_bytes": 8 if decoder == "kvq"
                         else 0})
    table = pd.DataFrame(rows)
    table["total_bytes"] = table[["weight_bytes", "extra_weight_bytes", "kv_bytes", "exit_query_bytes"]].sum(axis=1)
    return table


def test_the_memory_claim_reads_every_decoders_bytes_against_kvqs():
    claim = "ls.abstract.single_model_memory"
    held = judged({"decoding_memory": _memory()}).loc[claim]
    assert held["verdict"] == H and "none 1.022-1.022x; two-model 1.476-1.476x" in held["measured"]
    same = judged({"decoding_memory": _memory(extra_kv=0.0)}).loc[claim]  # a second cache that holds nothing
    assert same["verdict"] == N and same["diagnosis"] == "setup"
    assert judged({}).loc[claim, "verdict"] == M


def test_generation_must_drop_from_a_last_exit_that_scores():
    """Sec. 6.1: classification keeps decent accuracy at the middle exit while generation 'drops drastically' - from a
    last exit that scores (95 % lower bound above 5 %), not from nothing."""
    found = load_tables(FIGURES)
    tasks = found["pretrained_tasks"].copy()
    middle, last = 15, 30  # the pretrained SmolLM2's middle and last exits in the committed run
    source = (tasks["study"] == "continual") & (tasks["recipe"] == "source")
    at = lambda task, layer: source & (tasks["task"] == task) & (tasks["exit_layer"] == layer)  # noqa: E731
    assert at("book_nextline", middle).sum() == 1 and at("book_cloze", last).sum() == 1
    tasks.loc[at("book_nextline", middle), "value"] = 0.6  # a multiple-choice task kept well above chance
    kept = judged({**found, "pretrained_tasks": tasks}).loc["ls.tab1.classification_vs_generation"]
    assert kept["verdict"] == H and "book_cloze 34.0 -> 0.0" in kept["measured"]
    tasks.loc[at("book_cloze", last), "value"] = 0.02  # generation never scored: nothing drops
    assert judged({**found, "pretrained_tasks": tasks}).loc["ls.tab1.classification_vs_generation", "verdict"] == N


def test_exponential_time_curriculum_claim_reads_the_last_exit():
    """Sec. 4.1.1: from scratch, S_exp 'lead to best accuracies' against S(t) = 1 (the recipe 'ld_tconst')."""
    runs = [record("baseline", 0, 6.0, 3.0), record("ld", 0, 5.5, 3.0), record("ld", 1, 5.5, 3.02)]
    found = judged(scratch_tables(runs + [record("ld_tconst", 0, 5.6, 3.1)]), SCRATCH)
    row = found.loc["ls.s411.exp_time_curriculum_from_scratch"]
    assert row["verdict"] == H and "gap +0.0900 nats" in row["measured"]
    flipped = judged(scratch_tables(runs + [record("ld_tconst", 0, 5.6, 2.95)]), SCRATCH)
    row = flipped.loc["ls.s411.exp_time_curriculum_from_scratch"]
    assert row["verdict"] == N and row["diagnosis"] == "budget" and "opposite sign" in row["evidence"]
    assert judged(scratch_tables(runs), SCRATCH).loc["ls.s411.exp_time_curriculum_from_scratch", "verdict"] == M


def test_the_s_equals_one_recipe_keeps_its_dropout_flat_over_training():
    """'ld_tconst' overrides the profile's S_exp with S(t) = 1: the last layer drops at p_max from the first step,
    where S_exp starts at 0 and reaches p_max at the end."""
    from rlib.layerskip.config import RECIPES
    from rlib.layerskip.training import with_recipe
    from tests.test_looping import tiny_model

    last = {}
    for recipe in ("ld", "ld_tconst"):
        model, _ = with_recipe(tiny_model(4), *RECIPES[recipe], p_max=0.2, e_scale=0.0, curriculum="rotational",
                               rotation=None, time_schedule="exp", total_steps=100, accumulation_steps=1, seed=0)
        last[recipe] = (model.rates(0)[-1], model.rates(99)[-1])
    assert last["ld_tconst"] == pytest.approx((0.2, 0.2))
    assert last["ld"][0] == pytest.approx(0.0) and last["ld"][1] == pytest.approx(0.2, rel=0.05)


# ------------------------------------------------------------------------------------------ audited diagnoses
CPU_LONG = Path(__file__).resolve().parents[1] / "figures" / "cpu-long" / "05_layerskip"


def test_fig8_one_seed_has_no_seed_sd_to_clear():
    """One seed per recipe leaves the middle-exit gap's seed s.d. unknown: never read as 0, so never held."""
    one_seed = [r for r in results() if r["seed"] == 0]
    found = scratch_tables(one_seed)
    exits = found["exits"].copy()
    exits.loc[(exits["recipe"] == "ld_ee") & (exits["exit_layer"] == 2), "top1_acc"] = 0.25  # better at every exit
    row = judged({**found, "exits": exits}, SCRATCH).loc["ls.fig8.scratch_early_exits_better"]
    assert row["verdict"] == N and row["diagnosis"] == "budget"
    assert "vs seed s.d. unknown (1 seed(s) of LD+EE, 1 of the baseline)" in row["measured"]
    assert "no seed s.d. says" in row["evidence"] and "needs: more seeds" in row["evidence"]
    two_seeds = scratch_tables(results())  # the same exits with 2 seeds each: the gap clears their s.d.
    exits = two_seeds["exits"].copy()
    exits.loc[(exits["recipe"] == "ld_ee") & (exits["exit_layer"] == 2), "top1_acc"] = 0.25
    assert judged({**two_seeds, "exits": exits}, SCRATCH).loc["ls.fig8.scratch_early_exits_better", "verdict"] == H


def _ee_all_last(last_nll: float, top1: float) -> list[dict]:
    """results() with EE all's last exit at `last_nll` nats and `top1` top-1 (the baseline's last-exit s.d. 0.014)."""
    ee_all = record("ee_all", 0, 4.0, last_nll, step_seconds=0.2)
    ee_all["exits"]["top1_acc"] = [0.1, 0.2, 0.3, top1]
    return [r for r in results() if r["recipe"] != "ee_all"] + [ee_all]


def test_all_layers_reversed_beyond_the_seed_sd_disagrees_with_the_paper():
    claim = "ls.s412.all_layers_hurts_last"
    beyond = judged(scratch_tables(_ee_all_last(2.90, 0.45)), SCRATCH).loc[claim]  # 0.11 nats better than both
    assert beyond["verdict"] == N and beyond["diagnosis"] == "disagrees with the paper"
    assert "baseline (2 seed(s)): NLL -0.110 nats, top-1 0.4500 vs 0.4000" in beyond["evidence"]
    assert "beyond the largest last-exit seed s.d. of the recipes run with seeds (0.014 nats" in beyond["evidence"]
    within = judged(scratch_tables(_ee_all_last(3.005, 0.45)), SCRATCH).loc[claim]  # better, but within the s.d.
    assert within["verdict"] == N and within["diagnosis"] == "budget" and "needs: >= 3 seeds" in within["evidence"]


def _timed(base: tuple[float, float], ee: float, ld_ee: tuple[float, float] = (0.114, 0.115),
           ee_all: float = 0.21) -> dict[str, pd.DataFrame]:
    runs = [record("baseline", s, 6.0, 3.0, step_seconds=t) for s, t in enumerate(base)]
    runs += [record("ld_ee", s, 4.0, 3.03, step_seconds=t) for s, t in enumerate(ld_ee)]
    runs += [record("ee", 0, 4.2, 3.01, step_seconds=ee), record("ee_all", 0, 4.0, 3.1, step_seconds=ee_all)]
    return scratch_tables(runs)


def test_large_r_overhead_is_diagnosed_from_the_seeds_it_was_measured_over():
    claim = "ls.concl.large_r_minimal_overhead"
    scale = judged(_timed((0.100, 0.102), 0.114), SCRATCH).loc[claim]  # +12.9 %, far beyond a 0.001 s s.d.
    assert scale["verdict"] == N and scale["diagnosis"] == "scale"
    assert "measured, not one timing: EE 0.114 s/step (1 seed(s)) vs baseline 0.101 (2 seed(s))" in scale["evidence"]
    assert "LD+EE, under the same curriculum, +13.4% over 2 seeds (by seed +12.7% to +14.0%)" in scale["evidence"]
    assert "one early exit's loss at about 36.0% of a baseline step" in scale["evidence"]
    assert "for any R to bring the overhead within 5%" in scale["evidence"]
    noisy = judged(_timed((0.100, 0.120), 0.120), SCRATCH).loc[claim]  # +9.1 %, 0.005 s over the bound, s.d. 0.014
    assert noisy["verdict"] == N and noisy["diagnosis"] == "budget" and "within one seed s.d." in noisy["evidence"]
    single = judged(_timed((0.100,), 0.114, ld_ee=(0.114,)), SCRATCH).loc[claim]  # no seed spread at all
    assert single["diagnosis"] == "setup" and "from one timing per run" in single["evidence"]


def test_parse_speedup_capped_by_the_measured_cost_model_is_scale():
    """Table 10's speedups: the committed cpu-long cost model gives less than Table 10 even at Table 10's own
    acceptance, so the shortfall is the model's size (scale), not its drafts' acceptance alone (budget)."""
    committed = load_tables(CPU_LONG)
    found = {name: committed[name] for name in ("decoding_parse", "decoding_costs")}
    long = ParseConfig.preset("cpu-long")
    row = judged(found, pcfg=long).loc["ls.tab10.parse_speedup"]
    assert row["verdict"] == N and row["diagnosis"] == "scale"
    assert "E=8 1.64x at 0.76 (Table 10 1.90x), E=15 1.55x at 0.97 (Table 10 1.59x)" in row["evidence"]
    assert "E=8 d=3 1.792x (the measured best), E=8 d=7 2.058x" in row["evidence"]
    assert "its whole head 3.65 layers on one token" in row["evidence"]
    cheap = found["decoding_costs"].copy()  # a head, round and prefill 100x cheaper: Table 10 within reach
    cheap.loc[cheap["component"].isin(["head", "round overhead", "prefill"]), "ms"] *= 0.01
    row = judged({**found, "decoding_costs": cheap}, pcfg=long).loc["ls.tab10.parse_speedup"]
    assert row["verdict"] == N and row["diagnosis"] == "budget" and row["evidence"].startswith("acceptance 0.48-0.84")
    same_model = judged(found, pcfg=long).loc["ls.tab10.parse_speedup.ours"]  # the book's 1.5x is within the cap
    assert same_model["diagnosis"] == "budget"


def test_code_quality_without_a_scoring_baseline_is_not_testable():
    """Table 4 against HumanEval's solutions (the paper's references): a baseline that shares no bigram with them
    leaves no share to judge, not a failed claim."""
    decoding = scratch_decoding().assign(study="code")
    no_overlap = quality_rows(decoding).assign(rouge2=0.0)
    claim = "ls.tab4.generation_quality.code"
    row = judged({"decoding_code": decoding, "decoding_code_quality": no_overlap}).loc[claim]
    assert row["verdict"] == T and row["diagnosis"] == ""
    assert "HumanEval canonical solution on 0 of 12 prompts (ROUGE-2 0.0000), so no share of it is defined" in \
        row["measured"]
    assert "needs: more prompts and tokens" in row["measured"]
    scored = judged({"decoding_code": decoding, "decoding_code_quality": quality_rows(decoding)})
    assert scored.loc[claim, "verdict"] == H  # a scoring baseline is judged as before
