"""Per-exit metrics and the layers-needed probe (rlib.layerskip.analysis)."""

from __future__ import annotations

import math

import pytest
import torch

from rlib.early_exit import static_exit_losses
from rlib.layerskip.analysis import exit_metrics, layers_needed
from tests.test_looping import ids, tiny_model


def test_exit_metrics_agree_with_the_static_exit_losses():
    model = tiny_model(4)
    windows = ids(5, 9, seed=4)
    table = exit_metrics(model, windows, batch_size=2)
    reference = static_exit_losses(model, windows, (0, 1, 2, 3), batch_size=3)
    assert list(table["exit_layer"]) == [1, 2, 3, 4]
    assert list(table["nll"]) == pytest.approx([reference[d] for d in range(4)], rel=1e-5)
    assert list(table["ppl"]) == pytest.approx([math.exp(reference[d]) for d in range(4)], rel=1e-5)
    with torch.no_grad():
        logits = model(windows)
    last_acc = (logits[:, :-1].argmax(-1) == windows[:, 1:]).float().mean().item()
    assert table["top1_acc"].iloc[-1] == pytest.approx(last_acc)


def test_layers_needed_reads_both_definitions():
    model = tiny_model(4, seed=1)
    prompt = ids(1, 5, seed=7)
    sequence = model.generate(prompt, 8, eos_ids=())[0]
    table = layers_needed(model, sequence, first_generated=5)
    assert list(table["token"]) == list(table["final_argmax"])  # greedy tokens are the last exit's argmax
    assert (table["first"] <= table["stable"]).all() and table["stable"].between(1, 4).all()
    with torch.no_grad():
        hidden = model(sequence[None], return_hidden=True).hidden_states
    top = torch.stack([model.head(h[0, 4:12]).argmax(-1) for h in hidden])  # [L, 8]
    for column, token in enumerate(table.itertuples()):
        agree = [bool(top[layer, column] == top[-1, column]) for layer in range(4)]
        assert token.first == agree.index(True) + 1
        assert token.stable == min(layer + 1 for layer in range(4) if all(agree[layer:]))
    with pytest.raises(ValueError, match="first_generated=0"):
        layers_needed(model, sequence, 0)
