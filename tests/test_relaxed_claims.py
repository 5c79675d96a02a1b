"""Chapter 02's claims ledger (rlib.relaxed.claims): the committed cpu tables give the catalogued verdicts, every
"not held" carries its diagnosis, and moving one number across a threshold flips the verdict."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rlib.book.claims import check_ledger, load_tables
from rlib.relaxed.claims import SPECS, judge
from rlib.relaxed.config import RelaxedConfig
from tests.claims_checks import FIGURES, check_partial_runs, check_specs, committed_ledger

# the verdicts of the committed cpu run (figures/02_relaxed_recursion), claim by claim; the studies the cpu profile
# leaves to cpu-long (issue 27's hour) are "not measured" here and judged in figures/cpu-long/02_relaxed_recursion
CPU_VERDICTS = {
    # the paper's sentence as posed (Eq. 4's init at full rank, tied norms: 1.1e4-3.0e5 against 97.25) since
    # 2026-12-07; the book's norm-folded full-rank LoRA (step0_folded) is the .ours entry
    "rrt.eq5.full_rank_equals_source": "not held",
    "rrt.eq5.full_rank_equals_source.ours": "held",
    "rrt.appG.svd_error_falls_with_rank": "held",
    "rrt.ours.step0_ppl_monotone": "not held",
    # the single-seed directional claims hold only beyond a measured seed s.d. (since 2026-12-07): the cpu profile
    # measures none (cpu-long's module_ranks and post_seeds do), so "needs: seeds"
    "rrt.fig6b.avg_lower_gain_from_relaxation": "not held",
    "rrt.s3_5.stepwise_may_degrade": "held",
    "rrt.fig6c.svd_beats_zero_avg_lower": "not measured",  # cpu-long's since 2026-12-02 (issue 23's hour)
    "rrt.s3_5.svd_converges_faster": "not measured",  # cpu-long's init_curves (new 2026-12-06)
    "rrt.figG2.stepwise_zero_ge_svd": "not measured",  # cpu-long\'s
    "rrt.fig7a.avg_lower_improve_with_rank": "held",
    "rrt.figG3.stepwise_u_shape": "not measured",
    "rrt.s3_5.relaxed_avg_beats_recursive_step": "not held",
    "rrt.fig6.average_best_with_lora": "not held",
    "rrt.figG1.training_loss_relaxed_vs_recursive": "not measured",
    "rrt.tabG1.per_module_rank": "not measured",
    "rrt.tabH1.prefix_relaxation_weak": "not measured",  # cpu-long\'s
    "rrt.tabI1.kd_helps_relaxed": "not measured",  # cpu-long's since 2026-12-02 (issue 23's hour)
    "rrt.tabI1.longer_uptraining_helps": "not measured",  # cpu-long\'s
    "rrt.tabI1.longer_uptraining_helps.ours": "not measured",
    "rrt.fig7b.kd_and_longer_combined": "not measured",
    "rrt.fig4.relaxed_interpolates_to_full": "not held",  # full_reference: chapter 01's full model, since 2026-11-28
    "rrt.tab3.agg_keeps_final_loop": "not held",  # +0.082 / +0.126 vs before (Table 3's Delta) at tolerance 0.023
    "rrt.tab3.agg_keeps_final_loop.ours": "not held",
    "rrt.tab3.loop1_lifted_small_gap": "held",
    "rrt.tabJ1.weighted_overemphasizes_loop1": "not held",  # +0.026 / -0.051, one seed, no seed s.d. (2026-12-07)
    # loop 1 -0.012 (paper -0.031), one seed with no seed s.d. in the cpu profile (cpu-long's is 0.040): not held,
    # budget, since 2026-12-07 (held before; +0.013 on 2026-12-05)
    "rrt.tabJ1.self_kd_lifts_loop1": "not held",
    "rrt.tabJ1.self_kd_lifts_loop1.ours": "not held",  # final +0.029 against the book's 0.023 bound
    "rrt.appJ.overlapped_matches_new": "not measured",  # cpu-long's post_seeds study, since 2026-12-05
    "rrt.tabJ1.coefficient_sweep": "not measured",  # cpu-long\'s
    "rrt.tabJ1.freeze_head_lora": "not measured",
    "rrt.tabJ1.post_beats_co_training": "not measured",  # cpu-long\'s
    "rrt.tabJ2.relaxed_loop1_worse": "held",
    "rrt.tabJ2.kd_limits_final_drop": "not held",  # relaxed final +0.087 with KD (one seed; new 2026-12-06)
    "rrt.tabJ3.second_architecture": "not measured",
    "rrt.fig8.recursive_cdb_beats_vanilla_and_csb": "held",
    "rrt.s3_8.speedup_2_3x": "not held",  # Δ_V 4.65, above the paper's "up to 2-3x" (batch 25 vs vanilla 8)
    "rrt.s3_8.speedup_2_3x.ours": "held",
    "rrt.tabK2.relaxed_cdb_beats_vanilla": "held",
    "rrt.fig8.relaxed_cdb_beats_csb": "held",  # Δ_Seq 1.29 (new 2026-12-06)
    "rrt.tabK1_K2.lora_cost_and_rank_tradeoff": "not measured",  # cpu-long\'s
    # short - long +0.220, 98.4 % interval [+0.078, +0.300] on 2026-12-07 (the run before: +0.202 [-0.070, +0.393])
    "rrt.tabK3_K4.memory_cap_short_context": "held",
    "rrt.fig3.cdb_without_exit_scheduling": "held",
    "rrt.appK.static_memory_beats_vanilla": "held",  # new 2026-12-05: static batch 25 vs 8, 1.73x
    "rrt.s3_8.recursive_gemma_4x_vanilla_pythia": "not testable at this scale",
    "rrt.ours.engine_cdb_exit_measured": "held",
    "rrt.ours.cdb_speedup_equal_memory": "held",
    "rrt.ours.cheap_exit_rule": "held",
    "rrt.ours.oracle_exit_distribution": "not held",
    "rrt.ours.paper_closed_form_check": "held",
    "rrt.ours.simulation_matches_engine": "not held",
    "rrt.fig6.relaxation_improves_with_rank.ours": "not held",
}


def test_committed_cpu_tables_give_the_catalogued_verdicts():
    by_id = committed_ledger(judge, RelaxedConfig.preset("cpu"), "02_relaxed_recursion", CPU_VERDICTS)
    # diagnoses carry this run's numbers: the pass-cost ratio and the exit-test cost are computed from the tables
    # 3.83x on the evening of 2026-12-06 on the 2-core AMX Xeon; 3.86x that morning on the AVX512-BF16 EPYC,
    # slower that day and timed in interleaved rounds (3.48x there on
    # 2026-12-05, 2.94x on 2026-12-02's slower AMX host, 3.19x on the morning's faster one), 64 requests
    # (3.13x on the AVX512-BF16 EPYC with 96, 2.49x on 2026-11-28's slower Xeon, 2.85x on 2026-11-27's faster host)
    equal_memory = by_id.loc["rrt.ours.cdb_speedup_equal_memory", "measured"]
    assert "3.58x" in equal_memory  # 2026-12-07 night at bef91da, the AVX512-BF16 EPYC (3.11x at 57ad0ac that
    # day on the AMX Xeon, 3.30x and 3.64x earlier)
    # the engine decoded the recursive model's own greedy text, more repetitive than the corpus's paragraphs
    assert "distinct-2 0.41 (the corpus's own paragraphs 0.99)" in equal_memory  # 0.34 on the AMX Xeon
    assert "0.4% of step time (softmax 12.3%)" in by_id.loc["rrt.ours.cheap_exit_rule", "measured"]  # 0.6 / 20.4
    # on the AMX Xeon
    assert "recursive 25" in by_id.loc["rrt.tabK3_K4.memory_cap_short_context", "measured"]
    assert "7 interleaved rounds" in by_id.loc["rrt.tabK3_K4.memory_cap_short_context", "measured"]  # +0.109 [-0.087,
    # App. K's oracle read on the corpus's own paragraphs (1.185 on 2026-12-07 night on the AVX512-BF16 EPYC; 1.139 on
    # the evening of 2026-12-06 on the AMX Xeon, 1.185 before)
    assert "recursive 1.185" in by_id.loc["rrt.ours.oracle_exit_distribution", "measured"]
    assert by_id.loc["rrt.eq5.full_rank_equals_source", "diagnosis"] == "disagrees with the paper"
    # one seed and no seed s.d. in this profile: the directional single-seed claims say where the noise is measured
    for claim in ("rrt.fig6b.avg_lower_gain_from_relaxation", "rrt.tabJ1.weighted_overemphasizes_loop1"):
        assert by_id.loc[claim, "diagnosis"] == "budget", claim
        assert "not measured in this profile (cpu-long's" in by_id.loc[claim, "evidence"], claim
        assert by_id.loc[claim, "evidence"].endswith("needs: seeds"), claim


def test_specs_are_unique_and_placed_and_nothing_is_judged_without_tables():
    check_specs(SPECS, judge, RelaxedConfig.preset("cpu"), CPU_VERDICTS)
    check_partial_runs(judge, [RelaxedConfig.preset(p) for p in ("cpu", "smoke", "gpu")], "02_relaxed_recursion")


CFG = RelaxedConfig.preset("smoke").override(
    train_corpus="c", eval_corpora=("c",), inits=("stepwise", "average", "lower"), ranks=(8, 16),
    rank_inits=("stepwise", "average"), zero_inits=("average", "lower"), prefix_lengths=(4,), long_factor=2,
    exit_schedules=("none", "weighted", "aggressive", "aggressive_kd"), kd_alpha=1.0, co_training=True)

# after NLL per uptraining run: (init, rank, lora_init, prefix, kd, steps_factor)
RUNS = {("stepwise", 0, "svd", 0, False, 1): 5.0, ("stepwise", 8, "svd", 0, False, 1): 5.2,
        ("stepwise", 16, "svd", 0, False, 1): 5.3,
        ("average", 0, "svd", 0, False, 1): 6.0, ("average", 8, "svd", 0, False, 1): 5.8,
        ("average", 16, "svd", 0, False, 1): 5.6, ("average", 16, "zero", 0, False, 1): 5.9,
        ("average", 0, "svd", 4, False, 1): 6.02,
        ("lower", 0, "svd", 0, False, 1): 5.5, ("lower", 16, "svd", 0, False, 1): 5.4,
        ("lower", 16, "zero", 0, False, 1): 5.45,
        ("average", 16, "svd", 0, True, 1): 5.5, ("average", 16, "svd", 0, False, 2): 5.2,
        ("average", 16, "svd", 0, True, 2): 5.0}


def runs_table(**changes: float) -> pd.DataFrame:
    """A small runs table; `changes` sets one run's NLL by a short name, e.g. stepwise_r8=4.9."""
    names = {"stepwise_r8": ("stepwise", 8, "svd", 0, False, 1), "stepwise_r16": ("stepwise", 16, "svd", 0, False, 1),
             "average_r8": ("average", 8, "svd", 0, False, 1), "average_r16": ("average", 16, "svd", 0, False, 1),
             "average_zero": ("average", 16, "zero", 0, False, 1), "lower_r16": ("lower", 16, "svd", 0, False, 1),
             "prefix": ("average", 0, "svd", 4, False, 1), "kd": ("average", 16, "svd", 0, True, 1),
             "kd_long": ("average", 16, "svd", 0, True, 2)}
    nll = {**RUNS, **{names[k]: v for k, v in changes.items()}}
    return pd.DataFrame([{"init": i, "rank": r, "lora_init": li, "exit": "none", "phase": "uptrain", "kd": kd,
                          "steps_factor": sf, "seed": 0, "prefix": p, "before nll[c]": v + 5, "after nll[c]": v}
                         for (i, r, li, p, kd, sf), v in nll.items()])


def module_ranks_table(sd: float) -> pd.DataFrame:
    """Table G.1's seed study: the relaxed Average r=16 at three seeds, 5.6 -/+ sd (seed s.d. `sd`), and one halved
    group at one seed (no spread)."""
    return pd.DataFrame([{"halved": "", "seed": s, "after nll[c]": 5.6 + sd * d, "delta": 0.0}
                         for s, d in enumerate((-1, 0, 1))] + [{"halved": "ffn", "seed": 0, "after nll[c]": 5.7,
                                                                "delta": 0.1}])


