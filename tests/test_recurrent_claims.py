"""Chapter 04's claims ledger (rlib.recurrent.claims, paper 002): the committed cpu tables give the catalogue's
verdicts, every "not held" carries a diagnosis and evidence, moving one number flips a verdict, and missing tables
or columns give "not measured" instead of an error."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from rlib.book.claims import SMOKE_EVIDENCE, check_ledger, load_tables
from rlib.recurrent import claims, tables
from rlib.recurrent.config import RecurrentConfig

FIGURES = Path(__file__).resolve().parents[1] / "figures" / "04_recurrent_transformer"
CPU = RecurrentConfig.preset("cpu")

# The verdicts on the committed cpu tables (rt.fig4.latency_growth is judged from the committed GPU run: gpu_prefill)
CPU_VERDICTS = {
    "rt.s5.tiling_exact": "held",
    "rt.s5.tiling_exact.ours": "held",
    "rt.s5.traffic_n_log_n": "held",
    "rt.s5.traffic_n_log_n.ours": "held",
    "rt.s5.arithmetic_intensity": "held",
    # new 2026-12-06, counted from the schedules: pairs equal to the loop's at every N (slope 2.000), the mean slice
    # (log2 N) / 2 (0.508 -> 0.500 of log2 N over N = 64 .. 16384)
    "rt.s5.attention_flops_quadratic": "held",
    "rt.s6_3.kv_slice_log_n": "held",
    "rt.s2_2.no_extra_kv_parameters": "held",  # 0.744368M and 0.787712M, both blocks
    "rt.thm1.simulates_transformer": "held",  # App. A's construction: attention and outputs equal to ~1e-15
    "rt.s3_2.token_recurrence": "held",  # 0.16 at G = 0 down to 1.6e-13 at G = 32
    "rt.s3_1.single_layer_width_2d": "held",  # new 2026-12-06: width 16 for 8, outputs equal to 2.6e-16
    "rt.thm4_1.closed_form": "held",
    "rt.thm4_1.no_explosion_no_vanishing": "held",
    "rt.thm4_1.grows_above_one.ours": "held",
    # the newest GPU folder (H200, 3d9e1ee), eager over N 4096 -> 8192: naive slope 1.84, PyTorch tiles (the paper's
    # implementation) 1.52; the book's Triton tiles 0.83 over 2048 -> 4096 (held when judged on them, to 2026-12-05)
    "rt.fig4.latency_growth": "not held",
    "rt.ours.cpu_speedup": "not held",  # 1.60x on a 2-core AMX Xeon (2.03x, 2.43x, 1.67x, 1.82x on EPYCs before)
    "rt.table2.cuda_graphs": "not held",  # H200, 3d9e1ee: eager max/min 1.86 over B, graph speed-up 2.7x at B 512
    "rt.s7_3.kv_cache_same_as_transformer": "held",
    "rt.ours.decode_matches_prefill": "held",
    # the 2026-12-06 run on a 2-core AMX Xeon, batch 1: deep 1.27x [0.85, 1.35] straddles 1.2 (1.25x [1.22, 1.31],
    # not held, on 2026-12-05's AVX2 EPYC)
    # 2026-12-07 (promoted then): batch 1 1.23x [1.22, 1.25], above 1.2, not held; the evening's run at 8c1acbd, the
    # same kind of host: 1.26x [1.19, 1.38], straddling it
    "rt.abstract.decode_cost": "not testable at this scale",
    "rt.fig5.recall_sequence_accuracy": "not held",
    "rt.fig5.copying_sequence_accuracy": "not held",
    "rt.fig5.recall_copy_margin.ours": "not held",
    "rt.fig5.transformer_no_meaningful_performance": "not held",
    "rt.fig6.compression_token_level": "not held",
    "rt.fig6.rt_ahead_token_level.ours": "not held",
    "rt.ours.task_loss_ablation": "not measured",  # cpu-long's (figures/cpu-long)
    "rt.ours.task_setup_copying": "not held",
    "rt.table1.rt_beats_transformer_equal_depth": "not held",
    "rt.table1.shallow_rt_beats_deeper_transformer": "held",
    "rt.table1.shallow_rt_no_worse.ours": "held",
    "rt.table1.shallow_rt_best_overall": "not held",
    "rt.table1.depth_width_shift": "not held",
    "rt.table1.kv_cache_30pct": "held",
    "rt.table1.transformer_2L": "not measured",
    "rt.e2.norm_allows_higher_lr": "not measured",  # cpu-long's
    "rt.e2.no_norm_significantly_worse": "not measured",
    "rt.fig8_9.batch_sizes_150m": "not measured",
    "rt.tables3_5_8.downstream_gold_ce.ours": "not held",  # RT's cloze CE higher by 2.2-2.5 s.e.
    "rt.tables6_9_10.downstream_accuracy": "held",  # every next-line accuracy within 0.25 +- 0.060
}
CPU_DIAGNOSES = {
    "rt.fig5.recall_sequence_accuracy": "setup",
    "rt.fig5.copying_sequence_accuracy": "budget",
    "rt.fig5.recall_copy_margin.ours": "setup",
    # memorization on MAD's 256 sequences since 2026-12-07: the Transformer reaches 0.722 (setup before)
    "rt.fig5.transformer_no_meaningful_performance": "disagrees with the paper",
    "rt.fig6.compression_token_level": "budget",
    "rt.fig6.rt_ahead_token_level.ours": "setup",
    "rt.ours.task_setup_copying": "budget",
    "rt.table1.rt_beats_transformer_equal_depth": "budget",
    "rt.table1.shallow_rt_best_overall": "budget",
    "rt.table1.depth_width_shift": "scale",
    "rt.ours.cpu_speedup": "setup",
    "rt.fig4.latency_growth": "setup",
    "rt.table2.cuda_graphs": "setup",
    "rt.tables3_5_8.downstream_gold_ce.ours": "budget",
}


def _judge(tables_: dict[str, pd.DataFrame], cfg: RecurrentConfig = CPU):
    return claims.judge(tables_, cfg, "cpu").finish().set_index("id")


def _verdict(tables_: dict[str, pd.DataFrame], claim_id: str, cfg: RecurrentConfig = CPU) -> str:
    return _judge(tables_, cfg).loc[claim_id, "verdict"]


@pytest.fixture(scope="module")
def committed() -> dict[str, pd.DataFrame]:
    return load_tables(FIGURES)


def test_committed_cpu_tables_give_the_catalogue_verdicts(committed):
    ledger = claims.judge(committed, CPU, "cpu").finish()
    assert check_ledger(ledger) == []
    judged = ledger.set_index("id")
    assert judged["verdict"].to_dict() == CPU_VERDICTS
    not_held = judged[judged["verdict"] == "not held"]
    assert not_held["diagnosis"].to_dict() == CPU_DIAGNOSES
    assert all("needs:" in text for text in judged.loc[judged["verdict"] == "not measured", "measured"])
    # the evidence is formatted from this run's numbers, not written in advance
    assert "2.09x at N = 4096" in judged.loc["rt.ours.cpu_speedup", "measured"]  # 1.61x in the run before
    assert "in_context_recall curve is flat at token acc 0.29-0.32" in judged.loc["rt.fig5.recall_sequence_accuracy",
                                                                                  "evidence"]
    assert "RT copy +0.015" in judged.loc["rt.fig5.copying_sequence_accuracy", "evidence"]  # +0.017 the run before
    assert "counts the letters still to copy scores 0.240 = 3.5x chance" in judged.loc["rt.ours.task_setup_copying",
                                                                                      "evidence"]
    assert "0.39 per non-embedding parameter" in judged.loc["rt.table1.rt_beats_transformer_equal_depth", "evidence"]


def test_specs_are_unique_and_placed_in_the_paper():
    ids = [spec.id for spec in claims.SPECS]
    assert len(ids) == len(set(ids)) == len(CPU_VERDICTS)
    assert set(ids) == set(CPU_VERDICTS)
    assert all(spec.where.strip() and spec.paper == "002" and spec.artifact for spec in claims.SPECS)
    assert all(spec.ours == (".ours" in spec.id or spec.id.startswith("rt.ours.")) for spec in claims.SPECS)
    judged_ids = {claim_id for claim_id, _, _ in claims.RULES} | set(claims.NOT_MEASURED)
    assert judged_ids == set(ids)


def test_no_tables_means_every_claim_not_measured():
    ledger = claims.judge({}, CPU, "cpu").finish()
    assert len(ledger) == len(claims.SPECS)
    assert set(ledger["verdict"]) == {"not measured"}
    assert all(text.startswith("needs:") for text in ledger["measured"])
    assert check_ledger(ledger) == []


def test_a_missing_column_is_not_measured_not_an_error(committed):
    partial = dict(committed, tasks=committed["tasks"].drop(columns=["token_acc"]),
                   norm_ablation=pd.DataFrame(columns=["kv_norm", "lr", "test_nll", "final_train_loss", "diverged"]))
    judged = _judge(partial)
    assert judged.loc["rt.fig5.recall_sequence_accuracy", "verdict"] == "not measured"
    assert "token_acc" in judged.loc["rt.fig5.recall_sequence_accuracy", "measured"]
    assert judged.loc["rt.e2.no_norm_significantly_worse", "verdict"] == "not measured"
    assert judged.loc["rt.s5.tiling_exact", "verdict"] == "held"  # other tables are still judged


def test_the_promoted_cpu_long_tables_give_the_moved_claims_verdicts(committed):
    """cpu-long (figures/cpu-long) measured what cpu leaves out: MAD's loss, the norm ablation, the 2L row. Its run of
    2026-12-07 has App. D.1's tuning (each Table 1 shape at its own rate of the grid) and memorization on MAD's 256."""
    long = load_tables(FIGURES.parents[0] / "cpu-long" / FIGURES.name)
    judged = _judge({**committed, **long}, RecurrentConfig.preset("cpu-long"))
    # MAD's value draws (2026-12-05): RT trained on the scored targets stays on its plateau (0.32 after 1,000 steps)
    assert tuple(judged.loc["rt.ours.task_loss_ablation", ["verdict", "diagnosis"]]) == ("not held", "budget")
    # the grid reaches 3.16e-2 since 2026-12-07: there the norm-free shallow RT diverges and the normed one does not
    # (4.898), so the norm allows the higher rate; both variants' best rate is 1e-2 below it, where they tie
    assert tuple(judged.loc["rt.e2.norm_allows_higher_lr", ["verdict", "diagnosis"]]) == ("held", "")
    worse = judged.loc["rt.e2.no_norm_significantly_worse"]
    assert (worse["verdict"], worse["diagnosis"]) == ("not held", "scale")
    assert "without - with per lr: -0.016, -0.001, +0.004, diverged" in worse["measured"]
    assert "without the norm the run at lr 0.0316 diverged where the normed one reaches 4.898" in worse["evidence"]
    assert "+0.018 over its best at 0.01" in worse["evidence"] and "do not reach" not in worse["evidence"]
    # the norm-free layer ahead beyond the seed s.d. at the lowest rate: named as the reverse of the paper's order
    assert "better beyond 2 seed s.d. at lr 0.001, the reverse of the paper's order" in worse["evidence"]
    # the 2L row parameter-matched (~D / sqrt(2), Table 1's 24 x 1024 shape), tuned over the grid as the others:
    # deeper and narrower is worse at this size, the paper's own reading of its row. On the threshold: +0.0385 is
    # 2.01 s.e. in this run (the EPYC), +0.0383 was 1.97 s.e. in the run before (the AMX Xeon), so it reads not held
    assert tuple(judged.loc["rt.table1.transformer_2L", ["verdict", "diagnosis"]]) == ("not held", "scale")
    assert "T(2L) 4.9349 vs T(L) 4.8964 (+0.0385, 2.0 s.e.)" in judged.loc["rt.table1.transformer_2L", "measured"]
    # tuned as App. D.1: the RT - T comparisons at equal shape read budget, the tuning named in the evidence
    equal = judged.loc["rt.table1.rt_beats_transformer_equal_depth"]
    assert (equal["verdict"], equal["diagnosis"]) == ("not held", "budget")
    assert "each shape's learning rate is tuned as App. D.1 does" in equal["evidence"]
    assert "vs best Transformer (L 2, D 176)" in judged.loc["rt.table1.shallow_rt_best_overall", "measured"]
    # memorization on MAD's 256 sequences, scored on fresh ones: the 1-layer Transformer solves it (0.722)
    assert tuple(judged.loc["rt.fig5.transformer_no_meaningful_performance", ["verdict", "diagnosis"]]) == (
        "not held", "disagrees with the paper")
    # the tuning grid (copy at 15 epochs) lifts RT's copy to 13x chance (13.4x on the AMX Xeon): the set-up check holds
    assert judged.loc["rt.ours.task_setup_copying", "verdict"] == "held"
    assert "copy: RT 13.2x, T 3.6x chance" in judged.loc["rt.ours.task_setup_copying", "measured"]
    # Figs. 8-9 at batch 16 and 32, the downstream columns and the decode cost: measured, with diagnoses
    assert tuple(judged.loc["rt.fig8_9.batch_sizes_150m", ["verdict", "diagnosis"]]) == ("not held", "budget")
    gold_ce = "rt.tables3_5_8.downstream_gold_ce.ours"
    assert tuple(judged.loc[gold_ce, ["verdict", "diagnosis"]]) == ("not held", "budget")
    assert judged.loc["rt.tables6_9_10.downstream_accuracy", "verdict"] == "held"
    # cpu-long's own decode-cost timing (2026-12-07 evening, the EPYC, 15 paired rounds, quiet): at batch 1 the
    # interval straddles the paper's 1.2x, so not testable (above it, 1.24x [1.23, 1.26], on the AMX Xeon that day)
    assert judged.loc["rt.abstract.decode_cost", "verdict"] == "not testable at this scale"
    assert "batch 1: RT / T 1.23x per token [1.16, 1.29]" in judged.loc["rt.abstract.decode_cost", "measured"]


# ---- small synthetic tables: one number flips a verdict -------------------------------------------------------


def _exactness(fp32_grad: float) -> pd.DataFrame:
    rows = [("float64", 1e-15, 2e-15, 1e-30), ("float32", 6e-7, 9e-7, fp32_grad)]
    return pd.DataFrame([{"n": 33, "dtype": d, "position": "alibi", "gqa": False, "tiles": "reference",
                          "max_abs_dz": dz, "max_abs_dk": dk, "grad_rel_sq_err": g} for d, dz, dk, g in rows])


def test_exactness_paper_threshold_is_tighter_than_the_books():
    assert _verdict({"exactness": _exactness(4e-13)}, "rt.s5.tiling_exact") == "held"
    judged = _judge({"exactness": _exactness(5e-12)})
    assert judged.loc["rt.s5.tiling_exact", "verdict"] == "not held"
    assert "5.0e-12" in judged.loc["rt.s5.tiling_exact", "evidence"]
    assert judged.loc["rt.s5.tiling_exact.ours", "verdict"] == "held"  # the book's 1e-10 stays as it was


def test_smoke_profile_gets_the_ledgers_note_instead_of_a_diagnosis():
    smoke = claims.judge({"exactness": _exactness(5e-12)}, CPU, "smoke").finish().set_index("id")
    assert smoke.loc["rt.s5.tiling_exact", "verdict"] == "not held"
    assert smoke.loc["rt.s5.tiling_exact", "evidence"] == SMOKE_EVIDENCE


def test_theorem_trend_flips_when_the_gradient_grows_below_radius_one(committed):
    paths = committed["theorem_4_1"].copy()
    assert _verdict({"theorem_4_1": paths}, "rt.thm4_1.no_explosion_no_vanishing") == "held"
    last = paths.index[(paths["radius"] == 0.5) & (paths["t"] == 12)]
    paths.loc[last, "grad_norm"] = 1.0  # above its t = 2 value 0.544: exploding below radius 1
    judged = _judge({"theorem_4_1": paths})
    assert judged.loc["rt.thm4_1.no_explosion_no_vanishing", "verdict"] == "not held"
    assert "radius 0.5" in judged.loc["rt.thm4_1.no_explosion_no_vanishing", "evidence"]
    # above radius 1 the paper states nothing: the growth there is the book's own claim, judged apart
    assert "radius 1.5" not in judged.loc["rt.thm4_1.no_explosion_no_vanishing", "measured"]
    flat = committed["theorem_4_1"].copy()
    above = flat.index[(flat["radius"] > 1) & (flat["t"] == flat["t"].max())]
    flat.loc[above, "grad_norm"] = 0.0
    judged = _judge({"theorem_4_1": flat})
    assert judged.loc["rt.thm4_1.grows_above_one.ours", "verdict"] == "not held"
    assert judged.loc["rt.thm4_1.no_explosion_no_vanishing", "verdict"] == "held"


def _decoding(rt_bytes: float) -> pd.DataFrame:
    return pd.DataFrame([{"block": b, "position": "alibi", "prompt": 4, "decoded": 4, "max_abs_logit_diff": 1e-6,
                          "cache_bytes_per_token": rt_bytes if b == "recurrent" else 1024.0,
                          "predicted_bytes_per_token": 1024} for b in ("recurrent", "transformer")])


def test_decoding_cache_size_flips():
    assert _verdict({"decoding": _decoding(1024.0)}, "rt.s7_3.kv_cache_same_as_transformer") == "held"
    assert _verdict({"decoding": _decoding(2048.0)}, "rt.s7_3.kv_cache_same_as_transformer") == "not held"


def _latency(device: str, tiled_4096: float) -> pd.DataFrame:
    seconds = {"naive": (1.0, 16.0), "tiled-reference": (1.0, tiled_4096), "transformer": (0.2, 3.0)}
    return pd.DataFrame([{"n": n, "mode": mode, "seconds": s[i], "d_model": 64, "heads": 4, "batch": 4,
                          "device": device, "threads": 2, "speedup_vs_naive": seconds["naive"][i] / s[i]}
                         for mode, s in seconds.items() for i, n in enumerate((1024, 4096))])


def test_latency_growth_is_judged_on_a_gpu_only():
    assert _verdict({"latency": _latency("cpu", 4.0)}, "rt.fig4.latency_growth") == "not measured"
    assert _verdict({"latency": _latency("cuda", 4.0)}, "rt.fig4.latency_growth") == "held"  # slope 1.0
    assert _verdict({"latency": _latency("cuda", 8.0)}, "rt.fig4.latency_growth") == "not held"  # slope 1.5
    assert _verdict({"latency": _latency("cpu", 4.0)}, "rt.ours.cpu_speedup") == "not held"  # 4x
    assert _verdict({"latency": _latency("cpu", 3.0)}, "rt.ours.cpu_speedup") == "held"  # 5.3x


def _gpu_prefill(naive_ratio: float) -> pd.DataFrame:
    """make gpu-check's prefill rows: naive eager time grows by `naive_ratio` per doubling, Triton tiles by 2x."""
    rows = []
    for mode, ratio in (("naive", naive_ratio), ("tiled-triton", 2.0)):
        for i, n in enumerate((1024, 2048, 4096)):
            rows += [{"n": n, "mode": mode, "cuda_graph": graph, "batch": 32, "d_model": 1024, "seconds": ratio ** i,
                      "device": "NVIDIA H100", "date": "2026-11-25", "commit": "abc"} for graph in (False, True)]
    return pd.DataFrame(rows)


