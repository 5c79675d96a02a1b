"""Reading a LayerSkip model layer by layer (paper 004, Sec. 2.1 Fig. 2; Sec. 5 Figs. 6, 8, 10, 11; Table 1).

    exit_metrics      held-out NLL, perplexity and top-1 next-token accuracy of the shared head after every layer (or
                      chosen layers): the per-exit curves of Figs. 6, 8 and 10; Table 1's last vs middle layer
    exit_argmax       the head's argmax after every layer for each generated token (Fig. 2b's grid)
    layers_needed     the motivation probe of Fig. 2: for each token of a sequence, the earliest layer whose exit
                      already predicts the model's final choice. The paper's wording fits two readings and both are
                      reported: "first" (the first layer that agrees) and "stable" (the layer from which every later
                      exit agrees). The paper's Llama1 7B needs 23.45 of 32 layers on average.
    motivation_probe  both on a prompt: the model's greedy continuation and its agreement grid (Fig. 2a-b)
"""

from __future__ import annotations

import math

import pandas as pd
import torch
import torch.nn.functional as F

from rlib.model import Decoder

__all__ = ["exit_argmax", "exit_metrics", "layers_needed", "motivation_probe"]


def _check_exits(exits: tuple[int, ...] | None, n_layers: int) -> tuple[int, ...]:
    exits = tuple(range(1, n_layers + 1)) if exits is None else tuple(sorted(set(exits)))
    bad = [e for e in exits if not 1 <= e <= n_layers]
    if bad or not exits:
        raise ValueError(f"exits {list(exits)} must name layers in [1, {n_layers}] (the head after that many layers)")
    return exits


@torch.no_grad()
def exit_metrics(model: Decoder, windows: torch.Tensor, batch_size: int = 8,
                 exits: tuple[int, ...] | None = None) -> pd.DataFrame:
    """windows [N, T] -> one row per exit (layer 1..L: the head after that many layers; default every layer): nll,
    ppl, top1_acc, and agree_last: the share of positions where the exit's argmax is the last exit's (what a greedy
    draft from that exit would get accepted on this text, teacher-forced). The model runs once per batch."""
    model.eval()
    exits = _check_exits(exits, len(model.plan))
    nll = torch.zeros(len(exits), dtype=torch.float64)
    right = torch.zeros(len(exits), dtype=torch.float64)
    agree = torch.zeros(len(exits), dtype=torch.float64)
    count = 0
    device = next(model.parameters()).device
    for start in range(0, len(windows), batch_size):
        batch = windows[start:start + batch_size].to(device)  # [b, T]
        targets = batch[:, 1:].flatten()
        out = model(batch, return_hidden=True)
        final = out.logits[:, :-1].flatten(0, 1).argmax(-1)  # [b (T - 1)]: the last exit's choices
        for i, layer in enumerate(exits):
            logits = model.head(out.hidden_states[layer - 1][:, :-1]).flatten(0, 1).float()  # [b (T - 1), V]
            nll[i] += F.cross_entropy(logits, targets, reduction="sum").item()
            right[i] += (logits.argmax(-1) == targets).sum().item()
            agree[i] += (logits.argmax(-1) == final).sum().item()
        count += targets.numel()
    rows = [{"exit_layer": layer, "nll": float(nll[i] / count), "ppl": math.exp(float(nll[i] / count)),
             "top1_acc": float(right[i] / count), "agree_last": float(agree[i] / count)}
            for i, layer in enumerate(exits)]
    return pd.DataFrame(rows)


@torch.no_grad()
def exit_argmax(model: Decoder, sequence: torch.Tensor, first_generated: int) -> torch.Tensor:
    """sequence [T] -> [L, n]: the shared head's argmax after every layer at the n positions whose next token was
    generated (from index `first_generated` on): Fig. 2(b)'s grid of per-layer predictions."""
    model.eval()
    if not 1 <= first_generated < sequence.shape[0]:
        raise ValueError(f"first_generated={first_generated} must index a token of the {sequence.shape[0]}-long "
                         "sequence after at least one prompt token")
    hidden = model(sequence[None], return_hidden=True).hidden_states
    rows = slice(first_generated - 1, sequence.shape[0] - 1)  # positions whose next token was generated
    return torch.stack([model.head(h[0, rows]).argmax(-1) for h in hidden])  # [L, n]


def layers_needed(model: Decoder, sequence: torch.Tensor, first_generated: int) -> pd.DataFrame:
    """sequence [T] (prompt + the model's own greedy continuation from index `first_generated`) -> per generated
    token: its id, the final exit's argmax, and the layers needed under both readings (1..L)."""
    return _needed(exit_argmax(model, sequence, first_generated), sequence[first_generated:])


def _needed(top: torch.Tensor, tokens: torch.Tensor) -> pd.DataFrame:
    agree = top == top[-1]  # [L, n]
    n_layers = top.shape[0]
    first = agree.long().argmax(0) + 1  # the last exit always agrees, so a True exists
    later_all = torch.flip(torch.cumprod(torch.flip(agree.long(), [0]), 0), [0]).bool()  # agree from l to the end
    stable = n_layers - later_all.sum(0) + 1
    return pd.DataFrame({"token": tokens.tolist(), "final_argmax": top[-1].tolist(),
                         "first": first.tolist(), "stable": stable.tolist()})


@torch.no_grad()
def motivation_probe(model: Decoder, prompt: torch.Tensor, new_tokens: int) -> tuple[pd.DataFrame, torch.Tensor]:
    """Fig. 2 on one prompt [1, T]: the model's greedy continuation (EOS ignored), then per generated token the
    layers needed (`layers_needed`'s table) and the agreement grid [L, n] of every exit with the last one."""
    if prompt.dim() != 2 or prompt.shape[0] != 1 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be [1, T] ids with T >= 1, got shape {tuple(prompt.shape)}")
    sequence = model.eval().generate(prompt, new_tokens, eos_ids=())[0]  # [T + n]
    top = exit_argmax(model, sequence, prompt.shape[1])  # [L, n]
    return _needed(top, sequence[prompt.shape[1]:]), top == top[-1]
