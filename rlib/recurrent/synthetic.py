"""Training and scoring one layer on the synthetic tasks (paper 002, Sec. 7.1, Figs. 5-6, App. D.2).

A task model is `RTModel` with one layer (recurrent, or its Transformer twin with the same parameters) and, for
compression, MAD's autoencoder read-out: the last position's hidden state plus a sinusoidal embedding of each
output position, through two (norm, linear, GELU) blocks, to logits for every input token. Training is AdamW with
a cosine schedule over the training set for a few epochs, on every next token (MAD's recipe) or only on the
scored targets (`loss_on="scored"`; in our CPU-scale probes MAD's loss, half of it unpredictable tokens, kept one
RT layer at chance on recall, while the scored targets alone taught it). Scoring reports token accuracy (argmax
over scored targets) and sequence accuracy (every scored target of a sequence right), as the paper's Figs. 5-6 do.
With a probe set, `fit` also records a learning curve (both accuracies at evenly spaced steps), which tells "not
learned yet" (a curve still rising at the end) from "not learnable" (flat at chance).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rlib.config import ConfigError
from rlib.progress import progress
from rlib.recurrent.config import LOSS_TARGETS, RTConfig
from rlib.recurrent.layer import RMSNorm
from rlib.recurrent.model import RTModel
from rlib.recurrent.tasks import IGNORE, TaskData

__all__ = ["LOSS_TARGETS", "FitConfig", "TaskModel", "curve_steps", "evaluate", "fit"]



def sinusoid(positions: int, dim: int) -> torch.Tensor:
    """[positions, dim] sine/cosine position embedding (Vaswani et al.)."""
    pos = torch.arange(positions, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10_000.0) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    table = torch.zeros(positions, dim)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq[: dim // 2])
    return table


class TaskModel(nn.Module):
    """One-layer RTModel with an LM head, or the compression read-out (module docstring)."""

    def __init__(self, config: RTConfig, head: str, seq_len: int, seed: int = 0, tile_impl: str = "auto"):
        super().__init__()
        if head not in ("lm", "compress"):
            raise ValueError(f"head={head!r}: use 'lm' or 'compress'")
        self.head_kind, self.tile_impl = head, tile_impl
        self.body = RTModel(config, seed=seed)
        if head == "compress":
            d = config.d_model
            self.register_buffer("positions", sinusoid(seq_len, d), persistent=False)
            self.decoder = nn.Sequential(RMSNorm(d, config.norm_eps), nn.Linear(d, d), nn.GELU(),
                                         RMSNorm(d, config.norm_eps), nn.Linear(d, d), nn.GELU())

    def forward(self, ids: torch.Tensor, schedule: str = "tiled", tile_impl: str | None = None) -> torch.Tensor:
        body, tile_impl = self.body, tile_impl or self.tile_impl
        if self.head_kind == "lm":
            return body(ids, schedule=schedule, tile_impl=tile_impl)  # [B, T, V]
        hidden = body.hidden_states(ids, schedule, tile_impl)[0][:, -1]  # [B, D]: the compressed state
        queries = hidden[:, None, :] + self.positions[None, : ids.shape[1]]  # [B, T, D]
        return body.logits(self.decoder(queries))


@dataclass(frozen=True)
class FitConfig:
    epochs: int
    batch_size: int
    lr: float
    weight_decay: float = 0.0
    warmup_fraction: float = 0.05
    seed: int = 0
    loss_on: str = "all"  # "all": every next token, as MAD trains; "scored": only the targets accuracy is scored on
    curve_points: int = 0  # evaluations of the probe set spread evenly over training (the last one at the end)

    def __post_init__(self) -> None:
        if self.loss_on not in LOSS_TARGETS:
            raise ConfigError(f"loss_on={self.loss_on!r}: choose from {list(LOSS_TARGETS)}")
        if self.curve_points < 0:
            raise ConfigError(f"curve_points={self.curve_points} must be >= 0 (0 = no learning curve)")


def curve_steps(total: int, points: int) -> list[int]:
    """The steps (1-based counts of optimizer steps taken) after which a learning curve evaluates: `points` evenly
    spread, the last one at `total`."""
    return sorted({max(1, round(total * (i + 1) / points)) for i in range(points)}) if points else []


def fit(model: TaskModel, data: TaskData, cfg: FitConfig, desc: str = "train",
        probe: TaskData | None = None) -> dict[str, Any]:
    """AdamW over `data` for cfg.epochs (cosine schedule to 0 after a linear warm-up); returns loss, time and, with
    `probe` and cfg.curve_points, the learning curve: `evaluate(probe)` after each of `curve_steps` (the evaluation
    time is not counted in `seconds`)."""
    generator = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    steps_per_epoch = math.ceil(len(data) / cfg.batch_size)
    total = cfg.epochs * steps_per_epoch
    warmup = max(1, int(cfg.warmup_fraction * total))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warmup, 0.5 * (1 + math.cos(
        math.pi * min(1.0, max(0, s - warmup) / max(1, total - warmup))))))
    model.train()
    started, loss_value = time.perf_counter(), float("nan")
    bar = progress(range(total), desc=desc, unit="step", leave=False)
    order = torch.randperm(len(data), generator=generator)
    targets = data.train_targets if cfg.loss_on == "all" else data.targets  # [n, T]
    checkpoints = set(curve_steps(total, cfg.curve_points)) if probe is not None else set()
    curve: list[dict[str, float]] = []
    paused = 0.0
    for step in bar:
        if step and step % steps_per_epoch == 0:
            order = torch.randperm(len(data), generator=generator)
        index = order[(step % steps_per_epoch) * cfg.batch_size:][: cfg.batch_size]
        logits = model(data.inputs[index])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets[index].flatten(),
                               ignore_index=IGNORE)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_value = loss.item()
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{loss_value:.3f}")
        if step + 1 in checkpoints:
            pause = time.perf_counter()
            scores = evaluate(model, probe)
            curve.append({"step": step + 1, "train_loss": loss_value, "token_acc": scores["token_acc"],
                          "seq_acc": scores["seq_acc"]})
            paused += time.perf_counter() - pause
    return {"final_loss": loss_value, "seconds": time.perf_counter() - started - paused, "steps": total,
            "curve": curve}


@torch.no_grad()
def evaluate(model: TaskModel, data: TaskData, batch_size: int = 256) -> dict[str, float]:
    """Token accuracy, sequence accuracy and mean loss over the scored targets of `data`."""
    model.eval()
    right = scored = seq_right = seqs = 0
    loss_sum = 0.0
    for start in range(0, len(data), batch_size):
        part = data.subset(slice(start, start + batch_size))
        logits = model(part.inputs).float()
        mask = part.targets != IGNORE  # [B, T]
        hit = (logits.argmax(-1) == part.targets) & mask
        right += int(hit.sum())
        scored += int(mask.sum())
        has = mask.any(dim=1)
        seq_right += int(((hit | ~mask).all(dim=1) & has).sum())
        seqs += int(has.sum())
        loss_sum += float(F.cross_entropy(logits.flatten(0, 1), part.targets.flatten(), ignore_index=IGNORE,
                                          reduction="sum"))
    model.train()
    return {"token_acc": right / max(1, scored), "seq_acc": seq_right / max(1, seqs),
            "loss": loss_sum / max(1, scored), "scored_tokens": scored}
