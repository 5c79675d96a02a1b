"""The Table 9 analog (rlib.mor.uptrain): what each run builds, the run list, bad configs, the table and the
claims. The real up-training on SmolLM2 runs in the smoke book (tests/test_smoke_book.py)."""

from __future__ import annotations

import pytest
import torch

from rlib import looping
from rlib.book.claims import check_ledger
from rlib.config import ConfigError
from rlib.mor import tables
from rlib.mor.claims import judge
from rlib.mor.config import MoRConfig, UptrainConfig, UptrainRun, uptrain_runs
from tests.test_looping import ids, tiny_model


@torch.no_grad()
def test_reduced_runs_the_converted_blocks_once():
    source = tiny_model(6)
    reduced = UptrainRun("reduced", "cycle", "lower").build(source, n_loops=2, seed=0)
    assert len(reduced.blocks) == 3 and len(reduced.plan.steps) == 3
    torch.testing.assert_close(reduced(ids()), looping.truncated(source, 3)(ids()))  # Lower = the first 3 layers
    averaged = UptrainRun("reduced", "sequence", "average").build(source, n_loops=2, seed=0)
    looped = UptrainRun("recursive", "sequence", "average").build(source, n_loops=2, seed=0)
    assert len(looped.plan.steps) == 6 and len(averaged.plan.steps) == 3
    for mine, theirs in zip(averaged.state_dict().values(), looped.state_dict().values()):
        torch.testing.assert_close(mine, theirs)  # same weights, only the plan differs


@torch.no_grad()
def test_full_run_is_the_source_and_middle_sharing_keeps_both_ends():
    source = tiny_model(6)
    torch.testing.assert_close(UptrainRun("full").build(source, 2, 0)(ids()), source(ids()))
    middle = UptrainRun("recursive", "middle_cycle", "upper").build(source, n_loops=2, seed=0)
    assert [s.block for s in middle.plan.steps] == [0, 1, 2, 1, 2, 3]
    for block, layer in ((0, 0), (1, 3), (2, 4), (3, 5)):  # ends kept; Upper: the last middle layers (3, 4)
        for name, tensor in middle.blocks[block].state_dict().items():
            torch.testing.assert_close(tensor, source.blocks[layer].state_dict()[name])



def test_cpu_long_runs_are_ordered_and_unique():
    cfg = UptrainConfig.preset("cpu-long")  # the cpu profile leaves Table 9 to cpu-long
    names = [r.name for r in uptrain_runs(cfg)]
    assert names[0] == "full" and len(names) == len(set(names)) == 1 + 3 + 4 * 3
    assert names[1:4] == ["reduced-cycle-stepwise", "reduced-cycle-average", "reduced-sequence-average"]
    cfg.check_model(30)  # SmolLM2-135M: 2 loops fit every sharing


def test_bad_configs_fail_before_any_work():
    cfg = UptrainConfig.preset("smoke")
    with pytest.raises(ConfigError, match="sharing 'ring' unknown"):
        cfg.override(sharings=("ring",))
    with pytest.raises(ConfigError, match="init 'random' is not a pretrained"):
        cfg.override(inits=("random",))
    with pytest.raises(ConfigError, match="n_loops=1"):
        cfg.override(n_loops=1)
    with pytest.raises(ConfigError, match=r"n_loops=4 does not fit a 30-layer .*\['cycle'\]"):
        cfg.override(n_loops=4, sharings=("cycle", "middle_cycle"), reduced=()).check_model(30)
    with pytest.raises(ConfigError, match="run kind 'big' unknown"):
        UptrainRun("big")


def _result(kind: str, sharing: str, init: str, nll: float, blocks: int) -> dict:
    run = UptrainRun(kind, sharing, init)
    return {"name": run.name, "run": {"kind": kind, "sharing": sharing, "init": init},
            "params": {"non_embedding": blocks * 1_000_000}, "n_blocks": blocks,
            "loops": 2 if kind == "recursive" else 1, "before": {"nll": nll + 1, "nll_se": 0.01},
            "after": {"nll": nll, "nll_se": 0.01}, "train": {"final_loss": nll, "tokens": 100, "seconds": 60.0}}