def test_latency_growth_reads_the_gpu_prefill_table_when_measured():
    cpu = {"latency": _latency("cpu", 4.0)}
    assert _verdict({**cpu, "gpu_prefill": _gpu_prefill(4.0)}, "rt.fig4.latency_growth") == "held"  # slopes 2, 1
    assert _verdict({**cpu, "gpu_prefill": _gpu_prefill(3.0)}, "rt.fig4.latency_growth") == "not held"  # naive 1.58
    unmeasured = pd.DataFrame([{"note": "prefill: not measured on a GPU", "device": "", "date": "", "commit": ""}])
    assert _verdict({**cpu, "gpu_prefill": unmeasured}, "rt.fig4.latency_growth") == "not measured"
    # the paper's layer is PyTorch tiles (no custom kernels): where they were timed, they are judged, not Triton's,
    # over the same span as the naive loop
    both = pd.concat([_gpu_prefill(4.0), _gpu_prefill(4.0).query("mode == 'tiled-triton'").assign(
        mode="tiled-reference", seconds=lambda d: 3.0 ** (d["n"] / 1024).map(math.log2))])
    row = _judge({**cpu, "gpu_prefill": both}).loc["rt.fig4.latency_growth"]
    assert row["verdict"] == "not held" and "tiled-reference slope 1.58" in row["measured"]
    assert "the book's Triton tiles, eager 1.00" in row["measured"] and "per doubling" in row["evidence"]


