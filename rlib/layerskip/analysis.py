"""Reading a LayerSkip model layer by layer (paper 004, Sec. 2.1 Fig. 2; Sec. 5 Figs. 6, 8, 10, 11; Table 1).

    exit_metrics      held-out NLL, perplexity and top-1 next-token accuracy of the shared head after every layer
                      (the per-exit curves of Figs. 6, 8 and 10; Table 1's last vs middle layer)
    layers_needed     the motivation probe of Fig. 2: for each token of a sequence, the earliest layer whose exit
                      already predicts the model's final choice. The paper's wording fits two readings and both are
                      reported: "first" (the first layer that agrees) and "stable" (the layer from which every later
                      exit agrees). The paper's Llama1 7B needs 23.45 of 32 layers on average.
"""

from __future__ import annotations

import math

import pandas as pd
import torch
import torch.nn.functional as F

from rlib.model import Decoder

__all__ = ["exit_metrics", "layers_needed"]


@torch.no_grad()
def exit_metrics(model: Decoder, windows: torch.Tensor, batch_size: int = 8) -> pd.DataFrame:
    """windows [N, T] -> one row per exit (layer 1..L: the head after that many layers): nll, ppl, top1_acc."""
    model.eval()
    n_layers = len(model.plan)
    nll = torch.zeros(n_layers, dtype=torch.float64)
    right = torch.zeros(n_layers, dtype=torch.float64)
    count = 0
    device = next(model.parameters()).device
    for start in range(0, len(windows), batch_size):
        batch = windows[start:start + batch_size].to(device)  # [b, T]
        targets = batch[:, 1:].flatten()
        hidden = model(batch, return_hidden=True).hidden_states
        for layer, states in enumerate(hidden):
            logits = model.head(states[:, :-1]).flatten(0, 1).float()  # [b (T - 1), V]
            nll[layer] += F.cross_entropy(logits, targets, reduction="sum").item()
            right[layer] += (logits.argmax(-1) == targets).sum().item()
        count += targets.numel()
    rows = [{"exit_layer": layer + 1, "nll": float(nll[layer] / count), "ppl": math.exp(float(nll[layer] / count)),
             "top1_acc": float(right[layer] / count)} for layer in range(n_layers)]
    return pd.DataFrame(rows)


@torch.no_grad()
def layers_needed(model: Decoder, sequence: torch.Tensor, first_generated: int) -> pd.DataFrame:
    """sequence [T] (prompt + the model's own greedy continuation from index `first_generated`) -> per generated
    token: its id, the final exit's argmax, and the layers needed under both readings (1..L)."""
    model.eval()
    if not 1 <= first_generated < sequence.shape[0]:
        raise ValueError(f"first_generated={first_generated} must index a token of the {sequence.shape[0]}-long "
                         "sequence after at least one prompt token")
    hidden = model(sequence[None], return_hidden=True).hidden_states
    rows = slice(first_generated - 1, sequence.shape[0] - 1)  # positions whose next token was generated
    top = torch.stack([model.head(h[0, rows]).argmax(-1) for h in hidden])  # [L, n]
    agree = top == top[-1]  # [L, n]
    n_layers = top.shape[0]
    first = agree.long().argmax(0) + 1  # the last exit always agrees, so a True exists
    later_all = torch.flip(torch.cumprod(torch.flip(agree.long(), [0]), 0), [0]).bool()  # agree from l to the end
    stable = n_layers - later_all.sum(0) + 1
    return pd.DataFrame({"token": sequence[first_generated:].tolist(), "final_argmax": top[-1].tolist(),
                         "first": first.tolist(), "stable": stable.tolist()})
