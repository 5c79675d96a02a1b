"""LayerSkip training (paper 004, Sec. 4.1): per-sample layer dropout and the early-exit loss through the shared head.

`LayerSkipDecoder` wraps a plain `Decoder` (identity plan). In training mode layer l skips its whole block for a
sample with probability p(l, t) (`rlib.layerskip.schedules`): the dropped samples pass through unchanged (no
1/(1 - p) rescaling, Eq. 1), and only the kept ones run the block, as the paper does (gather, run, scatter). The
masks come from a generator seeded by (seed, forward call), so every data-parallel rank draws the same masks and
drops the same number of samples per layer. Evaluation runs every layer. Each forward keeps every layer's output
for the loss hook; the logits it returns are the last layer's, which is what `rlib.train` sees.

`LayerSkipLoss` is an `rlib.train.LossHook`. The trainer computes the last layer's cross-entropy ("ce") and weighs
it by the hook's `ce_weight` = e~(t, L-1); the hook returns "exit" = the earlier layers' terms, so the optimized loss
is exactly Eq. 5, with one cross-entropy per layer:

    J = sum_l e~(t, l) CE(head(x_{l+1}), Y)        e~ from the curriculum at step t (Eq. 6)

The training step t drives both schedules. The wrapper counts its training forwards (a persistent buffer, so it
resumes with a checkpoint) and divides by the gradient-accumulation steps; the hook, which the trainer hands the
true step, refuses to go on if the two disagree.

    model = LayerSkipDecoder(decoder, p_max=0.1, total_steps=cfg.max_steps, accumulation_steps=accum)
    train(model, windows, cfg, out, hooks=[LayerSkipLoss(model, e_scale=0.2, curriculum="rotational", rotation=4)])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rlib.config import ConfigError
from rlib.layerskip.schedules import CURRICULA, curriculum_mask, dropout_rates, exit_loss_weights
from rlib.model import Decoder
from rlib.train import next_token_loss

__all__ = ["ExitProbe", "LayerSkipDecoder", "LayerSkipLoss", "with_recipe"]


class LayerSkipDecoder(nn.Module):
    """A Decoder with LayerSkip's layer dropout in training mode; keeps every layer's output (module docstring)."""

    def __init__(self, decoder: Decoder, p_max: float = 0.0, time_schedule: str = "constant", total_steps: int = 1,
                 accumulation_steps: int = 1, seed: int = 0, layer_schedule: str = "exp"):
        super().__init__()
        if not decoder.plan.is_identity(decoder.config.n_layers):
            raise ConfigError("LayerSkip needs a plain decoder (identity execution plan), not a looped one")
        if accumulation_steps < 1:
            raise ConfigError(f"accumulation_steps={accumulation_steps} must be >= 1")
        dropout_rates(decoder.config.n_layers, p_max, 0, total_steps, time_schedule, layer_schedule)  # validates
        self.decoder = decoder
        self.p_max, self.time_schedule, self.total_steps = p_max, time_schedule, total_steps
        self.layer_schedule = layer_schedule
        self.accumulation_steps, self.seed = accumulation_steps, seed
        self.register_buffer("training_forwards", torch.zeros((), dtype=torch.long), persistent=True)
        self.hidden_states: list[torch.Tensor] = []  # the last forward's layer outputs, n_layers x [B, T, D]
        self.kept: list[torch.Tensor] | None = None  # the last forward's masks, n_layers x [B] bool (None: no dropout)
        self.last_step: int | None = None  # the training step the last training forward used

    @property
    def config(self):
        return self.decoder.config

    @property
    def n_layers(self) -> int:
        return self.decoder.config.n_layers

    @property
    def step(self) -> int:
        """The training step of the next training forward."""
        return min(int(self.training_forwards) // self.accumulation_steps, self.total_steps - 1)

    def rates(self, step: int) -> list[float]:
        return dropout_rates(self.n_layers, self.p_max, step, self.total_steps, self.time_schedule,
                             self.layer_schedule)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder.head(hidden)

    def exit_head(self, layer: int, hidden: torch.Tensor) -> torch.Tensor:
        """The logits of exit `layer` (0-based) for its output [B, T, D]: LayerSkip's one shared head for every layer
        (a subclass may give the early exits heads of their own: `rlib.layerskip.exit_heads`)."""
        return self.head(hidden)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [B, T] -> the last layer's logits [B, T, V]; every layer's output stays in `hidden_states`."""
        if not self.training:
            out = self.decoder(input_ids, return_hidden=True)
            self.hidden_states, self.kept = out.hidden_states, None
            return out.logits
        step = self.step
        rates = self.rates(step)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + int(self.training_forwards))
        batch, tokens = input_ids.shape
        positions = torch.arange(tokens, device=input_ids.device).expand(batch, tokens)  # [B, T]
        x = self.decoder.embed_tokens(input_ids)  # [B, T, D]
        ctx = self.decoder.context(positions, x.dtype, None, plain_causal=True)
        hidden, kept = [], []
        for layer, rate in enumerate(rates):
            keep = torch.rand(batch, generator=generator) >= rate  # [B], drawn on the CPU: identical on every rank
            if bool(keep.all()):
                x = self.decoder.run_step(layer, x, ctx)
            elif bool(keep.any()):
                rows = keep.nonzero().squeeze(1).to(x.device)  # [b]
                sub_ctx = self.decoder.context(positions[rows], x.dtype, None, plain_causal=True)
                x = x.index_copy(0, rows, self.decoder.run_step(layer, x[rows], sub_ctx))
            hidden.append(x)
            kept.append(keep)
        self.training_forwards += 1
        self.hidden_states, self.kept, self.last_step = hidden, kept, step
        return self.decoder.head(x)