def _gpu_prefill_batch(scale_eager_2048: float = 1.0, drop: int | None = None) -> pd.DataFrame:
    """make gpu-check's prefill_batch table holding the paper's own Table 2 numbers (optionally one eager row scaled,
    one batch left out)."""
    rows = []
    for batch, (eager, graph) in claims.TABLE2_MS.items():
        if batch == drop:
            continue
        eager *= scale_eager_2048 if batch == 2048 else 1.0
        base = {"batch": batch, "n": 512, "device": "NVIDIA H100", "date": "2026-12-01", "commit": "abc1234"}
        rows += [{**base, "cuda_graph": False, "ms_per_layer": eager, "graph_speedup": float("nan")},
                 {**base, "cuda_graph": True, "ms_per_layer": graph, "graph_speedup": eager / graph}]
    return pd.DataFrame(rows)


def test_table2_rule_passes_the_papers_own_numbers_and_flips_on_each_reading():
    claim = "rt.table2.cuda_graphs"
    assert _verdict({"gpu_prefill_batch": _gpu_prefill_batch()}, claim) == "held"  # 1.066 flat, 3.393x at B 512
    judged = _judge({"gpu_prefill_batch": _gpu_prefill_batch(1.2)})  # eager 352 ms at B 2048: not flat
    assert judged.loc[claim, "verdict"] == "not held" and "varies 1.28x" in judged.loc[claim, "evidence"]
    # the diagnosis measures the launch overhead (eager - graphed at B 32: 277.08 - 38.85 here) beside the paper's
    evidence = judged.loc[claim, "evidence"]
    assert "launch overhead (eager - graphed) 238 ms per layer at B 32, the paper's 238" in evidence
    assert "B 512: 3.4x" in judged.loc[claim, "measured"]
    assert _verdict({"gpu_prefill_batch": _gpu_prefill_batch(drop=1024)}, claim) == "not measured"
    unmeasured = pd.DataFrame([{"note": "prefill_batch: not measured on a GPU", "device": "", "date": "",
                                "commit": ""}])
    assert _verdict({"gpu_prefill_batch": unmeasured}, claim) == "not measured"


