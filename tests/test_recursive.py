"""Tests of chapter 01's experiment layer: the run list, model building, result caching, the claims logic and
the memory probe. The real uptraining runs in the smoke book (tests/test_smoke_book.py)."""

from __future__ import annotations

import json

import pytest
import torch

from rlib import experiments, memory
from rlib.config import ConfigError
from rlib.model import save
from rlib.recursive.claims import judge
from rlib.recursive.config import RecursiveConfig, Variant, variants
from rlib.recursive.tables import flat, init_table
from tests.test_looping import tiny_model


def test_cpu_run_list_is_ordered_and_unique():
    cfg = RecursiveConfig.preset("cpu")
    runs = variants(cfg)
    names = [v.name for v in runs]
    assert len(names) == len(set(names))
    assert runs[0] == Variant("full", seed=0)  # the teacher comes first
    assert {v.init for v in runs if v.kind == "recursive"} >= set(cfg.inits)
    assert sum(v.kd for v in runs) == len(cfg.kd_seeds)  # cpu: none (cpu-long's)
    seeded = [v for v in runs if v.kind == "recursive" and v.init == "stepwise" and not v.kd and not v.corpus
              and v.n_loops == cfg.init_loops]
    assert sorted(v.seed for v in seeded) == list(cfg.seeds)
    assert {v.n_loops for v in runs if v.kind == "scratch"} == set(cfg.loops)


def test_variants_build_the_right_shapes():
    source = tiny_model(6)
    assert Variant("full").build(source).plan.is_identity(6)
    looped = Variant("recursive", 3, "average").build(source)
    assert looped.config.n_layers == 2 and len(looped.plan) == 6
    assert Variant("truncated", 2).build(source).config.n_layers == 3
    scratch = Variant("scratch", 2, seed=4).build(source)
    assert scratch.config.n_layers == 3 and not torch.equal(scratch.embed.weight, source.embed.weight)
    with pytest.raises(ConfigError, match="kind 'huge'"):
        Variant("huge")


def test_bad_configs_fail_before_any_work():
    cpu = RecursiveConfig.preset("cpu")
    with pytest.raises(ConfigError, match="inits \\['best'\\]"):
        cpu.override(inits=("best",))
    with pytest.raises(ConfigError, match="must include train_corpus"):
        cpu.override(eval_corpora=("shakespeare",))
    with pytest.raises(ConfigError, match="extra_inits \\['best'\\]"):
        cpu.override(extra_inits=("best",))
    with pytest.raises(ConfigError, match="kd_seeds \\[7\\] are not among seeds"):
        cpu.override(kd_seeds=(0, 7))
    with pytest.raises(ConfigError, match=r"loops \[4\] do not divide the 30 layers.*valid: \[1, 2, 3, 5"):
        cpu.override(loops=(2, 4)).check_model(30)
    # one peak rate for every start, as in the paper (the cpu value is chosen by rlib.recursive.lr_sweep)
    assert {cpu.train_config(v).lr for v in (Variant("scratch", 2), Variant("recursive", 2, "random"),
                                            Variant("full"))} == {cpu.lr}
    assert cpu.train_config(Variant("recursive", 2, "stepwise", kd=True)).kd_alpha == cpu.kd_alpha


def test_cached_results_are_reused_only_under_the_same_key(tmp_path):
    calls = []
    compute = lambda: calls.append(1) or {"x": len(calls)}  # noqa: E731
    assert experiments.cached(tmp_path / "run", "k1", compute) == {"x": 1}
    assert experiments.cached(tmp_path / "run", "k1", compute) == {"x": 1}
    assert experiments.cached(tmp_path / "run", "k2", compute) == {"x": 2}
    assert json.loads((tmp_path / "run" / experiments.RESULT_FILE).read_text())["key"] == "k2"
    assert experiments.digest(Variant("full"), 1) != experiments.digest(Variant("full", seed=1), 1)
    assert len(experiments.code_digest("rlib.looping")) == 16


