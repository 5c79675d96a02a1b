"""App. D.1's learning-rate tuning of chapter 04's language models (rlib.recurrent.tuning, .experiments.run_lm_grid,
the Table 1 claims' evidence): which run each shape's rate comes from, what Table 1 then reads, and the refusal to
train a run without a rate."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rlib.recurrent import claims, experiments, tables
from rlib.recurrent.config import LMRun, RecurrentConfig
from rlib.recurrent.tuning import RELEASED_LRS, chosen_rates, describe_grid, mark_table1, tuning_table

GRID = (1e-3, 3.16e-3, 1e-2)
CPU = RecurrentConfig.preset("cpu")


def _run(block: str, depth: str, seed: int, lr: float, val: float, test: float | None = None, kv_norm: bool = True,
         batch: int = 0) -> dict:
    test = val + 0.01 if test is None else test
    run = LMRun(block, depth, seed, lr, kv_norm, batch)
    return {"name": run.name, "block": block, "depth": depth, "seed": seed, "lr": lr, "kv_norm": kv_norm,
            "table1": run.table1, "batch": batch or 16, "steps": 300, "tokens": 307200,
            "n_layers": 4 if depth == "deep" else 2, "d_model": 128 if depth == "deep" else 176, "n_heads": 8,
            "non_embedding_params": 787712, "kv_floats_per_token": 1024, "test_nll": test, "test_nll_se": 0.01,
            "final_train_loss": val, "val_loss": val, "seconds": 60.0, "curve": {"step": [300], "val_loss": [val]},
            "downstream": {}}


def _grid_results() -> list[dict]:
    """Seed 0 of both deep models at the three rates (RT best at 1e-2, T best at 3.16e-3), seed 1 at the chosen
    rates, and two runs that must never be chosen: a batch-32 run and a run without the norm, both lowest."""
    val = {("recurrent", 1e-3): 5.3, ("recurrent", 3.16e-3): 5.1, ("recurrent", 1e-2): 5.0,
           ("transformer", 1e-3): 5.2, ("transformer", 3.16e-3): 4.9, ("transformer", 1e-2): float("nan")}
    runs = [_run(b, "deep", 0, lr, v) for (b, lr), v in val.items()]
    runs += [_run("recurrent", "deep", 1, 1e-2, 5.02), _run("transformer", "deep", 1, 3.16e-3, 4.93)]
    runs += [_run("recurrent", "deep", 0, 1e-3, 1.0, batch=32), _run("recurrent", "deep", 0, 3e-4, 1.0),
             _run("recurrent", "deep", 0, 1e-3, 1.0, kv_norm=False)]
    return runs


def test_each_shape_takes_the_rate_of_its_lowest_first_seed_validation_nll():
    rates = chosen_rates(_grid_results(), 0, GRID)
    # a diverged run (NaN) never wins; runs at another batch, without the norm or off the grid are not candidates
    assert rates == {("recurrent", "deep"): 1e-2, ("transformer", "deep"): 3.16e-3}
    tied = [_run("recurrent", "deep", 0, lr, 5.0) for lr in GRID]
    assert chosen_rates(tied, 0, GRID) == {("recurrent", "deep"): 1e-3}  # ties go to the lower rate


def test_table_1_reads_the_chosen_runs_of_every_seed_and_nothing_else():
    results = _grid_results()
    marked = mark_table1(results, chosen_rates(results, 0, GRID))
    main = {(r["block"], r["seed"], r["lr"]) for r in marked if r["main"]}
    assert main == {("recurrent", 0, 1e-2), ("recurrent", 1, 1e-2), ("transformer", 0, 3.16e-3),
                    ("transformer", 1, 3.16e-3)}
    table = tables.lm_table(marked).set_index("block")
    assert table.loc["recurrent", "lr"] == 1e-2 and table.loc["recurrent", "seeds"] == 2
    assert table.loc["recurrent", "test_nll"] == pytest.approx((5.01 + 5.03) / 2)
    assert table.loc["transformer", "test_nll"] == pytest.approx((4.91 + 4.94) / 2)
    assert set(tables.lm_validation_table(marked)["seed"]) == {0, 1}


def test_the_tuning_table_marks_the_choice_and_a_choice_at_the_grid_edge():
    table = tuning_table(_grid_results(), 0, GRID)
    assert len(table) == 6 and list(table.columns[-2:]) == ["chosen", "at_edge"]
    chosen = table[table["chosen"]].set_index("block")
    assert chosen.loc["recurrent", "lr"] == 1e-2 and bool(chosen.loc["recurrent", "at_edge"])
    assert chosen.loc["transformer", "lr"] == 3.16e-3 and not chosen.loc["transformer", "at_edge"]
    assert math.isnan(table.loc[(table["block"] == "transformer") & (table["lr"] == 1e-2), "val_loss"].iloc[0])
    assert tuning_table([], 0, GRID).empty


def test_an_lm_run_without_a_rate_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match=r"lm-recurrent-deep-lr0-s0: an LM run to train needs its learning rate"):
        experiments.run_lm(LMRun("recurrent", "deep", 0), RecurrentConfig.preset("smoke"), slot=None)


def test_a_run_whose_loss_goes_non_finite_is_a_diverged_result_not_a_failed_grid(tmp_path, monkeypatch):
    """Fig. 7's ablation expects the norm-free RT to diverge at a high rate (2026-12-07: the shallow one at 3.16e-2, NaN
    at step 163): the trainer's FloatingPointError becomes a result with NaN losses, which the ablation marks diverged
    and the tuning never chooses."""
    from rlib.experiments import RunSlot

    def diverging(model, windows, tcfg, out_dir, **kwargs):
        out_dir.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"step": [1, 2], "loss": [5.0, 9.0], "val_loss": [5.1, math.nan]}).to_csv(
            out_dir / "metrics.csv", index=False)
        raise FloatingPointError("training loss is nan at step 3; lower lr or check the data")

    monkeypatch.setattr(experiments, "train", diverging)
    run = LMRun("recurrent", "shallow", 0, 3.16e-2, kv_norm=False)
    result = experiments.run_lm(run, RecurrentConfig.preset("smoke"), RunSlot(tmp_path / run.name, "k"))
    assert result["divergence"].startswith("training loss is nan at step 3")
    assert all(math.isnan(result[k]) for k in ("test_nll", "val_loss", "final_train_loss", "test_nll_se"))
    assert result["curve"] == {"step": [1], "val_loss": [5.1]} and result["downstream"] == {}
    normed = {**result, "kv_norm": True, "test_nll": 4.9, "val_loss": 4.9, "final_train_loss": 4.8}
    ablation = tables.ablation_table([result, normed])
    assert ablation.set_index("kv_norm").loc[False, "diverged"] and not ablation.set_index("kv_norm").loc[True,
                                                                                                      "diverged"]
    assert chosen_rates([{**result, "kv_norm": True, "table1": True}, {**normed, "lr": 1e-2, "table1": True}], 0,
                        (1e-2, 3.16e-2)) == \
        {("recurrent", "shallow"): 1e-2}


def _lm_table(lr: float | None) -> pd.DataFrame:
    rows = [("transformer", "deep", 4, 128, 5.0), ("transformer", "shallow", 2, 176, 5.02),
            ("recurrent", "deep", 4, 128, 5.01), ("recurrent", "shallow", 2, 176, 4.95)]
    table = pd.DataFrame([{"block": b, "depth": d, "n_layers": n, "d_model": w, "params_m": 0.78,
                           "kv_floats_per_token": 1024 if d == "deep" else 704, "test_nll": v, "test_nll_sd": 0.01,
                           "seeds": 2, "minutes": 1.0} for b, d, n, w, v in rows])
    return table if lr is None else table.assign(lr=lr)


def test_table_1_evidence_names_the_tuned_rates_and_keeps_the_diagnosis_off_setup():
    claim = "rt.table1.rt_beats_transformer_equal_depth"
    tuning = pd.DataFrame([{"block": b, "depth": d, "n_layers": n, "d_model": w, "lr": lr, "val_loss": 5.0,
                            "test_nll": 5.0, "chosen": lr == best, "at_edge": lr == best == 1e-2}
                           for b, d, n, w, best in (("transformer", "deep", 4, 128, 3.16e-3),
                                                    ("recurrent", "deep", 4, 128, 1e-2),
                                                    ("transformer", "shallow", 2, 176, 3.16e-3),
                                                    ("recurrent", "shallow", 2, 176, 3.16e-3)) for lr in GRID])
    released = CPU.override(lm_lrs=GRID)
    judged = claims.judge({"language_models": _lm_table(None), "lm_tuning": tuning}, released, "cpu").finish()
    row = judged.set_index("id").loc[claim]
    assert (row["verdict"], row["diagnosis"]) == ("not held", "budget")
    assert ("tuned as App. D.1 does, on seed 0's final validation NLL over 0.001 / 0.00316 / 0.01 (the released "
            "sweep) with a 40 % warm-up (as in the released config)") in row["evidence"]
    assert "chosen T L 4 D 128 0.00316; RT L 4 D 128 0.01;" in row["evidence"]
    assert "at the grid's edge for 1 of 4 shapes, so their best rate may lie beyond the paper's grid" in row["evidence"]
    # the cpu preset's grid reaches above the released sweep: the evidence says which rate is ours
    wider = pd.DataFrame([{"block": b, "depth": d, "n_layers": n, "d_model": w, "lr": lr, "val_loss": 5.0,
                           "test_nll": 5.0, "chosen": lr == best, "at_edge": lr == best == 3.16e-2}
                          for b, d, n, w, best in (("transformer", "deep", 4, 128, 1e-2),
                                                   ("recurrent", "deep", 4, 128, 3.16e-2),
                                                   ("transformer", "shallow", 2, 176, 1e-2),
                                                   ("recurrent", "shallow", 2, 176, 3.16e-3))
                          for lr in (*GRID, 3.16e-2)])
    row = claims.judge({"language_models": _lm_table(None), "lm_tuning": wider}, CPU, "cpu").finish().set_index(
        "id").loc[claim]
    assert "over 0.001 / 0.00316 / 0.01 (the released sweep) and 0.0316 (ours) with a 40 % warm-up" in row["evidence"]
    assert "RT L 4 D 128 0.0316" in row["evidence"]
    assert "at the grid's edge for 1 of 4 shapes, so their best rate may lie beyond this grid" in row["evidence"]


def test_describe_grid_names_the_released_sweep_and_ours():
    assert describe_grid(GRID) == "0.001 / 0.00316 / 0.01 (the released sweep)"
    assert describe_grid((3.16e-2, *GRID)) == "0.001 / 0.00316 / 0.01 (the released sweep) and 0.0316 (ours)"
    assert describe_grid((1e-2, 3e-2)) == "0.01 (the released sweep, less 0.001 / 0.00316) and 0.03 (ours)"
    assert describe_grid((5e-4,)) == "no rate of the released sweep (0.001 / 0.00316 / 0.01) and 0.0005 (ours)"
    assert RELEASED_LRS == GRID


def test_an_untuned_table_names_its_one_rate():
    claim = "rt.table1.rt_beats_transformer_equal_depth"
    one_rate = CPU.override(lm_lrs=(3.16e-3,))
    evidence = claims.judge({"language_models": _lm_table(3.16e-3)}, one_rate, "cpu").finish().set_index(
        "id").loc[claim, "evidence"]
    assert "every model trains at one learning rate, 0.00316 with a 40 % warm-up" in evidence
    legacy = claims.judge({"language_models": _lm_table(None)}, CPU, "cpu").finish().set_index("id")
    assert "every model trains at one learning rate, 0.003 with a 5 % warm-up" in legacy.loc[claim, "evidence"]
