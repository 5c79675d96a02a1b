"""The measured cost model of LayerSkip's decoders (rlib.layerskip.decode_costs): the timed components cover every
decoding row, the prediction follows the round arithmetic of the module docstring, and `required_acceptance` inverts
`predict`."""

from __future__ import annotations

import pandas as pd
import pytest

from rlib.config import ConfigError
from rlib.layerskip.decode_costs import head_in_layers, measure_costs, predict, required_acceptance, speedup_at
from rlib.layerskip.decoding import benchmark_decoding, decode_cases, draft_vocabulary
from rlib.layerskip.plots import plot_cost_model
from rlib.layerskip.tables import cost_table
from tests.test_looping import ids, tiny_model

LAYER, HEAD, PREFILL, VOCAB_HEAD = 1.0, 3.0, 20.0, 0.5  # ms of the synthetic cost table


def synthetic_costs(n_layers: int = 8, exits=(2, 4), drafts=(3,)) -> pd.DataFrame:
    """Every layer costs LAYER ms per call whatever the tokens, the head HEAD ms on 1 token and 2 HEAD on d + 1."""
    rows = [{"component": "prefill", "exit_layer": n_layers, "tokens": 10, "ms": PREFILL},
            {"component": "head", "exit_layer": 0, "tokens": 1, "ms": HEAD},
            {"component": "vocab head", "exit_layer": 0, "tokens": 1, "ms": VOCAB_HEAD}]
    rows += [{"component": "layers", "exit_layer": e, "tokens": 1, "ms": e * LAYER} for e in (*exits, n_layers)]
    for d in drafts:
        rows.append({"component": "head", "exit_layer": 0, "tokens": d + 1, "ms": 2 * HEAD})
        rows += [{"component": "layers from", "exit_layer": e, "tokens": d + 1, "ms": (n_layers - e) * LAYER}
                 for e in (0, *exits)]
    table = pd.DataFrame(rows)
    table["layers"] = table["ms"] / LAYER
    return table


def decoding_rows(rows: list[dict]) -> pd.DataFrame:
    base = {"recipe": "ld_ee", "n_draft": 0, "reuse": "", "draft_vocab": False, "tokens_per_round": 1.0,
            "drafts_per_round": 0.0, "new_tokens": 40, "speedup": 1.0}
    return pd.DataFrame([{**base, **row} for row in rows])


def test_prediction_follows_the_round_arithmetic():
    table = decoding_rows([
        {"method": "autoregressive", "exit_layer": 8},
        {"method": "early_exit", "exit_layer": 2},
        {"method": "self_speculative", "exit_layer": 2, "n_draft": 3, "reuse": "kvq", "tokens_per_round": 2.5,
         "drafts_per_round": 3.0, "speedup": 1.2},
        {"method": "self_speculative", "exit_layer": 2, "n_draft": 3, "reuse": "kv", "tokens_per_round": 2.5,
         "drafts_per_round": 3.0},
        {"method": "self_speculative", "exit_layer": 2, "n_draft": 3, "reuse": "kvq", "tokens_per_round": 2.5,
         "drafts_per_round": 3.0, "draft_vocab": True},
        {"method": "hf_greedy", "exit_layer": 8},
    ])
    out = predict(table, synthetic_costs(), prompts=4)
    ms = out["predicted_ms"].tolist()
    autoregressive = (4 * PREFILL + 36 * (8 * LAYER + HEAD)) / 40
    assert ms[0] == pytest.approx(autoregressive)
    assert ms[1] == pytest.approx((4 * PREFILL * 2 / 8 + 36 * (2 * LAYER + HEAD)) / 40)
    verify = 6 * LAYER + 2 * HEAD  # layers 2..7 and the head on d + 1 tokens
    kvq_round = 3 * (2 * LAYER + HEAD) + 2 * LAYER + verify
    assert ms[2] == pytest.approx((4 * (PREFILL - verify) + 16 * kvq_round) / 40)  # 40 / 2.5 = 16 rounds
    kv_verify = 8 * LAYER + 2 * HEAD
    assert ms[3] == pytest.approx((4 * (PREFILL - kv_verify) + 16 * (3 * (2 * LAYER + HEAD) + kv_verify)) / 40)
    vocab_round = 3 * (2 * LAYER + VOCAB_HEAD) + 2 * LAYER + verify
    assert ms[4] == pytest.approx((4 * (PREFILL - verify) + 16 * vocab_round) / 40)
    assert out["cost_model_speedup"].iloc[0] == 1.0 and pd.isna(out["predicted_ms"].iloc[5])
    assert out["measured_over_cost"].iloc[2] == pytest.approx(1.2 / (autoregressive / ms[2]))


def test_the_round_overhead_is_paid_once_a_round():
    table = decoding_rows([
        {"method": "autoregressive", "exit_layer": 8},
        {"method": "self_speculative", "exit_layer": 2, "n_draft": 3, "reuse": "kvq", "tokens_per_round": 2.5,
         "drafts_per_round": 3.0}])
    costs = synthetic_costs()
    with_overhead = pd.concat([costs, pd.DataFrame([{"component": "round overhead", "exit_layer": 0, "tokens": 1,
                                                     "ms": 2.0, "layers": 2.0}])], ignore_index=True)
    before, after = (predict(table, c, prompts=4)["predicted_ms"] for c in (costs, with_overhead))
    assert after.iloc[0] - before.iloc[0] == pytest.approx(36 * 2.0 / 40)  # 36 rounds after the 4 prefills
    assert after.iloc[1] - before.iloc[1] == pytest.approx(16 * 2.0 / 40)  # 16 rounds


