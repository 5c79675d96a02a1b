"""`Decoder`: embeddings, a list of *unique* blocks, an explicit execution plan, final norm and LM head.

The execution plan is a list of steps; step i (the "depth" i) names which block's weights run and
which KV-cache slot they use. A plain L-layer model is the identity plan; a looped (recursive) model
is a different plan over fewer blocks, not a fork of the code:

    ExecutionPlan.identity(6)                   blocks 0 1 2 3 4 5, slots 0..5
    ExecutionPlan.cycle(3, n_loops=2)           blocks 0 1 2 0 1 2, slots 0..5 (one cache per depth)
    ExecutionPlan.cycle(3, 2, share_kv=True)    blocks 0 1 2 0 1 2, slots 0 1 2 0 1 2; loop 2 reads loop 1's keys

Seams for the book's later chapters:
    run_step(depth, x, ctx)   one step on any hidden states, e.g. a router's subset with its original positions
                              (or one sublayer of it: attention=False / mlp=False skip the other)
    head(hidden)              final norm + LM head (+ soft-cap), shared by every early exit
    forward(return_hidden=True)  the hidden state after every step; forward(n_steps=k) stops after k steps
    Projection.adapters       per-depth additive terms on every linear map of the blocks (depth-wise LoRA)
    Attention.keys_values     the K/V projection on its own, for layers whose keys come from their output

One deliberate difference from transformers: the token embedding has no `padding_idx`, so the pad token's
embedding row gets gradients like any other (transformers zeroes them; SmolLM2's pad id is its EOS id).
Forward outputs are identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from rlib.config import ConfigError
from rlib.model.cache import KVCache
from rlib.model.config import DecoderConfig
from rlib.model.layers import BLOCK_WINDOW, DecoderBlock, RMSNorm, RotaryTable, StepContext


@dataclass(frozen=True)
class Step:
    """One depth of the plan: run `block`'s weights; write cache `slot` (or read it when `reuse_kv`).

    `window` and `rope_theta` override the block's attention geometry at this depth: a looped Gemma 3 can keep
    the source model's sliding/global pattern per depth although one shared block serves both kinds.
    window "block" = the block's own; None = global attention; an int = that sliding window.
    rope_theta None = the block's own.
    """

    block: int
    slot: int
    reuse_kv: bool = False
    window: int | str | None = BLOCK_WINDOW
    rope_theta: float | None = None

    def __post_init__(self) -> None:
        ok = self.window is None or self.window == BLOCK_WINDOW or (isinstance(self.window, int) and self.window > 0)
        if not ok:
            raise ConfigError(f"Step.window={self.window!r}: use {BLOCK_WINDOW!r}, None (global) or a positive int")


@dataclass(frozen=True)
class ExecutionPlan:
    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        written: set[int] = set()
        for depth, step in enumerate(self.steps):
            if step.reuse_kv and step.slot not in written:
                raise ConfigError(f"plan step {depth} reads slot {step.slot} before any earlier step writes it")
            if not step.reuse_kv and step.slot in written:
                raise ConfigError(f"plan step {depth} writes slot {step.slot}, already written by an earlier step")
            written.add(step.slot)

    @classmethod
    def identity(cls, n_layers: int) -> ExecutionPlan:
        return cls(tuple(Step(block=i, slot=i) for i in range(n_layers)))

    @classmethod
    def from_blocks(cls, blocks: list[int] | tuple[int, ...]) -> ExecutionPlan:
        """Any block order (cycle, sequence, middle-cycle...), one cache slot per depth."""
        return cls(tuple(Step(block=b, slot=depth) for depth, b in enumerate(blocks)))

    @classmethod
    def cycle(cls, n_blocks: int, n_loops: int, share_kv: bool = False) -> ExecutionPlan:
        """Blocks 0..K-1 repeated `n_loops` times; with `share_kv` every loop attends to loop 1's keys/values."""
        if not share_kv:
            return cls.from_blocks(list(range(n_blocks)) * n_loops)
        return cls(tuple(Step(block=b, slot=b, reuse_kv=loop > 0) for loop in range(n_loops) for b in range(n_blocks)))

    @property
    def n_slots(self) -> int:
        return 1 + max(step.slot for step in self.steps)

    def is_identity(self, n_layers: int) -> bool:
        return self == ExecutionPlan.identity(n_layers)

    @property
    def thetas(self) -> set[float]:
        """Rope thetas the plan asks for beyond the blocks' own."""
        return {s.rope_theta for s in self.steps if s.rope_theta is not None}

    def to_list(self) -> list[dict]:
        rows = []
        for s in self.steps:
            row = {"block": s.block, "slot": s.slot, "reuse_kv": s.reuse_kv}
            if s.window != BLOCK_WINDOW or s.rope_theta is not None:
                row.update(window=s.window, rope_theta=s.rope_theta)
            rows.append(row)
        return rows

    @classmethod
    def from_list(cls, steps: list[dict]) -> ExecutionPlan:
        return cls(tuple(Step(**s) for s in steps))

    def __len__(self) -> int:
        return len(self.steps)