def verdict(tables, claim: str) -> str:
    return judge(tables, CFG, "cpu").finish().set_index("id").loc[claim, "verdict"]


@pytest.mark.parametrize("claim, before, change, after", [
    ("rrt.fig6b.avg_lower_gain_from_relaxation", "held", {"lower_r16": 5.55}, "not held"),
    ("rrt.s3_5.stepwise_may_degrade", "held", {"stepwise_r8": 4.9, "stepwise_r16": 4.8}, "not held"),
    ("rrt.fig6c.svd_beats_zero_avg_lower", "held", {"average_zero": 5.5}, "not held"),
    ("rrt.fig7a.avg_lower_improve_with_rank", "held", {"average_r8": 6.1}, "not held"),
    ("rrt.s3_5.relaxed_avg_beats_recursive_step", "not held", {"average_r16": 4.9}, "held"),
    ("rrt.fig6.average_best_with_lora", "not held", {"average_r16": 4.9}, "held"),
    ("rrt.tabH1.prefix_relaxation_weak", "held", {"prefix": 6.05}, "not held"),
    ("rrt.tabI1.kd_helps_relaxed", "held", {"kd": 5.7}, "not held"),
    ("rrt.fig7b.kd_and_longer_combined", "held", {"kd_long": 5.3}, "not held"),  # combined above longer alone
    ("rrt.fig6.relaxation_improves_with_rank.ours", "not held", {"stepwise_r8": 4.9, "stepwise_r16": 4.8}, "held"),
])
def test_one_relaxation_number_flips_the_verdict(claim, before, change, after):
    tables = {"step0": step0_table(), "module_ranks": module_ranks_table(0.01)}  # seed noise below every gap
    assert verdict({**tables, "runs": runs_table()}, claim) == before
    assert verdict({**tables, "runs": runs_table(**change)}, claim) == after


def _row(tables, claim: str) -> pd.Series:
    ledger = judge(tables, CFG, "cpu").finish()
    assert check_ledger(ledger) == []
    return ledger.set_index("id").loc[claim]


@pytest.mark.parametrize("claim, runs, noisy", [
    # RUNS' single-seed gaps: Average / Lower gain 0.4 / 0.1, SVD leads 0.3 / 0.05, prefix 0.22 above LoRA r8, KD 0.1
    ("rrt.fig6b.avg_lower_gain_from_relaxation", {}, 0.2),
    ("rrt.fig6c.svd_beats_zero_avg_lower", {}, 0.1),
    ("rrt.tabH1.prefix_relaxation_weak", {}, 0.3),
    ("rrt.tabI1.kd_helps_relaxed", {}, 0.2),
])
def test_single_seed_uptraining_claims_hold_only_beyond_the_measured_seed_sd(claim, runs, noisy):
    """A directional claim read from one seed per run holds only where each gap exceeds the uptraining seed s.d. that
    Table G.1's seeded runs measure (module_ranks); inside it, or with no seed study (the cpu profile), not held."""
    tables = {"step0": step0_table(), "runs": runs_table(**runs)}
    quiet = _row({**tables, "module_ranks": module_ranks_table(0.01)}, claim)
    assert quiet["verdict"] == "held" and "the uptraining seed s.d. 0.010 nats" in quiet["measured"]
    loud = _row({**tables, "module_ranks": module_ranks_table(noisy)}, claim)
    assert (loud["verdict"], loud["diagnosis"]) == ("not held", "budget")
    assert f"inside the uptraining seed s.d. {noisy:.3f} nats" in loud["evidence"]
    assert loud["evidence"].endswith("needs: more seeds")
    alone = _row(tables, claim)
    assert (alone["verdict"], alone["diagnosis"]) == ("not held", "budget")
    assert "uptraining's seed noise is not measured in this profile" in alone["evidence"]
    assert alone["evidence"].endswith("needs: seeds")


def test_the_seed_sd_is_pooled_over_table_g1s_seeded_set_ups():
    from rlib.relaxed.claims import _uptrain_noise

    table = pd.concat([module_ranks_table(0.1), module_ranks_table(0.3).query("halved == ''").assign(halved="kv")],
                      ignore_index=True)  # ffn's one seed has no spread and adds nothing
    noise = _uptrain_noise({"module_ranks": table}, CFG)
    assert noise.sd == pytest.approx(math.sqrt((0.1**2 + 0.3**2) / 2))  # two set-ups, 2 degrees of freedom each
    assert "2 set-ups" in noise.phrase and "3 seeds" in noise.phrase
    assert _uptrain_noise({"module_ranks": module_ranks_table(0.1).head(1)}, CFG).sd is None
    assert _uptrain_noise({}, CFG).sd is None


def _u_runs(**stepwise: float) -> dict[str, pd.DataFrame]:
    """runs_table with Stepwise at r0 5.0 and LoRA ranks r4 / r8 / r16 (`stepwise` sets them by 'r4', 'r8', 'r16')."""
    runs = runs_table(stepwise_r8=stepwise.get("r8", 5.2), stepwise_r16=stepwise.get("r16", 5.1))
    extra = runs.query("init == 'stepwise' and rank == 8").assign(rank=4, **{"after nll[c]": stepwise.get("r4", 5.3)})
    return {"step0": step0_table(), "runs": pd.concat([runs, extra], ignore_index=True)}


def test_the_u_shape_needs_a_middle_lora_rank_worse_than_both_ends():
    """§3.5 / App. G: 'a middle-range rank resulted in poor approximation, whereas very low ranks ... yielded better
    performance'. The U is among the LoRA ranks: a curve that falls from its lowest LoRA rank on is no U, even though
    rank 0 lies below it (which the rule read as the U's low end until 2026-12-07)."""
    claim = "rrt.figG3.stepwise_u_shape"
    falling = _u_runs(r4=5.3, r8=5.2, r16=5.1)  # r0 5.0 best, then falling with rank: the old rule's "U"
    row = _row(falling, claim)
    assert row["verdict"] == "not held" and "LoRA ranks r4 5.300, r8 5.200, r16 5.100" in row["measured"]
    assert row["diagnosis"] == "budget" and row["evidence"].endswith("needs: seeds and more steps")
    inside = _row({**falling, "module_ranks": module_ranks_table(0.5)}, claim)
    assert inside["diagnosis"] == "budget" and "span 0.200 nats, inside the uptraining seed s.d. 0.500" in \
        inside["evidence"]
    beyond = _row({**falling, "module_ranks": module_ranks_table(0.01)}, claim)
    assert beyond["diagnosis"] == "disagrees with the paper" and "the lowest one" in beyond["evidence"]
    assert verdict(_u_runs(r4=5.1, r8=5.3, r16=5.2), claim) == "held"  # r8 above both r4 and r16
    assert verdict(_u_runs(r4=5.1, r8=5.3, r16=5.3), claim) == "not held"  # the highest rank does not recover
    # two LoRA ranks have no middle one
    assert verdict({"step0": step0_table(), "runs": runs_table(stepwise_r16=5.1)}, claim) == "not measured"


def _longer_runs(stepwise_2x: float) -> pd.DataFrame:
    """runs_table (average r16 5.6 vs stepwise r0 5.0; average r16 at 2x 5.2) with stepwise r0 at 2x the steps."""
    runs = runs_table()
    return pd.concat([runs, runs.query("init == 'stepwise' and rank == 0").assign(
        steps_factor=2, **{"after nll[c]": stepwise_2x})], ignore_index=True)


def _loss_curves(average_peak: float) -> pd.DataFrame:
    """Training curves of the relaxed Average r16 (at `average_peak` at step 3, a climb where above its first 9.0) and
    of Stepwise r0 (falling)."""
    average = [9.0, 8.5, average_peak, 7.0, 6.0]
    return pd.DataFrame([{"init": i, "rank": r, "step": k + 1, "loss": v}
                         for i, r, losses in (("average", 16, average), ("stepwise", 0, [8.0, 7.0, 6.5, 6.0, 5.5]))
                         for k, v in enumerate(losses)])


def test_relaxed_average_behind_stepwise_is_budget_only_where_the_longer_runs_close_the_gap():
    """The 2x runs of both models decide whether the deficit is budget: the gap must close fast enough that the
    paper's own 4x budget step (Table I.1) would close it; a gap that barely closes is not budget."""
    claim = "rrt.s3_5.relaxed_avg_beats_recursive_step"
    closing = _row({"runs": _longer_runs(4.95)}, claim)  # gap 0.600 -> 0.250: closes 0.350 per doubling
    assert (closing["verdict"], closing["diagnosis"]) == ("not held", "budget")
    assert "a gap of +0.600 / +0.250: 2x the budget closes 0.350 of the 0.600-nat gap (58%)" in closing["evidence"]
    assert "it stands at -0.100 (at the measured rate per doubling)" in closing["evidence"]
    stuck = _row({"runs": _longer_runs(4.7), "loss_curves": _loss_curves(15.0)}, claim)  # 0.600 -> 0.500
    assert (stuck["verdict"], stuck["diagnosis"]) == ("not held", "setup")
    assert "closes 0.100 of the 0.600-nat gap (17%)" in stuck["evidence"]
    assert "it stands at +0.400 (at the measured rate per doubling): not budget" in stuck["evidence"]
    assert "climbs from 9.0 to 15.0 nats at step 3" in stuck["evidence"] and "stepwise r=0's never climbs" in \
        stuck["evidence"]
    assert "needs: the relaxed runs at a lower rate" in stuck["evidence"]  # no sweep of the Average init
    # chapter 01's sweep (lr_sweep) tried the Average init: the need names its own best rate, here above this one
    sweep = pd.DataFrame({"lr": [2e-4, CFG.lr, 3e-3], "val_loss[average]": [7.6, 7.4, 7.3]})
    swept = _row({"runs": _longer_runs(4.7), "loss_curves": _loss_curves(15.0), "lr_sweep": sweep}, claim)
    assert swept["diagnosis"] == "setup" and "the recursive Average's own best rate above this one" in \
        swept["evidence"] and "needs: the relaxed runs at 0.003" in swept["evidence"]
    calm = _row({"runs": _longer_runs(4.7), "loss_curves": _loss_curves(8.0)}, claim)
    assert calm["diagnosis"] == "disagrees with the paper" and "never climbs" in calm["evidence"]
    # without the recursive model's longer run the longer study is missing: budget, as before
    assert _row({"runs": runs_table()}, claim)["diagnosis"] == "budget"



def _rate_table(*rows: tuple[float, float, float, bool]) -> pd.DataFrame:
    """average_rate (rlib.relaxed.average_rate.rate_table) from (multiple, NLL, validation loss, climbs) rows; the
    chapter's own run (multiple 1) first."""
    return pd.DataFrame([{"variant": "average-r16-svd-s0", "lr": CFG.lr * m, "multiple": m, "after nll[c]": nll,
                          "last_val_loss": val, "first_loss": 9.0, "peak_loss": 15.0 if climbs else 9.0,
                          "peak_step": 3 if climbs else 1, "climbs": climbs} for m, nll, val, climbs in rows])


