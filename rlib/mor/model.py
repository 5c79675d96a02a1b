"""`MoRDecoder`: a Mixture-of-Recursions language model over our `Decoder` (paper 001, Sec. 2, Fig. 2, App. A).

The unique blocks and their order live in an ordinary `Decoder` (embeddings, blocks, head, KV cache); the plan
runs them as `looping.block_order(sharing, L, Nr)`, e.g. Middle-Cycle with L = 8, Nr = 3:

    depth   0 | 1 2 | 3 4 | 5 6 | 7          prefix = [0], recursions = [[1, 2], [3, 4], [5, 6]], suffix = [7]
    block   0 | 1 2 | 1 2 | 1 2 | 3

Before recursion r a router chooses the tokens that run it (see `rlib.mor.routers` and `MoRSpec`). The chosen
tokens of each row are gathered in position order into a compact [B, n_r, D] tensor with their *original*
positions (RoPE and masks use them; rows with fewer tokens are padded with position -1, which the masks ignore),
run through the recursion's steps, and scattered back. Under recursion-wise caching (`kv="cache"`) the steps of
recursion r see only the tokens active at r; with a KV cache each depth's slot holds only those tokens' keys. Under
recursive KV sharing (`kv="share"`) the plan's deeper steps read the slot that recursion 1 wrote for every token.

Two routing modes for the expert-choice router:
    "topk"    the training rule: top-k_r over the whole sequence. A token's route depends on later tokens, so this
              is not a causal language model at inference (Sec. 2.2.1, "causality violation")
    "causal"  each token decides alone, G(logit) >= 0.5 (or the auxiliary router's logit >= 0): what decoding uses;
              `forward(..., cache=...)` token by token then equals the full causal forward (tests/test_mor.py)
Token-choice and the Recursive baseline are causal by construction.

`forward` returns logits [B, T, V]; the routing of the last call (kept masks, gates, depths, loss terms, metrics)
is in `last_routing`. `MoRLoss` adds its loss terms to `rlib.train.train`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from rlib.config import ConfigError
from rlib.looping import block_order
from rlib.model import Decoder, DecoderConfig, ExecutionPlan
from rlib.model.cache import KVCache
from rlib.model.decoder import Step
from rlib.model.init import DEFAULT_STD, init_weights
from rlib.mor import routers as R
from rlib.mor.relaxation import relax_recursions
from rlib.mor.spec import MoRSpec

__all__ = ["MODES", "MoRDecoder", "MoRLoss", "Routing", "build", "mor_plan"]

MODES = ("topk", "causal")


@dataclass
class Routing:
    """What the last forward decided; masks are over the call's positions [B, T]."""

    kept: list[torch.Tensor] = field(default_factory=list)  # per recursion: tokens that ran it [B, T] bool
    gates: list[torch.Tensor] = field(default_factory=list)  # per recursion: router gate values [B, T] (fp32)
    logits: list[torch.Tensor] = field(default_factory=list)  # per recursion (expert) or one [B, T, Nr] (token)
    topk: list[torch.Tensor] = field(default_factory=list)  # expert: the top-k choice per step (None in causal mode)
    causal: list[torch.Tensor] = field(default_factory=list)  # expert: the causal decision per step
    candidates: list[torch.Tensor] = field(default_factory=list)  # expert: tokens eligible at each step
    depth: torch.Tensor | None = None  # recursions each token ran [B, T] (1..Nr)
    losses: dict[str, torch.Tensor] = field(default_factory=dict)  # weighted terms for the training loss
    probs: torch.Tensor | None = None  # token-choice p [B, T, Nr]


def mor_plan(sharing: str, n_layers: int, n_recursions: int, kv: str) -> tuple[ExecutionPlan, list[int],
                                                                                 list[list[int]], list[int]]:
    """(plan, prefix depths, per-recursion depths, suffix depths) for an L-layer unrolled model.

    KV sharing: a depth reads the slot of the first depth that ran the same block (cycle: recursion 1; sequence:
    the first of each run of equal blocks), as MoR's Table 12 defines it."""
    order = block_order(sharing, n_layers, n_recursions)
    first_depth: dict[int, int] = {}
    steps = []
    for depth, block in enumerate(order):
        if kv == "share" and block in first_depth:
            steps.append(Step(block=block, slot=first_depth[block], reuse_kv=True))
        else:
            first_depth.setdefault(block, depth)
            steps.append(Step(block=block, slot=depth))
    plan = ExecutionPlan(tuple(steps))
    if sharing in ("cycle", "middle_cycle"):
        start = 1 if sharing == "middle_cycle" else 0
        end = n_layers - 1 if sharing == "middle_cycle" else n_layers
        per = (end - start) // n_recursions
        recursions = [list(range(start + r * per, start + (r + 1) * per)) for r in range(n_recursions)]
        return plan, list(range(start)), recursions, list(range(end, n_layers))
    return plan, list(range(n_layers)), [], []  # sequence orders: no recursion to route (baseline only)


