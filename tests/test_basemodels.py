"""Chapter 00: the bf16 / fp32 check paired on the windows fp32 scored, and the chapter's ledger."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from rlib.basemodels import claims, experiments, tables
from rlib.basemodels.config import ModelsDataConfig
from rlib.book.claims import check_ledger
from rlib.config import ConfigError
from tests.claims_checks import check_partial_runs, check_specs

CPU_VERDICTS = {
    "base.d1.above_chance.ours": "held",
    "base.d1.more_tokens_higher_accuracy.ours": "not testable at this scale",
    "base.bf16_matches_fp32.ours": "held",
}


def test_specs_are_unique_and_placed_and_partial_runs_are_judged():
    check_specs(claims.SPECS, claims.judge, ModelsDataConfig.preset("cpu"), CPU_VERDICTS)
    check_partial_runs(claims.judge, [ModelsDataConfig.preset(p) for p in ("cpu", "smoke")], "00_models_and_data")


def test_precision_check_pairs_every_dtype_with_fp32_on_the_windows_fp32_scored():
    fp32 = [2.0, 3.0, 4.0]
    bf16 = [2.01, 3.03, 3.98, 9.0, 9.0]  # two more windows that fp32 did not score: left out of the comparison
    table = tables.precision_check({("m", "c", "float32"): fp32, ("m", "c", "bfloat16"): bf16})
    row = table.iloc[0]
    assert (row["model"], row["corpus"], row["dtype"], row["n_windows"]) == ("m", "c", "bfloat16", 3)
    diffs = [0.01, 0.03, -0.02]
    assert row["diff_nll"] == pytest.approx(sum(diffs) / 3)
    assert row["ratio"] == pytest.approx(math.exp(sum(diffs) / 3))
    assert row["ppl_fp32"] == pytest.approx(math.exp(3.0)) and row["ppl"] == pytest.approx(math.exp(sum(bf16[:3]) / 3))
    assert row["diff_nll_se"] == pytest.approx(pd.Series(diffs).std() / math.sqrt(3))
    assert row["max_abs_diff_nll"] == pytest.approx(0.03)
    with pytest.raises(ValueError, match="fewer than fp32's 3"):
        tables.precision_check({("m", "c", "float32"): fp32, ("m", "c", "bfloat16"): bf16[:2]})


def test_fp32_scores_only_the_first_windows_and_bf16_is_compared_on_exactly_those(monkeypatch):
    cfg = ModelsDataConfig.preset("smoke").override(models=("m",), eval_corpora=("c",), n_eval_windows=6,
                                                     fp32_windows=4, prompts=("p",))
    windows = torch.arange(6 * 5).reshape(6, 5)  # [N, T]: window i's tokens all differ from window j's
    scored = {}

    def fake_perplexity(model, w, **kwargs):  # each window's "NLL" is its mean token id, offset by the dtype
        scored[model] = w.clone()
        per = (w.double().mean(1) / 10 + (0.001 if model == "bfloat16" else 0.0)).tolist()
        return {"nll": sum(per) / len(per), "n_windows": len(w), "per_window": per}

    monkeypatch.setattr(experiments.data, "heldout_windows", lambda *a, **k: windows)
    monkeypatch.setattr(experiments, "_n_windows", lambda *a: 6)
    monkeypatch.setattr(experiments.assets, "load_model", lambda name, dtype, device: str(dtype).split(".")[-1])
    monkeypatch.setattr(experiments.assets, "load_tokenizer", lambda name: None)
    monkeypatch.setattr(experiments.rl_eval, "perplexity", fake_perplexity)
    monkeypatch.setattr(experiments.rl_eval, "greedy_generate", lambda model, tok, prompts, n: ["x"] * len(prompts))
    monkeypatch.setattr(experiments.rl_eval, "forward_latency", lambda model, **k: {"median_s": 0.1})
    out = experiments.evaluate_models(cfg)
    assert torch.equal(scored["float32"], windows[:4]) and torch.equal(scored["bfloat16"], windows)
    ppl = out["perplexity"].set_index("dtype")
    assert ppl.loc["float32", "n_windows"] == 4 and ppl.loc["bfloat16", "n_windows"] == 6
    check = out["precision_check"].iloc[0]
    assert check["n_windows"] == 4 and check["diff_nll"] == pytest.approx(0.001)  # the same windows, paired
    assert check["max_abs_diff_nll"] == pytest.approx(0.001)


def test_reference_windows_are_capped_by_what_the_split_holds_and_validated():
    cfg = ModelsDataConfig.preset("cpu")
    assert cfg.reference_windows(32) == cfg.fp32_windows == 6 and cfg.reference_windows(5) == 5
    assert ModelsDataConfig.preset("smoke").reference_windows(4) == 4  # None: every window
    with pytest.raises(ConfigError, match="fp32_windows=1"):
        cfg.override(fp32_windows=1)


def _suite() -> pd.DataFrame:
    rows = []
    for model, tokens, acc in (("small", "2T", 0.60), ("large", "6T", 0.62)):
        for task in ("book_nextline", "book_code"):
            rows.append({"model": model, "task": task, "metric": "acc", "value": acc, "stderr": 0.07, "n": 50,
                         "primary": True, "pretraining_tokens": tokens})
    return pd.DataFrame(rows)


def _check(ratio: float) -> pd.DataFrame:
    return pd.DataFrame([{"model": "small", "corpus": "c", "dtype": "bfloat16", "n_windows": 8, "ppl_fp32": 10.0,
                          "ppl": 10.0 * ratio, "ratio": ratio, "diff_nll": math.log(ratio), "diff_nll_se": 0.0004,
                          "max_abs_diff_nll": 0.01}])


@pytest.mark.parametrize(("ratio", "verdict"), [(1.004, "held"), (0.995, "held"), (1.012, "not held")])
def test_bf16_claim_reads_the_paired_check(ratio, verdict):
    ledger = claims.judge({"task_suite": _suite(), "precision_check": _check(ratio)}, ModelsDataConfig.preset("cpu"),
                          "cpu").finish()
    assert check_ledger(ledger) == []
    row = ledger.set_index("id").loc["base.bf16_matches_fp32.ours"]
    assert row["verdict"] == verdict and "8 paired windows" in row["measured"]


def test_bf16_claim_falls_back_to_heldout_perplexity_of_runs_before_the_paired_check():
    ppl = pd.DataFrame([{"model": "small", "corpus": "c", "dtype": "float32", "ppl": 10.0},
                        {"model": "small", "corpus": "c", "dtype": "bfloat16", "ppl": 10.2}])
    row = claims.judge({"heldout_perplexity": ppl}, ModelsDataConfig.preset("cpu"), "cpu").finish() \
        .set_index("id").loc["base.bf16_matches_fp32.ours"]
    assert row["verdict"] == "not held" and "2.00%" in row["measured"]
