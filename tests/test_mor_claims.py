"""Chapter 03's claims ledger (rlib.mor.claims): the committed cpu tables give the catalogue's verdicts, one moved
number flips a verdict, every "not held" carries a diagnosis computed from the tables, and missing tables are
recorded as not measured."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from rlib.book.claims import check_ledger, load_tables
from rlib.mor import MoRSpec, analysis, tables
from rlib.mor.claims import JUDGES, NEEDS, SPECS, judge
from rlib.mor.config import MoRConfig
from tests.test_mor import ids, model

FIGURES = Path(__file__).resolve().parents[1] / "figures" / "03_mixture_of_recursions"
CPU = MoRConfig.preset("cpu")

# the verdicts of the committed cpu tables (figures/03_mixture_of_recursions): Table 3's isoFLOP grid and Fig. 3 at two
# budgets. Every run at the ablation budget (Tables 4, 8, 10-12, Fig. 5b / 9), the gate ablation, Tables 9 and 13 and
# Fig. 5a are cpu-long's, so their claims are not measured here; ABLATION_VERDICTS judges their tables below
COMMITTED = {
    "mor.tab3.ec_beats_recursive_isoflop": "held",
    "mor.tab3.mor_vs_vanilla_isoflop": "held",
    "mor.tab3.more_tokens_isoflop": "held",  # MoR-2 / 3 EC 1.27x / 1.40x vanilla's tokens (paper 1.35 / 1.50)
    "mor.tab3.fixed_tokens_mor2": "held",
    "mor.tab3.fixed_tokens_mor2_accuracy": "not held",  # next line within chance for every model
    "mor.tab3.fixed_tokens_time_memory": "not held",  # time 0.899x, memory 0.846x (paper 0.81, 0.75; AMX Xeon)
    "mor.tab3.ec_beats_tc": "held",
    # ours (Table 3's rows): MoR-3 TC 0.35 / 0.40 nats ahead of Recursive-3 (paper 0.07 behind); budget
    "mor.tab3.tc_behind_recursive": "not held",
    "mor.tab3.kv_share_isoflop": "not held",  # sharing 0.027 ahead, 13x the seed s.d.: scale (0.021 its extra tokens)
    "mor.tab3_fig5c.nll_rises_with_nr": "not held",
    "mor.fig3.mor_beats_recursive_every_budget": "held",
    "mor.fig3.mor_matches_or_beats_vanilla": "not testable at this scale",
    "mor.fig3.mor_behind_vanilla_smallest": "not testable at this scale",  # stated at 135M; MoR ahead by 0.19-0.34
    "mor.tab7.advantage_shrinks_with_budget": "not held",
    "mor.tab7.recursive_behind_vanilla": "not held",  # ahead by 0.0078 at the quarter budget, behind by 0.16 at 1x
    # 6 paired rounds since 2026-12-07 (the rounds decide from 5, rlib.rounds): MoR EC 1.076x [1.040, 1.105] at B,
    # every MoR interval above 1; Nr 2 -> 3 falls at B beyond the rounds (1.254x -> 1.076x). Until 2026-12-07 3 rounds
    # decided it: the evening run on a 2-core AMX Xeon read held (1.159x [1.071, 1.164]), the morning's EPYC run not
    # held (0.929x at B), on the same code
    "mor.fig4a.throughput": "held",
    "mor.fig4a.throughput_rises_with_nr": "not held",
    "mor.fig4b.middle_cycle_best": "not measured",
    "mor.ours.middle_cycle_tied_best": "not measured",
    "mor.tab8.sequence_worst_cycle_family_better": "not measured",
    "mor.fig4b.reference_vanillas": "not measured",
    "mor.tab12.kv_share_ec_vs_tc": "not measured",
    "mor.tab12.kv_share_recursive_slight": "not measured",
    "mor.tab12.kv_share_helps_vanilla": "not measured",  # rlib.mor.vanilla_kv: cpu-long's
    "mor.tab4.aux_loss_beats_aux_router": "not measured",
    "mor.fig5b_tab10.ec_aux_loss_separation": "not measured",
    "mor.appf3.linear_aux_loss_few_dead": "not measured",
    "mor.tab4.sigmoid_beats_tanh": "not measured",
    "mor.tab10.alpha1_collapse": "not measured",
    "mor.tab4.ec_router_arch_and_zloss": "not measured",
    "mor.tab4.ec_zloss_negligible": "not measured",
    "mor.ours.ec_zloss_nll": "not measured",
    "mor.tab4.tc_balancing_loss_vs_loss_free": "not measured",
    "mor.tab11.tc_design_rows": "not measured",
    "mor.tab4.tc_mlp_router_best": "not measured",
    "mor.apph.tc_load_imbalance": "held",  # 84 % / 76 % of steps above 0.266 (57 % / 60 % in the fp32 run)
    "mor.fig5c.test_time_scaling": "not held",  # cap 1 -> 2 +0.0004 nats (1.0 s.e.) for MoR-2 EC: within noise
    "mor.fig5a.compute_optimal": "not measured",
    "mor.fig1_tab14.depth_follows_semantics": "not held",
    "mor.fig7.kv_norms": "held",
    "mor.fig8.kv_cosine": "held",
    "mor.tab2.kv_memory": "held",
    "mor.s4_3.kv_share_fewer_flops": "held",  # new 2026-12-06: 21.995 vs 22.051 MFLOPs/token, attention 2.617 vs 2.151
    "mor.tab9.middle_best_uptraining": "not measured",
    "mor.tab9.seq_step_beats_cyc_step": "not measured",
    "mor.ours.decode_agreement": "not held",
    "mor.ours.gate_ablation": "not measured",
    "mor.ours.flops_cost_model": "held",
    "mor.tab13.relaxation": "not measured",
    "mor.tab3.fewshot_column": "not held",
}

# the ablation-budget tables (routers, sharing, kv_sharing) and the up-training table of the cpu run of 2026-11-26 (at
# 6358f93, on the reference machine), kept as the judges' inputs since those studies moved to cpu-long
ABLATION_TABLES = Path(__file__).resolve().parent / "fixtures" / "figures" / "03_mixture_of_recursions"
ABLATION_VERDICTS = {
    "mor.fig4b.middle_cycle_best": "not held",
    "mor.ours.middle_cycle_tied_best": "not held",
    "mor.tab8.sequence_worst_cycle_family_better": "not held",
    "mor.tab12.kv_share_ec_vs_tc": "not held",
    "mor.tab12.kv_share_recursive_slight": "not held",
    "mor.tab4.aux_loss_beats_aux_router": "held",
    "mor.fig5b_tab10.ec_aux_loss_separation": "not held",  # sampling accuracy 0.945 (paper 0.992)
    "mor.appf3.linear_aux_loss_few_dead": "not held",
    "mor.tab4.sigmoid_beats_tanh": "not held",
    "mor.tab10.alpha1_collapse": "not held",
    "mor.tab4.tc_balancing_loss_vs_loss_free": "not held",
    "mor.tab9.middle_best_uptraining": "held",
    "mor.tab9.seq_step_beats_cyc_step": "held",
}


# the book's claims before the ledger (figures/.../claims.csv, "claim" column) -> the ledger entry that keeps them
OLD_CLAIMS = {
    "MoR (expert-choice) beats the fixed-depth Recursive model at equal training FLOPs":
        "mor.tab3.ec_beats_recursive_isoflop",
    "Expert-choice beats token-choice at equal FLOPs": "mor.tab3.ec_beats_tc",
    "Middle-Cycle is the best or tied-best sharing strategy (tied: within the Recursive model's seed spread, at least "
    "0.01 nats)": "mor.ours.middle_cycle_tied_best",
    "Validation loss falls as the test-time recursion cap rises (MoR-EC)": "mor.fig5c.test_time_scaling",
    "The expert-choice router with the auxiliary loss agrees with top-k selection on >= 95% of tokens at decode":
        "mor.ours.decode_agreement",
    "Measured KV-cache bytes match Table 2's ratios ((Nr+1)/2Nr for recursion-wise caching, 1/Nr for sharing)":
        "mor.tab2.kv_memory",
    "MoR beats the Recursive model at every isoFLOP budget (Fig. 3; first seed)":
        "mor.fig3.mor_beats_recursive_every_budget",
    "Up-training: both Middle strategies beat Cycle and Sequence at every init, and the reduced (loop 1) baselines of "
    "the same init": "mor.tab9.middle_best_uptraining",
    "Up-training: Sequence with Step init beats Cycle with Step init": "mor.tab9.seq_step_beats_cyc_step",
}


@pytest.fixture(scope="module")
def committed() -> dict[str, pd.DataFrame]:
    return load_tables(FIGURES)


@pytest.fixture(scope="module")
def with_ablations(committed) -> dict[str, pd.DataFrame]:
    """The committed cpu tables and the ablation-budget tables beside them (ABLATION_TABLES)."""
    return {**committed, **load_tables(ABLATION_TABLES)}


def judged(tabs: dict[str, pd.DataFrame], cfg: MoRConfig = CPU) -> pd.DataFrame:
    table = judge(tabs, cfg, "cpu").finish()
    assert check_ledger(table) == []
    return table.set_index("id")


def verdict(tabs: dict[str, pd.DataFrame], claim_id: str) -> str:
    return judged(tabs).loc[claim_id, "verdict"]


def with_value(tabs: dict[str, pd.DataFrame], name: str, row: dict, column: str, value) -> dict[str, pd.DataFrame]:
    """A copy of `tabs` with one number moved: `column` of the row of table `name` matching `row`."""
    df = tabs[name].copy()
    mask = np.logical_and.reduce([df[c] == v for c, v in row.items()])
    assert mask.sum() == 1, (name, row)
    df.loc[mask, column] = value
    return {**tabs, name: df}


def test_specs_are_unique_located_and_judged():
    ids = [s.id for s in SPECS]
    assert len(ids) == len(set(ids))
    assert all(s.where.strip() and s.paper == "001" and s.artifact for s in SPECS)
    assert set(ids) == set(JUDGES) | set(NEEDS) and not set(JUDGES) & set(NEEDS)
    assert set(ids) == set(COMMITTED)


def test_committed_cpu_tables_give_the_catalogue_verdicts(committed):
    table = judged(committed)
    assert table["verdict"].to_dict() == COMMITTED
    assert table.loc["mor.ours.middle_cycle_tied_best", "ours"] and not table.loc["mor.fig4b.middle_cycle_best", "ours"]
    # the diagnoses carry the tables' numbers, not sentences typed in
    assert "nats per doubling" in table.loc["mor.tab3.kv_share_isoflop", "evidence"]
    speed = committed["throughput"].set_index(["model", "setting"])
    assert f"{speed.loc[('MoR EC', 'B'), 'speedup_vs_vanilla']:.3f}x" in table.loc["mor.fig4a.throughput", "measured"]
    assert "paired rounds" in table.loc["mor.fig4a.throughput", "measured"]
    assert f"(depth {speed.loc[('MoR-2 EC', 'B'), 'mean_depth']:.2f})" in \
        table.loc["mor.fig4a.throughput_rises_with_nr", "measured"]


def test_the_ablation_budget_tables_give_their_verdicts(with_ablations):
    table = judged(with_ablations)
    assert {i: table.loc[i, "verdict"] for i in ABLATION_VERDICTS} == ABLATION_VERDICTS
    assert "tolerance 0.0261" in table.loc["mor.ours.middle_cycle_tied_best", "measured"]
    # Table 12's equal-token row joins Table 3's KV-sharing diagnosis when it was measured
    assert "(kv_sharing.csv)" in table.loc["mor.tab3.kv_share_isoflop", "evidence"]
    assert "(kv_sharing.csv)" not in judged({k: v for k, v in with_ablations.items() if k != "kv_sharing"}).loc[
        "mor.tab3.kv_share_isoflop", "evidence"]


def test_the_books_old_claims_keep_their_verdicts(committed):
    old = committed["claims"]
    if "claim" not in old.columns:
        pytest.skip("figures/ already holds a ledger: the old claims' verdicts are checked by COMMITTED")
    table = judged(committed)
    assert dict(zip(old["claim"].map(OLD_CLAIMS), old["held"])) == {i: table.loc[i, "verdict"] for i in
                                                                    OLD_CLAIMS.values()}


def test_no_tables_means_every_claim_not_measured():
    for cfg in (CPU, MoRConfig.preset("smoke")):
        table = judged({}, cfg)
        assert len(table) == len(SPECS) and set(table["verdict"]) == {"not measured"}
        assert all(m.startswith("needs:") for m in table["measured"])


def test_any_single_table_alone_is_judged_without_error(with_ablations):
    for name, df in with_ablations.items():
        judged({name: df})


def test_a_table_in_another_layout_is_not_measured(with_ablations):
    renamed = {**with_ablations, "routers": with_ablations["routers"].rename(columns={"sampling_acc": "accuracy"})}
    table = judged(renamed)
    assert table.loc["mor.tab4.sigmoid_beats_tanh", "verdict"] == "not measured"
    assert "sampling_acc" in table.loc["mor.tab4.sigmoid_beats_tanh", "measured"]
    assert table.loc["mor.tab3.ec_beats_tc", "verdict"] == "held"


def test_paired_seeds_decide_mor_against_recursive(committed):
    key = {"label": "MoR-3 EC", "seed": 1, "depth_cap": 3}
    assert verdict(committed, "mor.tab3.ec_beats_recursive_isoflop") == "held"
    moved = with_value(committed, "depth_scaling", key, "nll", 6.60)  # seed 1 above Recursive-3's 6.4449
    table = judged(moved)
    assert table.loc["mor.tab3.ec_beats_recursive_isoflop", "verdict"] == "not held"
    assert "seed 1 reverses by 0.2087" in table.loc["mor.tab3.ec_beats_recursive_isoflop", "evidence"]
    assert table.loc["mor.tab3.ec_beats_tc", "verdict"] == "not held"  # and above TC's


def test_tiny_tables_flip_on_one_number():
    def sweep(mor_low: float) -> dict[str, pd.DataFrame]:
        rows = [("MoR-3 EC", 1e12, mor_low), ("MoR-3 EC", 2e12, 5.0), ("Recursive-3 (middle_cycle)", 1e12, 6.0),
                ("Recursive-3 (middle_cycle)", 2e12, 5.5), ("Vanilla", 1e12, 6.2), ("Vanilla", 2e12, 5.2)]
        df = pd.DataFrame(rows, columns=["label", "budget_flops", "nll"]).assign(tokens_m=0.1, params_m=4.0)
        return {"budget_sweep": df}

    held, failed = judged(sweep(5.9)), judged(sweep(6.1))
    assert held.loc["mor.fig3.mor_beats_recursive_every_budget", "verdict"] == "held"
    assert failed.loc["mor.fig3.mor_beats_recursive_every_budget", "verdict"] == "not held"
    assert held.loc["mor.tab7.advantage_shrinks_with_budget", "verdict"] == "held"  # d = -0.3, then -0.2
    assert failed.loc["mor.tab7.advantage_shrinks_with_budget", "verdict"] == "not held"  # d = -0.1, then -0.2
    # App. C: Recursive above vanilla at every budget (6.0 > 6.2 fails at the first budget, 5.5 > 5.2 holds)
    assert held.loc["mor.tab7.recursive_behind_vanilla", "verdict"] == "not held"
    assert "0.0250 tokens per parameter" in held.loc["mor.tab7.recursive_behind_vanilla", "evidence"]
    behind = {"budget_sweep": sweep(5.9)["budget_sweep"].replace({"nll": {6.2: 5.95}})}
    assert judged(behind).loc["mor.tab7.recursive_behind_vanilla", "verdict"] == "held"
    # the paper states 'matches or beats vanilla' above 360M (vanilla 315M non-embedding): below, not testable
    small = judged(sweep(6.23)).loc["mor.fig3.mor_matches_or_beats_vanilla"]
    assert small["verdict"] == "not testable at this scale" and "within the paper's 'matches' margin" in \
        small["measured"] and "the book's vanilla has 4.0M" in small["measured"]
    at_size = {"budget_sweep": sweep(6.25)["budget_sweep"].assign(params_m=320.0)}
    assert judged(at_size).loc["mor.fig3.mor_matches_or_beats_vanilla", "verdict"] == "not held"  # +0.05 > 0.039
    at_size = {"budget_sweep": sweep(6.23)["budget_sweep"].assign(params_m=320.0)}
    assert judged(at_size).loc["mor.fig3.mor_matches_or_beats_vanilla", "verdict"] == "held"


def test_middle_cycle_paper_margin_and_the_books_tolerance():
    def tabs(middle_cycle: float, rec_std: float) -> dict[str, pd.DataFrame]:
        sharing = pd.DataFrame({"label": ["Vanilla", "c", "s", "mc", "ms"],
                                "sharing": [np.nan, "cycle", "sequence", "middle_cycle", "middle_sequence"],
                                "nr": [0, 3, 3, 3, 3], "nll": [6.0, 6.2, 6.3, middle_cycle, 6.1]})
        main = pd.DataFrame({"label": ["Recursive-3 (middle_cycle)"], "budget": ["flops"], "nll": [6.4],
                             "nll_std": [rec_std]})
        return {"sharing": sharing, "main": main}

    # the paper's claim at Nr=3 (Fig. 4b) is strict: Middle-Cycle lowest at both of its sizes
    assert verdict(tabs(6.095, 0.0172), "mor.fig4b.middle_cycle_best") == "held"
    # 0.015 above the best: within a 0.0172 seed spread (the book's tie), outside the 0.01 floor, and not the lowest
    assert verdict(tabs(6.115, 0.0172), "mor.fig4b.middle_cycle_best") == "not held"
    assert verdict(tabs(6.115, 0.0172), "mor.ours.middle_cycle_tied_best") == "held"
    assert verdict(tabs(6.115, np.nan), "mor.ours.middle_cycle_tied_best") == "not held"
    assert verdict(tabs(6.05, 0.0172), "mor.tab8.sequence_worst_cycle_family_better") == "not held"  # M-Seq 6.1 < Seq
    assert verdict({"sharing": tabs(6.05, 0.0)["sharing"].assign(nll=[6.0, 6.1, 6.4, 6.05, 6.3])},
                   "mor.tab8.sequence_worst_cycle_family_better") == "held"


def test_single_thresholds_flip(with_ablations):
    committed = with_ablations
    cases = [  # (table, row, column, value that flips, claim)
        ("decode_agreement", {}, "depth_agreement", 0.951, "mor.ours.decode_agreement"),
        ("routers", {"row": "ec_tanh"}, "sampling_acc", 0.90, "mor.tab4.sigmoid_beats_tanh"),
        ("routers", {"row": "ec_aux_router"}, "sampling_acc", 0.95, "mor.tab4.aux_loss_beats_aux_router"),
        ("kv_sharing", {"routing": "none"}, "share - cache", 0.0150, "mor.tab12.kv_share_recursive_slight"),
        ("kv_bytes", {"kv": "share"}, "measured_ratio", 0.36, "mor.tab2.kv_memory"),
        ("main", {"label": "MoR-2 EC", "budget": "tokens"}, "nll", 6.31, "mor.tab3.fixed_tokens_mor2"),
        ("main", {"label": "MoR-3 EC", "budget": "flops"}, "nll", 6.35, "mor.tab3.mor_vs_vanilla_isoflop"),
        ("uptraining", {"run": "recursive-sequence-stepwise"}, "nll", 6.30, "mor.tab9.seq_step_beats_cyc_step"),
    ]
    baseline = judged(committed)["verdict"]
    for name, row, column, value, claim in cases:
        before = baseline[claim]
        tabs = with_value(committed, name, row, column, value) if row else {
            **committed, name: committed[name].assign(**{column: value})}
        after = verdict(tabs, claim)
        assert {before, after} == {"held", "not held"}, (claim, before, after)


def test_router_and_kv_claims_judge_what_the_paper_states(with_ablations):
    """Sec. 4.2's aux-loss claim is about inference-time behaviour (sampling accuracy), not NLL; Table 10's alpha 1.0
    claim is the collapse of routing (NLL moves both ways there); Sec. 4.3's 'robust' KV sharing of the Recursive
    model bounds a degradation, and an improvement is robust too."""
    tabs = with_ablations
    routers = tabs["routers"]
    final = routers[(routers["routing"] == "expert") & (routers["row"] == "final design")]
    worse_nll = with_value(tabs, "routers", {"routing": "expert", "row": "final design"}, "nll",
                           float(final["nll"].iloc[0]) + 1.0)
    assert verdict(worse_nll, "mor.tab4.aux_loss_beats_aux_router") == "held"
    collapsed = with_value(tabs, "routers", {"row": "ec_alpha1"}, "dead_ratio", 1 - 1 / CPU.n_recursions)
    assert verdict(tabs, "mor.tab10.alpha1_collapse") == "not held"
    assert verdict(collapsed, "mor.tab10.alpha1_collapse") == "held"
    improves = with_value(tabs, "kv_sharing", {"routing": "none"}, "share - cache", -0.03)
    assert verdict(improves, "mor.tab12.kv_share_recursive_slight") == "held"
    assert "sharing improves" in judged(improves).loc["mor.tab12.kv_share_recursive_slight", "measured"]


def _routers(**rows: dict) -> pd.DataFrame:
    """A routers.csv of expert-choice rows: name -> {nll, dead_ratio, sampling_acc}."""
    return pd.DataFrame([{"routing": "expert", "row": name, "arch": "linear", **values}
                         for name, values in rows.items()])


def _separation(kept_median: float, unkept_median: float) -> pd.DataFrame:
    return pd.DataFrame([{"panel": "EC, aux loss", "step": step, "n_selected": 10, "n_unselected": 6,
                          "selected_median": kept_median, "unselected_median": unkept_median, "selected_near_1": 0.9,
                          "unselected_near_0": 0.9, "misplaced": 0.0} for step in (2, 3)])


def test_fig5b_separation_needs_sampling_accuracy_and_outputs_at_the_ends(committed):
    """Sec. 5.2: 'perfect separation ... selected near 1.0, unselected near 0.0' - judged on sampling accuracy and the
    router outputs' medians per step; the dead ratio is App. F.3's claim, judged apart."""
    good = {"nll": 6.0, "dead_ratio": 0.0, "sampling_acc": 0.995}
    tabs = {**committed, "routers": _routers(**{"final design": good})}
    assert verdict(tabs, "mor.fig5b_tab10.ec_aux_loss_separation") == "not measured"  # outputs not written
    assert verdict({**tabs, "router_separation": _separation(0.97, 0.02)},
                   "mor.fig5b_tab10.ec_aux_loss_separation") == "held"
    middling = judged({**tabs, "router_separation": _separation(0.7, 0.3)})
    assert middling.loc["mor.fig5b_tab10.ec_aux_loss_separation", "verdict"] == "not held"
    assert "0.400 apart" in middling.loc["mor.fig5b_tab10.ec_aux_loss_separation", "evidence"]
    # a sampling accuracy below the paper's fails the conjunction with or without the outputs
    low = {**committed, "routers": _routers(**{"final design": {**good, "sampling_acc": 0.95}})}
    assert verdict(low, "mor.fig5b_tab10.ec_aux_loss_separation") == "not held"
    assert verdict({**low, "router_separation": _separation(0.97, 0.02)},
                   "mor.fig5b_tab10.ec_aux_loss_separation") == "not held"
    # the dead ratio moves App. F.3's claim, not the separation
    dead = {**tabs, "routers": _routers(**{"final design": {**good, "dead_ratio": 0.05}}),
            "router_separation": _separation(0.97, 0.02)}
    assert verdict(dead, "mor.fig5b_tab10.ec_aux_loss_separation") == "held"
    assert verdict(dead, "mor.appf3.linear_aux_loss_few_dead") == "not held"
    assert verdict(tabs, "mor.appf3.linear_aux_loss_few_dead") == "held"


def test_router_architecture_and_z_loss_are_judged_apart(committed):
    """Sec. 4.2: the linear router's 'best performance' on NLL; the z-loss's 'negligible impact on accuracy' needs the
    router rows' few-shot accuracy, which the runs do not score, so it is not measured while the book's NLL reading
    (ours) is judged beside it."""
    rows = {"final design": {"nll": 6.00, "dead_ratio": 0.004, "sampling_acc": 0.95},
            "ec_mlp": {"nll": 6.01, "dead_ratio": 0.0, "sampling_acc": 0.9},
            "ec_wide_mlp": {"nll": 6.02, "dead_ratio": 0.0, "sampling_acc": 0.9},
            "ec_zloss": {"nll": 6.01, "dead_ratio": 0.0, "sampling_acc": 0.8}}
    table = judged({**committed, "routers": _routers(**rows)})
    assert table.loc["mor.tab4.ec_router_arch_and_zloss", "verdict"] == "held"
    assert table.loc["mor.tab4.ec_zloss_negligible", "verdict"] == "not measured"
    assert "+0.0100" in table.loc["mor.tab4.ec_zloss_negligible", "measured"]
    assert table.loc["mor.ours.ec_zloss_nll", "verdict"] == "held" and table.loc["mor.ours.ec_zloss_nll", "ours"]
    far = judged({**committed, "routers": _routers(**{**rows, "ec_zloss": {**rows["ec_zloss"], "nll": 6.05}})})
    assert far.loc["mor.ours.ec_zloss_nll", "verdict"] == "not held"
    mlp_best = judged({**committed, "routers": _routers(**{**rows, "ec_mlp": {**rows["ec_mlp"], "nll": 5.99}})})
    assert mlp_best.loc["mor.tab4.ec_router_arch_and_zloss", "verdict"] == "not held"


def test_mor_behind_vanilla_at_the_smallest_size_and_more_tokens(committed):
    """Sec. 3.2: MoR trails vanilla at 135M at every budget; Sec. 3.1: at equal FLOPs MoR sees more tokens."""
    sweep = committed["budget_sweep"]
    row = judged(committed).loc["mor.fig3.mor_behind_vanilla_smallest"]
    assert row["verdict"] == "not testable at this scale"  # stated at 135M (106M non-embedding); the book's is smaller
    assert "the book's vanilla has 11.0M and sees 0.0045-0.0178 tokens per non-embedding parameter" in row["measured"]
    behind = sweep.copy()
    mor = behind["label"] == "MoR-3 EC"
    vanilla_nll = behind[behind["label"] == "Vanilla"].set_index("budget_flops")["nll"]
    behind.loc[mor, "nll"] = behind.loc[mor, "budget_flops"].map(vanilla_nll) + 0.05
    behind.loc[behind["label"] == "Vanilla", "params_m"] = 106.0  # at the paper's own size it is judged as stated
    assert verdict({**committed, "budget_sweep": behind}, "mor.fig3.mor_behind_vanilla_smallest") == "held"
    ahead = sweep.assign(params_m=sweep["params_m"].where(sweep["label"] != "Vanilla", 106.0))
    assert verdict({**committed, "budget_sweep": ahead}, "mor.fig3.mor_behind_vanilla_smallest") == "not held"
    assert verdict(committed, "mor.tab3.more_tokens_isoflop") == "held"
    fewer = with_value(committed, "main", {"label": "MoR-2 EC", "budget": "flops"}, "tokens_m", 0.1)
    table = judged(fewer)
    assert table.loc["mor.tab3.more_tokens_isoflop", "verdict"] == "not held"
    assert "FLOPs per token" in table.loc["mor.tab3.more_tokens_isoflop", "evidence"]


def test_router_separation_table_in_numbers():
    outputs = {"EC, aux loss": pd.DataFrame({"step": [1, 1, 2, 2, 2, 2], "output": [0.9, 0.8, 0.95, 0.6, 0.3, 0.05],
                                             "selected": [True, True, True, True, False, False]})}
    table = tables.router_separation_table(outputs)
    assert table["step"].tolist() == [2]  # step 1 keeps every candidate: nothing to separate
    row = table.iloc[0]
    assert (row["n_selected"], row["n_unselected"]) == (2, 2)
    assert row["selected_median"] == pytest.approx(0.775) and row["unselected_median"] == pytest.approx(0.175)
    assert row["selected_near_1"] == 0.5 and row["unselected_near_0"] == 0.5 and row["misplaced"] == 0.0
    wrong = {"p": outputs["EC, aux loss"].assign(output=[0.9, 0.8, 0.4, 0.6, 0.5, 0.05])}
    assert tables.router_separation_table(wrong).iloc[0]["misplaced"] == pytest.approx(0.5)  # 0.4 kept, 0.5 not


def test_throughput_and_test_time_scaling_flip(committed):
    speed = committed["throughput"].assign(rounds=5)  # the committed table's spread, read as 5 rounds
    faster = speed.assign(speedup_lo=lambda d: d["speedup_lo"] + 0.5, speedup_hi=lambda d: d["speedup_hi"] + 0.5)
    assert verdict({**committed, "throughput": faster}, "mor.fig4a.throughput") == "held"
    # a median above 1 whose slowest paired round is not: the interval contains 1, so the rounds cannot decide
    mor = speed["model"] == "MoR EC"
    straddles = speed.assign(speedup_vs_vanilla=np.where(mor, 1.04, speed["speedup_vs_vanilla"]),
                             speedup_lo=np.where(mor, 0.98, speed["speedup_lo"]),
                             speedup_hi=np.where(mor, 1.10, speed["speedup_hi"]))
    row = judged({**committed, "throughput": straddles}).loc["mor.fig4a.throughput"]
    assert row["verdict"] == "not testable at this scale" and "interval contains 1 for MoR EC at B (0.980-1.100x)" \
        in row["measured"]
    # a table without the rounds' spread (written before the paired rounds) cannot decide it
    point = speed.drop(columns=["speedup_lo", "speedup_hi"])
    row = judged({**committed, "throughput": point}).loc["mor.fig4a.throughput"]
    assert row["verdict"] == "not measured" and "speedup_lo" in row["measured"]
    depth = committed["depth_scaling"]
    ec = depth["label"].isin(["MoR-3 EC", "MoR-2 EC"])
    falling = depth.assign(nll=np.where(ec, 7.0 - depth["depth_cap"], depth["nll"]))
    assert verdict({**committed, "depth_scaling": falling}, "mor.fig5c.test_time_scaling") == "held"
    # a failing step is measured against its paired standard error, when the table has one
    cap = (depth["label"] == "MoR-3 EC") & (depth["seed"] == 0)
    cap2 = float(depth.loc[cap & (depth["depth_cap"] == 2), "nll"].iloc[0])
    rising = depth.assign(nll=np.where(cap & (depth["depth_cap"] == 3), cap2 + 0.00036, depth["nll"]))
    noisy = rising.assign(step_se=np.where(depth["depth_cap"] > 1, 0.002, np.nan))
    row = judged({**committed, "depth_scaling": noisy}).loc["mor.fig5c.test_time_scaling"]
    assert row["verdict"] == "not held" and "seed 0 cap 2 -> 3: +0.0004 = +0.18 s.e." in row["measured"]


def test_kv_share_at_isoflop_follows_the_first_seeds_difference(committed):
    row = {"label": "MoR-3 EC KV share", "seed": 0, "depth_cap": 3}
    assert verdict(committed, "mor.tab3.kv_share_isoflop") == "not held"  # sharing 5.8772 < caching 5.9040
    assert verdict(with_value(committed, "depth_scaling", row, "nll", 5.93), "mor.tab3.kv_share_isoflop") == "held"


def test_kv_share_at_isoflop_diagnosis_reads_the_seed_spread_and_the_extra_tokens(committed, with_ablations):
    """Sharing's isoFLOP lead (0.0268) is 13x MoR-3 EC's seed s.d. (0.0020): not seed noise, so the diagnosis is
    not 'budget: needs 2 seeds' (as until 2026-12-07) but the isoFLOP trade at this scale, with what sharing's extra
    tokens are worth on the chapter's own learning curve beside the paper's; within the seed spread it stays budget."""
    claim = "mor.tab3.kv_share_isoflop"
    row = judged(committed).loc[claim]
    assert row["verdict"] == "not held" and row["diagnosis"] == "scale"
    assert row["evidence"].startswith("sharing leads by 13x the MoR-3 EC isoFLOP seed s.d. (0.0020, main.csv)")
    assert "6.0% more tokens (0.2908 vs 0.2744M; the paper's 31B vs 30B, +3.3%)" in row["evidence"]
    assert "0.246 nats per doubling" in row["evidence"] and "the paper's Table 3 curve" in row["evidence"]
    assert "worth about 0.021 of the 0.0268 (the paper's about 0.0026" in row["evidence"]
    assert "0.058 tokens per non-embedding parameter" in row["evidence"]
    # Table 12's equal-token row (the cpu-long ablation budget) joins it when measured
    ablation = judged(with_ablations).loc[claim, "evidence"]
    d = float(with_ablations["kv_sharing"].set_index("routing").loc["expert", "share - cache"])
    assert f"sharing differs by {d:+.4f} (kv_sharing.csv)" in ablation
    # a lead within 3 seed s.d. is seed noise: budget, needs seeds
    noisy = with_value(committed, "main", {"label": "MoR-3 EC", "budget": "flops"}, "nll_std", 0.01)
    row = judged(noisy).loc[claim]
    assert row["diagnosis"] == "budget" and "2.7x the MoR-3 EC isoFLOP seed s.d. (0.0100, main.csv), within the " \
        "seed spread" in row["evidence"] and row["evidence"].endswith("needs: 2 seeds of both")


def test_token_choice_behind_recursive_is_ours_and_read_per_seed(committed):
    """Table 3's rows (ours: the text does not say it): MoR-3 TC 2.9163 behind Recursive-3 2.8466. The committed
    tables have token-choice ahead by 0.35-0.40 nats in both seeds; the diagnosis reads the Recursive model's
    plateau."""
    claim = "mor.tab3.tc_behind_recursive"
    row = judged(committed).loc[claim]
    assert row["verdict"] == "not held" and row["diagnosis"] == "budget" and row["ours"]
    assert "TC - Recursive -0.3539 (seed 0), -0.3983 (seed 1) (paper +0.0697)" in row["measured"]
    assert "token-choice leads in 2 of 2 paired seeds by 0.3539-0.3983, 6.2-6.9x the larger isoFLOP seed s.d." in \
        row["evidence"]
    assert "1.40x the Recursive model's tokens" in row["evidence"] and "initial plateau" in row["evidence"]
    behind = committed
    for seed in (0, 1):
        behind = with_value(behind, "depth_scaling", {"label": "MoR-3 TC", "seed": seed, "depth_cap": 3}, "nll", 6.5)
    assert verdict(behind, claim) == "held"
    one = with_value(committed, "depth_scaling", {"label": "MoR-3 TC", "seed": 0, "depth_cap": 3}, "nll", 6.5)
    row = judged(one).loc[claim]  # behind in one seed only: not in every paired seed
    assert row["verdict"] == "not held" and "leads in 1 of 2 paired seeds" in row["evidence"]
    # the gate ablation (cpu-long) says how much of the lead MoR's gate alone is worth
    gates = pd.DataFrame({"model": ["Recursive"] * 4, "tag": [np.nan, "rec_gated"] * 2, "seed": [0, 0, 1, 1],
                          "nll": [6.40, 6.00, 6.44, 6.02]})
    row = judged({**committed, "gates": gates}).loc[claim]
    assert "gains 0.4000, 0.4200 nats from the gate alone" in row["evidence"]
    assert verdict({k: v for k, v in committed.items() if k != "depth_scaling"}, claim) == "not measured"


def test_token_depths_by_word_class():
    texts = [[" the", " garden", " and", " field", "\n", " of", " cavern"]]
    deep_content = tables.token_depth_table(texts, [[1, 3, 1, 3, 3, 1, 2]])
    deep_function = tables.token_depth_table(texts, [[3, 1, 3, 1, 1, 3, 3]])
    assert verdict({"token_depths": deep_content}, "mor.fig1_tab14.depth_follows_semantics") == "held"
    table = judged({"token_depths": deep_function})
    assert table.loc["mor.fig1_tab14.depth_follows_semantics", "verdict"] == "not held"
    assert "function words 1.000 (3 of 3), punctuation and line breaks 0.000 (0 of 1)" in \
        table.loc["mor.fig1_tab14.depth_follows_semantics", "measured"]
    # the paper counts '—' and '\n' among the function tokens: deep punctuation alone outweighs deep content words
    marks = tables.token_depth_table([[" garden", ",", "\n", " field", " the", ";"]], [[3, 3, 3, 1, 1, 3]])
    row = judged({"token_depths": marks}).loc["mor.fig1_tab14.depth_follows_semantics"]
    assert row["verdict"] == "not held" and row["diagnosis"] == "scale"
    assert "content words 0.500 (1 of 2) vs function tokens 0.750 (3 of 4" in row["measured"]
    assert row["evidence"].startswith("3 of the 4 tokens the router sends to depth 3 are punctuation or line breaks")


def _geometry(value_period: bool) -> dict[str, pd.DataFrame]:
    """Norms and similarities of a 1 + 2 + 1 Middle-Cycle plan with Nr = 3 (blocks 0, 1, 2, 1, 2, 1, 2, 3)."""
    blocks = [0, 1, 2, 1, 2, 1, 2, 3]
    depth = np.arange(len(blocks))
    periodic = np.array([1.0, 2.0, 1.0, 2.2, 1.2, 2.4, 1.4, 3.0])
    norms = pd.DataFrame({"depth": depth, "block": blocks, "hidden": 1.0 + depth,
                          "key": periodic, "value": periodic if value_period else 1.0 + 0.1 * depth ** 2 % 3})
    same = np.equal.outer(blocks, blocks)
    sims = {kind: pd.DataFrame(np.where(same, level, 0.1)) for kind, level in (("hidden", 0.5), ("key", 0.9),
                                                                             ("value", 0.7))}
    return tables.kv_geometry_tables({"norms": norms, **{f"similarity_{k}": v for k, v in sims.items()}})


def test_kv_geometry_claims_from_numbers():
    assert verdict(_geometry(True), "mor.fig7.kv_norms") == "held"
    assert verdict(_geometry(False), "mor.fig7.kv_norms") == "not held"
    geo = _geometry(True)
    assert verdict(geo, "mor.fig8.kv_cosine") == "held"
    sim = geo["kv_similarity"]
    value_band = (sim["kind"] == "value") & (sim["block_a"] == sim["block_b"])
    geo["kv_similarity"] = sim.assign(cosine=np.where(value_band, 0.95, sim["cosine"]))  # values above keys
    assert verdict(geo, "mor.fig8.kv_cosine") == "not held"


@torch.no_grad()
def test_kv_geometry_tables_of_a_real_model_are_judged():
    geo = analysis.kv_geometry(model(MoRSpec.recursive(3)), ids())
    out = tables.kv_geometry_tables(geo)
    assert len(out["kv_similarity"]) == 3 * len(out["kv_norms"]) ** 2
    table = judged(out)
    assert table.loc["mor.fig7.kv_norms", "verdict"] in ("held", "not held")
    assert table.loc["mor.fig8.kv_cosine", "verdict"] in ("held", "not held")


def test_flops_cost_model_against_the_released_configs():
    paper = tables.paper_budget_table()
    table = judged({"paper_budgets": paper})
    assert table.loc["mor.ours.flops_cost_model", "verdict"] == "held"
    assert "MoR-3 EC 14160 vs 14161" in table.loc["mor.ours.flops_cost_model", "measured"]
    moved = paper.assign(released_steps=np.where(paper["model"] == "Vanilla", 9440, paper["released_steps"]))
    assert verdict({"paper_budgets": moved}, "mor.ours.flops_cost_model") == "not held"


def _gate_results(replace_nll: tuple[float, float], gated_rec_nll: tuple[float, float] = (6.30, 6.31)) -> list[dict]:
    """Run records of the main Nr's isoFLOP Recursive and MoR-EC runs and the three gate variants, 2 seeds."""
    from rlib.mor.config import gate_ablation_spec

    nr = CPU.n_recursions
    rows = [("", MoRSpec.recursive(nr), (6.42, 6.43)), ("", MoRSpec.expert(nr), (5.90, 5.91)),
            ("ec_alpha1", gate_ablation_spec("ec_alpha1", nr), (6.0, 6.05)),
            ("ec_replace", gate_ablation_spec("ec_replace", nr), replace_nll),
            ("rec_gated", gate_ablation_spec("rec_gated", nr), gated_rec_nll),
            ("", MoRSpec.expert(2), (5.5, 5.5))]  # another Nr: not in the table
    return [{"name": f"{tag}-{spec.n_recursions}-{spec.routing}-s{seed}", "label": spec.label(), "tag": tag,
             "budget": "flops", "seed": seed, "spec": dataclasses.asdict(spec), "n_layers": 14, "params": 4.7e6,
             "flops_per_token": 2e7, "train_flops": 5e12, "tokens": 2e5, "tokens_per_s": 1e3, "seconds": 100.0,
             "after": {"nll": nll[seed], "nll_causal": nll[seed] + 0.01}}
            for tag, spec, nll in rows for seed in (0, 1)]


