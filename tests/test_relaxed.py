"""rlib.relaxed (chapter 02's grid): presets, variants and their dependencies, configuration errors."""

from __future__ import annotations

import dataclasses

import pytest

from rlib.config import ConfigError
from rlib.relaxed.config import RelaxedConfig, RelaxedVariant, main_variants, variants


@pytest.mark.parametrize("profile", ["smoke", "cpu", "gpu", "paper"])
def test_every_preset_builds_and_post_training_runs_follow_their_parents(profile):
    cfg = RelaxedConfig.preset(profile)
    runs = variants(cfg)
    names = [v.name for v in runs]
    assert len(names) == len(set(names))
    for i, v in enumerate(runs):
        if v.parent is not None:
            assert v.parent.name in names[:i], (v.name, v.parent.name)
    for main in main_variants(cfg):
        assert main.name in names


def test_cpu_grid_covers_the_claims():
    cfg = RelaxedConfig.preset("cpu")
    runs = variants(cfg)
    uptrained = {(v.init, v.rank, v.lora_init) for v in runs if v.phase == "uptrain" and not v.kd
                 and v.steps_factor == 1}
    for init in cfg.inits:
        ranks = cfg.ranks if init in cfg.rank_inits else (max(cfg.ranks),)
        assert {(init, 0, "svd")} | {(init, r, "svd") for r in ranks} <= uptrained
    assert not cfg.zero_inits and not any(v.kd for v in runs)  # Fig. 6(c)'s zero inits and Table I.1's KD: cpu-long
    long = variants(RelaxedConfig.preset("cpu-long"))
    assert {(i, max(cfg.ranks), "zero") for i in ("average", "lower")} <= {(v.init, v.rank, v.lora_init) for v in long}
    assert any(v.kd and v.steps_factor == 1 for v in long)
    post = {(v.rank, v.exit) for v in runs if v.phase == "post"}
    assert {(0, "none"), (0, "aggressive")} <= post
    assert cfg.train_config(RelaxedVariant(phase="post", exit="aggressive")).max_steps == cfg.post_steps
    assert cfg.train_config(RelaxedVariant(steps_factor=2)).max_steps == 2 * cfg.steps
    assert cfg.train_config(RelaxedVariant(phase="post", exit="none")).seed != cfg.train_config(RelaxedVariant()).seed


def test_bad_settings_name_the_value():
    cfg = RelaxedConfig.preset("cpu")
    with pytest.raises(ConfigError, match=r"exit_schedules \['greedy'\] unknown"):
        cfg.override(exit_schedules=("greedy",))
    with pytest.raises(ConfigError, match="n_loops=1"):
        cfg.override(n_loops=1)
    with pytest.raises(ConfigError, match="phase 'later' unknown"):
        RelaxedVariant(phase="later")
    with pytest.raises(ConfigError, match="'uptrain' has no exit loss"):
        RelaxedVariant(exit="weighted")
    assert dataclasses.replace(RelaxedVariant("average", 64), exit="weighted", phase="co").name == \
        "average-r64-svd-co_weighted-s0"