def test_the_average_at_its_own_rate_tells_the_rate_from_the_init():
    """Where the average_rate study trained the relaxed Average at other rates, the gap that the budget does not
    close is judged at the Average's own rate, the one with the lowest *validation* loss: setup (App. E's one rate)
    where it reaches the rival there or still climbs; with the rate and the climb ruled out, budget where the gap's
    measured closing per doubling would close it within the paper's 15B tokens, else a disagreement."""
    claim = "rrt.s3_5.relaxed_avg_beats_recursive_step"
    base = {"runs": _longer_runs(4.7), "loss_curves": _loss_curves(15.0)}  # 0.600-nat gap, not budget (see above)
    own = (1.0, 5.6, 6.0, True)
    cured = _row({**base, "average_rate": _rate_table(own, (3.0, 4.9, 5.5, False))}, claim)
    assert (cured["verdict"], cured["diagnosis"]) == ("not held", "setup")
    assert "at its own rate 0.003 (lowest validation loss) it reaches 4.900 against stepwise r=0's 5.000" in \
        cured["evidence"] and "not the init, is the cause" in cured["evidence"]
    assert "0.001 (the chapter's): NLL 5.600, validation 6.000, training loss climbs to 15.0 at step 3" in \
        cured["evidence"]
    # neither the rate nor the climb: budget where the gap, closing 0.100 nats per doubling (the 2x runs), would close
    # inside the paper's 15B tokens (6 doublings of the 256 tokens here, against 25.8), else a disagreement
    stands = _row({**base, "average_rate": _rate_table(own, (3.0, 5.4, 5.5, False))}, claim)
    assert (stands["verdict"], stands["diagnosis"]) == ("not held", "budget")
    assert "(+0.400; +0.200 of the 0.600-nat gap closed by the rate)" in stands["evidence"]
    assert "and its training loss does not climb there; neither the rate nor the climb explains the gap" in \
        stands["evidence"]
    assert "fitted over the 1 doubling measured (1x -> 2x; closed per doubling: 1x -> 2x +0.100), the gap closes " \
        "+0.100 nats per doubling of the steps" in stands["evidence"]
    assert "closing the fitted +0.600 at 1x within the paper's 15B (26 doublings of our 256 tokens) needs +0.023 per " \
        "doubling: at this rate it closes after 6.0 doublings (64x our tokens), inside the paper's budget" in \
        stands["evidence"] and "needs: every init at 4x-64x the steps" in stands["evidence"]
    assert "short of closing at the paper's 4x" in stands["evidence"]
    widening = _row({"runs": _longer_runs(4.5), "loss_curves": _loss_curves(15.0),
                     "average_rate": _rate_table(own, (3.0, 5.4, 5.5, False))}, claim)  # 2x: the gap 0.6 -> 0.7
    assert widening["diagnosis"] == "disagrees with the paper"
    assert "neither the budget, the rate nor the climb explains the gap; fitted over the 1 doubling measured" in \
        widening["evidence"] and "the gap closes -0.100 nats per doubling" in widening["evidence"] and \
        widening["evidence"].endswith("needs +0.023 per doubling: beyond reach")
    slow = _row({"runs": _longer_runs(4.62), "loss_curves": _loss_curves(15.0),
                 "average_rate": _rate_table(own, (3.0, 5.4, 5.5, False))}, claim)  # 0.020 nats per doubling
    assert slow["diagnosis"] == "disagrees with the paper" and "the gap closes +0.020 nats per doubling" in \
        slow["evidence"] and "needs +0.023 per doubling: beyond reach" in slow["evidence"]
    still = _row({**base, "average_rate": _rate_table(own, (3.0, 5.4, 5.5, True))}, claim)
    assert still["diagnosis"] == "setup" and "still climbs at that rate" in still["evidence"]
    # the rate where it climbs least does no better than its own rate: the climb is not the cause either
    calm = _row({**base, "average_rate": _rate_table((0.2, 5.9, 6.2, False), own, (3.0, 5.7, 6.1, True))}, claim)
    assert calm["diagnosis"] == "budget" and "at its own rate 0.001 (lowest validation loss)" in calm["evidence"]
    assert "at 0.0002 its climb is smallest (+0.00 nats against +6.00 at 0.001) and it reaches 5.900 (+0.900): a " \
        "smaller climb does not close the gap; neither the rate nor the climb explains the gap" in calm["evidence"]
    better = _row({**base, "average_rate": _rate_table((0.2, 5.5, 6.2, False), own, (3.0, 5.7, 6.1, True))}, claim)
    assert better["diagnosis"] == "setup" and "still climbs at that rate" in better["evidence"]
    # the rate is chosen on validation loss: a rate with the lower held-out NLL but a higher validation loss loses
    chosen = _row({**base, "average_rate": _rate_table(own, (3.0, 4.9, 6.5, False), (10.0, 5.4, 5.5, False))},
                  claim)
    assert "at its own rate 0.01 (lowest validation loss)" in chosen["evidence"]
    assert chosen["diagnosis"] == "budget"
    # the chapter's rate alone (no study row beside it) leaves the climb rule as it was
    assert _row({**base, "average_rate": _rate_table(own)}, claim)["evidence"] == _row(base, claim)["evidence"]


def test_the_averages_other_deficits_weigh_the_longer_runs_of_both_sides():
    """Fig. 6's and Fig. 4's deficits of the relaxed Average are judged as Sec. 3.5's is: budget only where the longer
    runs close the gap by the paper's 4x; a rival without a longer run is held at its 1x NLL (the most the schedule
    could close), and the evidence says so (until 2026-12-07 the Average's 2x gain stood against the 1x deficit)."""
    fig6 = "rrt.fig6.average_best_with_lora"
    bound = _row({"runs": runs_table()}, fig6)  # average r16 5.6 -> 5.2 at 2x; stepwise r16 5.3 has no 2x run
    assert (bound["verdict"], bound["diagnosis"]) == ("not held", "budget")
    assert "stepwise r=16 5.300 / 5.300*" in bound["evidence"] and "(* stepwise r=16 has no run there and is " \
        "held at its 1x NLL: the most the longer schedule could close)" in bound["evidence"]
    assert "closes at most 0.400 of the 0.300-nat gap" in bound["evidence"] and "needs: stepwise r=16 at 2x" in \
        bound["evidence"]
    slow = runs_table()
    slow.loc[(slow["init"] == "average") & (slow["rank"] == 16) & ~slow["kd"] & (slow["steps_factor"] == 2),
             "after nll[c]"] = 5.55  # 2x moves the Average by 0.05 of a 0.3-nat gap
    stuck = _row({"runs": slow, "loss_curves": _loss_curves(15.0)}, fig6)
    assert stuck["diagnosis"] == "setup" and "climbs from 9.0 to 15.0" in stuck["evidence"]
    # Fig. 4: the main rank's gap to the recursive Stepwise model, with both models' 2x runs
    assert _fig4(_longer_runs(4.95))["diagnosis"] == "budget"
    setup = _fig4(_longer_runs(4.7), loss_curves=_loss_curves(15.0))
    assert (setup["verdict"], setup["diagnosis"]) == ("not held", "setup")
    assert "closes 0.100 of the 0.600-nat gap" in setup["evidence"] and "step-0 NLL" in setup["evidence"]


def _budget_table(**nll: float) -> pd.DataFrame:
    """longer_budget (rlib.relaxed.budget_study.budget_table) from `<init>_r<rank>_x<factor>[_s<seed>]=NLL`
    entries."""
    rows = []
    for name, v in nll.items():
        init, rank, factor, *seed = name.split("_")
        rows.append({"init": init, "rank": int(rank[1:]), "steps_factor": int(factor[1:]),
                     "seed": int(seed[0][1:]) if seed else 0, "after nll[c]": v, "last_val_loss": v + 0.1})
    return pd.DataFrame(rows)


def test_the_longer_budget_seeds_give_the_gap_as_a_mean_and_its_noise_where_it_is_read():
    """The study's seeds at 4x (2026-12-07): the gap there is the mean over seeds, and the fit's interval takes the
    seed s.d. measured at 4x for those runs (each a mean of 3) and the 1x seed s.d. elsewhere."""
    claim = "rrt.s3_5.relaxed_avg_beats_recursive_step"
    base = {"runs": _longer_runs(4.7), "loss_curves": _loss_curves(15.0), "module_ranks": module_ranks_table(0.116),
            "average_rate": _rate_table((0.2, 5.9, 6.2, False), (1.0, 5.6, 6.0, True), (3.0, 5.7, 6.1, True))}
    seeded = _budget_table(average_r16_x4=5.1, stepwise_r0_x4=4.5, average_r16_x8=5.0, stepwise_r0_x8=4.4,
                           average_r16_x4_s1=5.0, average_r16_x4_s2=5.2, stepwise_r0_x4_s1=4.45,
                           stepwise_r0_x4_s2=4.55)
    row = _row({**base, "longer_budget": seeded}, claim)  # gaps 0.6 / 0.5 / 0.6 (3 seeds each) / 0.6
    assert row["diagnosis"] == "budget"
    assert ("a gap of +0.600 / +0.500 / +0.600 / +0.600 (4x: the mean of 3 seeds of the Average and 3 of stepwise "
            "r=0)") in row["evidence"]
    assert ("(95 % interval [-0.151, +0.131], the seed s.d. 0.079 nats at 4x (longer_budget: 4 degrees of freedom, "
            "pooled over the models run at several seeds there); elsewhere the uptraining seed s.d. 0.116") in \
        row["evidence"]
    single = _row({**base, "longer_budget": _budget_table(average_r16_x4=5.1, stepwise_r0_x4=4.5, average_r16_x8=5.0,
                                                         stepwise_r0_x8=4.4)}, claim)
    assert "(95 % interval [-0.154, +0.134], the uptraining seed s.d. 0.116" in single["evidence"]
    assert "mean of" not in single["evidence"]
    # Table I.1 reads the mean at 4x too
    longer = _row({**base, "longer_budget": seeded}, "rrt.tabI1.longer_uptraining_helps")
    assert longer["measured"].startswith("recursive stepwise r=0: 5.000 -> 4.500 at 4x steps")


def test_the_longer_budget_study_measures_the_papers_4x_and_extrapolates_from_the_last_doubling():
    """Where the longer_budget study trained the Average and its rival at 4x and 8x the steps (2026-12-07), the gap
    at the paper's own 4x step is read, not extrapolated, and the projection to the paper's 15B tokens starts from
    the last doubling measured; a rival without a run at a factor is held at its last NLL, and the evidence marks
    it. Table I.1's longer-uptraining claim is then judged at the paper's 4x."""
    claim = "rrt.s3_5.relaxed_avg_beats_recursive_step"
    base = {"runs": _longer_runs(4.7), "loss_curves": _loss_curves(15.0)}  # 1x gap 0.600, 2x gap 0.500
    closed = _row({**base, "longer_budget": _budget_table(average_r16_x4=4.4, stepwise_r0_x4=4.5)}, claim)
    assert (closed["verdict"], closed["diagnosis"]) == ("not held", "budget")
    assert "at 1x / 2x / 4x the steps relaxed Average r=16 reaches 5.600 / 5.200 / 4.400 and stepwise r=0 5.000 / " \
        "4.700 / 4.500, a gap of +0.600 / +0.500 / -0.100" in closed["evidence"]
    assert "it stands at -0.100 (measured)" in closed["evidence"] and "needs: more seeds" in closed["evidence"]
    # 4x and 8x measured, the gap still open at 4x and closing slower: not budget by the paper's 4x (setup: climbs)
    slowing = _budget_table(average_r16_x4=4.9, stepwise_r0_x4=4.5, average_r16_x8=4.65, stepwise_r0_x8=4.3)
    open_ = _row({**base, "longer_budget": slowing}, claim)
    assert open_["diagnosis"] == "setup" and "it stands at +0.400 (measured): not budget" in open_["evidence"]
    # with the rate and the climb ruled out, the gap's line is fitted over every doubling (0.085 nats each), and at
    # that rate it closes in 6.9 doublings, inside the paper's 26
    own = (1.0, 5.6, 6.0, True)
    rates = _rate_table((0.2, 5.9, 6.2, False), own, (3.0, 5.7, 6.1, True))
    projected = _row({**base, "longer_budget": slowing, "average_rate": rates}, claim)
    assert projected["diagnosis"] == "budget"
    assert "fitted over the 3 doublings measured (1x -> 8x; closed per doubling: 1x -> 2x +0.100, 2x -> 4x +0.100, " \
        "4x -> 8x +0.050), the gap closes +0.085 nats per doubling" in projected["evidence"]
    assert "at this rate it closes after 6.9 doublings (123x our tokens)" in projected["evidence"] and \
        "needs: every init at 16x-128x the steps" in projected["evidence"]
    # a gap that stops closing: the fitted rate falls short of the paper's budget; whether that is a disagreement
    # turns on the seed noise of the runs (Table G.1's seed study): inside it the runs cannot tell
    flat = _budget_table(average_r16_x4=5.1, stepwise_r0_x4=4.5, average_r16_x8=5.0, stepwise_r0_x8=4.4)
    noisy = _row({**base, "longer_budget": flat, "average_rate": rates, "module_ranks": module_ranks_table(0.116)},
                 claim)  # gaps 0.6 / 0.5 / 0.6 / 0.6: -0.01 nats per doubling, +/- 0.144
    assert noisy["diagnosis"] == "budget" and "the fitted rate falls short, but the interval reaches it: the runs " \
        "cannot tell" in noisy["evidence"] and "(95 % interval [-0.154, +0.134], the uptraining seed s.d. 0.116" \
        in noisy["evidence"] and "needs: every init at 16x the steps, with seeds" in noisy["evidence"]
    quiet = _row({**base, "longer_budget": flat, "average_rate": rates, "module_ranks": module_ranks_table(0.01)},
                 claim)
    assert quiet["diagnosis"] == "disagrees with the paper" and "beyond reach even at the interval's top" in \
        quiet["evidence"]
    # Fig. 6's rival with its own 2x run, held at it beyond: marked, and the need names the factor it lacks
    fig6 = _row({"runs": runs_table(), "longer_budget": _budget_table(stepwise_r16_x2=5.1, average_r16_x4=4.9)},
                "rrt.fig6.average_best_with_lora")
    assert "at 1x / 2x / 4x the steps relaxed Average r=16 reaches 5.600 / 5.200 / 4.900 and stepwise r=16 5.300 " \
        "/ 5.100 / 5.100*" in fig6["evidence"] and "held at its 2x NLL" in fig6["evidence"]
    assert "needs: stepwise r=16 at 4x" in fig6["evidence"] and "4x the budget closes at most 0.500" in fig6["evidence"]
    # Table I.1: judged at the paper's 4x where it ran, the other factors listed
    longer = _row({**base, "longer_budget": slowing}, "rrt.tabI1.longer_uptraining_helps")
    assert longer["measured"].startswith("recursive stepwise r=0: 5.000 -> 4.500 at 4x steps (-0.500")
    assert "; at 2x 4.700, 4x 4.500, 8x 4.300" in longer["measured"]
    ours = _row({**base, "longer_budget": slowing}, "rrt.tabI1.longer_uptraining_helps.ours")  # the relaxed model's
    assert ours["verdict"] == "held" and ours["measured"].startswith("relaxed average r=16: 5.600 -> 4.900 at 4x")