def test_gate_table_pairs_every_variant_with_the_main_runs():
    table = tables.gate_table(_gate_results((6.2, 6.25)), CPU.n_recursions)
    assert len(table) == 10 and set(table["seed"]) == {0, 1}
    by_tag = table[table["seed"] == 0].set_index(["model", "tag"])
    assert by_tag.loc[("Recursive", ""), "gate"] == "none (x <- f(x))" and not by_tag.loc[("Recursive", ""), "routed"]
    assert by_tag.loc[("Recursive", "rec_gated"), "gate"].startswith("gated") and \
        not by_tag.loc[("Recursive", "rec_gated"), "routed"]
    assert by_tag.loc[("MoR-EC", "ec_replace"), "routed"] and by_tag.loc[("MoR-EC", "ec_replace"), "nll"] == 6.2


def test_gate_ablation_claim_flips_on_the_ungated_mor():
    claim = "mor.ours.gate_ablation"
    held = judged({"gates": tables.gate_table(_gate_results((6.2, 6.25)), CPU.n_recursions)})
    assert held.loc[claim, "verdict"] == "held" and "MoR-EC no gate 6.2000" in held.loc[claim, "measured"]
    assert "the gate alone gives +0.1200, +0.1200" in held.loc[claim, "measured"]  # 6.42 - 6.30, 6.43 - 6.31
    import io

    buffer = io.StringIO()  # as the ledger reads it back from gates.csv: an empty tag comes back as NaN
    tables.gate_table(_gate_results((6.2, 6.25)), CPU.n_recursions).to_csv(buffer, index=False)
    buffer.seek(0)
    assert verdict({"gates": pd.read_csv(buffer)}, claim) == "held"
    lost = judged({"gates": tables.gate_table(_gate_results((6.5, 6.41)), CPU.n_recursions)})
    assert lost.loc[claim, "verdict"] == "not held" and lost.loc[claim, "diagnosis"] == "setup"
    assert "the gate, which the Recursive baseline lacks, carries part" in lost.loc[claim, "evidence"]
    no_help = judged({"gates": tables.gate_table(_gate_results((6.5, 6.41), (6.5, 6.5)), CPU.n_recursions)})
    assert "the gate alone does not help the Recursive model" in no_help.loc[claim, "evidence"]
    one_seed = judged({"gates": tables.gate_table(_gate_results((6.2, 6.25)), CPU.n_recursions).query("seed == 0")})
    assert one_seed.loc[claim, "verdict"] == "not measured" and ">= 2 paired seeds" in one_seed.loc[claim, "measured"]