class MoRDecoder(nn.Module):
    """Mixture-of-Recursions (or the fixed-depth Recursive baseline) over an L-layer unrolled depth."""

    def __init__(self, decoder: Decoder, spec: MoRSpec, n_layers: int, seed: int = 0):
        super().__init__()
        plan, self.prefix, self.recursions, self.suffix = mor_plan(spec.sharing, n_layers, spec.n_recursions, spec.kv)
        if decoder.plan != plan:
            raise ConfigError("the decoder's plan is not the MoR plan of this spec; build models with rlib.mor.build")
        if spec.kv == "share" and spec.routing == "expert" and spec.capacity(0) < 1:
            raise ConfigError(f"KV sharing needs every token at recursion 1: capacities[0]={spec.capacity(0)}, use 1.0")
        self.decoder, self.spec, self.n_layers = decoder, spec, n_layers
        d = decoder.config.d_model
        self.routers = nn.ModuleList()
        self.aux_routers = nn.ModuleList()
        if spec.routing == "expert":
            self.routers.extend(R.Router(d, 1, spec.router_arch, seed=1000 * seed + r)
                                for r in range(spec.n_recursions))
            if spec.aux == "router":
                self.aux_routers.extend(R.Router(d, 1, "mlp", seed=1000 * seed + 100 + r)
                                        for r in range(spec.n_recursions))
        elif spec.routing == "token":
            self.routers.append(R.Router(d, spec.n_recursions, spec.router_arch, seed=1000 * seed))
            self.register_buffer("balance_bias", torch.zeros(spec.n_recursions), persistent=True)
        if spec.relax == "enc":  # Table 13's Enc: a trainable vector per recursion times its output (1 = unrelaxed)
            weight = decoder.embed.weight
            self.recursion_scales = nn.Parameter(torch.ones(spec.n_recursions, d, device=weight.device,
                                                            dtype=weight.dtype))  # [Nr, D]
        self.last_routing = Routing()

    @property
    def config(self) -> DecoderConfig:
        return self.decoder.config

    def new_cache(self) -> KVCache:
        return self.decoder.new_cache()

    # ---- running a set of tokens through steps ---------------------------------------------------------------

    def _steps(self, depths: list[int], x: torch.Tensor, positions: torch.Tensor, cache: KVCache | None,
               plain: bool) -> torch.Tensor:
        ctx = self.decoder.context(positions, x.dtype, cache, plain_causal=plain)
        for depth in depths:
            x = self.decoder.run_step(depth, x, ctx)
        return x

    def _run_subset(self, depths: list[int], x: torch.Tensor, active: torch.Tensor, positions: torch.Tensor,
                    cache: KVCache | None, plain: bool, update) -> torch.Tensor:
        """Gather the active tokens [B, T] (bool) of x [B, T, D], run `depths`, scatter `update(old, new)` back."""
        batch, tokens, width = x.shape
        if bool(active.all()):
            return update(x, self._steps(depths, x, positions, cache, plain), slice(None))
        n = int(active.sum(1).max())
        if n == 0:
            return x
        order = torch.argsort((~active).to(torch.int64) * tokens
                              + torch.arange(tokens, device=x.device), dim=1)[:, :n]  # active first, in order
        valid = active.gather(1, order)  # [B, n]
        sub_pos = torch.where(valid, positions.gather(1, order), torch.full_like(order, -1))
        gather_idx = order[..., None].expand(-1, -1, width)
        old = x.gather(1, gather_idx)  # [B, n, D]
        new = self._steps(depths, old, sub_pos, cache, plain=False)  # positions are not 0..n-1: masks by position
        merged = update(old, new, order)
        target = torch.where(valid, order, torch.full_like(order, tokens))  # padding goes to a dummy column
        padded = torch.cat([x, x.new_zeros(batch, 1, width)], dim=1)
        padded = padded.scatter(1, target[..., None].expand(-1, -1, width), merged)
        return padded[:, :tokens]

    # ---- forward -----------------------------------------------------------------------------------------------

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None, mode: str = "topk",
                depth_cap: int | None = None, last_only: bool = False) -> torch.Tensor:
        """input_ids [B, T] -> logits [B, T, V] (see the module docstring for `mode`; `depth_cap` runs at most that
        many recursions: the test-time depth of Fig. 5c)."""
        if mode not in MODES:
            raise ConfigError(f"mode={mode!r}: choose from {MODES}")
        n_rec = len(self.recursions)
        if depth_cap is not None and not 1 <= depth_cap <= n_rec:
            raise ConfigError(f"depth_cap={depth_cap}: use 1..{n_rec}" if n_rec else
                              f"depth_cap={depth_cap}: this {self.spec.sharing} model has no recursions to cap")
        cap = n_rec if depth_cap is None else depth_cap
        batch, tokens = input_ids.shape
        start = cache.seen_tokens if cache is not None else 0
        positions = torch.arange(start, start + tokens, device=input_ids.device).expand(batch, tokens)
        if cache is None and self.spec.kv == "share":
            cache = self.new_cache()  # deeper recursions read recursion 1's keys from it
        plain = start == 0
        x = self.decoder.embed_tokens(input_ids)  # [B, T, D]
        x = self._steps(self.prefix, x, positions, cache, plain)
        routing = Routing()
        if self.spec.routing == "expert":
            x = self._expert(x, positions, cache, plain, mode, cap, routing)
        elif self.spec.routing == "token":
            x = self._token(x, positions, cache, plain, cap, routing)
        else:
            for r in range(min(cap, n_rec)):
                x = self._steps(self.recursions[r], x, positions, cache, plain)
                if self.spec.relax == "enc":
                    x = x * self.recursion_scales[r].to(x.dtype)
            routing.depth = torch.full((batch, tokens), min(cap, n_rec), device=x.device)
        x = self._steps(self.suffix, x, positions, cache, plain)
        if cache is not None:
            cache.seen_tokens += tokens
        self.last_routing = routing
        return self.decoder.head(x[:, -1:] if last_only else x)

    def _expert(self, x, positions, cache, plain, mode, cap, routing: Routing) -> torch.Tensor:
        spec, (batch, tokens) = self.spec, positions.shape
        candidates = torch.ones(batch, tokens, dtype=torch.bool, device=x.device)
        depth = torch.zeros(batch, tokens, dtype=torch.long, device=x.device)
        aux = z = None
        for r in range(min(cap, len(self.recursions))):
            logits = self.routers[r](x)[..., 0]  # [B, T]
            gates = R.expert_scores(logits, spec)  # alpha * G(logits / temperature)
            decider = logits if spec.aux != "router" else self.aux_routers[r](x.detach())[..., 0]
            full = spec.capacity(r) >= 1
            causal = candidates if full else candidates & R.causal_decision(decider)
            topk = None
            if mode == "topk" or self.training:
                k = max(1, int(spec.capacity(r) * tokens))
                topk = candidates if full else R.topk_select(gates, candidates, k)
            kept = candidates if full else (topk if mode == "topk" else causal)
            if self.training and spec.routed:
                if (spec.aux == "loss" and spec.aux_coef > 0) or spec.aux == "router":
                    term = R.bce_aux_loss(decider, topk, candidates)
                    aux = term if aux is None else aux + term
                if spec.z_coef > 0:
                    term = R.z_loss(logits[..., None], candidates.float())
                    z = term if z is None else z + term
            routing.kept.append(kept.detach())
            routing.gates.append(gates.detach())
            routing.logits.append(decider.detach())
            routing.topk.append(None if topk is None else topk.detach())
            routing.causal.append(causal.detach())
            routing.candidates.append(candidates.detach())
            depth = depth + kept.long()
            g = gates[..., None].to(x.dtype)  # [B, T, 1]

            def update(old, new, where, g=g):
                return new if spec.gating == "replace" else old + _at(g, where) * new

            x = self._run_subset(self.recursions[r], x, kept, positions, cache, plain, update)
            candidates = kept
        routing.depth = depth
        if aux is not None:
            routing.losses["router_aux"] = (spec.aux_coef if spec.aux == "loss" else 1.0) * aux
        if z is not None:
            routing.losses["router_z"] = spec.z_coef * z
        return x

    def _token(self, x, positions, cache, plain, cap, routing: Routing) -> torch.Tensor:
        spec, n_rec = self.spec, len(self.recursions)
        logits = self.routers[0](x)  # [B, T, Nr]
        probs = R.token_probs(logits, spec)
        choice = (probs + self.balance_bias).argmax(-1) if spec.balance == "loss_free" else probs.argmax(-1)
        if self.training and spec.balance == "loss_free":
            with torch.no_grad():
                load = torch.bincount(choice.reshape(-1), minlength=n_rec).float()
                self.balance_bias += spec.bias_rate * torch.sign(load.mean() - load)
        g = probs.gather(-1, choice[..., None])  # [B, T, 1]
        depth = choice.clamp(max=cap - 1)  # 0-based last recursion of each token
        h1, state, out = x, x, x
        for r in range(min(cap, n_rec)):
            active = depth >= r
            if spec.token_gating == "every":
                gate = g.to(x.dtype)
                state = self._run_subset(self.recursions[r], state, active, positions, cache, plain,
                                         lambda old, new, where, gate=gate: _at(gate, where) * new)
                out = torch.where((depth == r)[..., None], h1 + state, out)
            else:
                state = self._run_subset(self.recursions[r], state, active, positions, cache, plain,
                                         lambda old, new, where: new)
                out = torch.where((depth == r)[..., None], h1 + g.to(x.dtype) * state, out)
        routing.logits.append(logits.detach())
        routing.probs = probs.detach()
        routing.depth = depth + 1
        routing.kept = [(depth >= r).detach() for r in range(n_rec)]
        routing.gates = [g[..., 0].detach()] * n_rec
        if self.training:
            if spec.balance == "loss" and spec.balance_coef > 0:
                routing.losses["router_balance"] = spec.balance_coef * R.balance_loss(probs, choice, n_rec)
            if spec.z_coef > 0:
                routing.losses["router_z"] = spec.z_coef * R.z_loss(logits)
        return out


