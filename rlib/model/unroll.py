"""Unrolling: a looped or relaxed `Decoder` written out as the plain decoder that computes the same function.

A Recursive Transformer (Relaxed Recursive Transformers, Sec. 2.1) runs K unique blocks at L depths; its relaxed
form (Sec. 2.3, Eq. 3) adds at depth l a LoRA to each linear map, W' + B_l A_l, and here optionally a delta to
each norm weight. A transformers model has L independent layers, so the export writes, for every depth l:

    layer l = a copy of block plan.steps[l].block, with W' + B_l A_l merged into each linear map (fp32, then the
              weights' dtype) and w' + delta_l into each norm weight, attending with the depth's window and rope
              theta (a looped Gemma 3 keeps its source's sliding/global pattern per depth)

Parameters grow from K blocks (+ adapters) to L blocks; logits are those of the looped model up to the rounding
of the merged sums. Two plans have no unrolled equivalent and are refused: recursive KV sharing (a later depth
reads an earlier depth's keys/values; transformers layers each keep their own cache) and prefix relaxation
(App. H: extra gated keys per depth).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlib.config import ConfigError
from rlib.model.convert import empty_decoder
from rlib.model.decoder import Decoder
from rlib.model.layers import BLOCK_WINDOW
from rlib.model.lora import LoRA, NormDelta

__all__ = ["Unrolled", "describe", "unroll"]


@dataclass(frozen=True)
class Unrolled:
    """What `unroll` did, for a model card: per depth the block it copied and the adapters it merged."""

    n_blocks: int
    blocks: tuple[int, ...]  # depth -> unique block
    lora_ranks: tuple[dict[str, int], ...]  # depth -> {projection path: merged LoRA rank}
    norm_deltas: tuple[tuple[str, ...], ...]  # depth -> norm paths whose delta was merged

    @property
    def is_looped(self) -> bool:
        return list(self.blocks) != list(range(self.n_blocks))

    @property
    def is_relaxed(self) -> bool:
        return any(self.lora_ranks) or any(self.norm_deltas)


def _check_unrollable(decoder: Decoder) -> None:
    shared = [depth for depth, step in enumerate(decoder.plan.steps) if step.reuse_kv]
    if shared:
        raise ConfigError(f"plan depths {shared} reuse an earlier depth's keys/values (recursive KV sharing); no "
                          "transformers model computes that, so the model cannot be unrolled. Evaluate it in the "
                          "book instead: python -m rlib.eval --model rlib --model_args path=FOLDER")
    for name, module in decoder.named_modules():
        for depth, adapter in getattr(module, "adapters", {}).items():
            if not isinstance(adapter, LoRA | NormDelta):
                raise ConfigError(f"{name}.adapters[{depth}] is a {type(adapter).__name__} (prefix relaxation): its "
                                  "gated prefix attention has no transformers equivalent and cannot be merged. "
                                  "Evaluate it in the book instead: python -m rlib.eval --model rlib "
                                  "--model_args path=FOLDER")


def _adapters_at(block: torch.nn.Module, depth: int):
    """(path, module, adapter) for every module of `block` with an adapter at `depth`."""
    for path, module in block.named_modules():
        adapters = getattr(module, "adapters", None)
        if isinstance(adapters, torch.nn.ModuleDict) and str(depth) in adapters:
            yield path, module, adapters[str(depth)]


def describe(decoder: Decoder) -> Unrolled:
    """The record of what `unroll(decoder)` merges (raises ConfigError where it would refuse)."""
    _check_unrollable(decoder)
    ranks, norms = [], []
    for depth, step in enumerate(decoder.plan.steps):
        found = list(_adapters_at(decoder.blocks[step.block], depth))
        ranks.append({path: adapter.rank for path, _, adapter in found if isinstance(adapter, LoRA)})
        norms.append(tuple(path for path, _, adapter in found if isinstance(adapter, NormDelta)))
    return Unrolled(n_blocks=decoder.config.n_layers, blocks=tuple(s.block for s in decoder.plan.steps),
                    lora_ranks=tuple(ranks), norm_deltas=tuple(norms))


@torch.no_grad()
def _merged_block_state(decoder: Decoder, depth: int) -> dict[str, torch.Tensor]:
    """The state dict of depth `depth`'s block with that depth's LoRA and norm deltas added to the weights."""
    block = decoder.blocks[decoder.plan.steps[depth].block]
    state = {name: tensor.detach().clone() for name, tensor in block.state_dict().items() if ".adapters." not in name}
    for path, module, adapter in _adapters_at(block, depth):
        if isinstance(adapter, LoRA):  # W' + B_l A_l
            merged = module.weight.float() + adapter.lora_b.float() @ adapter.lora_a.float()
        else:  # NormDelta: w' + delta_l, exactly what RMSNorm.forward adds
            merged = module.weight + adapter.delta
        state[f"{path}.weight"] = merged.to(module.weight.dtype)
    return state


def unroll(decoder: Decoder) -> Decoder:
    """A plain decoder (identity plan, no adapters) with one layer per depth of `decoder`; see the module doc.

    A plain decoder comes back as an equal copy."""
    _check_unrollable(decoder)
    config = decoder.config
    steps = decoder.plan.steps
    windows, thetas = [], []
    for step in steps:
        windows.append(config.sliding_windows[step.block] if step.window == BLOCK_WINDOW else step.window)
        thetas.append(config.rope_thetas[step.block] if step.rope_theta is None else step.rope_theta)
    unrolled_config = config.replace(n_layers=len(steps), sliding_windows=tuple(windows), rope_thetas=tuple(thetas))
    weight = decoder.embed.weight
    plain = empty_decoder(unrolled_config, None, weight.dtype, weight.device)
    state = {name: tensor for name, tensor in decoder.state_dict().items() if not name.startswith("blocks.")}
    for depth in range(len(steps)):
        state.update({f"blocks.{depth}.{name}": tensor for name, tensor in _merged_block_state(decoder, depth).items()})
    plain.load_state_dict(state, strict=True)
    return plain.train(decoder.training)