def _task_tables(noisy_rt_seed1: float, seeds: int = 2) -> dict[str, pd.DataFrame]:
    """Recall tasks with per-seed rows; the noisy-recall RT sequence accuracy of seed 1 is the number to move."""
    per_seed = []
    for seed in range(seeds):
        for task, rt, tf in (("in_context_recall", 0.95, 0.0), ("noisy_recall", 0.6, 0.0),
                             ("fuzzy_recall", 0.5, 0.05)):
            rt = noisy_rt_seed1 if (task == "noisy_recall" and seed == 1) else rt
            per_seed += [{"task": task, "block": "recurrent", "seed": seed, "token_acc": 0.9, "seq_acc": rt},
                         {"task": task, "block": "transformer", "seed": seed, "token_acc": 0.6, "seq_acc": tf}]
    per_seed = pd.DataFrame(per_seed)
    means = per_seed.groupby(["task", "block"], sort=False).agg(
        token_acc=("token_acc", "mean"), seq_acc=("seq_acc", "mean"), token_acc_sd=("token_acc", "std"),
        seeds=("seed", "count")).reset_index()
    return {"tasks": means, "task_seeds": per_seed}


def test_recall_needs_a_clear_margin_over_seed_noise():
    claim = "rt.fig5.recall_sequence_accuracy"
    assert _verdict(_task_tables(0.6), claim) == "held"
    judged = _judge(_task_tables(0.1))  # noisy recall mean gap 0.35 but seed s.d. 0.35: within noise
    assert judged.loc[claim, "verdict"] == "not held" and "within 2 seed s.d." in judged.loc[claim, "evidence"]
    one_seed = _judge(_task_tables(0.6, seeds=1))
    assert one_seed.loc[claim, "verdict"] == "not held" and "1 seed(s)" in one_seed.loc[claim, "evidence"]


def _compression(rt_token: float) -> dict[str, pd.DataFrame]:
    rows = [{"task": "compression", "block": b, "seed": s, "token_acc": acc + 0.005 * s, "seq_acc": 0.0}
            for s in range(3) for b, acc in (("recurrent", rt_token), ("transformer", 0.2))]
    per_seed = pd.DataFrame(rows)
    means = per_seed.groupby(["task", "block"], sort=False).agg(
        token_acc=("token_acc", "mean"), seq_acc=("seq_acc", "mean"), seeds=("seed", "count")).reset_index()
    return {"tasks": means, "task_seeds": per_seed}


def test_compression_gap_flips_at_the_threshold():
    claim = "rt.fig6.compression_token_level"
    assert _verdict(_compression(0.30), claim) == "held"
    judged = _judge(_compression(0.22))
    assert judged.loc[claim, "verdict"] == "not held" and judged.loc[claim, "diagnosis"] == "budget"


def _lm(rt_deep: float, rt_shallow: float = 4.95, sd: float = 0.01, t_deep: float = 5.0,
        t_shallow: float = 5.02) -> pd.DataFrame:
    rows = [("transformer", "deep", 4, 128, t_deep, 1024), ("transformer", "shallow", 2, 176, t_shallow, 704),
            ("recurrent", "deep", 4, 128, rt_deep, 1024), ("recurrent", "shallow", 2, 176, rt_shallow, 704)]
    return pd.DataFrame([{"block": b, "depth": d, "n_layers": n, "d_model": w, "params_m": 0.78,
                          "kv_floats_per_token": kv, "test_nll": nll, "test_nll_sd": sd, "seeds": 2}
                         for b, d, n, w, nll, kv in rows])


