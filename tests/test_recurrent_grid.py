"""Chapter 04's grid and claims (rlib.recurrent.config / .experiments / .tables / .claims): run lists, parameter
matching, bad configs, and the book's earlier claims judged from the numbers. The runs themselves execute in the smoke
book (tests/test_smoke_book.py); the paper's claims are tested in tests/test_recurrent_claims.py."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from rlib.config import ConfigError
from rlib.recurrent import claims, experiments, tables
from rlib.recurrent.config import RecurrentConfig, alibi_slopes, lm_runs, lm_tuning_runs, table1_shapes, task_runs


def test_shallow_models_keep_parameters_within_six_percent_below():
    for profile in ("cpu", "gpu"):
        cfg = RecurrentConfig.preset(profile)
        d, _ = cfg.lm_width
        wide, heads = cfg.shallow_width()
        assert wide % heads == 0 and wide // heads == d // cfg.lm_width[1]  # the head dim is kept
        ratio = (cfg.lm_layers // 2) * wide**2 / (cfg.lm_layers * d**2)  # 12 L D^2 per model
        assert 0.94 <= ratio <= 1.0, (profile, ratio)


def test_run_lists_are_unique_and_pair_every_ablation_rate():
    cfg = RecurrentConfig.preset("cpu-long")  # the profile with every study (cpu leaves the ablations to it)
    tuning = lm_tuning_runs(cfg)
    shapes = table1_shapes(cfg)
    assert len(shapes) == 5 and {(r.block, r.depth) for r in tuning} == set(shapes)
    assert sorted((r.shape, r.lr) for r in tuning) == sorted((s, lr) for s in shapes for lr in cfg.lm_lrs)
    assert {r.seed for r in tuning} == {cfg.lm_seeds[0]} and all(r.table1 for r in tuning)
    rates = {shape: cfg.lm_lrs[i % len(cfg.lm_lrs)] for i, shape in enumerate(shapes)}  # a different rate per shape
    runs = lm_runs(cfg, rates)
    names = [r.name for r in runs]
    assert len(names) == len(set(names)) == len(tuning) + len(shapes) * (len(cfg.lm_seeds) - 1) + 4 * len(
        cfg.lm_seeds) * bool(cfg.lm_batch_alt) + len(cfg.ablation_lrs)  # the normed ablation runs are tuning runs
    assert names[:len(tuning)] == [r.name for r in tuning]
    later = [r for r in runs if r.seed != cfg.lm_seeds[0] and not r.batch]
    assert all(r.lr == rates[r.shape] and r.table1 for r in later) and len(later) == len(shapes)
    alt = [r for r in runs if r.batch]
    assert {r.batch for r in alt} == {cfg.lm_batch_alt} and not any(r.table1 for r in alt)
    assert all(r.lr == rates[r.shape] for r in alt)
    ablation = [r for r in runs if r.block == "recurrent" and r.depth == "shallow" and r.seed == cfg.lm_seeds[0]
                and not r.batch]
    assert sorted((r.lr, r.kv_norm) for r in ablation) == sorted(
        (lr, norm) for lr in cfg.ablation_lrs for norm in (True, False))
    with pytest.raises(ValueError, match=r"no learning rate chosen for \[\('transformer', 'double'\)\]"):
        lm_runs(cfg, {shape: 1e-3 for shape in shapes[:4]})
    tasks = task_runs(cfg)
    assert len({t.name for t in tasks}) == len(tasks) == 2 * len(cfg.tasks) * len(cfg.task_seeds) + 2 * len(
        cfg.loss_ablation_tasks) + 2 * len(cfg.task_tuning)
    ablated = [t for t in tasks if t.ablation]
    assert {t.loss_on for t in ablated} == {"all"} and {t.loss_on for t in tasks if not t.ablation} == {"scored"}
    assert {t.block for t in ablated} == {"recurrent", "transformer"}


def test_bad_configs_fail_before_any_work():
    cfg = RecurrentConfig.preset("smoke")
    with pytest.raises(ConfigError, match=r"tasks \['sorting'\] unknown"):
        cfg.override(tasks=(("sorting", 16),))
    with pytest.raises(ConfigError, match="lm_layers=3"):
        cfg.override(lm_layers=3)
    with pytest.raises(ConfigError, match="d_model must be a multiple"):
        cfg.override(lm_width=(30, 4))
    with pytest.raises(ConfigError, match="task_loss='none'"):
        cfg.override(task_loss="none")
    with pytest.raises(ConfigError, match=r"loss_ablation_tasks \['memorization'\] are not in tasks"):
        cfg.override(loss_ablation_tasks=("memorization",))
    with pytest.raises(ConfigError, match=r"task_alibi_max_bias=2: the flattest ALiBi head reaches 4 tokens"):
        cfg.override(task_alibi_max_bias=2.0)  # the chapter's earlier set-up: no head reached the copy source
    with pytest.raises(ConfigError, match=r"lm_lrs=\(\)"):
        cfg.override(lm_lrs=())
    with pytest.raises(ConfigError, match=r"lm_lrs=\(0.001, 0.001\)"):
        cfg.override(lm_lrs=(1e-3, 1e-3))
    with pytest.raises(ConfigError, match=r"ablation_lrs=\(-0.01,\)"):
        cfg.override(ablation_lrs=(-1e-2,))
    with pytest.raises(ConfigError, match="lm_warmup=1.0"):
        cfg.override(lm_warmup=1.0)


@pytest.mark.parametrize("profile", ["smoke", "cpu", "gpu"])
def test_every_task_model_has_a_head_that_reaches_across_its_sequence(profile):
    """Some head's ALiBi penalty stays within one logit from the last position back to the first one, for every
    task of every profile (max bias 2 with 4 heads, the earlier set-up, cost 16 logits at T = 64)."""
    cfg = RecurrentConfig.preset(profile)
    flattest = min(alibi_slopes(cfg.task_width[1], cfg.task_alibi_max_bias))
    for task, length in cfg.tasks:
        assert flattest * (length - 1) <= 1.0, (profile, task, length, flattest)


def test_counted_traffic_slopes():
    table = experiments.traffic_table(RecurrentConfig.preset("cpu"))
    assert table["naive_slope"].iloc[-1] == pytest.approx(2.0, abs=0.02)
    assert 1.0 < table["tiled_slope"].iloc[-1] < 1.2


OLD_CLAIMS = ("rt.s5.tiling_exact.ours", "rt.s5.traffic_n_log_n.ours", "rt.fig5.recall_copy_margin.ours",
              "rt.table1.shallow_rt_no_worse.ours")


def _claims(rt_seq: float, t_seq: float, rt_nll: float, t_nll: float, sd: float = 0.01):
    exact = pd.DataFrame([{"n": 9, "dtype": "float32", "tiles": "reference", "max_abs_dz": 3e-7,
                           "grad_rel_sq_err": 1e-13},
                          {"n": 9, "dtype": "float64", "tiles": "reference", "max_abs_dz": 1e-15,
                           "grad_rel_sq_err": 1e-30}])
    traffic = experiments.traffic_table(RecurrentConfig.preset("smoke"))
    tasks = pd.DataFrame([{"task": "copy", "block": "recurrent", "seq_acc": rt_seq, "token_acc": rt_seq, "seeds": 1},
                          {"task": "copy", "block": "transformer", "seq_acc": t_seq, "token_acc": t_seq, "seeds": 1}])
    lm = pd.DataFrame([{"block": "recurrent", "depth": "shallow", "n_layers": 2, "d_model": 176, "params_m": 1.0,
                        "kv_floats_per_token": 700, "test_nll": rt_nll, "test_nll_sd": sd, "seeds": 2},
                       {"block": "transformer", "depth": "deep", "n_layers": 4, "d_model": 128, "params_m": 1.0,
                        "kv_floats_per_token": 1024, "test_nll": t_nll, "test_nll_sd": sd, "seeds": 2}])
    tables_ = {"exactness": exact, "traffic": traffic, "tasks": tasks, "language_models": lm}
    ledger = claims.judge(tables_, RecurrentConfig.preset("smoke"), "cpu")
    return [ledger.claims[claim_id].verdict for claim_id in OLD_CLAIMS]


def test_claims_follow_the_numbers():
    assert _claims(0.9, 0.05, 4.00, 4.02) == ["held", "held", "held", "held"]
    assert _claims(0.1, 0.05, 4.10, 4.02)[2:] == ["not held", "not held"]
    assert _claims(0.9, 0.05, 4.025, 4.02, sd=0.01)[3] == "held"  # within one seed s.d.


def test_theorem_4_1_closed_form_matches_autograd():
    from rlib.recurrent import theory

    assert theory.stirling_first(4) == [0, 6, 11, 6, 1] and sum(theory.stirling_first(6)) == 720
    table = theory.jacobian_table(dim=4, n=8)
    assert table["max_abs_err"].max() < 1e-12
    last = table[table["t"] == 8].set_index("radius")["grad_norm"]
    assert last[0.5] < last[0.9] < 2.0 < last[1.5]  # bounded below radius 1, growing above


def test_task_tables_keep_the_loss_ablation_apart():
    def record(block, loss_on, ablation, acc):
        return {"task": "in_context_recall", "block": block, "seed": 0, "loss_on": loss_on, "ablation": ablation,
                "n_train": 12_800, "test": {"token_acc": acc, "seq_acc": acc / 2}, "train": {"seconds": 60.0}}

    results = [record("recurrent", "scored", False, 0.9), record("transformer", "scored", False, 0.5),
               record("recurrent", "all", True, 0.1), record("transformer", "all", True, 0.4)]
    main = tables.task_table(results)
    assert list(main["token_acc"]) == [0.9, 0.5]
    losses = tables.loss_table(results)
    assert list(zip(losses["block"], losses["loss_on"], losses["token_acc"])) == [
        ("recurrent", "all", 0.1), ("recurrent", "scored", 0.9), ("transformer", "all", 0.4),
        ("transformer", "scored", 0.5)]


def test_task_curve_table_keeps_every_point_with_chance():
    results = [{"task": "copy", "block": b, "seed": 0, "loss_on": "scored", "ablation": False, "seq_len": 64,
                "train": {"curve": [{"step": s, "train_loss": 1.0, "token_acc": 0.1 * s, "seq_acc": 0.0}
                                    for s in (1, 2)]}} for b in ("recurrent", "transformer")]
    results.append({**results[0], "train": {}})  # a run cached before curves existed: no rows, no error
    table = tables.task_curve_table(results)
    assert len(table) == 4 and set(table["step"]) == {1, 2}
    assert table["chance"].iloc[0] == pytest.approx((31 / 26 + 1) / 32)


def test_tuning_recipes_are_validated_before_any_run():
    cfg = RecurrentConfig.preset("cpu-long")
    for recipe in (("tiling", 15, 3e-3), ("copy", 0, 3e-3), ("copy", 15, 0.0)):
        with pytest.raises(ConfigError, match="task_tuning"):
            dataclasses.replace(cfg, task_tuning=(recipe,))
    with pytest.raises(ConfigError, match="lm_downstream_items=-1"):
        dataclasses.replace(cfg, lm_downstream_items=-1)
    with pytest.raises(ConfigError, match="lm_batch_alt=16"):
        dataclasses.replace(cfg, lm_batch_alt=cfg.lm_batch)


def _task_result(block: str, acc: float, epochs: int = 0, lr: float = 0.0) -> dict:
    return {"task": "copy", "block": block, "seed": 0, "loss_on": "scored", "ablation": False, "epochs": epochs,
            "lr": lr, "seq_len": 64, "n_train": 12_800, "test": {"token_acc": acc, "seq_acc": 0.0},
            "train": {"seconds": 60.0}}


def test_tuning_table_puts_the_main_run_beside_each_recipe_and_marks_the_best():
    results = [_task_result("recurrent", 0.18), _task_result("transformer", 0.15),
               _task_result("recurrent", 0.84, 15, 3e-3), _task_result("transformer", 0.19, 15, 3e-3),
               _task_result("recurrent", 0.26, 15, 1e-2), _task_result("transformer", 0.25, 15, 1e-2)]
    table = tables.tuning_table(results, epochs=5, lr=3e-3)
    assert len(table) == 6 and set(table.loc[table["token_acc"] < 0.185, "epochs"]) == {5}
    best = table[table["best"]].set_index("block")
    assert best.loc["recurrent", "lr"] == 3e-3 and best.loc["recurrent", "epochs"] == 15
    assert best.loc["transformer", "lr"] == 1e-2
    main = tables.task_table(results)  # the main comparison keeps the one-recipe runs only
    assert sorted(main["token_acc"]) == [0.15, 0.18]
    assert tables.tuning_table(results[:2], epochs=5, lr=3e-3).empty


def _lm_result(block: str, depth: str, seed: int, nll: float, batch: int = 16, alt: bool = False) -> dict:
    name = f"lm-{block}-{depth}{'-batch' + str(batch) if alt else ''}-s{seed}"
    return {"name": name, "block": block, "depth": depth, "seed": seed, "lr": 3e-3, "kv_norm": True, "main": not alt,
            "batch": batch, "steps": 4800 // batch, "tokens": 4800 * 64, "n_layers": 4, "d_model": 128, "n_heads": 8,
            "non_embedding_params": 10, "kv_floats_per_token": 8, "test_nll": nll, "test_nll_se": 0.01,
            "final_train_loss": nll, "val_loss": nll, "seconds": 60.0, "curve": {"step": [1], "val_loss": [nll]},
            "downstream": {}}


def test_the_second_batch_size_stays_out_of_table_1_and_the_norm_ablation():
    results = [_lm_result(b, d, s, 5.0 + 0.1 * (b == "transformer") + 0.01 * s + (0.2 if alt else 0.0), batch,
                          alt) for b in ("recurrent", "transformer") for d in ("deep", "shallow") for s in (0, 1)
               for batch, alt in ((16, False), (32, True))]
    assert len(tables.lm_table(results)) == 4 and (tables.lm_table(results)["seeds"] == 2).all()
    assert tables.lm_table(results)["test_nll"].max() < 5.2  # no batch-32 run in Table 1's means
    batches = tables.batch_table(results)
    assert len(batches) == 8 and set(batches["batch"]) == {16, 32} and set(batches["steps"]) == {300, 150}
    assert set(tables.lm_curves(results, alt_batch=True)["val_loss"].round(2)) == {5.2, 5.21, 5.3, 5.31}
    assert tables.batch_table([r for r in results if r["main"]]).empty  # one batch size: no table
    assert len(tables.ablation_table(results)) == 1  # the one main shallow RT run of the first seed
