"""Early-exit training of looped models (Relaxed Recursive Transformers, Sec. 3.7, App. J; Table 3).

A looped model with B loops of K blocks can answer after any loop: the hidden state at depth jK - 1 goes through
the shared final norm and LM head. Training makes those intermediate answers usable. With L_j the cross-entropy
of loop j's output:

    weighted     L = sum_j (j / sum_i i) L_j                         (prior work; B = 2: 1/3, 2/3)
    aggressive   L = L_B + c * sum_{j<B} L_j                          (the paper's "Agg(c)", c = 0.1 by default)
    + kd         each j < B adds (its coefficient) * KL(stop_grad(p_B) || p_j): self-distillation from the
                 detached final output (the paper's final recipe)

Post-training (uptrain first, then train exits on new tokens) and co-training (exit losses from the start) are
the same loss applied at different times; the chapter runs both.

Plumbing: `ExitModel` wraps a Decoder so that its forward returns the final logits as usual (what the trainer and
validation see) and keeps every exit's logits for `ExitLoss`, a `rlib.train.LossHook`. One forward serves both.

Table J.1's Freeze rows train no weight of the model: a LoRA on the classifier head (`ExitHead`, rank 128 in the
paper) is the only trainable part, and it serves the intermediate exits only, so the final output stays the frozen
model's.

    wrapped = ExitModel(model, exits=loop_exits(model))
    train(wrapped, windows, cfg, out, hooks=[ExitLoss(wrapped, "aggressive", coef=0.1, kd=True)])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rlib.config import ConfigError
from rlib.model import Decoder
from rlib.model.lora import LoRA

__all__ = ["EXIT_SCHEDULES", "ExitHead", "ExitLoss", "ExitModel", "confidence_exit_loops", "exit_coefficients",
           "exit_predictions", "exit_logits", "loop_exits", "oracle_exit_loops", "static_exit_losses",
           "static_exit_nll"]

EXIT_SCHEDULES = ("weighted", "aggressive", "final")


def loop_exits(model: Decoder, n_loops: int | None = None) -> tuple[int, ...]:
    """Plan depths after which a loop ends: K-1, 2K-1, ..., L-1 for L steps over K unique blocks (B = L / K)."""
    n_steps = len(model.plan.steps)
    n_loops = n_loops or n_steps // len(model.blocks)
    if n_loops < 1 or n_steps % n_loops:
        raise ConfigError(f"n_loops={n_loops} must divide the plan's {n_steps} steps")
    per_loop = n_steps // n_loops
    return tuple(per_loop * (j + 1) - 1 for j in range(n_loops))


def exit_coefficients(schedule: str, n_exits: int, coef: float = 0.1) -> tuple[float, ...]:
    """The weight of each exit's loss, the final exit last."""
    if schedule not in EXIT_SCHEDULES:
        raise ConfigError(f"exit schedule {schedule!r} unknown; choose from {EXIT_SCHEDULES}")
    if schedule == "weighted":
        total = n_exits * (n_exits + 1) / 2
        return tuple((j + 1) / total for j in range(n_exits))
    if schedule == "aggressive":
        if not 0 <= coef <= 1:
            raise ConfigError(f"aggressive coefficient {coef} must lie in [0, 1] (the paper: 0.3, 0.1, 0.05, 0.01)")
        return tuple([coef] * (n_exits - 1) + [1.0])
    return tuple([0.0] * (n_exits - 1) + [1.0])  # "final": the plain objective, exits untrained


def _head_weight(decoder: Decoder) -> torch.Tensor:
    """The LM head's weight [V, D]: the embedding when tied (as `Decoder.head` reads it)."""
    return decoder.embed.weight if decoder.lm_head is None else decoder.lm_head.weight


class ExitHead(nn.Module):
    """The decoder's head (final norm, LM head, soft-cap) plus a rank-R LoRA on the LM head's weight, for the
    intermediate exits of a frozen model (Table J.1's Freeze rows). B starts at zero: at init it is the head."""

    def __init__(self, decoder: Decoder, rank: int, seed: int = 0):
        super().__init__()
        weight = _head_weight(decoder)  # [V, D]
        self.lora = LoRA(weight.shape[1], weight.shape[0], rank)
        self.lora.reset_standard(torch.Generator().manual_seed(seed))
        self.lora.to(device=weight.device, dtype=weight.dtype)

    def forward(self, decoder: Decoder, hidden: torch.Tensor) -> torch.Tensor:
        """[B, T, D_model] -> [B, T, V]"""
        normed = decoder.final_norm(hidden)
        logits = F.linear(normed, _head_weight(decoder)) + self.lora(normed)
        if decoder.config.logit_softcap is not None:
            cap = decoder.config.logit_softcap
            logits = cap * torch.tanh(logits / cap)
        return logits


def exit_logits(decoder: Decoder, hidden: torch.Tensor, exit_head: ExitHead | None = None) -> torch.Tensor:
    """An intermediate exit's logits: through `exit_head` when there is one, else the decoder's own head."""
    return decoder.head(hidden) if exit_head is None else exit_head(decoder, hidden)


class ExitModel(nn.Module):
    """A Decoder whose forward also keeps the logits of every exit in `self.exit_logits` ([B, T, V] each); with an
    `exit_head` the intermediate exits read through it (the final exit always through the decoder's head)."""

    def __init__(self, decoder: Decoder, exits: tuple[int, ...], exit_head: ExitHead | None = None):
        super().__init__()
        if not exits or exits[-1] != len(decoder.plan.steps) - 1 or list(exits) != sorted(set(exits)):
            raise ConfigError(f"exits {exits} must be increasing plan depths ending at the last step "
                              f"({len(decoder.plan.steps) - 1})")
        self.decoder = decoder
        self.exit_head = exit_head
        self.exits = tuple(exits)
        self.exit_logits: list[torch.Tensor] = []

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out = self.decoder(input_ids, return_hidden=True)
        self.exit_logits = [exit_logits(self.decoder, out.hidden_states[d], self.exit_head)
                            for d in self.exits[:-1]] + [out.logits]
        return out.logits