def test_exit_plot_takes_a_table_without_coefficient_sweep_rows():
    """The cpu profile leaves Table J.1's sweep to cpu-long: every `sweep` is False and the labels stay plain."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from rlib.relaxed.plots import plot_exits

    table = pd.DataFrame({"model": ["recursive", "recursive"], "phase": ["post", "post"],
                          "exit": ["none", "aggressive"], "coef": [float("nan"), 0.1], "sweep": [False, False],
                          "nll loop 1": [7.0, 6.5], "nll loop 2": [6.2, 6.25]})
    table = table.astype({"model": "string", "phase": "string", "exit": "string"})
    fig = plot_exits(table, 2, "exits")
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["recursive · post none", "recursive · post aggressive"]
    plt.close(fig)


def test_the_serving_warm_up_runs_one_batch_of_short_replies():
    from rlib.relaxed.throughput import WARM_UP_TOKENS, warm_up_requests
    from rlib.serving import Request

    reqs = [Request(i, [1, 2, 3], n) for i, n in enumerate([3, 40, 256, 9])]
    warm = warm_up_requests(reqs, 3)
    assert [r.id for r in warm] == [0, 1, 2] and [r.prompt for r in warm] == [[1, 2, 3]] * 3
    assert [r.max_new_tokens for r in warm] == [3, WARM_UP_TOKENS, WARM_UP_TOKENS]
    assert [r.max_new_tokens for r in reqs] == [3, 40, 256, 9]  # the timed requests are untouched


def test_fig4s_full_reference_names_chapter_01_when_its_model_is_missing(tmp_path):
    from rlib.relaxed.tables import full_reference_table

    with pytest.raises(ConfigError, match="run chapter 01 with the same profile first"):
        full_reference_table(RelaxedConfig.preset("smoke"), tmp_path / "full-s0" / "model")


def test_the_freeze_run_post_trains_the_recursive_model_in_cpu_long_only():
    from rlib.relaxed.config import main_variants

    cpu, long = RelaxedConfig.preset("cpu"), RelaxedConfig.preset("cpu-long")
    assert cpu.grid_context() == long.grid_context()  # an extension field: cpu's runs keep their keys
    assert not [v for v in variants(cpu) if v.freeze_rank]
    frozen = [v for v in variants(long) if v.freeze_rank]
    assert [(v.freeze_rank, v.phase, v.exit, v.parent) for v in frozen] == [
        (128, "post", "aggressive", main_variants(long)[0])]
    assert frozen[0].name.endswith("-freeze128-s0")
    with pytest.raises(ConfigError, match="frozen model's head LoRA is trained in post-training"):
        RelaxedVariant(freeze_rank=8)


def test_table_g1s_halved_runs_train_per_seed_in_cpu_long_and_stay_out_of_the_main_tables():
    from rlib.relaxed import tables
    from rlib.relaxed.config import HALVINGS, main_variants

    long = RelaxedConfig.preset("cpu-long")
    main = main_variants(long)[1]
    g1 = [v for v in variants(long) if v.halved or (v.seed and not v.freeze_rank)]
    assert {(v.halved, v.seed) for v in g1} == {(g, s) for g in ("", *HALVINGS) for s in (0, 1, 2)} - {("", 0)}
    assert all((v.init, v.rank, v.lora_init) == (main.init, main.rank, main.lora_init) for v in g1)
    assert not [v for v in variants(RelaxedConfig.preset("cpu")) if v.halved]
    with pytest.raises(ConfigError, match="halve one of"):
        RelaxedVariant("average", 64, halved="mlp")
    with pytest.raises(ConfigError, match="halved_groups \\['mlp'\\] unknown"):
        RelaxedConfig.preset("cpu").override(halved_groups=("mlp",))

    def result(seed: int, halved: str, nll: float) -> dict:
        variant = dataclasses.asdict(RelaxedVariant("average", 64, seed=seed, halved=halved))
        return {"name": RelaxedVariant("average", 64, seed=seed, halved=halved).name, "variant": variant,
                "params": {"unique": 1, "non_embedding": 1}, "train": {"tokens_per_s": 1.0}, "before": {},
                "after": {f"nll[{long.train_corpus}]": nll, f"ppl[{long.train_corpus}]": 1.0,
                          f"ppl[{long.eval_corpora[1]}]": 1.0}}

    results = [result(0, "", 5.0), result(0, "ffn", 5.3), result(1, "", 5.1), result(1, "ffn", 5.2)]
    g1_table = tables.module_rank_table(results, long)
    assert g1_table.set_index(["halved", "seed"])["delta"].round(6).to_dict() == {
        ("", 0): 0.0, ("", 1): 0.0, ("ffn", 0): 0.3, ("ffn", 1): 0.1}
    assert len(tables.main_grid(tables.flat(results))) == 1  # the main grid reads the all-equal seed-0 run only


def test_a_halved_variant_builds_its_groups_at_half_the_rank():
    from rlib.model.lora import LoRA
    from rlib.relaxed.experiments import build
    from tests.test_looping import tiny_model

    source = tiny_model(6)
    model = build(RelaxedVariant("average", 4, halved="q_o"), RelaxedConfig.preset("smoke"), source)
    ranks = {name.split(".adapters")[0].split(".", 2)[-1]: m.rank for name, m in model.named_modules()
             if isinstance(m, LoRA)}
    assert ranks == {"attn.q_proj": 2, "attn.k_proj": 4, "attn.v_proj": 4, "attn.o_proj": 2, "mlp.gate_proj": 4,
                     "mlp.up_proj": 4, "mlp.down_proj": 4}, ranks


def test_table_j3_repeats_the_main_models_recipe_on_the_second_architecture():
    from rlib.relaxed.config import main_variants, second_architecture, second_variants

    cpu, long = RelaxedConfig.preset("cpu"), RelaxedConfig.preset("cpu-long")
    assert second_architecture(cpu) is None and cpu.grid_context() == long.grid_context()
    second = second_architecture(long)
    assert second.model == "gemma3-270m" and second.second_model == ""
    for field in ("steps", "post_steps", "lr", "seq_len", "batch_size", "exit_coef", "n_loops", "exit_schedules"):
        assert getattr(second, field) == getattr(long, field), field  # the same recipe
    runs = second_variants(second)
    assert runs[:2] == list(main_variants(second)) and main_variants(second)[1].rank == max(long.ranks)
    assert {(v.rank, v.exit) for v in runs[2:]} == {(r, s) for r in (0, max(long.ranks)) for s in long.exit_schedules}
    assert all(v.parent in runs[:2] for v in runs[2:])
    with pytest.raises(ConfigError, match="is the main model"):
        cpu.override(second_model=cpu.model)


def test_evaluation_reads_the_uptraining_corpus_once_and_matches_its_perplexity():
    """`rlib.relaxed.experiments.evaluate`: the last loop's static-exit NLL is the perplexity's, from the same forward,
    and every corpus's numbers equal `rlib.eval.perplexity`'s."""
    from types import SimpleNamespace

    import torch

    from rlib import eval as rl_eval
    from rlib import looping
    from rlib.looping import Looping
    from rlib.relaxed import experiments
    from tests.test_looping import ids, tiny_model

    model = looping.convert(tiny_model(6), Looping(2))
    windows = {"poetry": ids(5, 11, seed=3), "code": ids(4, 9, seed=4)}
    cfg = SimpleNamespace(train_corpus="poetry", precision="no", n_loops=2, micro_batch_size=3, tasks=())
    calls = []
    handle = model.register_forward_pre_hook(lambda module, args: calls.append(args[0].shape[0]))
    try:
        out = experiments.evaluate(model, cfg, windows)
    finally:
        handle.remove()
    assert calls == [3, 2, 3, 1]  # poetry's 5 windows once (batches of 3), then code's 4
    assert list(out)[:3] == ["nll[poetry]", "ppl[poetry]", "nll_se[poetry]"]
    for corpus, win in windows.items():
        ref = rl_eval.perplexity(model, win, batch_size=3, progress=False)
        for key in ("nll", "ppl", "nll_se"):
            assert out[f"{key}[{corpus}]"] == pytest.approx(ref[key], rel=1e-5), (key, corpus)
    assert out["nll_loop2"] == out["nll[poetry]"] and out["nll_loop1"] != out["nll_loop2"]
    with torch.no_grad():  # loop 1's number is the model stopped after its first loop
        first = rl_eval.perplexity(lambda x: model(x, n_steps=3), windows["poetry"], batch_size=3, progress=False)
    assert out["nll_loop1"] == pytest.approx(first["nll"], rel=1e-5)


def test_the_step0_curve_scores_the_first_step0_windows_and_trains_nothing_keyed(monkeypatch):
    """`step0_windows` cuts the step-0 curve's evaluation to the first windows of the evaluation's sample (every row,
    the source's too, on the same ones) and leaves the run grid's key as it is."""
    import torch

    from rlib.relaxed import experiments
    from tests.test_looping import ids, tiny_model

    cfg = RelaxedConfig.preset("smoke").override(step0_ranks=(0,), step0_windows=3)
    assert cfg.grid_context() == cfg.override(step0_windows=0).grid_context()  # the run cache's key is unchanged
    windows = ids(7, 9, seed=5)  # [7, 9]
    seen = []
    monkeypatch.setattr(experiments.ch01, "eval_windows", lambda c: {cfg.train_corpus: windows})
    key = f"ppl[{cfg.train_corpus}]"
    monkeypatch.setattr(experiments.ch01, "evaluate_model",
                        lambda model, c, w, tasks: seen.append(w[cfg.train_corpus]) or {key: 1.0})
    source = tiny_model(4)
    table = experiments.step0_table(cfg, source)
    assert len(table) == 1 + 2 * 3  # the source, then per init rank 0 and full rank with and without norm deltas
    assert len(seen) == len(table) and all(torch.equal(w, windows[:3]) for w in seen)
    with pytest.raises(ConfigError, match="step0_windows=-1"):
        cfg.override(step0_windows=-1)


def test_table_i1s_longer_row_is_the_recursive_stepwise_models_and_its_table_shows_both_main_models():
    """Table I.1 reports longer uptraining (60B vs 15B tokens) for the recursive Gemma Stepwise model: cpu-long trains
    that model `long_factor` times longer beside the relaxed one, and `kd_and_longer` lists both, each beside its 1x
    run, and no other run of the grid."""
    from rlib.relaxed import tables
    from rlib.relaxed.config import main_variants

    long = RelaxedConfig.preset("cpu-long")
    recursive, relaxed = main_variants(long)
    longer = {v for v in variants(long) if v.steps_factor == long.long_factor and not v.kd}
    assert longer == {dataclasses.replace(recursive, steps_factor=2), dataclasses.replace(relaxed, steps_factor=2)}
    assert not [v for v in variants(RelaxedConfig.preset("cpu")) if v.steps_factor != 1]

    def result(variant: RelaxedVariant, ppl: float) -> dict:
        return {"name": variant.name, "variant": dataclasses.asdict(variant),
                "params": {"unique": 1, "non_embedding": 1}, "train": {"tokens_per_s": 1.0}, "before": {},
                "after": {f"ppl[{c}]": ppl for c in long.eval_corpora}}

    runs = [(recursive, 40.0), (dataclasses.replace(recursive, steps_factor=2), 38.0), (relaxed, 30.0),
            (dataclasses.replace(relaxed, kd=True), 29.0), (dataclasses.replace(relaxed, steps_factor=2), 28.0),
            (RelaxedVariant("lower", 0), 50.0), (RelaxedVariant("stepwise", 64), 31.0)]
    table = tables.kd_long_table([result(v, p) for v, p in runs], long)
    assert list(table["model"]) == ["recursive (stepwise, r=0)"] * 2 + ["relaxed (average, r=64)"] * 3
    assert list(table["steps_factor"]) == [1, 2, 1, 2, 1] and list(table["kd"]) == [False] * 4 + [True]
    assert list(table[f"after ppl[{long.train_corpus}]"]) == [40.0, 38.0, 30.0, 28.0, 29.0]


def test_the_longer_study_trains_the_chapters_own_runs_and_refuses_a_profile_without_them(capsys):
    from rlib.relaxed import longer_study

    long = RelaxedConfig.preset("cpu-long")
    runs = longer_study.study_runs(long)
    assert len(runs) == 4 and set(runs) <= set(variants(long))  # the chapter's keys: its grid reads them back
    assert {v.steps_factor for v in runs} == {1, long.long_factor}
    assert longer_study.study_runs(RelaxedConfig.preset("cpu")) == []
    with pytest.raises(SystemExit):
        longer_study.main(["--profile", "cpu"])
    assert "the cpu preset has no runs for this study" in capsys.readouterr().err


def test_the_oracle_exit_loops_are_read_on_the_text_given():
    """App. K reads oracle exits on the corpus's own text "as if generated by our models"; the study passes each
    request's reference (or, for ours, the model's own output): one exit loop per continuation token after the first,
    each the earliest loop whose prediction equals the last loop's."""
    import torch

    from rlib import looping
    from rlib.looping import Looping
    from rlib.relaxed import early_exit
    from rlib.relaxed.throughput import _oracle_loops
    from tests.test_looping import tiny_model

    model = looping.convert(tiny_model(4), Looping(2, init="stepwise")).eval()
    cfg = RelaxedConfig.preset("smoke")
    prompt, real, loop = [5, 9, 14, 3], [21, 7, 30, 2, 11, 40, 8], [21, 7] * 4
    got = _oracle_loops(model, cfg, [(prompt, real), (prompt, loop), (prompt, [21])])
    assert [len(x) for x in got] == [len(real) - 1, len(loop) - 1, 1]  # a one-token reply: its prefill runs all loops
    assert got[2] == [cfg.n_loops] and all(1 <= j <= cfg.n_loops for x in got for j in x)
    top, _ = early_exit.exit_predictions(model, torch.tensor([prompt + real]), early_exit.loop_exits(model, 2))
    assert got[0] == early_exit.oracle_exit_loops(top)[0, len(prompt):-1].tolist()


def test_the_throughput_figure_sets_the_own_output_oracle_beside_the_papers():
    import matplotlib.pyplot as plt
    import pandas as pd

    from rlib.relaxed.plots import plot_throughput
    from rlib.relaxed.throughput import OWN_OUTPUT_ORACLE

    measured = pd.DataFrame([{"model": "recursive", "scheduler": "cdb", "exit_rule": "none", "batch": 8,
                              "decode_tokens_per_s": 50.0}])
    simulated = pd.DataFrame([{"model": "recursive", "scheduler": "cdb", "exits": e, "batch": 8, "tokens_per_s": v}
                              for e, v in (("none", 55.0), ("oracle", 80.0), (OWN_OUTPUT_ORACLE, 90.0))])
    fig = plot_throughput(measured, simulated, "throughput")
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["recursive · cdb · no exit · batch 8", "recursive · cdb · oracle exit · batch 8"]
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()] if fig.axes[0].get_legend() else [
        t.get_text() for t in fig.legends[0].get_texts()]
    assert "simulated, oracle on its own greedy output (ours)" in legend
    plt.close(fig)
