"""LayerSkip's training schedules (paper 004, Sec. 4.1, Eq. 1-6): layer-dropout rates and early-exit loss scales.

Layer dropout skips layer l's whole residual branch for a sample with probability

    p(l, t) = S(t) D(l) p_max                                         (Eq. 2)
    D(l) = 2^(l / (L - 1)) - 1          0 at the first layer, 1 at the last                 (Eq. 3)
    S(t) = 1 (continual pretraining, fine-tuning) or 2^(t / (T - 1)) - 1 (from scratch)     (Eq. 4)

The early-exit loss weighs the shared head's cross-entropy after layer l by

    e~(t, l) = C(t, l) e(l) / sum_i C(t, i) e(i)                      (Eq. 6)
    e(l) = e_scale l (l + 1) / 2  for l < L - 1,     e(L - 1) = (L - 1) + e_scale (L - 2)(L - 1) / 2

with the curriculum C(t, l) in {0, 1}:

    all          every layer, every step
    rotational   layer l when (l - t) mod R == 0, and always the last layer (torchtune's reading; without it most
                 steps of the paper's R = L - 1 would train no last-layer loss and Eq. 6 could divide by zero)
    gradual      layer l from step (L - 1 - l) T / (2L) on: the last layer first, every layer from T/2

`e(0) = 0`, so the exit after the first layer never gets weight (a property of the paper's formula, kept).
"""

from __future__ import annotations

import math

from rlib.config import ConfigError

__all__ = ["CURRICULA", "LAYER_SCHEDULES", "TIME_SCHEDULES", "curriculum_mask", "dropout_rates", "exit_loss_scales",
           "exit_loss_weights", "layer_scale", "time_scale"]

TIME_SCHEDULES = ("constant", "exp")
LAYER_SCHEDULES = ("exp", "constant")  # D(l) of Eq. 3, or its mean on every layer (Fig. 12's "Const")
CURRICULA = ("all", "rotational", "gradual")


def _check_layers(n_layers: int) -> None:
    if n_layers < 2:
        raise ConfigError(f"n_layers={n_layers}: LayerSkip's schedules need at least 2 layers")


def _check_step(step: int, total_steps: int) -> None:
    if total_steps < 1:
        raise ConfigError(f"total_steps={total_steps} must be >= 1")
    if not 0 <= step < total_steps:
        raise ConfigError(f"step={step} outside [0, total_steps={total_steps})")


def layer_scale(layer: int, n_layers: int) -> float:
    """D(l) = 2^(l / (L - 1)) - 1 (Eq. 3)."""
    _check_layers(n_layers)
    if not 0 <= layer < n_layers:
        raise ConfigError(f"layer={layer} outside [0, {n_layers})")
    return 2.0 ** (layer / (n_layers - 1)) - 1.0


def time_scale(step: int, total_steps: int, schedule: str) -> float:
    """S(t): 1 for "constant", 2^(t / (T - 1)) - 1 for "exp" (Eq. 4; 1 when T = 1)."""
    if schedule not in TIME_SCHEDULES:
        raise ConfigError(f"time schedule {schedule!r} unknown; choose from {list(TIME_SCHEDULES)}")
    _check_step(step, total_steps)
    if schedule == "constant" or total_steps == 1:
        return 1.0
    return 2.0 ** (step / (total_steps - 1)) - 1.0


def dropout_rates(n_layers: int, p_max: float, step: int = 0, total_steps: int = 1,
                  schedule: str = "constant", layer_schedule: str = "exp") -> list[float]:
    """p(l, t) = S(t) D(l) p_max for every layer (Eq. 2); layer_schedule="constant" puts the mean of D(l) on every
    layer instead (the equal-mean baseline of Fig. 12)."""
    if not 0.0 <= p_max <= 1.0:
        raise ConfigError(f"p_max={p_max} must lie in [0, 1]")
    if layer_schedule not in LAYER_SCHEDULES:
        raise ConfigError(f"layer schedule {layer_schedule!r} unknown; choose from {list(LAYER_SCHEDULES)}")
    scale = time_scale(step, total_steps, schedule)
    per_layer = [layer_scale(layer, n_layers) for layer in range(n_layers)]
    if layer_schedule == "constant":
        per_layer = [math.fsum(per_layer) / n_layers] * n_layers
    return [scale * d * p_max for d in per_layer]


def exit_loss_scales(n_layers: int, e_scale: float) -> list[float]:
    """The unnormalized e(l) of every layer (the paper's formula after Elbayad et al.; see the module docstring)."""
    _check_layers(n_layers)
    if not 0.0 <= e_scale <= 1.0:
        raise ConfigError(f"e_scale={e_scale} must lie in [0, 1]")
    last = n_layers - 1
    scales = [e_scale * layer * (layer + 1) / 2 for layer in range(last)]
    return scales + [last + e_scale * (last - 1) * last / 2]


def curriculum_mask(n_layers: int, curriculum: str, step: int = 0, total_steps: int = 1,
                    rotation: int | None = None) -> list[bool]:
    """C(t, l) for every layer: which exits get a loss at this step (module docstring)."""
    _check_layers(n_layers)
    if curriculum not in CURRICULA:
        raise ConfigError(f"curriculum {curriculum!r} unknown; choose from {list(CURRICULA)}")
    _check_step(step, total_steps)
    last = n_layers - 1
    if curriculum == "all":
        return [True] * n_layers
    if curriculum == "rotational":
        if rotation is None or not 1 <= rotation <= n_layers:
            raise ConfigError(f"rotation={rotation}: the rotational curriculum needs 1 <= R <= n_layers={n_layers}")
        return [layer == last or (layer - step) % rotation == 0 for layer in range(n_layers)]
    interval = total_steps / (2 * n_layers)  # gradual: one more layer every T / 2L steps, from the last down
    return [step >= (last - layer) * interval for layer in range(n_layers)]


def exit_loss_weights(n_layers: int, e_scale: float, curriculum: str = "all", step: int = 0, total_steps: int = 1,
                      rotation: int | None = None) -> list[float]:
    """e~(t, l) of Eq. 6: the enabled layers' e(l), normalized to sum to 1 (the last layer is always enabled)."""
    scales = exit_loss_scales(n_layers, e_scale)
    mask = curriculum_mask(n_layers, curriculum, step, total_steps, rotation)
    enabled = [s if on else 0.0 for s, on in zip(scales, mask)]
    total = math.fsum(enabled)
    return [s / total for s in enabled]