def _at(values: torch.Tensor, where) -> torch.Tensor:
    """Per-token values [B, T, 1] at the gathered positions `where` [B, n] (or all of them: a slice)."""
    return values if isinstance(where, slice) else values.gather(1, where[..., None])


class MoRLoss:
    """A `rlib.train` loss hook: the router terms of the last forward (aux BCE, balancing, z-loss).

    For a token-choice model it also counts, per optimizer step, the training tokens each recursion depth received
    (summed over the step's micro batches): `load_trace()` turns them into MaxVio against training steps, the
    quantity behind App. F.3's "struggles to achieve balance during quite long initial stage". Reading the depths
    changes nothing in training (tests/test_mor_load_trace.py)."""

    def __init__(self) -> None:
        self.loads: dict[int, torch.Tensor] = {}  # optimizer step -> tokens per depth [Nr] (int64)

    def loss(self, step: int, batch: torch.Tensor, logits: torch.Tensor, model: nn.Module) -> dict[str, torch.Tensor]:
        inner = getattr(model, "module", model)  # accelerate may wrap it
        routing = inner.last_routing
        if inner.spec.routing == "token" and routing.depth is not None:
            counts = torch.bincount((routing.depth - 1).reshape(-1).cpu(), minlength=inner.spec.n_recursions)
            self.loads[step] = self.loads[step] + counts if step in self.loads else counts
        return dict(routing.losses)

    def load_trace(self) -> dict[str, list]:
        """{"step", "tokens", "maxvio"}: one entry per recorded optimizer step, in step order (empty lists for a
        model that is not token-choice)."""
        steps = sorted(self.loads)
        return {"step": steps, "tokens": [int(self.loads[s].sum()) for s in steps],
                "maxvio": [R.max_violation(self.loads[s]) for s in steps]}