def test_gate_ablation_variants_in_the_grid():
    from rlib.config import ConfigError
    from rlib.mor.config import variants

    long = MoRConfig.preset("cpu-long")  # the cpu profile leaves the gate ablation to cpu-long
    tagged = [v for v in variants(long) if v.tag in long.gate_ablations and v.budget == "flops"]
    assert sorted((v.tag, v.seed) for v in tagged) == sorted((t, s) for t in long.gate_ablations for s in long.seeds)
    assert all(v.spec.n_recursions == long.n_recursions for v in tagged)
    gated = next(v.spec for v in tagged if v.tag == "rec_gated")
    assert all(gated.capacity(r) == 1.0 for r in range(gated.n_recursions)) and gated.gating == "weighted"
    with pytest.raises(ConfigError, match=r"gate_ablations \['ungated'\] unknown"):
        CPU.override(gate_ablations=("ungated",))


def test_the_gate_command_selects_the_runs_the_ablation_compares():
    from rlib.mor.gates import gate_runs, main

    long = MoRConfig.preset("cpu-long")
    runs = gate_runs(long)
    assert len(runs) == 2 * len(long.seeds) + len(long.gate_ablations) * len(long.seeds)
    untagged = {(v.spec.routing, v.seed) for v in runs if not v.tag}
    assert untagged == {(r, s) for r in ("none", "expert") for s in long.seeds}
    assert all(v.budget == "flops" and v.spec.n_recursions == long.n_recursions for v in runs)
    with pytest.raises(SystemExit):  # an unknown profile is refused before any run, naming the choices
        main(["--profile", "nonexistent"])