def test_the_gaps_closing_is_fitted_where_the_rival_ran_too():
    """A rival held at its last NLL past its runs credits the longer schedule with the most it could close: fine for
    the bound at the paper's 4x, but the closing rate is fitted over the factors where both ran, where two or more
    are (else over all, the rival held at 1x)."""
    from rlib.relaxed.claims import _Budget

    partly = _Budget({1: 0.8, 2: 0.6, 4: 0.5, 8: 0.3}, (8,), "")
    assert partly.fitted() == [1, 2, 4] and list(partly.closing()) == [(1, 2), (2, 4)]
    assert partly.closing()[(2, 4)] == pytest.approx(0.1)
    never = _Budget({1: 0.8, 2: 0.6, 4: 0.5}, (2, 4), "")
    assert never.fitted() == [1, 2, 4]
    assert partly.at(4) == (0.5, True) and never.at(8) == (pytest.approx(0.4), False)  # past 4x: the last doubling


# (model, phase, exit) -> (NLL loop 1, NLL loop 2)
EXITS = {("recursive", "uptrain", "none"): (7.0, 6.0), ("recursive", "post", "none"): (6.8, 6.02),
         ("recursive", "post", "weighted"): (6.1, 6.05), ("recursive", "post", "aggressive"): (6.2, 6.01),
         ("recursive", "post", "aggressive_kd"): (6.1, 6.015), ("recursive", "co", "aggressive_kd"): (6.3, 6.1),
         ("relaxed r=16", "post", "none"): (9.0, 6.3), ("relaxed r=16", "post", "weighted"): (7.0, 6.5),
         ("relaxed r=16", "post", "aggressive"): (7.2, 6.33), ("relaxed r=16", "post", "aggressive_kd"): (7.0, 6.34)}


# Table J.1's coefficient sweep: recursive, post-trained with aggressive CE at c -> (NLL loop 1, NLL loop 2)
SWEEP = {0.3: (6.1, 6.02), 0.05: (6.4, 6.0), 0.01: (7.0, 5.99)}


def exits_table(**changes: tuple[float, float]) -> pd.DataFrame:
    """A small early_exit table with the sweep rows; `changes` sets one row by '<model>_<phase>_<exit>' (model
    'relaxed' = r=16) or a sweep row by 'sweep_<c>'."""
    nll = dict(EXITS)
    sweep = dict(SWEEP)
    for key, loops in changes.items():
        if key.startswith("sweep_"):
            sweep[float(key.removeprefix("sweep_"))] = loops
            continue
        model, phase, exit = key.split("_", 2)
        nll[("relaxed r=16" if model == "relaxed" else model, phase, exit)] = loops
    rows = [{"model": m, "phase": p, "exit": e, "coef": CFG.exit_coef if e.startswith("aggressive") else None,
             "sweep": False, "nll loop 1": a, "nll loop 2": b} for (m, p, e), (a, b) in nll.items()]
    rows += [{"model": "recursive", "phase": "post", "exit": "aggressive", "coef": c, "sweep": True,
              "nll loop 1": a, "nll loop 2": b} for c, (a, b) in sweep.items()]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("claim, change", [
    ("rrt.tab3.agg_keeps_final_loop", {"recursive_post_aggressive": (6.2, 6.1)}),
    ("rrt.tab3.agg_keeps_final_loop.ours", {"relaxed_post_aggressive": (7.2, 6.4)}),
    ("rrt.tab3.loop1_lifted_small_gap", {"recursive_post_aggressive_kd": (6.2, 6.015)}),
    ("rrt.tabJ1.post_beats_co_training", {"recursive_co_aggressive_kd": (6.3, 5.9)}),
    ("rrt.tabJ2.relaxed_loop1_worse", {"relaxed_post_aggressive_kd": (6.05, 6.0)}),
    ("rrt.tabJ1.coefficient_sweep", {"sweep_0.05": (6.15, 6.0)}),
    ("rrt.tabJ1.coefficient_sweep", {"sweep_0.01": (7.0, 6.3)}),
])
def test_one_exit_number_flips_the_verdict(claim, change):
    assert verdict({"early_exit": exits_table()}, claim) == "held"
    flipped = judge({"early_exit": exits_table(**change)}, CFG, "cpu").finish()
    assert flipped.set_index("id").loc[claim, "verdict"] == "not held"
    assert check_ledger(flipped) == []


# App. J's seed study (rlib.relaxed.post_seeds): per-arm offsets in units of `noise`, a different order per arm so
# that every paired change varies over the five seeds
_ARM_NOISE = {("aggressive", "new"): (1, -1, 0.5, -0.5, 0), ("aggressive_kd", "new"): (-0.5, 0, 1, -1, 0.5),
              ("aggressive", "overlapped"): (0, 0.5, -1, 1, -0.5),
              ("aggressive_kd", "overlapped"): (0.5, 1, 0, -0.5, -1)}


def post_seeds_table(kd_lift: float = -0.05, ovlp_shift: float = 0.0, noise: float = 0.005) -> pd.DataFrame:
    """Five seeds of Agg(c) and Agg(c) + KD on new and overlapped tokens: KD moves loop 1 by `kd_lift`, overlapped
    tokens move both loops by `ovlp_shift`; each seed's batches shift its runs alike (paired away)."""
    rows = []
    for (exit, data), offsets in _ARM_NOISE.items():
        for seed, offset in enumerate(offsets):
            shift = 0.1 * seed + noise * offset + (ovlp_shift if data == "overlapped" else 0.0)
            rows.append({"exit": exit, "data": data, "seed": seed, "coef": CFG.exit_coef, "train_seed": seed,
                         "windows": 64, "seen_in_uptraining": 64 if data == "overlapped" else 0,
                         "nll loop 1": 6.5 + shift + (kd_lift if exit == "aggressive_kd" else 0.0),
                         "nll loop 2": 6.4 + shift})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("claim, table, expected", [
    ("rrt.tabJ1.self_kd_lifts_loop1", post_seeds_table(), "held"),
    ("rrt.tabJ1.self_kd_lifts_loop1", post_seeds_table(kd_lift=0.0), "not held"),  # narrow, reaches 0
    ("rrt.tabJ1.self_kd_lifts_loop1", post_seeds_table(kd_lift=0.0, noise=0.05), "not testable at this scale"),
    ("rrt.appJ.overlapped_matches_new", post_seeds_table(), "held"),
    ("rrt.appJ.overlapped_matches_new", post_seeds_table(ovlp_shift=0.05), "not held"),
    ("rrt.appJ.overlapped_matches_new", post_seeds_table(noise=0.05), "not testable at this scale"),
])
def test_app_j_seed_claims_follow_the_paired_intervals(claim, table, expected):
    ledger = judge({"early_exit": exits_table(), "post_seeds": table}, CFG, "cpu").finish()
    assert ledger.set_index("id").loc[claim, "verdict"] == expected
    assert check_ledger(ledger) == []


def quiet_post_seeds() -> pd.DataFrame:
    """post_seeds_table without its per-seed shift: Agg(c) on new tokens varies by 0.005 x its offsets (s.d. 0.004)."""
    table = post_seeds_table()
    return table.assign(**{col: table[col] - 0.1 * table["seed"] for col in ("nll loop 1", "nll loop 2")})


def test_the_weighted_claim_holds_only_beyond_post_trainings_measured_seed_sd():
    """Table J.1's weighted CE against Agg(c), one seed each (EXITS: final +0.040, loop 1 -0.100): held only where each
    gap exceeds post_seeds' seed s.d. of Agg(c) on new tokens at that loop; not held (budget) inside it or without
    the study."""
    claim = "rrt.tabJ1.weighted_overemphasizes_loop1"
    quiet = _row({"early_exit": exits_table(), "post_seeds": quiet_post_seeds()}, claim)
    assert quiet["verdict"] == "held" and "post_seeds' loop-1 seed s.d. 0.004 nats" in quiet["measured"]
    flipped = _row({"early_exit": exits_table(recursive_post_weighted=(6.3, 6.05)),
                    "post_seeds": quiet_post_seeds()}, claim)
    assert flipped["verdict"] == "not held"  # loop 1 above aggressive's
    loud = _row({"early_exit": exits_table(), "post_seeds": post_seeds_table()}, claim)  # s.d. 0.157 over seeds
    assert (loud["verdict"], loud["diagnosis"]) == ("not held", "budget")
    assert "the recursive final loop's rise 0.040 nats, inside post_seeds' final-loop seed s.d. 0.157" in \
        loud["evidence"]
    assert "its loop-1 drop 0.100 nats, inside post_seeds' loop-1 seed s.d. 0.157" in loud["evidence"]
    alone = _row({"early_exit": exits_table()}, claim)
    assert (alone["verdict"], alone["diagnosis"]) == ("not held", "budget")
    assert alone["evidence"].endswith("(cpu-long's post_seeds study measures it); needs: seeds")


def test_a_significant_overlapped_gap_is_diagnosed_with_how_well_the_parent_fits_the_seen_windows():
    table = post_seeds_table(ovlp_shift=0.05).assign(
        **{"train loss first": lambda t: t["data"].map({"new": 7.2, "overlapped": 6.5}),
           "train loss last": lambda t: t["data"].map({"new": 7.2, "overlapped": 6.8})})
    row = judge({"early_exit": exits_table(), "post_seeds": table}, CFG, "cpu").finish().set_index("id").loc[
        "rrt.appJ.overlapped_matches_new"]
    assert (row["verdict"], row["diagnosis"]) == ("not held", "scale")
    assert "starts 0.700 nats lower on the overlapped windows" in row["evidence"]