def test_equal_depth_comparison_flips_with_one_nll():
    claim = "rt.table1.rt_beats_transformer_equal_depth"
    assert _verdict({"language_models": _lm(4.96)}, claim) == "held"  # T - RT = 0.04 at L, 0.07 at L/2
    judged = _judge({"language_models": _lm(5.01)})
    assert judged.loc[claim, "verdict"] == "not held" and judged.loc[claim, "diagnosis"] == "budget"
    assert "needs: the lm_validation table" in judged.loc[claim, "evidence"]


def test_depth_width_shift_and_the_transformers_own_optimum():
    claim = "rt.table1.depth_width_shift"
    assert _verdict({"language_models": _lm(4.99, rt_shallow=4.95)}, claim) == "held"  # shift 0.06 > 2 s.e. 0.028
    judged = _judge({"language_models": _lm(4.99, t_shallow=4.97)})  # the Transformer prefers the shallow shape
    assert judged.loc[claim, "verdict"] == "not held" and judged.loc[claim, "diagnosis"] == "scale"


def test_curve_evidence_comes_from_the_validation_table():
    records = [{"name": f"lm-{b}-deep-lr0.00316-s{s}", "block": b, "depth": "deep", "n_layers": 4, "d_model": 128,
                "seed": s, "kv_norm": True, "main": True,
                "curve": {"step": [50, 100, 150], "val_loss": [v + 0.2, v + 0.1, v]}}
               for b, v in (("recurrent", 5.03), ("transformer", 5.0)) for s in (0, 1)]
    other_rate = dict(records[0], name="lm-recurrent-deep-lr0.01-s0", main=False)  # a tuning run not chosen
    curves = tables.lm_validation_table(records + [other_rate])
    assert len(curves) == 12 and set(curves["block"]) == {"recurrent", "transformer"}
    judged = _judge({"language_models": _lm(5.03), "lm_validation": curves})
    evidence = judged.loc["rt.table1.rt_beats_transformer_equal_depth", "evidence"]
    assert "+0.030 at step 50 to +0.030 at step 150" in evidence and "falls by 0.100 over the last 50 steps" in evidence


def test_transformer_2l_is_judged_once_its_runs_exist():
    claim = "rt.table1.transformer_2L"
    assert _verdict({"language_models": _lm(4.99)}, claim) == "not measured"
    lm = _lm(4.99)
    deeper = lm.iloc[[0]].assign(depth="deeper", n_layers=8, d_model=96, test_nll=5.005)
    assert _verdict({"language_models": pd.concat([lm, deeper])}, claim) == "held"
    assert _verdict({"language_models": pd.concat([lm, deeper.assign(test_nll=5.1)])}, claim) == "not held"
    # a 2L row at the deep width has twice the parameters: not Table 1's row, so not measured, and said why
    wide = _judge({"language_models": pd.concat([lm, deeper.assign(d_model=128, params_m=1.56)])})
    assert wide.loc[claim, "verdict"] == "not measured" and "re-run at D 96" in wide.loc[claim, "measured"]


def test_shallow_rt_best_overall_needs_table_1s_24_layer_row_to_hold():
    claim = "rt.table1.shallow_rt_best_overall"
    lm = _lm(4.99, rt_shallow=4.90)  # RT(L/2) below T(L) and T(L/2) by 5 s.e. and more
    judged = _judge({"language_models": lm})
    assert judged.loc[claim, "verdict"] == "not measured"  # the claim names the 2L Transformer too
    assert "no parameter-matched 8-layer Transformer run" in judged.loc[claim, "measured"]
    deeper = lm.iloc[[0]].assign(depth="deeper", n_layers=8, d_model=96, test_nll=5.0)
    assert _verdict({"language_models": pd.concat([lm, deeper])}, claim) == "held"
    assert _verdict({"language_models": pd.concat([lm, deeper.assign(test_nll=4.89)])}, claim) == "not held"
    # below L and L/2 fails already without the 2L row: not held, whatever that row would say
    assert _verdict({"language_models": _lm(4.99, rt_shallow=5.01)}, claim) == "not held"


def _ablation(no_norm_top: float, diverged: bool = False) -> pd.DataFrame:
    rows = [(True, 1e-3, 5.10), (True, 3e-3, 4.95), (True, 1e-2, 4.96),
            (False, 1e-3, 4.98), (False, 3e-3, 5.00), (False, 1e-2, no_norm_top)]
    return pd.DataFrame([{"kv_norm": norm, "lr": lr, "test_nll": nll, "final_train_loss": nll,
                          "diverged": diverged and not norm and lr == 1e-2} for norm, lr, nll in rows])


def test_norm_ablation_flips_with_the_top_rate_run():
    claim = "rt.e2.norm_allows_higher_lr"
    lm = _lm(4.99)
    # without the norm the best lr is 1e-3 (below the normed 3e-3); the top rate must be > 2 s.d. (0.02) worse
    assert _verdict({"norm_ablation": _ablation(5.00), "language_models": lm}, claim) == "not held"
    assert _verdict({"norm_ablation": _ablation(5.10), "language_models": lm}, claim) == "held"
    assert _verdict({"norm_ablation": _ablation(5.00, diverged=True), "language_models": lm}, claim) == "held"
    # a top rate worse for both variants is a rate past the optimum, not the destabilizing the paper names
    both_worse = _ablation(5.10).assign(test_nll=lambda t: t["test_nll"].mask(t["kv_norm"] & (t["lr"] == 1e-2), 5.10))
    assert _verdict({"norm_ablation": both_worse, "language_models": lm}, claim) == "not held"
    # the paper's text does not say how the two best rates compare: an unnormed best at the normed best rate still
    # holds when the top rate destabilizes, and both best rates are reported
    same_best = _ablation(5.10).assign(test_nll=lambda t: t["test_nll"].mask(~t["kv_norm"] & (t["lr"] == 1e-3), 5.05))
    row = _judge({"norm_ablation": same_best, "language_models": lm}).loc[claim]
    assert row["verdict"] == "held" and "best lr with the norm 0.003, without 0.003" in row["measured"]
    worse = "rt.e2.no_norm_significantly_worse"
    assert _verdict({"norm_ablation": _ablation(5.10), "language_models": lm}, worse) == "held"  # 4.98 vs 4.95
    better = _ablation(5.10).assign(test_nll=lambda t: t["test_nll"].where(t["kv_norm"], t["test_nll"] - 0.1))
    assert _verdict({"norm_ablation": better, "language_models": lm}, worse) == "not held"
    # the norm-free run diverged at the top rate, the normed layer's best: the diagnosis says the norm buys that rate,
    # and how close the norm-free best comes; a normed top rate past its own optimum reads as such instead
    edge = pd.DataFrame([{"kv_norm": norm, "lr": lr, "test_nll": nll, "final_train_loss": nll,
                          "diverged": not norm and lr == 1e-2}
                         for norm, lr, nll in [(True, 1e-3, 5.10), (True, 3e-3, 4.95), (True, 1e-2, 4.90),
                                               (False, 1e-3, 4.98), (False, 3e-3, 4.91), (False, 1e-2, float("nan"))]])
    row = _judge({"norm_ablation": edge, "language_models": lm}).loc[worse]
    assert (row["verdict"], row["diagnosis"]) == ("not held", "scale")
    assert "diverged where the normed one reaches 4.900, its best" in row["evidence"]
    assert "4.910 at 0.003, comes within +0.010 of it" in row["evidence"] and "diverged" in row["measured"]
    past = edge.assign(test_nll=lambda t: t["test_nll"].mask(t["kv_norm"] & (t["lr"] == 1e-2), 4.97))
    evidence = _judge({"norm_ablation": past, "language_models": lm}).loc[worse, "evidence"]
    assert "past the normed layer's own optimum (+0.020 over its best at 0.003" in evidence


