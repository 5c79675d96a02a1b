"""LayerSkip's schedules (rlib.layerskip.schedules) against the paper's formulas and the inventory's worked values."""

from __future__ import annotations

import pytest

from rlib.config import ConfigError
from rlib.layerskip import schedules as ls


def test_layer_scale_is_exponential_from_zero_to_one():
    assert ls.layer_scale(0, 32) == 0.0 and ls.layer_scale(31, 32) == pytest.approx(1.0)
    mean = sum(ls.layer_scale(layer, 32) for layer in range(32)) / 32
    assert mean == pytest.approx(0.4445, abs=1e-4)  # Fig. 12's constant 0.0889 = 0.2 x this mean
    rates = ls.dropout_rates(32, 0.1)
    assert [round(rates[layer], 4) for layer in (0, 8, 16, 24, 31)] == [0.0, 0.0196, 0.0430, 0.0710, 0.1]
    const = ls.dropout_rates(32, 0.2, layer_schedule="constant")
    assert const == pytest.approx([0.0889] * 32, abs=1e-4)  # Fig. 12's "Const"
    with pytest.raises(ConfigError, match="'linear' unknown"):
        ls.dropout_rates(4, 0.1, layer_schedule="linear")


def test_time_scale_ramps_from_zero_for_scratch_and_is_one_otherwise():
    assert ls.time_scale(0, 100, "exp") == 0.0 and ls.time_scale(99, 100, "exp") == pytest.approx(1.0)
    assert ls.time_scale(49, 99, "exp") == pytest.approx(2 ** 0.5 - 1)
    assert ls.time_scale(7, 100, "constant") == 1.0
    assert ls.dropout_rates(4, 0.2, step=0, total_steps=10, schedule="exp") == [0.0] * 4


def test_exit_scales_follow_the_formula():
    assert ls.exit_loss_scales(4, 0.0) == [0.0, 0.0, 0.0, 3.0]  # e_scale = 0: last layer only
    assert ls.exit_loss_scales(5, 1.0) == [i * (i + 1) / 2 for i in range(5)]  # e_scale = 1: one quadratic, last too
    weights = ls.exit_loss_weights(32, 0.2)
    assert sum(weights) == pytest.approx(1.0) and weights[-1] == pytest.approx(0.111, abs=1e-3)
    assert ls.exit_loss_weights(24, 1.0)[-1] == pytest.approx(0.120, abs=1e-3)


@pytest.mark.parametrize("n_layers, e_scale, layer, expected", [(32, 0.2, 16, 0.180), (40, 0.1, 20, 0.157),
                                                                (24, 1.0, 6, 0.071), (32, 1.0, 30, 0.484)])
def test_one_early_layer_plus_the_last_matches_the_inventory_table(n_layers, e_scale, layer, expected):
    rotation = n_layers - 1
    weights = ls.exit_loss_weights(n_layers, e_scale, "rotational", step=layer, total_steps=1000, rotation=rotation)
    enabled = [i for i, w in enumerate(weights) if w > 0]
    assert enabled == [layer, n_layers - 1]
    assert weights[layer] == pytest.approx(expected, abs=1e-3)


def test_rotation_visits_every_layer_once_per_period_and_keeps_the_last():
    n_layers, rotation = 12, 4
    masks = [ls.curriculum_mask(n_layers, "rotational", step, 100, rotation) for step in range(rotation)]
    assert all(mask[-1] for mask in masks)
    for layer in range(n_layers - 1):
        assert sum(mask[layer] for mask in masks) == 1
    assert sum(masks[0]) == n_layers // rotation + 1  # layers 0, 4, 8 and the last


def test_gradual_enables_from_the_last_layer_down_until_half_way():
    n_layers, total = 8, 160  # one more layer every 160 / 16 = 10 steps
    assert ls.curriculum_mask(n_layers, "gradual", 0, total) == [False] * 7 + [True]
    assert sum(ls.curriculum_mask(n_layers, "gradual", 10, total)) == 2
    assert all(ls.curriculum_mask(n_layers, "gradual", total // 2, total))
    counts = [sum(ls.curriculum_mask(n_layers, "gradual", step, total)) for step in range(total)]
    assert counts == sorted(counts)


def test_bad_schedule_arguments_name_the_value():
    with pytest.raises(ConfigError, match="p_max=1.5"):
        ls.dropout_rates(4, 1.5)
    with pytest.raises(ConfigError, match="e_scale=-0.1"):
        ls.exit_loss_scales(4, -0.1)
    with pytest.raises(ConfigError, match="'cyclic' unknown"):
        ls.curriculum_mask(4, "cyclic")
    with pytest.raises(ConfigError, match="rotation=None"):
        ls.curriculum_mask(4, "rotational")
    with pytest.raises(ConfigError, match="step=10 outside"):
        ls.time_scale(10, 10, "exp")
    with pytest.raises(ConfigError, match="n_layers=1"):
        ls.layer_scale(0, 1)
