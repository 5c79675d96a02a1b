"""Per-exit metrics and the layers-needed probe (rlib.layerskip.analysis)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from rlib.early_exit import static_exit_losses

from rlib.layerskip.analysis import exit_metrics, layers_needed, motivation_probe
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
    assert table["agree_last"].iloc[-1] == 1.0
    with torch.no_grad():
        hidden = model(windows, return_hidden=True).hidden_states
    first = model.head(hidden[0][:, :-1]).argmax(-1)
    assert table["agree_last"].iloc[0] == pytest.approx((first == logits[:, :-1].argmax(-1)).float().mean().item())


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


def test_exit_metrics_on_chosen_exits_equal_the_full_table():
    model = tiny_model(4)
    windows = ids(3, 12, seed=4)
    full = exit_metrics(model, windows, batch_size=2).set_index("exit_layer")
    chosen = exit_metrics(model, windows, batch_size=2, exits=(3, 1)).set_index("exit_layer")
    assert list(chosen.index) == [1, 3]
    pd.testing.assert_frame_equal(chosen, full.loc[[1, 3]])
    with pytest.raises(ValueError, match=r"exits \[0\] must name layers"):
        exit_metrics(model, windows, exits=(0,))


def test_motivation_probe_reads_the_models_own_greedy_continuation():
    model = tiny_model(4, seed=2)
    prompt = ids(1, 5, seed=6)
    table, agree = motivation_probe(model, prompt, new_tokens=7)
    sequence = model.generate(prompt, 7, eos_ids=())[0]
    assert table["token"].tolist() == sequence[5:].tolist() and agree.shape == (4, 7)
    assert bool(agree[-1].all())  # the last exit agrees with itself
    pd.testing.assert_frame_equal(table, layers_needed(model, sequence, 5))
    # the model's own greedy choice is what the last exit predicts at each position
    assert table["final_argmax"].tolist() == table["token"].tolist()
    with pytest.raises(ValueError, match=r"prompt must be \[1, T\]"):
        motivation_probe(model, ids(2, 5), 3)