def _copying(rt: float, t: float, curve_gain: float = 0.05) -> dict[str, pd.DataFrame]:
    """Copy and selective copying token accuracies (1 seed) and learning curves ending with `curve_gain` over the
    last 30 % of 1,000 steps."""
    chance = {"selective_copying": 1 / 14, "copy": (31 / 26 + 1) / 32}
    means = pd.DataFrame([{"task": task, "block": block, "token_acc": acc * chance[task], "seq_acc": 0.0,
                           "token_acc_sd": float("nan"), "seeds": 1}
                          for task in chance for block, acc in (("recurrent", rt), ("transformer", t))])
    curves = pd.DataFrame([{"task": task, "block": block, "seed": 0, "loss_on": "scored", "ablation": False,
                            "step": step, "train_loss": 1.0, "seq_acc": 0.0, "chance": chance[task],
                            "token_acc": acc * chance[task] - (curve_gain if step <= 700 else 0.0)}
                           for task in chance for block, acc in (("recurrent", rt), ("transformer", t))
                           for step in (100, 400, 700, 1000)])
    return {"tasks": means, "task_curves": curves}


def test_task_setup_check_flips_at_three_times_chance_and_explains_the_copy_ceiling():
    claim = "rt.ours.task_setup_copying"
    assert _verdict(_copying(4.0, 3.2), claim) == "held"
    judged = _judge(_copying(4.0, 2.2, curve_gain=0.0))  # the Transformer short: its counting ceiling is the reason
    assert judged.loc[claim, "verdict"] == "not held" and judged.loc[claim, "diagnosis"] == "setup"
    assert "counts the letters still to copy" in judged.loc[claim, "evidence"]
    judged = _judge(_copying(2.7, 3.1))  # RT short with its curve still rising: the budget
    assert judged.loc[claim, "verdict"] == "not held" and judged.loc[claim, "diagnosis"] == "budget"
    assert "still rising (+0.050" in judged.loc[claim, "evidence"]


def test_task_setup_check_takes_each_blocks_best_run_of_the_tuning_grid():
    claim = "rt.ours.task_setup_copying"
    tables_ = _copying(2.7, 2.2)
    selective = tables_["tasks"]["task"] == "selective_copying"
    tables_["tasks"].loc[selective, "token_acc"] = 4.0 / 14  # only copy falls short in the main runs
    assert _verdict(tables_, claim) == "not held"
    chance = (31 / 26 + 1) / 32
    rows = [("recurrent", 5, 3e-3, 2.7), ("recurrent", 15, 3e-3, 12.0), ("transformer", 5, 3e-3, 2.2),
            ("transformer", 15, 1e-2, 3.6)]
    tuning = pd.DataFrame([{"task": "copy", "block": b, "epochs": e, "lr": lr, "token_acc": x * chance,
                            "seq_acc": 0.0, "minutes": 1.0} for b, e, lr, x in rows])
    tuning["best"] = tuning["token_acc"] == tuning.groupby("block")["token_acc"].transform("max")
    judged = _judge({**tables_, "task_tuning": tuning}).loc[claim]
    assert judged["verdict"] == "held"
    assert "best of the tuning grid (RT 15 epochs, lr 0.003, T 15 epochs, lr 0.01)" in judged["measured"]


def test_copying_budget_diagnosis_reads_the_learning_curves():
    judged = _judge(_copying(4.0, 2.2))
    assert "token acc gained over the last 30 % of the 1,000 steps (task_curves): RT selective_copying +0.050" in \
        judged.loc["rt.fig5.copying_sequence_accuracy", "evidence"]


def test_a_flat_rt_curve_is_diagnosed_as_a_plateau_not_a_disagreement():
    """RT behind the Transformer on one task with a flat curve, while it jumped off the same plateau on another task:
    a set-up matter (a plateau not left), with both curves as evidence; without curves the old reading stands."""
    per_seed = pd.DataFrame([{"task": t, "block": b, "seed": 0, "token_acc": acc, "seq_acc": seq}
                             for t, b, acc, seq in (("in_context_recall", "recurrent", 1.0, 1.0),
                                                    ("in_context_recall", "transformer", 0.8, 0.0),
                                                    ("noisy_recall", "recurrent", 0.17, 0.0),
                                                    ("noisy_recall", "transformer", 0.79, 0.01))])
    means = per_seed.assign(token_acc_sd=float("nan"), seeds=1)
    curve = {("in_context_recall", "recurrent"): [0.16, 0.16, 0.97, 1.0], ("noisy_recall", "recurrent"): [0.17] * 4,
             ("in_context_recall", "transformer"): [0.5, 0.6, 0.7, 0.8],
             ("noisy_recall", "transformer"): [0.5, 0.6, 0.7, 0.79]}
    curves = pd.DataFrame([{"task": t, "block": b, "seed": 0, "loss_on": "scored", "ablation": False, "step": s,
                            "train_loss": 1.0, "token_acc": acc, "seq_acc": 0.0, "chance": 0.125}
                           for (t, b), accs in curve.items() for s, acc in zip((100, 200, 300, 400), accs)])
    judged = _judge({"tasks": means, "task_seeds": per_seed, "task_curves": curves})
    for claim in ("rt.fig6.rt_ahead_token_level.ours", "rt.fig5.recall_sequence_accuracy"):
        assert judged.loc[claim, "verdict"] == "not held" and judged.loc[claim, "diagnosis"] == "setup"
        assert "a plateau it has not left (1 seed), with a steepest ALiBi slope of 0.25" in judged.loc[claim,
                                                                                                      "evidence"]
        assert "on in_context_recall the same layer sat at 0.16 until step 200, then reached 0.97 by step 300" in \
            judged.loc[claim, "evidence"]
    without = _judge({"tasks": means, "task_seeds": per_seed})
    assert without.loc["rt.fig6.rt_ahead_token_level.ours", "diagnosis"] == "disagrees with the paper"