@dataclass
class LayerSkipLoss:
    """The early-exit loss of Eq. 5-6 as a trainer hook (module docstring); e_scale = 0 is plain training."""

    model: LayerSkipDecoder
    e_scale: float
    curriculum: str = "rotational"
    rotation: int | None = None  # R of the rotational curriculum (None = L - 1, the paper's common choice)
    total_steps: int | None = None  # T of the gradual curriculum (None = the model's)

    def __post_init__(self) -> None:
        if self.curriculum not in CURRICULA:
            raise ConfigError(f"curriculum {self.curriculum!r} unknown; choose from {list(CURRICULA)}")
        if self.rotation is None:
            self.rotation = self.model.n_layers - 1
        self.total_steps = self.total_steps or self.model.total_steps
        self.weights(0)  # validates e_scale, rotation and the step range

    def weights(self, step: int) -> list[float]:
        """e~(t, l) for every layer at `step` (the last step's weights after the end of the schedule)."""
        step = min(step, self.total_steps - 1)
        return exit_loss_weights(self.model.n_layers, self.e_scale, self.curriculum, step, self.total_steps,
                                 self.rotation)

    def enabled(self, step: int) -> list[bool]:
        step = min(step, self.total_steps - 1)
        return curriculum_mask(self.model.n_layers, self.curriculum, step, self.total_steps, self.rotation)

    def ce_weight(self, step: int) -> float:
        """e~(t, L-1): the weight of the trainer's last-layer cross-entropy in Eq. 5 (1 for plain training)."""
        return self.weights(step)[-1]

    def loss(self, step: int, batch: torch.Tensor, logits: torch.Tensor, model: nn.Module) -> dict[str, torch.Tensor]:
        """"exit": Eq. 5's terms of the layers before the last (the trainer adds ce_weight x its own CE)."""
        wrapped = self.model
        if wrapped.training and wrapped.last_step != min(step, wrapped.total_steps - 1):
            raise ConfigError(f"LayerSkipDecoder ran step {wrapped.last_step} but the trainer is at step {step}: "
                              f"pass accumulation_steps = the trainer's ({wrapped.accumulation_steps} given) and do "
                              "not call the model in training mode outside the trainer")
        weights = self.weights(step)
        exit_term = torch.zeros((), device=logits.device)  # the last layer's term is the trainer's (ce_weight)
        for layer, weight in enumerate(weights[:-1]):
            if weight > 0:
                logits_l = wrapped.exit_head(layer, wrapped.hidden_states[layer])  # [B, T, V]
                exit_term = exit_term + weight * next_token_loss(logits_l, batch)
        return {"exit": exit_term}