def _ce(logits: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), batch[:, 1:].flatten())


def _self_kd(student: torch.Tensor, final: torch.Tensor) -> torch.Tensor:
    """KL(stop_grad(p_final) || p_student), mean over tokens."""
    target = F.log_softmax(final.detach().float(), dim=-1).flatten(0, 1)
    log_q = F.log_softmax(student.float(), dim=-1).flatten(0, 1)
    return F.kl_div(log_q, target, log_target=True, reduction="sum") / log_q.shape[0]


@dataclass
class ExitLoss:
    """LossHook: the exit losses of `schedule` on an ExitModel. The trainer already adds the final cross-entropy
    with weight 1, so this adds (coef_B - 1) * L_B (zero for aggressive) and coef_j * L_j for j < B."""

    model: ExitModel
    schedule: str = "aggressive"
    coef: float = 0.1
    kd: bool = False

    def __post_init__(self) -> None:
        self.coefficients = exit_coefficients(self.schedule, len(self.model.exits), self.coef)

    def loss(self, step: int, batch: torch.Tensor, logits: torch.Tensor, model: nn.Module) -> dict[str, torch.Tensor]:
        exits = self.model.exit_logits
        if len(exits) != len(self.coefficients):
            raise RuntimeError("ExitLoss needs the ExitModel's forward to run first (pass the wrapped model to train)")
        terms: dict[str, torch.Tensor] = {}
        for j, (c, exit_logits) in enumerate(zip(self.coefficients[:-1], exits[:-1]), start=1):
            ce = _ce(exit_logits, batch)
            terms[f"ce_exit{j}"] = c * ce
            if self.kd:
                terms[f"kd_exit{j}"] = c * _self_kd(exit_logits, exits[-1])
        final_extra = self.coefficients[-1] - 1.0
        if final_extra:
            terms["ce_final_reweight"] = final_extra * _ce(exits[-1], batch)
        return terms


@torch.no_grad()
def exit_predictions(model: Decoder, windows: torch.Tensor, exits: tuple[int, ...], batch_size: int = 8,
                     dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced argmax and top-1 probability of every exit at every position: two [E, N, T] tensors."""
    device = next(model.parameters()).device
    tops, probs = [], []
    for start in range(0, len(windows), batch_size):
        batch = windows[start:start + batch_size].to(device)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = model(batch, return_hidden=True, n_steps=exits[-1] + 1)
            p = torch.stack([torch.softmax(model.head(out.hidden_states[d]).float(), -1) for d in exits])
        best = p.max(-1)  # [E, b, T]
        tops.append(best.indices.cpu())
        probs.append(best.values.cpu())
    return torch.cat(tops, 1), torch.cat(probs, 1)


def oracle_exit_loops(top: torch.Tensor) -> torch.Tensor:
    """The paper's oracle (App. K): the first exit whose argmax equals the last exit's; [E, N, T] -> [N, T] in 1..E."""
    agrees = top == top[-1:]  # [E, N, T]; the last exit always agrees
    return agrees.int().argmax(0) + 1


def confidence_exit_loops(prob: torch.Tensor, threshold: float) -> torch.Tensor:
    """The first exit whose top-1 probability reaches `threshold` (else the last); [E, N, T] -> [N, T] in 1..E."""
    confident = prob >= threshold
    confident[-1] = True
    return confident.int().argmax(0) + 1


@torch.no_grad()
def static_exit_nll(model: Decoder, windows: torch.Tensor, exits: tuple[int, ...], batch_size: int = 8,
                    dtype: torch.dtype | None = None, exit_head: ExitHead | None = None) -> dict[int, torch.Tensor]:
    """Each held-out window's mean NLL (nats/token, [N] fp64) when every token exits at the same depth ("static
    exiting", App. J), per exit, from one forward per batch; with `exit_head`, the exits before the last read through
    it (as `ExitModel` trains them). The last exit's is the model's own perplexity on the windows."""
    device = next(model.parameters()).device
    per_window: dict[int, list[torch.Tensor]] = {depth: [] for depth in exits}
    for start in range(0, len(windows), batch_size):
        batch = windows[start:start + batch_size].to(device)  # [b, T]
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = model(batch, return_hidden=True, n_steps=exits[-1] + 1)
            for depth in exits:
                hidden = out.hidden_states[depth]
                logits = model.head(hidden) if depth == exits[-1] else exit_logits(model, hidden, exit_head)
                nll = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), batch[:, 1:].flatten(), reduction="none")
                per_window[depth].append(nll.view(len(batch), -1).double().mean(1).cpu())  # [b]
    return {depth: torch.cat(parts) for depth, parts in per_window.items()}


def static_exit_losses(model: Decoder, windows: torch.Tensor, exits: tuple[int, ...], batch_size: int = 8,
                       dtype: torch.dtype | None = None, exit_head: ExitHead | None = None) -> dict[int, float]:
    """Held-out NLL (nats/token) per exit under static exiting: the mean of `static_exit_nll` (windows of equal
    length, so the mean over windows is the mean over tokens)."""
    return {depth: float(nll.mean()) for depth, nll in
            static_exit_nll(model, windows, exits, batch_size, dtype, exit_head).items()}