def test_cpu_long_extends_chapter_4_under_the_same_keys():
    """cpu-long reads cpu's task and LM runs back (the same grid keys) and adds recall with MAD's loss, the pre-KV-norm
    ablation and the 2L Transformer, which the cpu profile leaves out to fit its 30 minutes."""
    from rlib.recurrent.config import lm_config, lm_runs, lm_tuning_runs, table1_shapes, task_runs
    from rlib.recurrent.experiments import lm_grid_key, task_grid_key

    long = RecurrentConfig.preset("cpu-long")
    assert task_grid_key(CPU) == task_grid_key(long) and lm_grid_key(CPU) == lm_grid_key(long)
    assert {r.name for r in task_runs(CPU)} < {r.name for r in task_runs(long)}
    tuned = [r for r in task_runs(long) if r.tuned]
    assert {(r.task, r.block, r.epochs, r.lr) for r in tuned} == {
        ("copy", block, 15, lr) for block in ("recurrent", "transformer") for lr in (3e-3, 1e-2)}
    assert len({r.name for r in tuned}) == 4 and not any(r.tuned for r in task_runs(CPU))
    # App. D.1's released sweep and one half-decade above it (ours: every shape chose the released top)
    assert CPU.lm_lrs == long.lm_lrs == long.ablation_lrs == (1e-3, 3.16e-3, 1e-2, 3.16e-2)
    assert {r.name for r in lm_tuning_runs(CPU)} < {r.name for r in lm_tuning_runs(long)}
    rates = {shape: 3.16e-3 for shape in table1_shapes(long)}
    short = {r.name for r in lm_runs(CPU, rates)}
    added = [r for r in lm_runs(long, rates) if r.name not in short]
    assert short < {r.name for r in lm_runs(long, rates)}
    ablations = [r for r in added if not r.batch]
    assert {r.kv_norm for r in ablations} == {True, False} and {r.depth for r in ablations} == {"shallow", "double"}
    assert all(r.depth == "double" for r in ablations if r.kv_norm)  # the normed ablation runs are cpu's tuning runs
    assert {(r.depth, r.batch) for r in added if r.batch} == {(d, 2 * CPU.lm_batch) for d in ("deep", "shallow")}
    double = lm_config(next(r for r in added if r.depth == "double"), long, 100)
    assert (double.n_layers, double.d_model, double.block) == (2 * long.lm_layers, 96, "transformer")
    # Table 1's 24 x 1024 beside 12 x 1408: about the deep model's parameters per token, not twice them
    deep_d = long.lm_width[0]
    assert 1.0 <= double.n_layers * double.d_model**2 / (long.lm_layers * deep_d**2) <= 1.15
    assert double.d_model % (deep_d // long.lm_width[1]) == 0  # the deep model's head dim


def _decode_cost(ms_ratio: float, macs_ratio: float = 1.1, spread: float = 0.02) -> pd.DataFrame:
    rows = []
    for shape, layers in (("deep", 4), ("shallow", 2)):
        for batch in (1, 16):
            for block, ms, macs in (("recurrent", ms_ratio, macs_ratio), ("transformer", 1.0, 1.0)):
                rows.append({"shape": shape, "block": block, "batch": batch, "context": 64, "n_layers": layers,
                             "d_model": 128, "kv_floats_per_token": 1024 if shape == "deep" else 704,
                             "macs_per_token": 1e6 * macs, "macs_per_token_no_head": 8e5 * macs,
                             "ms_per_token": ms, "ms_per_step_spread": 0.1, "macs_per_token_ratio": macs,
                             "macs_per_token_no_head_ratio": macs, "ms_per_token_ratio": ms,
                             "ms_per_token_ratio_lo": ms - spread if block == "recurrent" else 1.0,
                             "ms_per_token_ratio_hi": ms + spread if block == "recurrent" else 1.0, "rounds": 9,
                             "ms_vs_first_transformer": ms * (0.8 if shape == "shallow" else 1.0)})
    return pd.DataFrame(rows)


def test_decode_cost_flips_at_the_time_ratio_and_blames_op_overhead_when_macs_agree():
    assert _verdict({"decode_cost": _decode_cost(1.15)}, "rt.abstract.decode_cost") == "held"
    slow = _judge({"decode_cost": _decode_cost(1.3)}).loc["rt.abstract.decode_cost"]
    assert slow["verdict"] == "not held" and slow["diagnosis"] == "scale"
    assert "GMAC/s" in slow["evidence"]
    heavy = _judge({"decode_cost": _decode_cost(1.3, macs_ratio=1.5)}).loc["rt.abstract.decode_cost"]
    assert heavy["diagnosis"] == "setup"


def test_decode_cost_whose_paired_rounds_straddle_the_threshold_is_noise_not_a_verdict():
    claim = "rt.abstract.decode_cost"
    assert _verdict({"decode_cost": _decode_cost(1.15, spread=0.1)}, claim) == "not testable at this scale"  # 1.05-1.25
    noisy = _judge({"decode_cost": _decode_cost(1.25, spread=0.1)}).loc[claim]  # 1.15-1.35: not above in every round
    assert noisy["verdict"] == "not testable at this scale" and "timing noise" in noisy["measured"]
    assert _verdict({"decode_cost": _decode_cost(1.15, spread=0.04)}, claim) == "held"  # every round <= 1.2
    old = _decode_cost(1.15).drop(columns=["ms_per_token_ratio_lo", "ms_per_token_ratio_hi"])  # a table before rounds
    assert _verdict({"decode_cost": old}, claim) == "not measured"
    few = _judge({"decode_cost": _decode_cost(1.3).assign(rounds=3)}).loc[claim]  # 75 %: the rounds decide nothing
    assert few["verdict"] == "not testable at this scale"
    assert "3 round(s) hold the median with 75.0% only" in few["measured"]


def _downstream(diff: float, se: float, acc: float) -> pd.DataFrame:
    rows = []
    for depth in ("deep", "shallow"):
        for seed in (0, 1):
            for task, chance in (("book_nextline", 0.25), ("book_cloze", float("nan"))):
                for block in ("transformer", "recurrent"):
                    rt = block == "recurrent"
                    rows.append({"block": block, "depth": depth, "n_layers": 4, "d_model": 128, "seed": seed,
                                 "task": task, "n": 200, "acc": acc, "acc_stderr": 0.03, "acc_norm": acc,
                                 "chance": chance, "gold_ce": 20.0 + (diff if rt else 0.0),
                                 "gold_ce_minus_t": diff if rt else float("nan"),
                                 "gold_ce_minus_t_se": se if rt else float("nan")})
    return pd.DataFrame(rows)


def test_downstream_gold_ce_needs_rt_below_t_beyond_two_standard_errors():
    claim = "rt.tables3_5_8.downstream_gold_ce.ours"
    assert _verdict({"downstream": _downstream(-0.5, 0.1, 0.25)}, claim) == "held"
    tie = _judge({"downstream": _downstream(-0.1, 0.1, 0.25)}).loc[claim]  # pooled s.e. 0.071: 1.4 s.e.
    assert tie["verdict"] == "not held" and tie["diagnosis"] == "budget" and "within 2 s.e." in tie["evidence"]
    worse = _judge({"downstream": _downstream(0.5, 0.1, 0.25)}).loc[claim]
    assert worse["verdict"] == "not held" and "higher beyond 2 s.e." in worse["evidence"]


def test_downstream_accuracy_is_close_to_random_as_the_paper_reads_its_own():
    claim = "rt.tables6_9_10.downstream_accuracy"
    assert _verdict({"downstream": _downstream(0.0, 0.1, 0.30)}, claim) == "held"  # 0.25 +- 0.060 at n 200
    # the paper calls its models' 6-7 points above random 'close to random noise': 0.37 is within +0.07 + 0.060
    assert _verdict({"downstream": _downstream(0.0, 0.1, 0.37)}, claim) == "held"
    above = _judge({"downstream": _downstream(0.0, 0.1, 0.40)}).loc[claim]
    assert above["verdict"] == "not held" and above["diagnosis"] == "setup" and "in-domain" in above["evidence"]
    assert "close to random up to +0.07" in above["measured"]
    # 'most of them': a minority of runs above the band leaves the claim held, a majority does not
    some = _downstream(0.0, 0.1, 0.30)
    nextline = some.index[some["task"] == "book_nextline"]
    assert _verdict({"downstream": some.assign(acc=some["acc"].mask(some.index.isin(nextline[:3]), 0.45))},
                    claim) == "held"  # 3 of 8 runs above
    assert _verdict({"downstream": some.assign(acc=some["acc"].mask(some.index.isin(nextline[:4]), 0.45))},
                    claim) == "not held"  # 4 of 8: no longer most


def _batches(rt_small: float, rt_large: float, t_small: float = 5.10, t_large: float = 5.15) -> pd.DataFrame:
    rows = []
    for depth in ("deep", "shallow"):
        for batch, rt, t in ((16, rt_small, t_small), (32, rt_large, t_large)):
            for block, nll in (("recurrent", rt), ("transformer", t)):
                rows.append({"block": block, "depth": depth, "batch": batch, "steps": 4800 // batch,
                             "tokens": 307_200, "test_nll": nll, "test_nll_sd": 0.01, "seeds": 2})
    return pd.DataFrame(rows)


def test_batch_sizes_need_rt_ahead_at_both_and_no_larger_rise():
    claim = "rt.fig8_9.batch_sizes_150m"
    assert _verdict({"lm_batches": _batches(5.00, 5.04)}, claim) == "held"
    tie = _judge({"lm_batches": _batches(5.00, 5.145)}).loc[claim]  # ahead at 16, level at 32, rises more
    assert tie["verdict"] == "not held" and "deep batch 32" in tie["evidence"] and "RT rises more" in tie["evidence"]


# ---- claims added on 2026-12-06: Sec. 2.2's parameters, Sec. 5's FLOPs, Sec. 6.3's slices, Sec. 3.1's width 2D --


def test_attention_flops_and_kv_slices_are_counted_from_the_schedule():
    from rlib.recurrent import experiments

    traffic = experiments.traffic_table(CPU)
    judged = _judge({"traffic": traffic})
    assert judged.loc["rt.s5.attention_flops_quadratic", "verdict"] == "held"
    assert judged.loc["rt.s6_3.kv_slice_log_n", "verdict"] == "held"
    assert "0.500" in judged.loc["rt.s6_3.kv_slice_log_n", "measured"]  # the mean lowbit is (log2 N) / 2
    # a schedule that scored one pair twice, or whose slices grew as sqrt(N), is caught
    doubled = traffic.assign(pairs=traffic["pairs"] + (traffic["n"] == 4096))
    row = _judge({"traffic": doubled}).loc["rt.s5.attention_flops_quadratic"]
    assert row["verdict"] == "not held" and row["diagnosis"] == "setup" and "at N = 4096" in row["evidence"]
    sqrt_slices = traffic.assign(kv_slice_over_log2n=traffic["n"] ** 0.5 / traffic["n"].map(math.log2))
    assert _verdict({"traffic": sqrt_slices}, "rt.s6_3.kv_slice_log_n") == "not held"


def test_no_extra_parameters_needs_equal_counts_at_every_shape(committed):
    lm = committed["language_models"]
    assert _verdict({"language_models": lm}, "rt.s2_2.no_extra_kv_parameters") == "held"
    extra = lm.assign(params_m=lm["params_m"] + (lm["block"] == "recurrent") * 0.033)  # two more D x D per layer
    row = _judge({"language_models": extra}).loc["rt.s2_2.no_extra_kv_parameters"]
    assert row["verdict"] == "not held" and row["diagnosis"] == "setup"
    only_rt = lm[lm["block"] == "recurrent"]
    assert _verdict({"language_models": only_rt}, "rt.s2_2.no_extra_kv_parameters") == "not measured"


def _memorization_tables(n_train: int | None) -> dict[str, pd.DataFrame]:
    """Both blocks solve memorization at sequence level, nothing else (RT 1.0 and T 0.98)."""
    rows = [{"task": task, "block": block, "token_acc": acc, "seq_acc": seq, "token_acc_sd": float("nan"), "seeds": 1}
            for task, rt, tf in (("memorization", 1.0, 0.98), ("in_context_recall", 0.3, 0.0))
            for block, acc, seq in (("recurrent", rt, rt), ("transformer", max(tf, 0.2), tf))]
    table = pd.DataFrame(rows)
    return {"tasks": table if n_train is None else table.assign(n_train=n_train)}


def test_a_transformer_that_memorizes_as_rt_does_reads_by_the_recipe_it_trained_under():
    claim = "rt.fig5.transformer_no_meaningful_performance"
    # trained on 12,800 sequences, 50x MAD's baseline (a table from before 2026-12-07 has no n_train: the same)
    for n_train in (12_800, None):
        judged = _judge(_memorization_tables(n_train)).loc[claim]
        assert (judged["verdict"], judged["diagnosis"]) == ("not held", "setup")
        assert "memorization trains on 12,800 sequences, MAD's baseline on 256" in judged["evidence"]
    # on MAD's 256: the paper's statement fails under its own benchmark's recipe for the task
    judged = _judge(_memorization_tables(256)).loc[claim]
    assert (judged["verdict"], judged["diagnosis"]) == ("not held", "disagrees with the paper")
    assert "memorization (T 0.980, RT 1.000)" in judged["evidence"]