@pytest.mark.parametrize("vocab", [False, True])
@pytest.mark.parametrize("target", [1.1, 1.4])
def test_required_acceptance_inverts_predict(vocab, target):
    costs = synthetic_costs()
    acceptance = required_acceptance(costs, 2, 3, target, new_tokens=40, prompts=4, vocab=vocab)
    assert acceptance > 0
    table = decoding_rows([
        {"method": "autoregressive", "exit_layer": 8},
        {"method": "self_speculative", "exit_layer": 2, "n_draft": 3, "reuse": "kvq", "draft_vocab": vocab,
         "tokens_per_round": 3 * acceptance + 1, "drafts_per_round": 3.0}])
    assert predict(table, costs, prompts=4)["cost_model_speedup"].iloc[1] == pytest.approx(target)
    assert speedup_at(costs, acceptance, 2, 3, new_tokens=40, prompts=4, vocab=vocab) == pytest.approx(target)


def test_a_cheaper_draft_head_needs_less_acceptance():
    costs = synthetic_costs()
    need = {v: required_acceptance(costs, 2, 3, 1.5, new_tokens=40, prompts=4, vocab=v) for v in (False, True)}
    assert need[True] < need[False]


def test_missing_costs_are_named():
    table = decoding_rows([{"method": "autoregressive", "exit_layer": 8},
                           {"method": "self_speculative", "exit_layer": 3, "n_draft": 3, "reuse": "kvq",
                            "tokens_per_round": 2.0, "drafts_per_round": 3.0}])
    with pytest.raises(ConfigError, match="E=3"):
        predict(table, synthetic_costs(), prompts=4)


def test_measured_costs_cover_a_real_benchmark_table():
    model = tiny_model(4, seed=1)
    prompts = [ids(1, 5, seed=s) for s in range(2)]
    vocab = draft_vocabulary([[1, 2, 3, 4, 5]])
    costs = measure_costs(model, prompts, exits=(2,), drafts=(1, 3), draft_vocab=vocab, repeats=2)
    keys = set(zip(costs["component"], costs["exit_layer"], costs["tokens"]))
    assert {("prefill", 4, 5), ("layers", 2, 1), ("layers", 4, 1), ("head", 0, 1), ("vocab head", 0, 1),
            ("head", 0, 2), ("head", 0, 4), ("layers from", 0, 4), ("layers from", 2, 2),
            ("round overhead", 0, 1)} <= keys
    assert (costs["ms"] >= 0).all() and (costs.loc[costs["component"] != "round overhead", "ms"] > 0).all()
    assert costs.loc[(costs["component"] == "layers") & (costs["exit_layer"] == 4), "layers"].iloc[0] == 4
    assert head_in_layers(costs) > 0
    table = benchmark_decoding(model, prompts, decode_cases((2,), (1, 3), ("kvq", "kv"), peers=False,
                                                            draft_vocab=True), 6, repeats=1, draft_vocab=vocab)
    spec = table[table["method"] == "self_speculative"]
    assert (spec["drafts_per_round"] > 0).all() and (spec["drafts_per_round"] <= spec["n_draft"]).all()
    out = predict(table, costs, prompts=len(prompts))
    assert (out["predicted_ms"] > 0).all() and out["cost_model_speedup"].iloc[0] == 1.0


def test_measure_rejects_bad_settings():
    model = tiny_model(4, seed=1)
    with pytest.raises(ConfigError, match="exits"):
        measure_costs(model, [ids(1, 5)], exits=(5,), drafts=(3,))
    with pytest.raises(ConfigError, match="prompts"):
        measure_costs(model, [], exits=(2,), drafts=(3,))


def predicted_table(speedups: tuple[float, float], acceptance: float = 0.6) -> pd.DataFrame:
    """A predicted table of the synthetic costs: autoregressive, whole-head and vocabulary self-speculation at E=2, d=3
    with measured speedups `speedups`."""
    counts = {"tokens_per_round": 3 * acceptance + 1, "drafts_per_round": 3.0, "acceptance": acceptance}
    table = decoding_rows([
        {"method": "autoregressive", "exit_layer": 8, "label": "autoregressive", "ms_per_token": 10.0},
        {"method": "self_speculative", "exit_layer": 2, "n_draft": 3, "reuse": "kvq", "speedup": speedups[0],
         "label": "self_speculative E=2 d=3 kvq", "ms_per_token": 10 / speedups[0], **counts},
        {"method": "self_speculative", "exit_layer": 2, "n_draft": 3, "reuse": "kvq", "draft_vocab": True,
         "speedup": speedups[1], "label": "self_speculative E=2 d=3 kvq vocab", "ms_per_token": 10 / speedups[1],
         **counts}])
    table["predicted_speedup"] = [float("nan"), 1.5, 1.5]
    return predict(table, synthetic_costs(), prompts=4)


def test_cost_table_keeps_our_decoders():
    table = cost_table(predicted_table((1.0, 1.0)))
    assert list(table["label"]) == ["autoregressive", "self_speculative E=2 d=3 kvq",
                                    "self_speculative E=2 d=3 kvq vocab"]
    assert "layer_count_speedup" in table


def test_cost_model_figure_draws():
    import matplotlib.pyplot as plt

    fig = plot_cost_model(predicted_table((1.2, 1.4)), synthetic_costs(), 4, "synthetic")
    left, right = fig.axes
    assert len(right.lines) >= 3 and len(left.collections) >= 3
    plt.close(fig)