def _grid(nll: dict[str, float], reduced: float) -> list[dict]:
    out = [_result("full", "cycle", "stepwise", 3.0, 30), _result("reduced", "cycle", "stepwise", reduced, 15)]
    for sharing, value in nll.items():
        out.append(_result("recursive", sharing, "stepwise", value, 16 if sharing.startswith("middle") else 15))
    return out


def test_table_follows_table_9():
    results = _grid({"cycle": 3.5, "sequence": 3.4, "middle_cycle": 3.3, "middle_sequence": 3.2}, reduced=3.6)
    table = tables.uptrain_table(results).set_index("run")
    assert table.loc["full", "share"] == "–" and table.loc["full", "N_L"] == "30"
    assert table.loc["reduced-cycle-stepwise", "share"] == "–" and table.loc["reduced-cycle-stepwise", "loop"] == 1
    assert table.loc["recursive-middle_cycle-stepwise", "N_L"] == "1+14+1"
    assert table.loc["recursive-sequence-stepwise", "share"] == "Seq"
    assert table.loc["recursive-sequence-stepwise", "loop"] == 2


TABLE_9_CLAIMS = ["mor.tab9.middle_best_uptraining", "mor.tab9.seq_step_beats_cyc_step"]


def claims(results: list[dict]) -> list[tuple[str, str]]:
    """The two Table 9 claims of chapter 03's ledger, judged from the up-training table: (verdict, measured)."""
    ledger = judge({"uptraining": tables.uptrain_table(results)}, MoRConfig.preset("smoke"), "cpu").finish()
    assert check_ledger(ledger) == []
    rows = ledger.set_index("id").loc[TABLE_9_CLAIMS]
    return list(zip(rows["verdict"], rows["measured"]))


def test_claims_are_judged_from_the_numbers():
    held = claims(_grid({"cycle": 3.5, "sequence": 3.4, "middle_cycle": 3.3, "middle_sequence": 3.2}, 3.6))
    assert [v for v, _ in held] == ["held", "held"]
    # one Middle run worse than Sequence, and Cycle beats Sequence: both fail
    failed = claims(_grid({"cycle": 3.3, "sequence": 3.4, "middle_cycle": 3.35, "middle_sequence": 3.2}, 3.6))
    assert [v for v, _ in failed] == ["not held", "not held"]
    # every Middle run beats Cycle and Sequence but not the reduced baseline of its init
    weak = claims(_grid({"cycle": 3.5, "sequence": 3.4, "middle_cycle": 3.3, "middle_sequence": 3.2}, 3.25))
    assert weak[0][0] == "not held" and "loop 1 3.250 (fails)" in weak[0][1]
    # a reduced run of another init does not count against a Middle run
    other = _grid({"cycle": 3.5, "sequence": 3.4, "middle_cycle": 3.3, "middle_sequence": 3.2}, 3.6)
    other.append(_result("reduced", "cycle", "average", 3.1, 15))
    assert claims(other)[0][0] == "held"


def test_claims_without_their_runs_say_not_measured():
    partial = claims(_grid({"cycle": 3.5, "middle_cycle": 3.3}, 3.6))
    assert [v for v, _ in partial] == ["not measured", "not measured"]