def test_the_promoted_cpu_long_tables_give_the_moved_claims_verdicts(committed):
    """cpu-long (figures/cpu-long, 2026-11-28 at dc5de1e; re-run at e2dd36a for Fig. 5a at the paper's budget ratios)
    measured what cpu leaves out: the ablation budget's routers, sharings and KV sharing, the gate ablation, Tables 9
    and 13, and Fig. 5a."""
    long = load_tables(FIGURES.parents[0] / "cpu-long" / FIGURES.name)
    table = judge({**committed, **long}, MoRConfig.preset("cpu-long"), "cpu-long").finish()
    assert check_ledger(table) == []
    table = table.set_index("id")
    expected = {"mor.ours.gate_ablation": ("held", ""), "mor.tab13.relaxation": ("held", ""),
                "mor.tab9.middle_best_uptraining": ("held", ""), "mor.tab4.aux_loss_beats_aux_router": ("held", ""),
                "mor.fig5a.compute_optimal": ("not held", "scale"), "mor.tab10.alpha1_collapse": ("not held", "setup"),
                "mor.fig4b.middle_cycle_best": ("not held", "budget"),
                "mor.tab4.tc_mlp_router_best": ("held", ""),  # MaxVio 0.115 vs 0.831 (paper 0.200 vs 0.492)
                # 3 paired rounds (rlib.rounds decides from 5); not held, scale until 2026-12-07
                "mor.fig4a.throughput": ("not testable at this scale", ""),
                "mor.fig4a.throughput_rises_with_nr": ("not testable at this scale", ""),
                # sharing 0.047 ahead at isoFLOP (7x the seed s.d.), +0.012 behind at equal ablation tokens
                "mor.tab3.kv_share_isoflop": ("not held", "scale"),
                "mor.tab3.tc_behind_recursive": ("not held", "budget")}  # ours; TC 0.24 / 0.44 ahead
    got = {i: (table.loc[i, "verdict"], table.loc[i, "diagnosis"] or "") for i in expected}
    assert got == expected
    assert "not bracketed" in table.loc["mor.fig5a.compute_optimal", "evidence"]
    kv = table.loc["mor.tab3.kv_share_isoflop", "evidence"]
    assert "leaving 0.0315 (4.6x the seed s.d.) that they do not explain" in kv
    assert "at equal tokens (0.1597M tokens, the ablation budget) sharing differs by +0.0119 (kv_sharing.csv), the " \
        "paper's sign" in kv
    assert "the gate alone is worth 96%-168% of token-choice's lead" in table.loc["mor.tab3.tc_behind_recursive",
                                                                                   "evidence"]