def test_the_self_kd_claim_reads_the_seed_study_where_there_is_one():
    """The grid's single pair (exits_table: KD lifts loop 1) holds alone; with the seed study the verdict is the
    study's, whose pairs are on overlapped tokens (Table J.1's set-up), and the single pair is reported beside."""
    # one seed and no seed study: the lift cannot be read against a seed s.d. (since 2026-12-07; held before)
    single = judge({"early_exit": exits_table()}, CFG, "cpu").finish().set_index("id").loc[
        "rrt.tabJ1.self_kd_lifts_loop1"]
    assert (single["verdict"], single["diagnosis"]) == ("not held", "budget") and "needs: seeds" in single["evidence"]
    row = judge({"early_exit": exits_table(), "post_seeds": post_seeds_table(kd_lift=0.0)}, CFG,
                "cpu").finish().set_index("id").loc["rrt.tabJ1.self_kd_lifts_loop1"]
    assert row["verdict"] == "not held" and "5 seeds paired" in row["measured"]
    assert "the grid's one pair (new tokens, seed 0) -0.100" in row["measured"]
    alone = judge({"early_exit": exits_table(), "post_seeds": post_seeds_table()[lambda t: t["seed"] == 0]}, CFG,
                  "cpu").finish().set_index("id")
    assert alone.loc["rrt.tabJ1.self_kd_lifts_loop1", "verdict"] == "not held"  # one seed: no interval, no s.d.
    assert alone.loc["rrt.appJ.overlapped_matches_new", "verdict"] == "not measured"


def test_single_seed_exit_diagnoses_quote_the_measured_post_training_noise():
    claim = "rrt.tabJ1.self_kd_lifts_loop1.ours"
    failing = exits_table(recursive_post_aggressive_kd=(6.1, 6.1))  # the final loop moves +0.09: over the bound
    without = judge({"early_exit": failing}, CFG, "cpu").finish().set_index("id").loc[claim]
    assert without["verdict"] == "not held" and "not measured in this profile" in without["evidence"]
    with_study = judge({"early_exit": failing, "post_seeds": post_seeds_table()}, CFG,
                       "cpu").finish().set_index("id").loc[claim]
    assert "has s.d. 0.157 nats over 5 seeds, of the paired KD change s.d. 0.005" in with_study["evidence"]


def step0_table(**changes: float) -> pd.DataFrame:
    """Source 100; each init falls 1000 -> 500 -> 100.05 over ranks 0, 8, 64 (full) and lands on 100.01 with norm
    deltas; `changes` sets one tied-norm value by '<init>_<rank>'."""
    rows = [{"init": "source", "rank": float("nan"), "norms": None, "ppl": 100.0}]
    for init in CFG.inits:
        for rank, ppl, error in ((0, 1000.0, 1.0), (8, 500.0, 0.4), (64, 100.05, 0.0)):
            rows.append({"init": init, "rank": float(rank), "norms": False, "ppl": changes.get(f"{init}_{rank}", ppl),
                         "svd_rel_error": changes.get(f"error_{init}_{rank}", error)})
        rows.append({"init": init, "rank": 64.0, "norms": True, "ppl": 100.01, "svd_rel_error": 0.0})
    return pd.DataFrame(rows)


def folded_table(**changes: float) -> pd.DataFrame:
    """`step0_folded`: every init's norm-folded full-rank model at 100.02 (source 100); `changes` by init."""
    return pd.DataFrame([{"init": i, "rank": 64, "ppl": changes.get(i, 100.02), "max_logit_gap": 1e-4,
                          "logit_scale": 30.0, "largest_gain_ratio": 12.0} for i in CFG.inits])


def test_step0_claims_follow_the_numbers():
    claim = "rrt.eq5.full_rank_equals_source"  # the paper's sentence: Eq. 4's init at full rank, tied norms
    assert verdict({"step0": step0_table()}, claim) == "held"
    assert verdict({"step0": step0_table()}, "rrt.ours.step0_ppl_monotone") == "held"
    tied = judge({"step0": step0_table(stepwise_64=200.0), "step0_folded": folded_table()}, CFG,
                 "cpu").finish().set_index("id").loc[claim]
    assert (tied["verdict"], tied["diagnosis"]) == ("not held", "disagrees with the paper")
    assert "the sentence holds for the linear maps, not for the model as the paper ties it" in tied["evidence"]
    assert "folded into the maps before the SVD (the .ours entry): stepwise 100.0200" in tied["evidence"]
    no_deltas = judge({"step0": step0_table(stepwise_64=200.0)}, CFG, "cpu").finish().set_index("id").loc[claim]
    assert no_deltas["diagnosis"] == "disagrees with the paper" and ".ours entry" not in no_deltas["evidence"]
    # the book's norm-folded full-rank models (ours), and nothing without them
    ours = "rrt.eq5.full_rank_equals_source.ours"
    assert verdict({"step0": step0_table()}, ours) == "not measured"
    held = judge({"step0": step0_table(stepwise_64=200.0), "step0_folded": folded_table()}, CFG,
                 "cpu").finish().set_index("id").loc[ours]
    assert held["verdict"] == "held" and "average 100.0200" in held["measured"]
    missed = judge({"step0": step0_table(), "step0_folded": folded_table(lower=100.2)}, CFG,
                   "cpu").finish().set_index("id").loc[ours]
    assert missed["verdict"] == "not held" and missed["diagnosis"] == "setup"
    assert "lower 1.0020" in missed["evidence"]
    assert verdict({"step0": step0_table(average_8=2000.0)}, "rrt.ours.step0_ppl_monotone") == "not held"
    assert verdict({"step0": step0_table()}, "rrt.appG.svd_error_falls_with_rank") == "held"
    assert verdict({"step0": step0_table(error_lower_8=1.0)}, "rrt.appG.svd_error_falls_with_rank") == "not held"
    assert verdict({"step0": step0_table(error_stepwise_64=0.01)}, "rrt.appG.svd_error_falls_with_rank") == "not held"


def throughput_tables(**changes: float) -> dict[str, pd.DataFrame]:
    """The throughput study's tables in which every throughput claim holds; `changes` moves one number: a simulated
    tokens/s ('recursive_oracle', 'relaxed16_oracle', 'relaxed8_none'), a relaxed pass time ('relaxed8_ms'), the
    relaxed oracle exit loop ('relaxed_loop'),
    an engine decode tokens/s ('engine_exit', 'engine_static', 'engine_relaxed', 'recursive_static': the recursive
    model's static batching at its capped batch), the recursive model's capped batch
    ('recursive_batch'), the relaxed pass time at short context ('relaxed_short_ms'), the exit decision's share
    ('decision_share'), the classifier's test agreement ('agreement'), the recursive no-exit TTFT ('ttft'), or the paper
    check's closed-form error ('closed_form')."""
    V = "vanilla (source)"
    looped = ("recursive", "relaxed r=8", "relaxed r=16")
    batch = {V: 8, "recursive": int(changes.get("recursive_batch", 20)), "relaxed r=8": 16, "relaxed r=16": 14}
    # the engine's decode tokens/s per (model, exit rule) at the model's capped batch; the simulation runs 5% faster
    engine_tok = {("recursive", "none"): 110.0, ("recursive", "classifier"): 160.0,
                  ("relaxed r=8", "none"): 90.0, ("relaxed r=8", "classifier"): 120.0,
                  ("relaxed r=16", "none"): 86.0, ("relaxed r=16", "classifier"): 112.0}
    sim = {(m, e): 1.05 * v for (m, e), v in engine_tok.items()}
    sim.update({("recursive", "oracle"): 200.0, ("relaxed r=8", "oracle"): 160.0, ("relaxed r=16", "oracle"): 150.0})
    short = {"recursive_oracle": ("recursive", "oracle"), "relaxed16_oracle": ("relaxed r=16", "oracle"),
             "relaxed8_oracle": ("relaxed r=8", "oracle"), "relaxed8_none": ("relaxed r=8", "none")}
    sim.update({short[k]: v for k, v in changes.items() if k in short})
    engine_tok[("recursive", "classifier")] = changes.get("engine_exit", 160.0)
    engine_tok[("relaxed r=16", "none")] = changes.get("engine_relaxed", 86.0)
    loops = {"recursive": 1.2, "relaxed r=16": changes.get("relaxed_loop", 1.35), "relaxed r=8": 1.33}
    simulated = pd.DataFrame(
        [{"model": V, "scheduler": s, "exits": "none", "batch": 8, "tokens_per_s": v, "mean_busy": 8.0,
          "ceiling_tokens_per_s": 120.0} for s, v in (("static", 90.0), ("csb", 1.05 * 105.0))] +
        [{"model": m, "scheduler": "cdb", "exits": e, "batch": batch[m], "tokens_per_s": v, "mean_busy": 8.0,
          "ceiling_tokens_per_s": 1.25 * v, "mean_exit_loop": loops[m] if e != "none" else float("nan")}
         for (m, e), v in sim.items()])
    parts = {"blocks_s": 9.0, "head_s": 0.5, "exit_decision_s": 0.2, "kv_fill_s": 0.3}

    def engine(model, scheduler, rule, b, tok_s, **extra):
        return {"model": model, "scheduler": scheduler, "exit_rule": rule, "batch": b, "decode_tokens_per_s": tok_s,
                "seconds": 11.0, "prefill_s": 1.0, "memory_mib": 500.0, "mean_busy": float(b), "mean_ttft_s": 1.0,
                "passes": 100,
                "exit_share_loop1": 0.0, "exit_share_loop2": 1.0, "exit_decision_share": 0.0, **parts, **extra}

    measured = [engine(V, "static", "none", 8, changes.get("engine_static", 95.0), mean_ttft_s=3.0),
                engine(V, "csb", "none", 8, 105.0),
                engine("recursive", "cdb", "none", 8, 108.0, mean_ttft_s=changes.get("ttft", 1.0)),
                engine("recursive", "cdb", "softmax", batch["recursive"], 120.0, exit_share_loop1=0.3,
                       exit_decision_share=0.3),
                engine("recursive", "static", "none", batch["recursive"], changes.get("recursive_static", 100.0),
                       mean_busy=14.0)]
    for (m, e), v in engine_tok.items():
        extra = {"exit_share_loop1": 0.4, "exit_share_loop2": 0.6,
                 "exit_decision_share": changes.get("decision_share", 0.02)} if e == "classifier" else {}
        measured.append(engine(m, "cdb", e, batch[m], v, **extra))
    measured = pd.DataFrame(measured)
    # ms per pass at batch 8: the relaxed models' LoRA share is smaller at long context (x 1.8 for the others)
    ms = {(V, "short"): 40.0, ("recursive", "short"): 20.0, ("relaxed r=8", "short"): changes.get("relaxed8_ms", 24.0),
          ("relaxed r=16", "short"): changes.get("relaxed_short_ms", 25.0)}
    ms.update({(V, "long"): 72.0, ("recursive", "long"): 36.0, ("relaxed r=8", "long"): 36.0,
               ("relaxed r=16", "long"): 37.5})
    passes = pd.DataFrame([{"model": m, "batch": b, "context": c, "position": 100 if c == "short" else 1000,
                            "ms_per_pass": ms[(m, c)] * (b / 8) ** 0.5}
                           for m in (V, *looped) for b in sorted({1, 8, batch[m]}) for c in ("short", "long")])
    workload = pd.DataFrame([{"requests": 64, "reply_median": 16.0, "reply_p25": 9.0, "reply_p75": 34.0,
                              "reply_max": 224, "budget_mib": 600.0,
                              **{f"max_batch {m}": b for m, b in batch.items()}}])
    rules_table = pd.DataFrame([
        {"model": "recursive", "rule": "classifier", "threshold": 0.7, "target_agreement": 0.9,
         "exit_share_loop1": 0.45, "exit_agreement": changes.get("agreement", 0.89), "nll_cost": 0.05,
         "same_decision_as_softmax": 0.8, "oracle_mean_exit_loop": 1.2},
        {"model": "recursive", "rule": "softmax", "threshold": 0.3, "target_agreement": 0.9,
         "exit_share_loop1": 0.5, "exit_agreement": 0.9, "nll_cost": 0.04, "same_decision_as_softmax": 1.0,
         "oracle_mean_exit_loop": 1.2}])
    check = pd.DataFrame([
        {"family": "A", "blocks": 0, "rank": 0, "batching": "csb", "dataset": d, "relative_error": e,
         "implied_mean_exit_loop": float("nan")} for d, e in (("SlimPajama", changes.get("closed_form", 0.001)),
                                                              ("RedPajama", 0.01))] + [
        {"family": "A", "blocks": 2, "rank": r, "batching": "cdb", "dataset": d, "relative_error": float("nan"),
         "implied_mean_exit_loop": v} for r, d, v in ((0, "SlimPajama", 1.19), (0, "RedPajama", 1.24),
                                                      (64, "SlimPajama", 1.31), (64, "RedPajama", 1.38))])
    return {"throughput_simulated": simulated, "throughput_measured": measured, "paper_throughput_check": check,
            "pass_times": passes, "workload": workload, "exit_rules": rules_table}


