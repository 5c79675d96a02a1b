"""Table 3's few-shot column for chapter 03 (rlib.mor.experiments.fewshot_scores, tables.fewshot_table, claim
mor.tab3.fewshot_column): the table keeps each task's primary metric and averages them, the claim compares the
paper's two pairs against the s.e. of the difference, and a routed model is scored with causal routing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from rlib.config import ConfigError
from rlib.mor import tables
from rlib.mor.claims import judge
from rlib.mor.config import MoRConfig
from rlib.mor.model import MoRDecoder

CPU = MoRConfig.preset("cpu")


def _result(label: str, nextline: float, cloze: float, routing: str = "expert", nr: int = 3, budget: str = "flops"):
    spec = None if label == "Vanilla" else {"routing": routing, "n_recursions": nr}
    score = {"book_nextline": {"acc": nextline - 0.02, "acc_stderr": 0.03, "acc_norm": nextline,
                               "acc_norm_stderr": 0.03, "n": 200},
             "book_cloze": {"acc": cloze, "acc_stderr": 0.02, "acc_norm": float("nan"),
                            "acc_norm_stderr": float("nan"), "n": 200}}
    return {"label": label, "budget": budget, "seed": 0, "spec": spec, "after": {"fewshot": score}}


def _results(mor2: float, ec3: float, tc3: float) -> list[dict]:
    return [_result("Vanilla", 0.30, 0.10), _result("MoR-2 EC", mor2, 0.10, nr=2), _result("MoR-3 EC", ec3, 0.10),
            _result("MoR-3 TC", tc3, 0.10, routing="token"), {"label": "Recursive-3", "budget": "flops", "seed": 1,
                                                               "spec": None, "after": {}}]


def test_table_keeps_each_tasks_primary_metric_and_averages_them():
    table = tables.fewshot_table(_results(0.40, 0.40, 0.30))
    assert set(table["label"]) == {"Vanilla", "MoR-2 EC", "MoR-3 EC", "MoR-3 TC"}  # unscored runs are left out
    vanilla = table[table["label"] == "Vanilla"].set_index("task")
    assert vanilla.loc["book_nextline", "metric"] == "acc_norm" and vanilla.loc["book_nextline", "value"] == 0.30
    assert vanilla.loc["book_cloze", "metric"] == "acc"
    assert vanilla.loc["average", "value"] == pytest.approx(0.20)
    assert vanilla.loc["average", "stderr"] == pytest.approx(np.hypot(0.03, 0.02) / 2)


def _verdict(results: list[dict]):
    return judge({"fewshot": tables.fewshot_table(results)}, CPU, "cpu").finish().set_index("id").loc[
        "mor.tab3.fewshot_column"]


def test_claim_needs_both_of_the_papers_gaps_beyond_their_standard_error():
    assert _verdict(_results(0.40, 0.40, 0.30))["verdict"] == "held"
    tie = _verdict(_results(0.31, 0.40, 0.30))  # MoR-2 EC +0.005 on the average: inside one s.e.
    assert tie["verdict"] == "not held" and tie["diagnosis"] == "budget" and "MoR-2 EC vs Vanilla" in tie["evidence"]
    chance = _verdict([_result("Vanilla", 0.26, 0.0), _result("MoR-2 EC", 0.25, 0.0, nr=2),
                       _result("MoR-3 EC", 0.27, 0.0), _result("MoR-3 TC", 0.28, 0.0, routing="token")])
    assert chance["verdict"] == "not held" and chance["diagnosis"] == "scale"


def test_bad_item_count_is_refused():
    with pytest.raises(ConfigError, match="fewshot_items=-1"):
        dataclasses.replace(CPU, fewshot_items=-1)


class _Routed(MoRDecoder):
    """A routed model with no weights: only the call convention of fewshot_scores is under test."""

    def __init__(self):
        torch.nn.Module.__init__(self)
        self.recursions = [0]
        self.modes: list[str] = []

    def forward(self, ids, mode="topk", **kwargs):
        self.modes.append(mode)
        return torch.zeros(*ids.shape, 8)  # [B, T, V]


def test_a_routed_model_is_scored_with_causal_routing(monkeypatch):
    from rlib import scratch_eval
    from rlib.mor import experiments

    def fake_scores(lm, limit=None):
        lm.model(torch.zeros(1, 3, dtype=torch.long))
        return {"book_nextline": {"acc": 0.3, "gold_ce": [1.0]}}

    monkeypatch.setattr(scratch_eval, "downstream_scores", fake_scores)
    model = _Routed()
    out = experiments.fewshot_scores(model, MoRConfig.preset("smoke"))
    assert model.modes == ["causal"] and out == {"book_nextline": {"acc": 0.3}}  # per-item CEs are not kept