def test_cpu_long_extends_chapter_3_under_the_same_keys():
    """cpu-long reads cpu's runs back (the same grid context, so the same keys) and adds every run at the ablation
    budget, the router and gate ablations and Table 9's up-training, which the cpu profile leaves out to fit its 40
    minutes."""
    from rlib.mor.config import GATE_ABLATIONS, BudgetSweepConfig, variants

    for cls in (MoRConfig, UptrainConfig, BudgetSweepConfig):
        assert cls.preset("cpu").grid_context() == cls.preset("cpu-long").grid_context(), cls.__name__
    cpu, long = MoRConfig.preset("cpu"), MoRConfig.preset("cpu-long")
    short = {v.name for v in variants(cpu)}
    added = [v for v in variants(long) if v.name not in short]
    assert short < {v.name for v in variants(long)}
    assert {v.tag for v in added} == {"", *GATE_ABLATIONS, *long.router_ablations, *long.relaxations}
    untagged = [v for v in added if not v.tag]  # Tables 8 and 12's grid and the two final router designs
    assert len(untagged) == 10 and {v.budget for v in untagged} == {"ablation"}
    assert len(variants(cpu)) == 13 and "ablation" not in {v.budget for v in variants(cpu)}  # Table 3's grid
    with pytest.raises(ConfigError, match="router_rows=True"):
        cpu.override(router_ablations=("ec_tanh",))
    assert not uptrain_runs(UptrainConfig.preset("cpu")) and len(uptrain_runs(UptrainConfig.preset("cpu-long"))) == 16
    # a field that changes how a run trains stays in the key
    assert cpu.grid_context() != cpu.override(lr=1e-3).grid_context()


def test_table_9s_full_and_cycle_runs_are_chapter_01s():
    """cpu-long's up-training recipe is chapter 01's: its full model and the Cycle-shared Step and Avg models have a
    chapter 01 twin with no recipe difference, which chapter 01 keeps; the other runs have none."""
    from rlib.mor import uptrain
    from rlib.recursive.config import RecursiveConfig
    from rlib.recursive.experiments import _keeps, variants

    up, ch01 = UptrainConfig.preset("cpu-long"), RecursiveConfig.preset("cpu-long")
    shared = [r.name for r in uptrain_runs(up) if not uptrain.recipe_differences(r, up, ch01)]
    assert shared == ["full", "recursive-cycle-stepwise", "recursive-cycle-average"]
    for run in uptrain_runs(up):
        twin = uptrain.chapter01_twin(run, up, ch01)
        if run.name in shared:
            assert twin in variants(ch01) and _keeps(twin, ch01)
    assert uptrain.recipe_differences(uptrain_runs(up)[0], up, ch01.override(lr=3e-3)) == [
        "lr: 0.001 here, 0.003 in chapter 01"]


def test_a_run_started_from_chapter_01_equals_one_trained_here(tmp_path, needs_assets):
    """The equivalence behind the sharing: the same before/after NLL and loss curve, to the last digit."""
    import pandas as pd

    from rlib.mor import uptrain
    from rlib.recursive import experiments as ch01
    from rlib.recursive.config import RecursiveConfig

    up = UptrainConfig.preset("smoke").override(sharings=("cycle",), reduced=(), full=False)
    rec = RecursiveConfig.preset("smoke").override(seq_len=up.seq_len, steps=up.steps, eval_every=up.eval_every,
                                                   keep_models=True, tasks=())
    needs_assets(up.model, up.corpus)
    (run,) = uptrain_runs(up)
    assert uptrain.recipe_differences(run, up, rec) == []
    source = uptrain.load_source(up)
    twin = uptrain.chapter01_twin(run, up, rec)
    ch01.run_grid(rec, tmp_path / "01", ch01.load_source(rec), only=[twin.name])
    (shared,) = uptrain.run_grid(up, tmp_path / "a", source, chapter01=(rec, tmp_path / "01"))
    (own,) = uptrain.run_grid(up, tmp_path / "b", source)
    assert shared["trained_by"].startswith(f"chapter 01's {twin.name}") and "trained_by" not in own
    assert shared["before"] == own["before"] and shared["after"] == own["after"]
    assert shared["train"]["tokens"] == own["train"]["tokens"]
    curves = [pd.read_csv(tmp_path / w / run.name / f"train-{r}" / "metrics.csv")
              for w, r in (("a", _key(tmp_path / "a" / run.name)), ("b", _key(tmp_path / "b" / run.name)))]
    pd.testing.assert_frame_equal(curves[0][["step", "loss", "val_loss"]], curves[1][["step", "loss", "val_loss"]])


def _key(folder) -> str:
    import json

    return json.loads((folder / "result.json").read_text())["key"]
