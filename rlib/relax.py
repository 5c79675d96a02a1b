"""Relaxed Recursive Transformers: depth-wise LoRA on a looped model (Bae et al., Sec. 2.3, Eq. 3-5, App. C, G).

A looped model runs block k = plan.steps[l].block at depth l. Relaxation gives every depth l its own LoRA on each
of the block's seven linear maps (Q, K, V, O, gate, up, down), so depth l computes W'x + B_l A_l x:

    init "svd"   (Eq. 4) R_l = W_l - W'  (the source layer l minus the shared weight it now uses);
                 U S V^T = svd(R_l); B_l = U_r S_r, A_l = V_r^T, so W' + B_l A_l is the best rank-r approximation
                 of W_l. Where R_l = 0 (Stepwise keeps some layers as they were) the LoRA gets the standard init.
    init "zero"  standard LoRA init everywhere (A random, B = 0): the relaxed model starts as the recursive one.

Rank r is capped per map at min(d_in, d_out) (the paper's parameter counts imply this cap); at the cap the SVD is
exact and every linear map of every depth equals the source's. The norms stay tied in the paper, so even then the
model is not the source; `norms=True` adds a per-depth additive delta to every norm weight (init: source - shared,
d parameters per norm and depth) and makes the full-rank relaxed model reproduce the source's logits.

    relaxed = relax(looped, source, Relaxation(rank=64, init="svd"))

Prefix relaxation (App. H, Table H.1) is the alternative: `prefix_relax(looped, length)` gives each depth P
trainable hidden-space prompt vectors whose shared K/V projections all queries also attend to, gated per head
(gate 0 at init, so the model starts as the recursive one; PEFT's adaption-prompt form, which the parameter
counts of Table H.1 match: L x P x d_model).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import nn

from rlib.config import Checked, ConfigError
from rlib.model import Decoder
from rlib.model.layers import Projection, RMSNorm
from rlib.model.lora import LoRA, NormDelta, PrefixAdapter

__all__ = ["PROJECTIONS", "RANK_GROUPS", "RELAX_INITS", "Relaxation", "full_rank", "lora_parameters", "prefix_adapter",
           "prefix_relax", "relax", "strip_adapters", "svd_relative_error"]

PROJECTIONS = ("attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
               "mlp.down_proj")
RANK_GROUPS = {"attn.q_proj": "q", "attn.k_proj": "kv", "attn.v_proj": "kv", "attn.o_proj": "o",
               "mlp.gate_proj": "ffn", "mlp.up_proj": "ffn", "mlp.down_proj": "ffn"}  # Table G.1's module groups
RELAX_INITS = ("svd", "zero")
NORMS = ("attn_norm", "attn_out_norm", "mlp_norm", "mlp_out_norm", "attn.q_norm", "attn.k_norm")


@dataclass(frozen=True)
class Relaxation(Checked):
    """How to relax a looped model: LoRA rank (per group of Table G.1 if `ranks` names one), init, norms."""

    rank: int
    init: str = "svd"
    ranks: dict[str, int] = field(default_factory=dict)  # "q" | "kv" | "o" | "ffn" -> rank, overriding `rank`
    norms: bool = False  # per-depth norm deltas (not in the paper; needed for an exact full-rank model)
    seed: int = 0  # standard-init draws

    def __post_init__(self) -> None:
        if self.init not in RELAX_INITS:
            raise ConfigError(f"relaxation init {self.init!r} unknown; choose from {RELAX_INITS}")
        bad = [g for g in self.ranks if g not in set(RANK_GROUPS.values())]
        if bad:
            raise ConfigError(f"ranks {bad} name no module group; use {sorted(set(RANK_GROUPS.values()))}")
        if self.rank < 1 or any(r < 1 for r in self.ranks.values()):
            raise ConfigError(f"LoRA ranks must be >= 1; got rank={self.rank}, ranks={self.ranks}")

    def rank_of(self, projection: str, d_in: int, d_out: int) -> int:
        return min(self.ranks.get(RANK_GROUPS[projection], self.rank), d_in, d_out)


def _check_pair(looped: Decoder, source: Decoder) -> None:
    n_src = len(source.plan.steps)
    if any(step.block != i for i, step in enumerate(source.plan.steps)) or n_src != len(source.blocks):
        raise ConfigError("the source must be a plain decoder (identity plan): depth l of the looped model is layer l")
    if len(looped.plan.steps) != n_src:
        raise ConfigError(f"the looped model has {len(looped.plan.steps)} depths but the source {n_src} layers")
    _require_unrelaxed(looped)


def _require_unrelaxed(looped: Decoder) -> None:
    for name, _ in looped.named_parameters():
        if ".adapters." in name:
            raise ConfigError(f"the looped model is already relaxed ({name}); relax the plain recursive model")


def _svd_lora(residual: torch.Tensor, rank: int, lora: LoRA, cached: tuple | None = None) -> tuple:
    """B = U_r S_r, A = V_r^T of the residual [out, in] (fp32 SVD); returns the factors for reuse."""
    u, s, vh = cached or torch.linalg.svd(residual.float(), full_matrices=False)  # [out, k], [k], [k, in]
    with torch.no_grad():
        lora.lora_b.copy_(u[:, :rank] * s[:rank])
        lora.lora_a.copy_(vh[:rank])
    return u, s, vh


def svd_relative_error(svd_cache: dict, rank: int) -> float:
    """||W_l - W' - B_l A_l||_F / ||W_l - W'||_F over every residual in `svd_cache` (filled by `relax`) for a
    rank-`rank` SVD LoRA: the share of the residuals' Frobenius norm the LoRA leaves out (App. G: a higher rank
    restores the pretrained weights better). 1 at rank 0, 0 at full rank; depths whose residual is zero (Stepwise's
    first loop) add nothing to either norm."""
    left = total = 0.0
    for _, s, _ in svd_cache.values():
        squares = s.double().square()  # [k]
        total += float(squares.sum())
        left += float(squares[min(rank, len(squares)):].sum())
    return (left / total) ** 0.5 if total else 0.0


def relax(looped: Decoder, source: Decoder, relaxation: Relaxation, svd_cache: dict | None = None) -> Decoder:
    """A copy of `looped` with a LoRA per depth on each linear map (and norm deltas if asked); see the module doc.

    `svd_cache` (a dict kept by the caller) reuses each residual's SVD across calls on the same looped model, e.g.
    a sweep over ranks."""
    _check_pair(looped, source)
    model = copy.deepcopy(looped)
    generator = torch.Generator().manual_seed(relaxation.seed)
    for depth, step in enumerate(model.plan.steps):
        shared, original = model.blocks[step.block], source.blocks[depth]
        for path in PROJECTIONS:
            proj: Projection = shared.get_submodule(path)
            d_out, d_in = proj.weight.shape
            lora = LoRA(d_in, d_out, relaxation.rank_of(path, d_in, d_out))
            lora.reset_standard(generator)
            residual = original.get_submodule(path).weight.detach().float() - proj.weight.detach().float()
            if relaxation.init == "svd" and bool(residual.abs().max() > 0):
                key = (depth, path)
                factors = _svd_lora(residual, lora.rank, lora, None if svd_cache is None else svd_cache.get(key))
                if svd_cache is not None:
                    svd_cache[key] = factors
            proj.adapters[str(depth)] = lora.to(device=proj.weight.device, dtype=proj.weight.dtype)
        if relaxation.norms:
            for path in NORMS:
                norm = _maybe(shared, path)
                if norm is None:
                    continue
                delta = NormDelta(norm.weight.shape[0])
                with torch.no_grad():
                    delta.delta.copy_(original.get_submodule(path).weight.float() - norm.weight.float())
                norm.adapters[str(depth)] = delta.to(device=norm.weight.device, dtype=norm.weight.dtype)
    return model


def prefix_relax(looped: Decoder, length: int, seed: int = 0) -> Decoder:
    """A copy of `looped` with a gated prefix of `length` prompt vectors at every depth (App. H).

    The prompts start as random rows of the token embedding matrix (scaled like embedded tokens), so their
    projections look like ordinary keys/values; the zero gates keep the model's outputs unchanged at step 0.
    """
    if length < 1:
        raise ConfigError(f"prefix length {length} must be >= 1")
    _require_unrelaxed(looped)
    model = copy.deepcopy(looped)
    generator = torch.Generator().manual_seed(seed)
    for depth, step in enumerate(model.plan.steps):
        attn = model.blocks[step.block].attn
        attn.adapters[str(depth)] = prefix_adapter(model, attn.n_heads, length, generator)
    return model


def prefix_adapter(model: Decoder, n_heads: int, length: int, generator: torch.Generator) -> PrefixAdapter:
    """A gated prefix of `length` prompts for one depth of `model`: random rows of its token embedding (scaled like
    embedded tokens, so their keys look like ordinary ones) and zero gates (the depth's output is unchanged)."""
    weight = model.embed.weight
    prefix = PrefixAdapter(length, model.config.d_model, n_heads)
    rows = torch.randint(0, weight.shape[0], (length,), generator=generator)
    with torch.no_grad():
        prefix.prompt.copy_(model.embed_tokens(rows[None].to(weight.device))[0].float())
    return prefix.to(device=weight.device, dtype=weight.dtype)


def _maybe(block: nn.Module, path: str) -> RMSNorm | None:
    try:
        module = block.get_submodule(path)
    except AttributeError:
        return None
    return module if isinstance(module, RMSNorm) else None


def strip_adapters(model: Decoder) -> Decoder:
    """A copy without any per-depth adapter: the plain recursive model under the relaxed one."""
    plain = copy.deepcopy(model)
    for module in plain.modules():
        if isinstance(getattr(module, "adapters", None), nn.ModuleDict):
            module.adapters = nn.ModuleDict()
    return plain


def full_rank(looped: Decoder) -> int:
    """The smallest rank at which every map's LoRA is capped (max over maps of min(d_in, d_out))."""
    block = looped.blocks[0]
    return max(min(block.get_submodule(p).weight.shape) for p in PROJECTIONS)


def lora_parameters(looped: Decoder, relaxation: Relaxation) -> int:
    """LoRA parameters that `relax` would add (all depths): sum over depths and maps of r * (d_in + d_out)."""
    total = 0
    for step in looped.plan.steps:
        for path in PROJECTIONS:
            d_out, d_in = looped.blocks[step.block].get_submodule(path).weight.shape
            total += relaxation.rank_of(path, d_in, d_out) * (d_in + d_out)
    return total