def _cost_rounds(monkeypatch, time_ratios, memory_ratios) -> pd.DataFrame:
    """train_cost.csv as `train_cost_table` writes it, from scripted measurements: vanilla steps 3.0 s with a 2000 MiB
    peak (200 MiB of state) in every round, MoR-2 EC at the given per-round ratios (128 MiB of state)."""
    from rlib.mor import train_cost

    vanilla = {"step_s": 3.0, "step_s_all": [2.9, 3.0, 3.1], "peak_mib": 2000.0, "state_mib": 200.0,
               "params": 13_000_000, "device": "cpu", "threads": 2}
    mor = iter([{"step_s": 3.0 * t, "step_s_all": [3.0 * t], "peak_mib": 2000.0 * m, "state_mib": 128.0,
                 "params": 8_400_000, "device": "cpu", "threads": 2} for t, m in zip(time_ratios, memory_ratios)])
    # scripted per model: the rounds alternate which model runs first
    monkeypatch.setattr(train_cost, "measure_one", lambda cfg, spec, warmup, steps: vanilla if spec is None
                        else next(mor))
    return train_cost.train_cost_table(CPU, rounds=len(time_ratios))


def test_training_time_and_memory_claim_reads_the_paired_rounds(committed, monkeypatch):
    claim = "mor.tab3.fixed_tokens_time_memory"
    promoted = judged(committed).loc[claim]  # 2026-12-07, bf16 AMX Xeon, cached grid: time 0.850x, memory 0.943x
    assert promoted["verdict"] == "not held" and "step time 0.899x vanilla" in promoted["measured"]
    assert "training state (parameters, gradients, AdamW moments) is 0.640x" in promoted["evidence"]
    assert verdict({k: v for k, v in committed.items() if k != "train_cost"}, claim) == "not measured"
    held = _cost_rounds(monkeypatch, [0.78, 0.80, 0.95], [0.70, 0.74, 0.76])  # medians 0.80 and 0.74
    row = judged({**committed, "train_cost": held}).loc[claim]
    assert row["verdict"] == "held" and "step time 0.800x vanilla [0.780, 0.950]" in row["measured"]
    assert "peak memory 0.740x [0.700, 0.760]" in row["measured"] and "3 paired rounds" in row["measured"]
    # time over the paper's 0.81: the diagnosis sets it beside the forward-FLOPs ratio of main.csv
    slow = _cost_rounds(monkeypatch, [0.85, 0.87, 0.90], [0.70, 0.70, 0.70])
    row = judged({**committed, "train_cost": slow}).loc[claim]
    main = committed["main"]
    flops = (main.loc[(main["label"] == "MoR-2 EC") & (main["budget"] == "tokens"), "flops_per_token_m"].iloc[0]
             / main.loc[main["label"] == "Vanilla", "flops_per_token_m"].iloc[0])
    assert row["verdict"] == "not held" and row["diagnosis"] == "scale"
    assert f"forward FLOPs per token are {flops:.3f}x" in row["evidence"] and "peak" not in row["evidence"]
    # memory over 0.75: the evidence splits the peak into training state and the rest
    heavy = _cost_rounds(monkeypatch, [0.70, 0.70, 0.70], [0.83, 0.84, 0.85])
    row = judged({**committed, "train_cost": heavy}).loc[claim]
    assert row["verdict"] == "not held" and "training state (parameters, gradients, AdamW moments) is 0.640x" in \
        row["evidence"] and "FLOPs" not in row["evidence"]
    # fewer than the three rounds the claim's test asks for cannot decide it
    two = _cost_rounds(monkeypatch, [0.70, 0.70], [0.70, 0.70])
    row = judged({**committed, "train_cost": two}).loc[claim]
    assert row["verdict"] == "not measured" and ">= 3 paired rounds" in row["measured"]


