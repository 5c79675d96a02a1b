"""Relaxing the parameter sharing of a Recursive model trained from scratch (MoR paper 001, App. G.2, Table 13).

The paper relaxes a Middle-Cycle Recursive model (Nr = 3) in four ways and finds "no substantial gain" from scratch:

    enc            a trainable vector per recursion, multiplied element-wise with that recursion's output
                   (`MoRDecoder` holds it as `recursion_scales` [Nr, D], initialised at 1)
    lora           a LoRA of rank r on the query and value projections at every recursion depth (the paper: r 64 at
                   d 960; B = 0 at init, so the model starts as the plain Recursive one)
    adapt_prompt   an adaptation prompt of P vectors at every recursion depth (the paper: P 256 with 2K contexts),
                   LLaMA-Adapter style: the shared K/V projections of the prompt join every query's attention
                   through a per-head gate that starts at 0 (`rlib.model.lora.PrefixAdapter`, also chapter 02's
                   prefix relaxation)

DoRA (the paper's fourth row) rescales the weight itself rather than adding to its output and has no adapter here.
Only the recursion depths are relaxed: the unique first and last layers of Middle-Cycle have no sharing to relax.
"""

from __future__ import annotations

import torch

from rlib.model import Decoder
from rlib.model.lora import LoRA
from rlib.relax import prefix_adapter

__all__ = ["LORA_PROJECTIONS", "relax_recursions"]

LORA_PROJECTIONS = ("attn.q_proj", "attn.v_proj")  # Table 13: "on the query and value matrices"


def relax_recursions(decoder: Decoder, depths: list[int], relax: str, rank: int = 0, length: int = 0,
                     seed: int = 0) -> None:
    """Add the per-depth adapters of `relax` ("lora" or "adapt_prompt") to `decoder` in place at every plan step in
    `depths`; "enc" and "none" add none here (Enc lives in the MoR model)."""
    if relax not in ("lora", "adapt_prompt"):
        return
    generator = torch.Generator().manual_seed(10_000 + seed)
    weight = decoder.embed.weight
    for depth in depths:
        block = decoder.blocks[decoder.plan.steps[depth].block]
        if relax == "lora":
            for path in LORA_PROJECTIONS:
                proj = block.get_submodule(path)
                d_out, d_in = proj.weight.shape
                lora = LoRA(d_in, d_out, min(rank, d_in, d_out))
                lora.reset_standard(generator)  # A random, B = 0
                proj.adapters[str(depth)] = lora.to(device=weight.device, dtype=weight.dtype)
        elif relax == "adapt_prompt":
            block.attn.adapters[str(depth)] = prefix_adapter(decoder, block.attn.n_heads, length, generator)