def _result(v: Variant, nll: float, corpus: str = "c") -> dict:
    return {"name": v.name, "variant": {**v.__dict__}, "corpus": v.corpus or corpus,
            "params": {"unique": 10, "non_embedding": 5, "effective": 20},
            "before": {f"nll[{corpus}]": nll + 1, f"ppl[{corpus}]": 2.0}, "after": {f"nll[{corpus}]": nll,
                                                                                   f"ppl[{corpus}]": 1.0},
            "train": {"tokens": 100, "seconds": 1.0, "tokens_per_s": 100.0, "final_loss": nll, "val_loss": nll}}


def test_claims_are_judged_from_the_numbers():
    cfg = RecursiveConfig.preset("smoke").override(train_corpus="c", eval_corpora=("c",), seeds=(0, 1),
                                                   inits=("stepwise", "average", "random"), loops=(2, 3))
    good = [_result(Variant("full"), 2.0), _result(Variant("recursive", 2, "stepwise"), 2.5),
            _result(Variant("recursive", 2, "stepwise", seed=1), 2.52),
            _result(Variant("recursive", 2, "average"), 2.7),
            _result(Variant("recursive", 2, "random"), 4.0), _result(Variant("recursive", 3, "stepwise"), 2.8),
            _result(Variant("truncated", 2), 3.0), _result(Variant("scratch", 2), 4.1),
            _result(Variant("recursive", 2, "stepwise", kd=True), 2.45),
            _result(Variant("recursive", 2, "stepwise", kd=True, seed=1), 2.46)]
    # the book's earlier five claims, now ledger entries (the truncated/scratch claim split in two)
    old = ["rrt.fig5.pretrained_inits_beat_random", "rrt.fig5.stepwise_best_init",
           "rrt.fig5c.recursive_beats_reduced_size", "rrt.ours.recursive_beats_truncated",
           "rrt.tabF1.more_blocks_lower_quality.ours", "rrt.tabI1.kd_helps_recursive"]
    claims = judge({"runs": flat(good)}, cfg, "cpu").finish().set_index("id")["verdict"]
    assert (claims[old] == "held").all(), claims[old]
    bad = [r if r["name"] != "recursive-B3-stepwise-s0" else _result(Variant("recursive", 3, "stepwise"), 2.4)
           for r in good]
    bad = [r if r["name"] != "recursive-B2-average-s0" else _result(Variant("recursive", 2, "average"), 2.3)
           for r in bad]
    held = judge({"runs": flat(bad)}, cfg, "cpu").finish().set_index("id")["verdict"]
    assert held["rrt.tabF1.more_blocks_lower_quality.ours"] == "not held"
    assert held["rrt.fig5.stepwise_best_init"] == "not held"
    assert held["rrt.fig5.pretrained_inits_beat_random"] == "held" and held["rrt.tabI1.kd_helps_recursive"] == "held"
    init = init_table(good, cfg).set_index("init")
    assert init.loc["stepwise", "n_seeds"] == 2 and init.loc["random", "Δppl vs random"] == 0


def test_memory_probe_sees_the_model_in_a_fresh_process(tmp_path):
    from rlib.model import Decoder

    big = Decoder(tiny_model(2).config.replace(vocab_size=40_000, d_model=256, n_heads=4, head_dim=64))  # ~50 MiB
    stats = memory.peak_rss(save(big, tmp_path / "m"), batch=1, seq_len=16)
    expected = sum(p.numel() * p.element_size() for p in big.parameters()) / 2**20
    assert stats["param_mib"] == pytest.approx(expected) and expected > 40
    assert stats["peak_rss_mib"] >= stats["after_load_rss_mib"] >= stats["baseline_rss_mib"] > 0
    # loading must show up in the child's own peak (a parent's inherited high-water mark would hide it)
    assert stats["after_load_rss_mib"] - stats["baseline_rss_mib"] > 0.8 * expected
    assert stats["baseline_rss_mib"] < 2000


