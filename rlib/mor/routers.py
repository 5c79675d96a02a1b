"""Routers of Mixture-of-Recursions and their losses and metrics (paper 001, Sec. 2.2.1, App. A.2, F).

Expert-choice (one router per recursion step):
    score  g = alpha * G(logit / temperature), G = sigmoid | tanh | identity
    choose top-k_r of the candidates (those kept at the previous step), k_r = max(1, int(c_r T)) with T the full
           sequence length; positions keep their order
    decide causally at inference: G(logit) >= 0.5 (sigmoid) or >= 0 (tanh, identity): what the BCE aux loss trains
           the router to agree with; an auxiliary router decides by its own logit >= 0
    losses BCE(logit, 1[top-k]) summed over steps, averaged over the candidates; z-loss mean(logit^2)
    metrics sampling accuracy (causal decision == top-k membership), dead-token ratio (positions never kept at the
           last step over a batch)

Token-choice (one router, Nr outputs):
    p = alpha * softmax(logits) (or alpha * sigmoid); depth = argmax(p + bias) (bias: loss-free balancing only)
    balancing loss sum_i f_i P_i with f_i = Nr / N * #tokens choosing i, P_i = mean p_i over the N tokens
    z-loss mean(logsumexp(logits)^2); metrics MaxVio = (max load - mean load) / mean load, entropy of mean p
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rlib.mor.spec import MoRSpec

__all__ = ["Router", "balance_loss", "expert_scores", "load_metrics", "max_violation", "topk_select", "z_loss"]


class Router(nn.Module):
    """x [..., D] -> logits [..., out]: linear (no bias), or an MLP with a 2D ("mlp") or 4D ("wide_mlp") hidden."""

    def __init__(self, d_model: int, out: int, arch: str = "linear", std: float = 0.02, seed: int = 0):
        super().__init__()
        if arch == "linear":
            self.net = nn.Linear(d_model, out, bias=False)
        else:
            hidden = d_model * (2 if arch == "mlp" else 4)
            self.net = nn.Sequential(nn.Linear(d_model, hidden), nn.GELU(), nn.Linear(hidden, out))
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.net.parameters():
                if p.ndim == 2:
                    p.copy_(torch.empty(p.shape).normal_(0.0, std, generator=generator))
                else:
                    p.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.to(next(self.parameters()).dtype))


# ---- expert-choice --------------------------------------------------------------------------------------------


def expert_scores(logits: torch.Tensor, spec: MoRSpec) -> torch.Tensor:
    """logits [B, n] -> gate values g = alpha * G(logits / temperature) [B, n] (fp32)."""
    z = logits.float() / spec.temperature
    if spec.router_func == "sigmoid":
        z = torch.sigmoid(z)
    elif spec.router_func == "tanh":
        z = torch.tanh(z)
    return spec.alpha * z


def causal_decision(logits: torch.Tensor) -> torch.Tensor:
    """The per-token decision a decoder can make without future tokens: G(logit) >= 0.5 for sigmoid, >= 0 else."""
    return logits.float() >= 0  # sigmoid(z) >= 0.5 <=> z >= 0; tanh(z) >= 0 <=> z >= 0; identity likewise


def topk_select(scores: torch.Tensor, candidates: torch.Tensor, k: int) -> torch.Tensor:
    """Among candidates [B, T] (bool), keep the k highest scores [B, T] per row -> kept [B, T] (bool).

    Non-candidates never win; a row with fewer than k candidates keeps all of them."""
    masked = scores.float().masked_fill(~candidates, float("-inf"))
    k = min(k, scores.shape[1])
    top = masked.topk(k, dim=1).indices  # [B, k]
    kept = torch.zeros_like(candidates).scatter(1, top, True)
    return kept & candidates


def bce_aux_loss(logits: torch.Tensor, kept: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """BCE of router logits against top-k membership, averaged over the candidate tokens."""
    loss = F.binary_cross_entropy_with_logits(logits.float(), kept.float(), reduction="none")
    return (loss * candidates).sum() / candidates.sum().clamp(min=1)


def z_loss(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Router z-loss: mean (logsumexp over outputs)^2; a single-logit router uses logit^2. logits [..., out]."""
    z = logits.float()
    value = (torch.logsumexp(z, dim=-1) if z.shape[-1] > 1 else z[..., 0]) ** 2
    if mask is None:
        return value.mean()
    return (value * mask).sum() / mask.sum().clamp(min=1)


# ---- token-choice ---------------------------------------------------------------------------------------------


def token_probs(logits: torch.Tensor, spec: MoRSpec) -> torch.Tensor:
    """logits [B, T, Nr] -> alpha * softmax (or alpha * sigmoid) [B, T, Nr] (fp32)."""
    z = logits.float() / spec.temperature
    return spec.alpha * (torch.softmax(z, dim=-1) if spec.router_func == "softmax" else torch.sigmoid(z))


def balance_loss(probs: torch.Tensor, depth: torch.Tensor, n_recursions: int) -> torch.Tensor:
    """Switch-style balancing: sum_i f_i P_i over all tokens; probs [B, T, Nr], depth [B, T] in 0..Nr-1."""
    flat_probs = probs.reshape(-1, n_recursions)
    counts = torch.bincount(depth.reshape(-1), minlength=n_recursions).float()
    f = counts * n_recursions / flat_probs.shape[0]
    return (f * flat_probs.mean(0)).sum()


def max_violation(counts: torch.Tensor) -> float:
    """MaxVio (App. F.2) of the tokens per expert [Nr]: (max load - mean load) / mean load."""
    counts = counts.float()
    mean = counts.mean()
    return float((counts.max() - mean) / mean.clamp(min=1e-9))


def load_metrics(depth: torch.Tensor, probs: torch.Tensor | None, n_recursions: int) -> dict[str, float]:
    """MaxVio and (with probs) the entropy of the mean routing distribution (max: log Nr)."""
    counts = torch.bincount(depth.reshape(-1), minlength=n_recursions).float()
    out = {"maxvio": max_violation(counts)}
    out.update({f"share_depth{i + 1}": float(c / counts.sum()) for i, c in enumerate(counts)})
    if probs is not None:
        p = probs.reshape(-1, n_recursions).float().mean(0)
        p = p / p.sum()
        out["entropy"] = float(-(p * p.clamp(min=1e-12).log()).sum())
        out["entropy_max"] = math.log(n_recursions)
    return out