def build(base: DecoderConfig, n_layers: int, spec: MoRSpec, seed: int = 0, std: float = DEFAULT_STD) -> MoRDecoder:
    """A randomly initialised MoR (or Recursive) model: `base`'s widths, `n_layers` unrolled depths."""
    plan, _, recursions, _ = mor_plan(spec.sharing, n_layers, spec.n_recursions, spec.kv)
    decoder = init_weights(Decoder(_uniform(base, max(s.block for s in plan.steps) + 1), plan), seed=seed, std=std)
    relax_recursions(decoder, [d for rec in recursions for d in rec], spec.relax, spec.relax_rank, spec.relax_len, seed)
    return MoRDecoder(decoder, spec, n_layers, seed=seed)


def vanilla(base: DecoderConfig, n_layers: int, seed: int = 0, std: float = DEFAULT_STD) -> Decoder:
    """The plain `n_layers`-layer baseline with `base`'s widths."""
    return init_weights(Decoder(_uniform(base, n_layers)), seed=seed, std=std)


def _uniform(base: DecoderConfig, n_blocks: int) -> DecoderConfig:
    """`base` with `n_blocks` blocks, all with the first block's rope theta and window."""
    return base.replace(n_layers=n_blocks, rope_thetas=(base.rope_thetas[0],) * n_blocks,
                        sliding_windows=(base.sliding_windows[0],) * n_blocks)


def next_token_nll(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Per-sequence mean next-token NLL [B]."""
    loss = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), input_ids[:, 1:], reduction="none")
    return loss.mean(1)