def test_lr_sweep_picks_the_lowest_mean_validation_loss_and_rejects_bad_rates(tmp_path):
    import pandas as pd

    from rlib.recursive import lr_sweep

    table = pd.DataFrame({"kind": ["recursive", "scratch"] * 3, "lr": [1e-4, 1e-4, 1e-3, 1e-3, 1e-2, 1e-2],
                          "val_loss": [6.0, 8.0, 6.5, 7.0, 5.9, 9.0]})
    assert lr_sweep.best_lr(table) == 1e-3  # means 7.0, 6.75, 7.45: the best over both starts, not either alone
    with pytest.raises(ValueError, match=r"lrs=\[0.0\]"):
        lr_sweep.sweep(RecursiveConfig.preset("smoke"), [0.0], tmp_path)
    # the runs are keyed on the function that trains them, not on the module's summaries and docstrings
    assert "def _run(" in lr_sweep.recipe_source() and "def summary(" not in lr_sweep.recipe_source()
    starts = lr_sweep.sweep_variants(RecursiveConfig.preset("cpu"))  # every start the chapter uptrains at this rate
    assert [lr_sweep.start_name(v) for v in starts] == ["stepwise", "average", "lower", "scratch", "full"]
    assert starts[0].name == "recursive-B2-stepwise-s0"


def test_lr_sweep_summary_marks_each_starts_own_best_and_the_mean_choice():
    import pandas as pd

    from rlib.recursive import lr_sweep

    table = pd.DataFrame({"start": ["stepwise", "average"] * 2, "kind": "recursive", "lr": [2e-4, 2e-4, 1e-3, 1e-3],
                          "val_loss": [6.6, 7.0, 6.2, 7.6]})  # means 6.8 / 6.9: 2e-4 chosen, stepwise's own is 1e-3
    wide = lr_sweep.summary(table, 1e-3).set_index("lr")
    assert list(wide.columns[:2]) == ["val_loss[stepwise]", "val_loss[average]"]
    assert wide.loc[2e-4, "best_for"] == "average" and wide.loc[1e-3, "best_for"] == "stepwise"
    assert wide.loc[2e-4, "chosen"] == "<- best" and wide.loc[1e-3, "used"] == "<- used"
    old = lr_sweep.summary(table.drop(columns="start").assign(kind=["recursive", "scratch"] * 2), 1e-3)
    assert "val_loss[scratch]" in old.columns  # a sweep written before the start column still reads


def test_cpu_long_extends_the_cpu_grid_under_the_same_keys():
    """cpu-long reads cpu's runs back (same grid context, so the same keys) and adds B = 3 and 5, Fig. F.1's
    ablations and Table I.1's distilled pair (the studies that do not fit the cpu profile's hour with chapter 02)."""
    cpu, long = RecursiveConfig.preset("cpu"), RecursiveConfig.preset("cpu-long")
    assert cpu.grid_context() == long.grid_context()
    short, extended = {v.name for v in variants(cpu)}, {v.name for v in variants(long)}
    assert short < extended
    added = [v for v in variants(long) if v.name not in short]
    assert {v.n_loops for v in added} | {v.norm_init for v in added} >= {3, 5, "choice", "zero"}
    assert {v.name for v in added} >= {"recursive-B2-stepwise_fixed_start-s0", "recursive-B2-stepwise-kd-s0",
                                       "recursive-B2-stepwise-kd-s1", "recursive-B3-stepwise-s0", "truncated-B3-s0",
                                       "scratch-B3-s0"}
    assert {v.n_loops for v in variants(cpu)} == {1, 2} and not any(v.kd for v in variants(cpu))
    assert {v.init for v in added if v.kind == "recursive" and v.n_loops == 3} == {"stepwise", "average", "lower",
                                                                                  "random"}
    assert not cpu.step0_tasks and RecursiveConfig.preset("gpu").step0_tasks
    without_b3 = long.override(loops=(2, 5))  # no Stepwise B = 3 to compare with: the B = 3 rows go with it
    assert not [v for v in variants(without_b3) if v.n_loops == 3]