def _speed(lo3: float, rounds: int = 5) -> pd.DataFrame:
    """throughput.csv with MoR-2 EC at [1.05, 1.15] over vanilla and MoR-3 EC at [lo3, lo3 + 0.1], both settings."""
    rows = [("Vanilla", 0, "B", 1.0, 1.0, 1.0, 1.0), ("Recursive", 3, "B", 0.9, 0.88, 0.93, 3.0)]
    for setting in ("B", "B = Max"):
        rows += [("MoR-2 EC", 2, setting, 1.10, 1.05, 1.15, 1.6), ("MoR EC", 3, setting, lo3 + 0.05, lo3, lo3 + 0.1,
                                                                     2.0)]
    return pd.DataFrame(rows, columns=["model", "nr", "setting", "speedup_vs_vanilla", "speedup_lo", "speedup_hi",
                                       "mean_depth"]).assign(max_batch=8, nll=6.0, rounds=rounds)


def test_throughput_growth_with_nr_needs_separated_rounds(committed):
    claim = "mor.fig4a.throughput_rises_with_nr"
    # the promoted run times 6 paired rounds: Nr 2 -> 3 falls at B beyond them (1.254x -> 1.076x)
    row = judged(committed).loc[claim]
    assert row["verdict"] == "not held" and row["diagnosis"] == "scale" and "(falls)" in row["measured"]
    three = committed["throughput"].assign(rounds=3)  # the same spread read as 3 rounds: too few to decide
    row = judged({**committed, "throughput": three}).loc[claim]
    assert row["verdict"] == "not testable at this scale" and row["diagnosis"] == ""
    assert "3 round(s) hold the median with 75.0% only" in row["measured"]
    older = committed["throughput"].drop(columns=["nr"])  # written before the Nr column
    row = judged({**committed, "throughput": older}).loc[claim]
    assert row["verdict"] == "not measured" and "each row's Nr" in row["measured"]
    assert verdict({**committed, "throughput": _speed(1.20)}, claim) == "held"  # Nr 3's slowest above Nr 2's fastest
    assert "holds the median with 93.8%" in judged({**committed, "throughput": _speed(1.20)}).loc[claim, "measured"]
    # Nr 3 slower than Nr 2 in every round at B, every batch 8, rising at B = Max: decided against, and the evidence
    # says where it holds and that the deeper model is slower at an unchanged batch
    one = _speed(1.20).assign(speedup_lo=lambda d: np.where((d["nr"] == 3) & (d["setting"] == "B"), 0.90,
                                                            d["speedup_lo"]),
                              speedup_hi=lambda d: np.where((d["nr"] == 3) & (d["setting"] == "B"), 1.00,
                                                            d["speedup_hi"]))
    row = judged({**committed, "throughput": one}).loc[claim]
    assert row["verdict"] == "not held" and row["diagnosis"] == "scale" and "it holds at B = Max" in row["evidence"]
    assert "at an unchanged batch the deeper MoR is slower" in row["evidence"]
    assert "Nr 3's fastest round 1.000 below Nr 2's slowest 1.050" in row["evidence"]
    row = judged({**committed, "throughput": _speed(1.12)}).loc[claim]  # the rounds overlap: not separated
    assert row["verdict"] == "not testable at this scale" and "Nr 2 1.100x [1.050, 1.150]" in row["measured"]
    assert "the intervals overlap, so 5 paired rounds cannot order the speed-ups" in row["measured"]
    # every MoR EC depth must beat vanilla in every round for Fig. 4a's first half
    assert verdict({**committed, "throughput": _speed(1.20)}, "mor.fig4a.throughput") == "held"
    straddle_two = _speed(1.20).assign(speedup_lo=lambda d: np.where(d["nr"] == 2, 0.98, d["speedup_lo"]))
    assert verdict({**committed, "throughput": straddle_two}, "mor.fig4a.throughput") == "not testable at this scale"
    slow_two = straddle_two.assign(speedup_hi=lambda d: np.where(d["nr"] == 2, 0.99, d["speedup_hi"]))
    row = judged({**committed, "throughput": slow_two}).loc["mor.fig4a.throughput"]
    assert row["verdict"] == "not held" and row["diagnosis"] == "scale"
    assert "slower than vanilla in every one of 5 paired rounds: MoR-2 EC at B" in row["evidence"]
    assert "the Recursive model, with vanilla's FLOPs and every layer pass, runs at 0.900x" in row["evidence"]