@pytest.mark.parametrize("claim, change", [
    ("rrt.fig8.recursive_cdb_beats_vanilla_and_csb", {"recursive_oracle": 105.0}),
    ("rrt.s3_8.speedup_2_3x", {"recursive_oracle": 170.0}),
    ("rrt.tabK2.relaxed_cdb_beats_vanilla", {"relaxed16_oracle": 85.0}),
    ("rrt.fig8.relaxed_cdb_beats_csb", {"relaxed8_oracle": 60.0}),
    ("rrt.tabK1_K2.lora_cost_and_rank_tradeoff", {"relaxed8_ms": 26.0}),
    ("rrt.ours.oracle_exit_distribution", {"relaxed_loop": 1.6}),
    ("rrt.ours.paper_closed_form_check", {"closed_form": 0.05}),
    ("rrt.ours.engine_cdb_exit_measured", {"engine_exit": 109.0}),
    ("rrt.ours.simulation_matches_engine", {"engine_relaxed": 70.0}),
    ("rrt.ours.cdb_speedup_equal_memory", {"engine_static": 120.0}),
    ("rrt.ours.cheap_exit_rule", {"decision_share": 0.2}),
    ("rrt.ours.cheap_exit_rule", {"agreement": 0.8}),
    ("rrt.tabK3_K4.memory_cap_short_context", {"recursive_batch": 8}),
    ("rrt.tabK3_K4.memory_cap_short_context", {"relaxed_short_ms": 19.0}),
    ("rrt.fig3.cdb_without_exit_scheduling", {"ttft": 3.5}),
    ("rrt.appK.static_memory_beats_vanilla", {"recursive_static": 90.0}),
    ("rrt.appK.static_memory_beats_vanilla", {"recursive_batch": 8}),
])
def test_one_throughput_number_flips_the_verdict(claim, change):
    assert verdict(throughput_tables(), claim) == "held"
    flipped = judge(throughput_tables(**change), CFG, "cpu").finish()
    assert flipped.set_index("id").loc[claim, "verdict"] == "not held"
    assert check_ledger(flipped) == []


def test_static_batching_claim_names_the_per_row_pass_cost():
    row = judge(throughput_tables(recursive_static=90.0), CFG, "cpu").finish().set_index("id").loc[
        "rrt.appK.static_memory_beats_vanilla"]
    assert "recursive at batch 20 90.0 decode tok/s, vanilla at batch 8 95.0 (0.95x)" in row["measured"]
    # pass_times here grow as sqrt(batch): 20 ms at batch 8 -> 2.50 ms per row, 31.6 ms at 20 -> 1.58
    assert "from 2.50 to 1.58 ms (1.58x)" in row["evidence"] and "70% of the recursive slots busy" in row["evidence"]
    small = judge(throughput_tables(recursive_batch=8), CFG, "cpu").finish().set_index("id").loc[
        "rrt.appK.static_memory_beats_vanilla"]
    assert "fits no more sequences than the vanilla one (8 vs 8)" in small["evidence"]


def curves_table(**final: float) -> pd.DataFrame:
    """Fig. G.1's curves: each init at rank 0 and 16 (a quarter of step0_table's full rank 64), 48 steps falling to a
    final loss (`final` sets one by '<init>_<rank>'), with step-to-step noise."""
    ends = {"stepwise_0": 5.0, "stepwise_16": 5.1, "average_0": 5.6, "average_16": 4.8, "lower_0": 5.4,
            "lower_16": 5.0, **final}
    rows = []
    for key, end in ends.items():
        init, rank = key.rsplit("_", 1)
        for step in range(1, 49):
            rows.append({"init": init, "rank": int(rank), "step": step, "tokens": 512 * step,
                         "loss": end + 4.0 / step + 0.02 * (-1) ** step, "val_loss": float("nan"),
                         "variant": f"{init}-r{rank}"})
    return pd.DataFrame(rows)


def test_training_loss_claim_follows_the_curves():
    claim = "rrt.figG1.training_loss_relaxed_vs_recursive"
    assert verdict({"step0": step0_table(), "loss_curves": curves_table()}, claim) == "held"
    # the relaxed Average no longer lowest, or Lower gaining less than Stepwise: not held
    assert verdict({"step0": step0_table(), "loss_curves": curves_table(stepwise_0=4.7)}, claim) == "not held"
    assert verdict({"step0": step0_table(), "loss_curves": curves_table(lower_16=5.5)}, claim) == "not held"
    # only ranks below a quarter of full rank: not measured, naming the rank it needs
    low = curves_table().assign(rank=lambda t: t["rank"].replace(16, 8))
    ledger = judge({"step0": step0_table(), "loss_curves": low}, CFG, "cpu").finish().set_index("id")
    assert ledger.loc[claim, "verdict"] == "not measured" and "r >= 16" in ledger.loc[claim, "measured"]


def test_g1_rank_is_the_smallest_common_rank_at_a_quarter_of_full_rank():
    from rlib.relaxed.tables import g1_rank

    curves = pd.DataFrame({"init": ["stepwise"] * 4 + ["average"] * 3, "rank": [0, 64, 144, 576, 0, 144, 576]})
    assert g1_rank(curves, ("stepwise", "average"), 576) == 144
    assert g1_rank(curves[curves["rank"] < 144], ("stepwise", "average"), 576) is None  # average has no rank > 0
    assert g1_rank(curves[curves["rank"] < 576], ("stepwise",), 576) == 144
    assert g1_rank(curves[curves["rank"] < 144], ("stepwise",), 576) == 64  # below a quarter: the largest common


def test_cpu_long_extends_the_cpu_grid_under_the_same_keys():
    from rlib.book.layout import work_root
    from rlib.relaxed.config import variants

    cpu, long = RelaxedConfig.preset("cpu"), RelaxedConfig.preset("cpu-long")
    assert cpu.grid_context() == long.grid_context()  # the runs both define are trained once
    added = [v.name for v in variants(long) if v not in variants(cpu)]
    moved = ["stepwise-r64-zero-s0", "average-p64-s0", "stepwise-r0-x2-s0", "average-r64-svd-x2-s0",
             "average-r64-svd-kd-x2-s0",
             "stepwise-r0-post_aggressive0.3-s0", "stepwise-r0-post_aggressive0.05-s0",
             "stepwise-r0-post_aggressive0.01-s0", "average-r16-svd-post_aggressive_kd-s0",
             "stepwise-r0-co_aggressive_kd-s0",  # the studies the cpu profile leaves to cpu-long (issue 27's hour)
             "average-r64-zero-s0", "lower-r64-zero-s0", "average-r64-svd-kd-s0",  # and issue 23's hour
             "stepwise-r0-post_aggressive-freeze128-s0"]  # Table J.1's Freeze row
    table_g1 = [f"average-r64-svd{f'-half{g}' if g else ''}-s{s}" for g in ("", "q_o", "kv", "ffn", "attn")
                for s in (0, 1, 2)][1:]  # Table G.1, beside the main grid's average-r64-svd-s0
    assert sorted(added) == sorted([f"{i}-r{r}-svd-s0" for i in cpu.inits for r in long.high_ranks] + moved
                                   + table_g1)
    assert all(v in variants(long) for v in variants(cpu))
    assert work_root("cpu-long", "02_x") == work_root("cpu", "02_x")  # where the grids live
    assert work_root("smoke", "02_x") != work_root("cpu", "02_x")


def test_a_profile_without_longer_uptraining_leaves_its_claims_not_measured():
    """The cpu profile leaves longer uptraining to cpu-long: the 1x run must not be read as its own 'longer' row."""
    tables = {"step0": step0_table(), "runs": runs_table()}
    ledger = judge(tables, CFG.override(long_factor=1), "cpu").finish().set_index("id")
    for claim in ("rrt.tabI1.longer_uptraining_helps", "rrt.tabI1.longer_uptraining_helps.ours",
                  "rrt.fig7b.kd_and_longer_combined"):
        assert ledger.loc[claim, "verdict"] == "not measured", claim
        assert "long_factor 1" in ledger.loc[claim, "measured"]
    assert verdict(tables, "rrt.tabI1.longer_uptraining_helps.ours") == "held"  # long_factor 2 reads the 2x row
    # the paper's claim is the recursive Stepwise model's: without its longer run it is not measured, with it judged
    paper = judge(tables, CFG, "cpu").finish().set_index("id").loc["rrt.tabI1.longer_uptraining_helps"]
    assert paper["verdict"] == "not measured" and "recursive Stepwise model (r=0)" in paper["measured"]
    longer = pd.concat([tables["runs"], tables["runs"].query("init == 'stepwise' and rank == 0").assign(
        steps_factor=2, **{"after nll[c]": 4.9})], ignore_index=True)
    assert verdict({**tables, "runs": longer}, "rrt.tabI1.longer_uptraining_helps") == "held"
    longer.loc[longer.index[-1], "after nll[c]"] = 5.1
    assert verdict({**tables, "runs": longer}, "rrt.tabI1.longer_uptraining_helps") == "not held"
    # nor as the budget evidence of a "not held": the diagnosis points at cpu-long's longer runs instead
    evidence = ledger.loc["rrt.s3_5.relaxed_avg_beats_recursive_step", "evidence"]
    if ledger.loc["rrt.s3_5.relaxed_avg_beats_recursive_step", "verdict"] == "not held":
        assert "cpu-long" in evidence and "+0.000" not in evidence


def _fig4(runs: pd.DataFrame, cfg: RelaxedConfig = CFG, **extra: pd.DataFrame) -> pd.Series:
    tables = {"step0": step0_table(), "runs": runs, **extra,
              "full_reference": pd.DataFrame([{"model": "full (uptrained, chapter 01)", "after nll[c]": 4.0}])}
    return judge(tables, cfg, "cpu").finish().set_index("id").loc["rrt.fig4.relaxed_interpolates_to_full"]


def test_fig4_needs_relaxed_average_between_recursive_stepwise_and_full_and_close_after_longer_kd():
    # RUNS: relaxed Average r8 5.8 / r16 5.6 lie above the recursive Stepwise model's 5.0
    above = _fig4(runs_table())
    assert above["verdict"] == "not held" and above["diagnosis"] == "budget" and "step-0 NLL" in above["evidence"]
    assert _fig4(runs_table(average_r8=4.8, average_r16=4.6, kd_long=4.01))["verdict"] == "held"
    far = _fig4(runs_table(average_r8=4.8, average_r16=4.6, kd_long=4.5))  # 0.5 nats from full: above the 0.021
    assert far["verdict"] == "not held" and "+0.500 from the full model" in far["measured"]
    worse = runs_table()
    worse.loc[(worse["init"] == "average") & (worse["rank"] == 16) & (worse["lora_init"] == "svd"),
              "before nll[c]"] = 4.5  # uptraining took the relaxed model from 4.5 to 5.6
    assert _fig4(worse)["diagnosis"] == "setup"
    below_full = _fig4(runs_table(average_r8=4.5, average_r16=3.9))  # r16 under the full model's 4.0
    assert below_full["diagnosis"] == "setup" and "r16 3.900 at or below the full model's 4.000" in \
        below_full["evidence"]
    # without longer uptraining (the cpu profile) a holding "between" leaves the claim unjudged
    short = _fig4(runs_table(average_r8=4.8, average_r16=4.6), CFG.override(long_factor=1))
    assert short["verdict"] == "not measured" and "cpu-long" in short["measured"]