class DecoderOutput(NamedTuple):
    logits: torch.Tensor  # [B, T, V] (or [B, 1, V] with last_only)
    hidden_states: list[torch.Tensor] | None  # after each step, before the final norm: n_steps x [B, T, D_model]


class Decoder(nn.Module):
    """A causal LM whose depth is an execution plan over `config.n_layers` unique blocks."""

    _no_split_modules = ("DecoderBlock",)  # FSDP's transformer auto-wrap shards per block when no class is named

    def __init__(self, config: DecoderConfig, plan: ExecutionPlan | None = None):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(DecoderBlock(config, layer) for layer in range(config.n_layers))
        self.final_norm = RMSNorm(config.d_model, config.norm_eps, plus_one=config.norm_kind == "rms_plus_one")
        self.lm_head = None if config.tie_embeddings else nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.rotary = RotaryTable(config.head_dim, config.rope_thetas)
        self.plan = plan or ExecutionPlan.identity(config.n_layers)

    @property
    def plan(self) -> ExecutionPlan:
        return self._plan

    @plan.setter
    def plan(self, plan: ExecutionPlan) -> None:
        bad = [s.block for s in plan.steps if not 0 <= s.block < self.config.n_layers]
        if bad:
            raise ConfigError(f"plan names blocks {bad}, but the decoder has {self.config.n_layers}")
        self._plan = plan

    def new_cache(self) -> KVCache:
        return KVCache(self.plan.n_slots)

    # ---- the pieces a custom forward (routers, exits, recurrent layers) can drive --------------------------
    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [B, T] -> [B, T, D_model], scaled by `embed_scale` (rounded to the weights' dtype, as in Gemma)."""
        x = self.embed(input_ids)
        if self.config.embed_scale != 1.0:
            x = x * torch.tensor(self.config.embed_scale, dtype=self.embed.weight.dtype, device=x.device)
        return x

    def context(
        self, positions: torch.Tensor, dtype: torch.dtype, cache: KVCache | None = None, plain_causal: bool = False
    ) -> StepContext:
        """A step context whose rotary tables (one per theta) are computed once for `positions` [B, T]."""
        thetas = set(self.rotary.thetas) | self.plan.thetas
        rope = {theta: self.rotary.cos_sin(positions, theta, dtype) for theta in sorted(thetas)}
        return StepContext(positions=positions, rope=rope, cache=cache, plain_causal=plain_causal)

    def run_step(self, depth: int, x: torch.Tensor, ctx: StepContext, attention: bool = True,
                 mlp: bool = True) -> torch.Tensor:
        """Run plan step `depth` on x [B, T, D_model] (any tokens, at ctx.positions) -> [B, T, D_model].
        attention / mlp False: skip that sublayer (its residual passes x through; a skipped attention writes no
        keys/values): Draft & Verify's drafter (`rlib.layerskip.draft_verify`)."""
        step = self.plan.steps[depth]
        ctx.depth, ctx.slot, ctx.reuse_kv = depth, step.slot, step.reuse_kv
        ctx.window, ctx.rope_theta = step.window, step.rope_theta
        block = self.blocks[step.block]
        if attention and mlp:
            return block(x, ctx)
        if attention:
            x = block.attention_residual(x, ctx)
        return block.mlp_residual(x, ctx.depth) if mlp else x

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm, LM head (tied or not) and optional soft-cap: [B, T, D_model] -> [B, T, V]."""
        hidden = self.final_norm(hidden)
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(hidden, weight)
        if self.config.logit_softcap is not None:
            cap = self.config.logit_softcap
            logits = cap * torch.tanh(logits / cap)
        return logits

    # ---- the whole model -------------------------------------------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor,
        cache: KVCache | None = None,
        positions: torch.Tensor | None = None,
        return_hidden: bool = False,
        n_steps: int | None = None,
        last_only: bool = False,
    ) -> torch.Tensor | DecoderOutput:
        """input_ids [B, T] -> logits [B, T, V], or DecoderOutput(logits, per-step hidden states) with return_hidden.

        cache      a KVCache from `new_cache()`; this call's keys/values are appended and `seen_tokens` advances
        positions  [B, T] or [T]; default: seen_tokens .. seen_tokens + T - 1. Use -1 for padding.
        n_steps    run only the first n_steps of the plan (a static early exit); the head is shared
        last_only  compute logits for the last token only ([B, 1, V]), as decoding needs
        """
        batch, tokens = input_ids.shape
        start = cache.seen_tokens if cache is not None else 0
        plain_causal = positions is None and start == 0
        if positions is None:
            positions = torch.arange(start, start + tokens, device=input_ids.device)
        positions = positions.expand(batch, tokens)  # [B, T]
        if cache is None and any(step.reuse_kv for step in self.plan.steps):
            cache = self.new_cache()  # steps that share keys/values need them stored even without decoding
        x = self.embed_tokens(input_ids)  # [B, T, D_model]
        ctx = self.context(positions, x.dtype, cache, plain_causal)
        hidden_states = []
        for depth in range(len(self.plan) if n_steps is None else n_steps):
            x = self.run_step(depth, x, ctx)
            if return_hidden:
                hidden_states.append(x)
        if cache is not None:
            cache.seen_tokens += tokens
        logits = self.head(x[:, -1:] if last_only else x)
        return DecoderOutput(logits, hidden_states) if return_hidden else logits

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int | None = None,
        eos_ids: tuple[int, ...] | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Prompt [B, T] -> [B, T + n]: greedy (temperature 0) or sampling (temperature, optional top-k).

        Uses the KV cache (one prefill, then one token per step) and stops once every row emitted an EOS
        (default: the config's eos_ids); a finished row is padded with its EOS.
        """
        eos_ids = self.config.eos_ids if eos_ids is None else eos_ids
        eos = torch.tensor(eos_ids, dtype=torch.long, device=input_ids.device)
        cache = self.new_cache()
        logits = self(input_ids, cache=cache, last_only=True)  # [B, 1, V]
        finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        fill = eos[0] if len(eos) else torch.tensor(0, device=input_ids.device)
        generated = []
        for i in range(max_new_tokens):
            next_ids = sample_next(logits[:, -1].float(), temperature, top_k, generator)  # [B]
            next_ids = torch.where(finished, fill, next_ids)
            generated.append(next_ids)
            finished |= torch.isin(next_ids, eos)
            if bool(finished.all()) or i == max_new_tokens - 1:
                break
            logits = self(next_ids[:, None], cache=cache, last_only=True)
        return torch.cat([input_ids, torch.stack(generated, dim=1)], dim=1) if generated else input_ids


def sample_next(
    logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None = None
) -> torch.Tensor:
    """logits [B, V] -> token ids [B]: argmax at temperature 0, else a sample from softmax(logits / T) within top-k."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        threshold = logits.topk(top_k, dim=-1).values[:, -1:]  # [B, 1]
        logits = logits.masked_fill(logits < threshold, float("-inf"))
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)[:, 0]