def test_throughput_claims_decide_only_from_five_rounds(committed):
    """rlib.rounds: paired timing rounds decide a claim only from DECIDING_ROUNDS (5); 3 rounds' [min, max] holds the
    median with 75 % only. Until 2026-12-07 both Fig. 4a claims were decided from 3 rounds (held / not held)."""
    for claim in ("mor.fig4a.throughput", "mor.fig4a.throughput_rises_with_nr"):
        for rounds, expected in ((3, "not testable at this scale"), (4, "not testable at this scale"), (5, "held")):
            row = judged({**committed, "throughput": _speed(1.20, rounds)}).loc[claim]
            assert row["verdict"] == expected, (claim, rounds)
        row = judged({**committed, "throughput": _speed(1.20, 3)}).loc[claim]
        assert "the rounds decide from 5 (93.8%)" in row["measured"] and "throughput_table's repeats" in row["measured"]
        # a table that does not say how many rounds it timed cannot be read as an interval
        row = judged({**committed, "throughput": _speed(1.20).drop(columns=["rounds"])}).loc[claim]
        assert row["verdict"] == "not measured" and "column `rounds`" in row["measured"]
    # 3 rounds below vanilla in every round: still too few to decide
    slow = _speed(0.80, 3).assign(speedup_lo=lambda d: np.where(d["nr"] == 2, 0.85, d["speedup_lo"]),
                                  speedup_hi=lambda d: np.where(d["nr"] == 2, 0.95, d["speedup_hi"]))
    assert verdict({**committed, "throughput": slow}, "mor.fig4a.throughput") == "not testable at this scale"
    assert verdict({**committed, "throughput": slow.assign(rounds=5)}, "mor.fig4a.throughput") == "not held"