@dataclass
class ExitProbe:
    """A trainer hook that adds no loss: at every `every`-th step it records the held-out NLL of chosen exits for the
    middle- vs last-layer curves over training (Fig. 11). A hook runs inside a step, before its update, so a record
    at step s is the model after s updates (s = 0: the initialization); call `final()` after training for the last
    point. Evaluation runs every layer, without dropout, and does not advance the dropout schedule."""

    model: LayerSkipDecoder
    windows: torch.Tensor  # [N, T] held-out
    exits: tuple[int, ...]  # exit layers 1..L (the head after that many layers)
    every: int
    batch_size: int = 8

    def __post_init__(self) -> None:
        bad = [e for e in self.exits if not 1 <= e <= self.model.n_layers]
        if bad or not self.exits:
            raise ConfigError(f"exits {list(self.exits)} must name layers in [1, {self.model.n_layers}]")
        if self.every < 1:
            raise ConfigError(f"every={self.every} must be >= 1")
        self.records: list[dict[str, float]] = []
        self._seen: set[int] = set()

    def loss(self, step: int, batch: torch.Tensor, logits: torch.Tensor, model: nn.Module) -> dict[str, torch.Tensor]:
        if step % self.every == 0 and step not in self._seen:  # once per step, whatever the gradient accumulation
            self._seen.add(step)
            self.records.append({"step": step, **self.measure()})
        return {}

    def final(self, steps: int) -> list[dict[str, float]]:
        """Record the trained model (after `steps` updates) and return every record."""
        if steps not in self._seen:
            self._seen.add(steps)
            self.records.append({"step": steps, **self.measure()})
        return self.records

    @torch.no_grad()
    def measure(self) -> dict[str, float]:
        decoder, was_training = self.model.decoder, self.model.training
        decoder.eval()
        totals, count = dict.fromkeys(self.exits, 0.0), 0
        device = next(decoder.parameters()).device
        for start in range(0, len(self.windows), self.batch_size):
            window = self.windows[start:start + self.batch_size].to(device)
            hidden = decoder(window, return_hidden=True, n_steps=max(self.exits)).hidden_states
            for layer in self.exits:
                totals[layer] += next_token_loss(decoder.head(hidden[layer - 1]), window).item() * window[:, 1:].numel()
            count += window[:, 1:].numel()
        decoder.train(was_training)
        return {f"nll_exit_{layer}": total / count for layer, total in totals.items()}


def with_recipe(decoder: Decoder, dropout: bool, exit_loss: bool, overrides: dict[str, str], *, p_max: float,
                e_scale: float, curriculum: str, rotation: int | None, time_schedule: str, total_steps: int,
                accumulation_steps: int, seed: int,
                wrapper: type[LayerSkipDecoder] = LayerSkipDecoder) -> tuple[LayerSkipDecoder, LayerSkipLoss]:
    """`decoder` wrapped for one recipe (`rlib.layerskip.config.RECIPES`: whether layer dropout and the early-exit
    loss are on, and the recipe's overrides of the layer schedule, time schedule or curriculum), and its loss
    hook. `wrapper` is the LayerSkipDecoder class to wrap with (a subclass may give the exits other heads:
    `rlib.layerskip.exit_heads`)."""
    model = wrapper(decoder, p_max=p_max if dropout else 0.0,
                    time_schedule=overrides.get("time_schedule", time_schedule),
                    total_steps=total_steps, accumulation_steps=accumulation_steps, seed=seed,
                    layer_schedule=overrides.get("layer_schedule", "exp"))
    hook = LayerSkipLoss(model, e_scale=e_scale if exit_loss else 0.0,
                         curriculum=overrides.get("curriculum", curriculum), rotation=rotation or None)
    return model, hook