def test_the_freeze_row_is_judged_by_its_share_of_aggs_loop1_lift():
    claim = "rrt.tabJ1.freeze_head_lora"

    def with_freeze(loop1: float) -> pd.Series:
        frozen = {"model": "recursive frozen, head LoRA r=128", "phase": "post", "exit": "aggressive",
                  "coef": CFG.exit_coef, "sweep": False, "nll loop 1": loop1, "nll loop 2": 6.0}
        table = pd.concat([exits_table(), pd.DataFrame([frozen])], ignore_index=True)
        return judge({"early_exit": table}, CFG, "cpu").finish().set_index("id").loc[claim]

    # EXITS: loop 1 is 7.0 before post-training and 6.2 after Agg(0.1): a lift of 0.8
    held = with_freeze(6.9)
    assert held["verdict"] == "held" and "recovers 12%" in held["measured"]
    lifted = with_freeze(6.3)
    assert lifted["verdict"] == "not held" and lifted["diagnosis"] == "disagrees with the paper"
    assert verdict({"early_exit": exits_table()}, claim) == "not measured"
    # the main Agg row is still read from the plain recursive model, not from the frozen one
    assert verdict({"early_exit": exits_table()}, "rrt.tab3.loop1_lifted_small_gap") == "held"


def test_table_g1_needs_ffn_to_cost_the_most_and_weighs_the_gap_against_seeds():
    claim = "rrt.tabG1.per_module_rank"

    def g1(deltas: dict[str, tuple[float, ...]]) -> pd.Series:
        rows = [{"halved": "", "seed": s, "after nll[c]": 5.0, "delta": 0.0} for s in range(3)]
        rows += [{"halved": g, "seed": s, "after nll[c]": 5.0 + d, "delta": d}
                 for g, ds in deltas.items() for s, d in enumerate(ds)]
        return judge({"module_ranks": pd.DataFrame(rows)}, CFG, "cpu").finish().set_index("id").loc[claim]

    # judged seed-paired: FFN's increase minus each other group's, every 95 % t-interval above 0
    held = g1({"ffn": (0.04, 0.05, 0.03), "kv": (0.021, 0.029, 0.012), "q_o": (0.011, 0.019, 0.002)})
    assert held["verdict"] == "held" and held["measured"].startswith("mean NLL increase over seeds: ffn +0.0400")
    assert "seeds [0, 1, 2]" in held["measured"] and "kv +0.019 [+0.016, +0.023]" in held["measured"]
    # FFN ahead on the means, but one seed reverses it: the interval reaches 0 and is wider than the paper's lead
    noisy = g1({"ffn": (0.04, 0.05, 0.03), "kv": (0.02, 0.01, 0.02), "q_o": (0.01, 0.0, 0.02)})
    assert noisy["verdict"] == "not testable at this scale"
    behind = g1({"ffn": (0.01, 0.0, 0.02), "kv": (0.041, 0.029, 0.052)})
    assert behind["verdict"] == "not held" and behind["diagnosis"] == "budget" and "3 seeds" in behind["evidence"]
    assert "kv reliably ahead of FFN" in behind["evidence"]
    assert g1({"kv": (0.01,)})["verdict"] == "not measured"


def test_table_j3_applies_the_table_3_and_j2_tests_to_the_second_architecture():
    claim = "rrt.tabJ3.second_architecture"
    judged = judge({"early_exit_second": exits_table()}, CFG, "cpu").finish().set_index("id").loc[claim]
    assert judged["verdict"] == "held" and "final kept [held]" in judged["measured"]
    lost = judge({"early_exit_second": exits_table(recursive_post_aggressive=(6.2, 6.1))}, CFG,
                 "cpu").finish().set_index("id").loc[claim]
    assert lost["verdict"] == "not held" and lost["evidence"].startswith("final kept (setup): recursive final: ")
    assert verdict({"early_exit": exits_table()}, claim) == "not measured"


def test_table_j3_names_every_failing_part_with_its_numbers():
    """Two parts fail (the final loop moves +0.100 against the 0.023 tolerance; the relaxed loop 1 is not worse):
    both are named with their numbers and diagnoses, the claim's category the one furthest from budget (setup)."""
    table = exits_table(recursive_post_aggressive=(6.2, 6.1), relaxed_post_aggressive_kd=(6.05, 6.0))
    row = _row({"early_exit_second": table}, "rrt.tabJ3.second_architecture")
    assert (row["verdict"], row["diagnosis"]) == ("not held", "setup")
    assert "final kept (setup): recursive final: before 6.000, post none 6.020; aggressive +0.100 vs before" in \
        row["evidence"]
    assert "relaxed loop 1 worse (budget): loop 1: relaxed r=16 6.050 vs recursive 6.100" in row["evidence"]
    assert "loop 1 lifted" not in row["evidence"]  # the part that holds is not in the diagnosis


# the verdicts cpu-long adds (figures/cpu-long/02_relaxed_recursion, promoted 2026-12-07, run at 56f32a8) for every
# claim the cpu profile leaves "not measured", with their diagnoses
CPU_LONG_VERDICTS = {
    # the cpu-long run of 2026-12-07 (its grid reads the cpu runs back, retrained since 2026-12-06; uptraining seed
    # s.d. 0.116 nats over Table G.1's 5 seeded set-ups): the single-seed gaps beyond it hold
    "rrt.fig6c.svd_beats_zero_avg_lower": ("held", ""),  # Lower's SVD lead 0.143 (0.025 in the run before)
    "rrt.tabI1.kd_helps_relaxed": ("held", ""),
    "rrt.figG2.stepwise_zero_ge_svd": ("held", ""),
    # the LoRA ranks rise from r16 on (6.485, 6.571, 6.650), 0.166 nats, beyond the seed s.d.: no middle rank worse
    # than both ends, and the curve climbs the other way (held until 2026-12-07, when rank 0 counted as the low end)
    "rrt.figG3.stepwise_u_shape": ("not held", "disagrees with the paper"),
    "rrt.figG1.training_loss_relaxed_vs_recursive": ("not held", "budget"),
    "rrt.tabG1.per_module_rank": ("not testable at this scale", ""),
    "rrt.tabH1.prefix_relaxation_weak": ("held", ""),  # prefix 64 within 0.006 of r0, above every LoRA rank
    "rrt.tabI1.longer_uptraining_helps": ("held", ""),
    "rrt.tabI1.longer_uptraining_helps.ours": ("held", ""),
    "rrt.fig7b.kd_and_longer_combined": ("held", ""),
    "rrt.appJ.overlapped_matches_new": ("not held", "scale"),
    "rrt.tabJ1.coefficient_sweep": ("held", ""),
    "rrt.tabJ1.freeze_head_lora": ("not held", "disagrees with the paper"),
    "rrt.tabJ1.post_beats_co_training": ("not held", "budget"),
    "rrt.tabJ3.second_architecture": ("not held", "setup"),
    "rrt.tabK1_K2.lora_cost_and_rank_tradeoff": ("held", ""),
    # Sec. 3.5's SVD convergence, first measured by the cpu-long run of 2026-12-07
    "rrt.s3_5.svd_converges_faster": ("not held", "budget"),
}


def test_the_promoted_cpu_long_tables_give_the_cpu_long_verdicts():
    """cpu-long judges every claim the cpu profile leaves out, each "not held" with its diagnosis and evidence."""
    table = judge(load_tables(FIGURES / "cpu-long" / "02_relaxed_recursion"), RelaxedConfig.preset("cpu-long"),
                  "cpu-long").finish()
    assert check_ledger(table) == []
    table = table.set_index("id")
    assert set(CPU_LONG_VERDICTS) == {i for i, v in CPU_VERDICTS.items() if v == "not measured"}
    got = {i: (table.loc[i, "verdict"], table.loc[i, "diagnosis"] or "") for i in CPU_LONG_VERDICTS}
    assert got == CPU_LONG_VERDICTS
    assert "recovers 74% of Agg's lift" in table.loc["rrt.tabJ1.freeze_head_lora", "measured"]
    assert "CE-only control already moves the final loop" in table.loc["rrt.tabJ3.second_architecture", "evidence"]
    # both of Table J.3's failing parts named with their numbers (2026-12-07)
    assert "relaxed loop 1 worse (budget): loop 1: relaxed r=64 7.079 vs recursive 6.485; gap to final: -0.022 vs " \
        "-0.003" in table.loc["rrt.tabJ3.second_architecture", "evidence"]
    assert "aggressive_kd +0.114 vs before" in table.loc["rrt.tabJ3.second_architecture", "evidence"]
    # the single-seed claims cpu also measures, judged here against the measured seed noise (2026-12-07)
    assert "the recursive final loop's rise 0.026 nats, inside post_seeds' final-loop seed s.d. 0.047 nats" in \
        table.loc["rrt.tabJ1.weighted_overemphasizes_loop1", "evidence"]
    assert (table.loc["rrt.tabJ1.weighted_overemphasizes_loop1", "verdict"],
            table.loc["rrt.tabJ1.weighted_overemphasizes_loop1", "diagnosis"]) == ("not held", "budget")
    assert table.loc["rrt.fig6b.avg_lower_gain_from_relaxation", "verdict"] == "held"  # 0.295 / 0.143 > 0.116
    # §3.5's relaxed Average behind Stepwise: the longer_budget study (2026-12-07) measures the gap at 2x / 4x / 8x the
    # steps, +0.640 / +0.683 / +0.679: at the paper's own 4x it is +0.683, not the +0.466 the one 2x doubling had
    # extrapolated; the average_rate study rules out the rate and the climb; fitted over the three doublings the gap
    # closes +0.036 nats per doubling, short of the +0.039 the paper's 15B would ask, inside the seed noise: budget,
    # the runs cannot tell
    avg_step = table.loc["rrt.s3_5.relaxed_avg_beats_recursive_step"]
    assert (avg_step["verdict"], avg_step["diagnosis"]) == ("not held", "budget")
    assert "a gap of +0.814 / +0.640 / +0.683 / +0.679" in avg_step["evidence"]
    assert "it stands at +0.683 (measured)" in avg_step["evidence"]
    assert "at its own rate 0.001 (lowest validation loss) it reaches 7.206 against stepwise r=0's 6.392" in \
        avg_step["evidence"]
    assert "at 0.0002 its climb is smallest (+0.14 nats against +2.36 at 0.001) and it reaches 7.325 (+0.933)" in \
        avg_step["evidence"]
    assert "the gap closes +0.036 nats per doubling of the steps (95 % interval [-0.108, +0.180]" in \
        avg_step["evidence"] and "needs +0.039 per doubling: the fitted rate falls short, but the interval reaches " \
        "it: the runs cannot tell" in avg_step["evidence"]
    # Fig. 4 reads the same gap; Fig. 6's rival (Lower r=64) ran at 2x, 4x and 8x: its gap stalls too
    assert table.loc["rrt.fig4.relaxed_interpolates_to_full", "diagnosis"] == "budget"
    fig6 = table.loc["rrt.fig6.average_best_with_lora"]
    assert fig6["diagnosis"] == "budget" and "lower r=64 6.415 / 5.966 / 5.694 / 5.388, a gap of +0.791 / +0.640 / " \
        "+0.577 / +0.658" in fig6["evidence"] and "*" not in fig6["evidence"]
    assert "it stands at +0.577 (measured)" in fig6["evidence"] and "fitted over the 3 doublings measured (1x -> 8x" \
        in fig6["evidence"] and "at this rate it closes after 15.9 doublings" in fig6["evidence"]
    # cpu-long judges every claim
    assert set(table.index[table["verdict"] == "not measured"]) == set()
    assert table.loc["rrt.tabI1.longer_uptraining_helps", "measured"].startswith(
        "recursive stepwise r=0: 6.392 -> 5.587 at 4x steps")  # the paper's 4x, measured since 2026-12-07
    # Table K.1's rank cost on 7 interleaved timing rounds, and K.2's throughput with App. K's oracle read on the
    # corpus's paragraphs (since 2026-12-06)
    rank_cost = table.loc["rrt.tabK1_K2.lora_cost_and_rank_tradeoff", "measured"]
    assert "r=16 +39.5% [+32.9%, +43.9%], r=64 +48.7% [+42.9%, +53.5%]" in rank_cost
    assert "cdb oracle tok/s r=16 174.1, r=64 170.5, recursive 316.2" in rank_cost