def _kv_flops(share_total: float, share_attention: float, share_bytes: int = 4) -> pd.DataFrame:
    rows = [("Recursive", "cache", 12, 30.0, 3.6), ("MoR-EC cache", "cache", 8, 22.0, 2.2),
            ("MoR-EC share", "share", share_bytes, share_total, share_attention)]
    return pd.DataFrame([{"model": m, "kv": kv, "bytes": b, "predicted_ratio": b / 12, "measured_ratio": b / 12,
                          "mflops_per_token": f, "attention_mflops_per_token": a, "app_c_mflops_per_token": f - 4}
                         for m, kv, b, f, a in rows])


def test_kv_sharing_flops_claim_reads_the_executed_counts(committed):
    """Sec. 4.3 footnote 5: fewer FLOPs overall although attention grows, and less memory; each part flips it."""
    assert verdict({**committed, "kv_bytes": _kv_flops(21.9, 2.6)}, "mor.s4_3.kv_share_fewer_flops") == "held"
    more = judged({**committed, "kv_bytes": _kv_flops(22.1, 2.6)}).loc["mor.s4_3.kv_share_fewer_flops"]
    assert more["verdict"] == "not held" and more["diagnosis"] == "scale" and "outweighs" in more["evidence"]
    no_reuse = judged({**committed, "kv_bytes": _kv_flops(21.9, 2.2)}).loc["mor.s4_3.kv_share_fewer_flops"]
    assert no_reuse["verdict"] == "not held" and no_reuse["diagnosis"] == "setup"
    assert verdict({**committed, "kv_bytes": _kv_flops(21.9, 2.6, share_bytes=9)},
                   "mor.s4_3.kv_share_fewer_flops") == "not held"
    assert "mflops_per_token" in verdict_measured(committed, "kv_bytes", "mor.s4_3.kv_share_fewer_flops")


def verdict_measured(tabs, name, claim_id) -> str:
    """The `measured` text of a claim judged without `name`'s new columns (an older run's table)."""
    old = tabs[name].drop(columns=[c for c in tabs[name].columns if "mflops" in c], errors="ignore")
    return judged({**tabs, name: old}).loc[claim_id, "measured"]


def test_token_choice_mlp_router_claim_reads_maxvio(committed):
    """Table 4 (right): MLP is 'best' only on MaxVio in the paper's own rows; NLL is reported, not judged."""
    def rows(mlp_vio: float, mlp_nll: float) -> pd.DataFrame:
        return pd.DataFrame([{"routing": "token", "row": "final design", "arch": "linear", "maxvio": 0.8, "nll": 6.5},
                             {"routing": "token", "row": "tc_mlp", "arch": "mlp", "maxvio": mlp_vio, "nll": mlp_nll}])

    assert verdict({**committed, "routers": rows(0.1, 6.9)}, "mor.tab4.tc_mlp_router_best") == "held"
    worse = judged({**committed, "routers": rows(0.9, 6.0)}).loc["mor.tab4.tc_mlp_router_best"]
    assert worse["verdict"] == "not held" and worse["diagnosis"] == "budget"


def test_nll_rising_with_nr_reads_a_reversal_beyond_seed_noise_as_a_disagreement(committed):
    """Table 3 / Fig. 5c: MoR-3 EC ahead of MoR-2 by 41x its seed s.d. while the Recursive order holds is the
    book's finding, not a budget shortfall; a reversal within the seed noise stays budget."""
    row = judged(committed).loc["mor.tab3_fig5c.nll_rises_with_nr"]
    assert row["verdict"] == "not held" and row["diagnosis"] == "disagrees with the paper"
    assert row["evidence"].startswith("MoR-3 EC leads MoR-2 by 0.0819 at equal FLOPs, 41x the MoR EC seed s.d.")
    close = with_value(committed, "main", {"label": "MoR-2 EC", "budget": "flops"}, "nll", 5.9045)
    close = with_value(close, "main", {"label": "MoR-2 EC", "budget": "tokens"}, "nll", 5.99)
    near = judged(close).loc["mor.tab3_fig5c.nll_rises_with_nr"]
    assert near["verdict"] == "not held" and near["diagnosis"] == "budget"
