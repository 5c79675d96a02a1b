"""Per-depth adapters of a relaxed recursive model (Relaxed Recursive Transformers, Sec. 2.3, Eq. 3-5).

A looped model shares one block among several depths; relaxation gives each depth a small private correction:

    LoRA        on a linear map h = W'x:  h = W'x + B_l A_l x         A [R, in], B [out, R], scale 1 (the SVD init
                                                                      of Eq. 4 writes B A = the residual's best rank-R
                                                                      approximation, so there is no alpha / R factor)
    NormDelta   on a norm weight w':      w_l = w' + delta_l          [D]; not in the paper, which ties the norms too:
                                                                      without it no rank of LoRA can restore the
                                                                      source model whose norms differ per layer

    PrefixAdapter  per-depth prompt vectors [P, D] whose shared K/V projections every query also attends to,
                   gated per head (gate 0 at init: the model starts unchanged); App. H's prefix relaxation

All live in the `adapters` ModuleDict of the Projection / RMSNorm / Attention they correct, keyed by the depth
(the execution step's index), and are saved and reloaded with the model (`rlib.model.convert`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class LoRA(nn.Module):
    """x -> B (A x): a rank-R update of one linear map at one depth."""

    def __init__(self, in_features: int, out_features: int, rank: int):
        super().__init__()
        if not 1 <= rank <= min(in_features, out_features):
            raise ValueError(f"LoRA rank {rank} must be in 1..min(in, out) = {min(in_features, out_features)}")
        self.lora_a = nn.Parameter(torch.empty(rank, in_features))  # [R, in]
        self.lora_b = nn.Parameter(torch.zeros(out_features, rank))  # [out, R]
        self.reset_standard()

    @property
    def rank(self) -> int:
        return self.lora_a.shape[0]

    def reset_standard(self, generator: torch.Generator | None = None) -> None:
        """Standard LoRA init (Hu et al.): A ~ U(+-1/sqrt(in)) (kaiming-uniform, a = sqrt 5), B = 0: a zero update."""
        bound = 1.0 / math.sqrt(self.lora_a.shape[1])
        with torch.no_grad():
            self.lora_a.uniform_(-bound, bound, generator=generator)
            self.lora_b.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(x, self.lora_a), self.lora_b)  # [..., in] -> [..., R] -> [..., out]

    def extra_repr(self) -> str:
        return f"in={self.lora_a.shape[1]}, out={self.lora_b.shape[0]}, rank={self.rank}"


class NormDelta(nn.Module):
    """An additive per-depth correction of a norm's weight vector."""

    def __init__(self, dim: int):
        super().__init__()
        self.delta = nn.Parameter(torch.zeros(dim))  # [D]

    def extra_repr(self) -> str:
        return f"{self.delta.shape[0]}"


class PrefixAdapter(nn.Module):
    """P hidden-space prompt vectors and a per-head gate for one depth's attention."""

    def __init__(self, length: int, d_model: int, n_heads: int):
        super().__init__()
        if length < 1:
            raise ValueError(f"prefix length {length} must be >= 1")
        self.prompt = nn.Parameter(torch.zeros(length, d_model))  # [P, D_model]
        self.gate = nn.Parameter(torch.zeros(n_heads))  # [H]

    def extra_repr(self) -> str:
        return f"length={self.prompt.shape[0]}, d_model={self.prompt.shape[1]}, heads={self.gate.shape[0]}"


def adapter_spec(module: nn.Module) -> dict:
    """What `convert.load` needs to rebuild an adapter before loading its weights."""
    if isinstance(module, LoRA):
        return {"kind": "lora", "in": module.lora_a.shape[1], "out": module.lora_b.shape[0], "rank": module.rank}
    if isinstance(module, NormDelta):
        return {"kind": "norm", "dim": module.delta.shape[0]}
    if isinstance(module, PrefixAdapter):
        return {"kind": "prefix", "length": module.prompt.shape[0], "d_model": module.prompt.shape[1],
                "heads": module.gate.shape[0]}
    raise TypeError(f"unknown adapter type {type(module).__name__}")


def build_adapter(spec: dict) -> nn.Module:
    if spec["kind"] == "lora":
        return LoRA(spec["in"], spec["out"], spec["rank"])
    if spec["kind"] == "norm":
        return NormDelta(spec["dim"])
    if spec["kind"] == "prefix":
        return PrefixAdapter(spec["length"], spec["d_model"], spec["heads"])
    raise ValueError(f"unknown adapter kind {spec['kind']!r} in a saved model")