def context_rounds(gaps: list[float]) -> pd.DataFrame:
    """Table K.3 / K.4's interleaved timing rounds at batch 8: the relaxed / recursive ratio is 1.04 at long context
    and 1.04 + gap at short context in each round."""
    rows = []
    for r, gap in enumerate(gaps):
        ms = {("recursive", "short"): 20.0, ("recursive", "long"): 36.0,
              ("relaxed r=16", "short"): 20.0 * (1.04 + gap), ("relaxed r=16", "long"): 36.0 * 1.04}
        rows += [{"round": r, "model": m, "context": c, "batch": 8, "position": 100 if c == "short" else 1000,
                  "ms_per_pass": v} for (m, c), v in ms.items()]
    return pd.DataFrame(rows)


def test_short_context_share_is_judged_by_the_interval_over_interleaved_rounds():
    claim = "rrt.tabK3_K4.memory_cap_short_context"
    clear = {**throughput_tables(), "context_share": context_rounds([0.20, 0.22, 0.18, 0.21, 0.19, 0.20, 0.23])}
    ledger = judge(clear, CFG, "cpu").finish().set_index("id")
    assert ledger.loc[claim, "verdict"] == "held"
    assert "7 interleaved rounds" in ledger.loc[claim, "measured"]
    assert "median +0.200 (98.4% order-statistic interval [+0.180, +0.230])" in ledger.loc[claim, "measured"]
    # a gap whose mean is positive but whose rounds straddle 0: the host's noise cannot decide it, so not held
    noisy = {**throughput_tables(), "context_share": context_rounds([0.15, -0.12, 0.10, -0.09, 0.13, -0.11, 0.02])}
    ledger = judge(noisy, CFG, "cpu").finish()
    assert check_ledger(ledger) == []
    row = ledger.set_index("id").loc[claim]
    assert row["verdict"] == "not held" and row["diagnosis"] == "setup"
    assert "within this host's timing noise" in row["evidence"]
    # the rounds take precedence over pass_times' single timings, which alone say "no interval"
    assert "no interval" in judge(throughput_tables(), CFG, "cpu").finish().set_index("id").loc[claim, "measured"]


def rank_rounds(costs: dict[str, list[float]]) -> pd.DataFrame:
    """Interleaved timing rounds at batch 8 for Table K.1's rank costs: in round i each relaxed model's short-context
    pass takes the recursive model's x (1 + costs[model][i]); long context keeps the same ratios."""
    rows = []
    for i in range(len(next(iter(costs.values())))):
        for context, base in (("short", 20.0), ("long", 36.0)):
            ms = {"recursive": base, **{m: base * (1 + c[i]) for m, c in costs.items()}}
            rows += [{"round": i, "model": m, "context": context, "batch": 8,
                      "position": 100 if context == "short" else 1000, "ms_per_pass": v} for m, v in ms.items()]
    return pd.DataFrame(rows)


def test_rank_cost_is_judged_on_interleaved_rounds_where_every_rank_was_timed():
    claim = "rrt.tabK1_K2.lora_cost_and_rank_tradeoff"
    rising = {"relaxed r=8": [0.20, 0.22, 0.18, 0.21, 0.19, 0.20, 0.23],
              "relaxed r=16": [0.25, 0.27, 0.24, 0.26, 0.25, 0.24, 0.28]}
    ledger = judge({**throughput_tables(), "context_share": rank_rounds(rising)}, CFG, "cpu").finish()
    assert check_ledger(ledger) == []
    row = ledger.set_index("id").loc[claim]
    assert row["verdict"] == "held"
    assert "median of 7 interleaved rounds (98.4% order-statistic intervals): r=8 +20.0% [+18.0%, +23.0%]" in \
        row["measured"]
    # the higher rank costs less in every round: the rounds refute "non-decreasing in rank"
    falling = {"relaxed r=8": rising["relaxed r=16"], "relaxed r=16": rising["relaxed r=8"]}
    row = judge({**throughput_tables(), "context_share": rank_rounds(falling)}, CFG, "cpu").finish().set_index(
        "id").loc[claim]
    assert (row["verdict"], row["diagnosis"]) == ("not held", "setup")
    assert "merged multi-LoRA kernel" in row["evidence"]
    # a step that straddles 0 cannot refute it: with every overhead above 0 the claim still holds
    level = {"relaxed r=8": rising["relaxed r=8"], "relaxed r=16": [0.21, 0.19, 0.22, 0.18, 0.20, 0.22, 0.19]}
    assert judge({**throughput_tables(), "context_share": rank_rounds(level)}, CFG, "cpu").finish().set_index(
        "id").loc[claim, "verdict"] == "held"
    # the costs hold but a relaxed model's oracle throughput beats the recursive model's: the evidence names each
    # model's batch and oracle exit loop, what the simulation's throughput also follows
    row = judge({**throughput_tables(relaxed16_oracle=205.0), "context_share": rank_rounds(rising)}, CFG,
                "cpu").finish().set_index("id").loc[claim]
    assert (row["verdict"], row["diagnosis"]) == ("not held", "budget")
    assert "relaxed r=16 batch 14, mean exit loop 1.350" in row["evidence"]


def test_engine_exit_claims_name_how_repetitive_the_decoded_text_was():
    tables = throughput_tables()
    tables["throughput_measured"] = tables["throughput_measured"].assign(distinct_2=0.31)
    tables["workload"] = tables["workload"].assign(reference_distinct_2=0.98)
    ledger = judge(tables, CFG, "cpu").finish().set_index("id")
    text = ("its greedy output's distinct-2 0.31 (the corpus's own paragraphs 0.98), 40.0% of its tokens leaving after "
            "loop 1 against 45.0% on test text")
    assert text in ledger.loc["rrt.ours.engine_cdb_exit_measured", "measured"]
    assert text in ledger.loc["rrt.ours.cdb_speedup_equal_memory", "measured"]
    # tables written before the column: the claim reads as before
    old = judge(throughput_tables(), CFG, "cpu").finish().set_index("id")
    assert "distinct-2" not in old.loc["rrt.ours.engine_cdb_exit_measured", "measured"]


def test_early_exit_claims_judge_the_papers_own_comparisons():
    """Table J.1 runs weighted CE on the recursive Gemma only and has no CE-only post-training control; App. J's
    overlapped-vs-new pair is the self-KD one (its New row is the final configuration, with KD)."""
    relaxed_flat = exits_table(relaxed_post_weighted=(7.3, 6.2))  # the relaxed model's weighted row now reversed
    assert verdict({"early_exit": relaxed_flat, "post_seeds": quiet_post_seeds()},
                   "rrt.tabJ1.weighted_overemphasizes_loop1") == "held"
    control_better = exits_table(recursive_post_none=(6.0, 6.02))  # the book's CE-only control beats the lift
    assert verdict({"early_exit": control_better}, "rrt.tab3.loop1_lifted_small_gap") == "held"
    plain = post_seeds_table()
    no_kd_shifted = plain.assign(**{col: plain[col] + 0.05 * ((plain["exit"] == "aggressive")
                                                             & (plain["data"] == "overlapped"))
                                    for col in ("nll loop 1", "nll loop 2")})
    ledger = judge({"early_exit": exits_table(), "post_seeds": no_kd_shifted}, CFG, "cpu").finish().set_index("id")
    assert ledger.loc["rrt.appJ.overlapped_matches_new", "verdict"] == "held"  # the arms without KD do not decide
    assert "Agg(0.1) + KD" in ledger.loc["rrt.appJ.overlapped_matches_new", "measured"]
    kd_shifted = plain.assign(**{col: plain[col] + 0.05 * ((plain["exit"] == "aggressive_kd")
                                                          & (plain["data"] == "overlapped"))
                                 for col in ("nll loop 1", "nll loop 2")})
    assert judge({"early_exit": exits_table(), "post_seeds": kd_shifted}, CFG, "cpu").finish().set_index("id").loc[
        "rrt.appJ.overlapped_matches_new", "verdict"] == "not held"


def test_kd_limits_the_final_drop_on_the_relaxed_pair():
    """Table J.2's caption: without KD the relaxed final loop drops more; judged on the main relaxed model's pair."""
    assert verdict({"early_exit": exits_table()}, "rrt.tabJ2.kd_limits_final_drop") == "not held"  # 6.34 vs 6.33
    kd_ahead = judge({"early_exit": exits_table(relaxed_post_aggressive_kd=(7.0, 6.31))}, CFG, "cpu").finish()
    row = kd_ahead.set_index("id").loc["rrt.tabJ2.kd_limits_final_drop"]
    assert row["verdict"] == "held" and "6.3100 vs without KD 6.3300" in row["measured"]
    behind = judge({"early_exit": exits_table()}, CFG, "cpu").finish().set_index("id")
    assert behind.loc["rrt.tabJ2.kd_limits_final_drop", "diagnosis"] == "budget"


def _init_curves(lower_zero_shift: float = 0.0) -> pd.DataFrame:
    """init_curves of Average and Lower: SVD starts 0.5 nats lower and keeps 0.1 ahead; zero's curve can be moved."""
    rows_ = []
    for init in ("average", "lower"):
        for kind in ("svd", "zero"):
            for step in range(1, 41):
                loss = 8.0 - 2.0 * (1 - math.exp(-step / 10)) + (0.1 + 0.4 * math.exp(-step / 5)) * (kind == "zero")
                if kind == "zero" and init == "lower":
                    loss += lower_zero_shift
                rows_.append({"init": init, "lora_init": kind, "rank": 64, "step": step, "tokens": 512 * step,
                              "loss": loss, "val_loss": float("nan"), "variant": f"{init}-{kind}"})
    return pd.DataFrame(rows_)


def test_svd_convergence_reads_every_quarter_of_training():
    """§3.5: SVD's 'faster convergence', read as its windowed training loss below the zero init's at each quarter."""
    cfg = RelaxedConfig.preset("cpu-long")
    held = judge({"init_curves": _init_curves()}, cfg, "cpu-long").finish().set_index("id")
    row = held.loc["rrt.s3_5.svd_converges_faster"]
    assert row["verdict"] == "held" and "at steps 10, 20, 30, 40" in row["measured"]
    late = judge({"init_curves": _init_curves(lower_zero_shift=-0.2)}, cfg, "cpu-long").finish().set_index("id")
    row = late.loc["rrt.s3_5.svd_converges_faster"]
    assert row["verdict"] == "not held" and row["diagnosis"] == "budget"
    assert judge({}, cfg, "cpu-long").finish().set_index("id").loc["rrt.s3_5.svd_converges_faster", "verdict"] == \
        "not measured"


def test_init_curves_pairs_each_zero_init_run_with_its_svd_twin(tmp_path):
    """`tables.init_curves` reads the training log of the SVD and zero runs of each zero init at the largest rank,
    and nothing else (other ranks, the recursive model, post-trained runs)."""
    import dataclasses

    from rlib.relaxed import tables
    from rlib.relaxed.config import RelaxedVariant

    cfg = RelaxedConfig.preset("smoke")
    top = max(cfg.ranks)
    variants = [RelaxedVariant("average", top, "svd"), RelaxedVariant("average", top, "zero"),
                RelaxedVariant("average", 0), RelaxedVariant("stepwise", top, "svd"),
                RelaxedVariant("average", top, "svd", exit="aggressive", phase="post")]
    results = []
    for i, v in enumerate(variants):
        name = f"run{i}"
        (tmp_path / name / "train").mkdir(parents=True)
        pd.DataFrame({"step": [1, 2], "tokens": [8, 16], "loss": [5.0 + i, 4.0 + i], "val_loss": [None, 4.5]}).to_csv(
            tmp_path / name / "train" / "metrics.csv", index=False)
        results.append({"name": name, "variant": dataclasses.asdict(v), "params": {"unique": 1, "non_embedding": 1},
                        "train": {"tokens_per_s": 1.0}, "before": {}, "after": {}, "train_dir": "train"})
    curves = tables.init_curves(tmp_path, results, cfg)
    assert sorted(set(zip(curves["init"], curves["lora_init"]))) == [("average", "svd"), ("average", "zero")]
    assert set(curves["variant"]) == {"run0", "run1"} and len(curves) == 4
    assert tables.init_curves(tmp_path, results, RelaxedConfig.preset("cpu")).empty  # no zero init in cpu
