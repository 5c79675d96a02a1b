"""Looped layer tying: an L-layer pretrained decoder becomes a Recursive Transformer of K unique layers.

Relaxed Recursive Transformers (paper 000), Sec. 2.1-2.2, Appendix B (sharing orders), Appendix F
(initializations); the Middle-* orders come from Mixture-of-Recursions (paper 001, Table 5). The converted
model is an ordinary `Decoder` with K blocks and an `ExecutionPlan` of L steps, so it trains, evaluates,
saves and generates like any other; nothing is copied per loop.

Sharing orders (which unique block runs at depth l = 0..L-1, for B loops):

    cycle            l mod K                         K = L / B      0 1 2 | 0 1 2          (the paper's default)
    sequence         l // B                          K = L / B      0 0 | 1 1 | 2 2
    middle_cycle     0 | 1 + (l-1) mod M | M+1       M = (L-2) / B  first and last layers unique, cycle between
    middle_sequence  0 | 1 + (l-1) // B  | M+1       M = (L-2) / B

Initializations of the unique blocks from the source layers W_0..W_{L-1} (0-indexed; the paper is 1-indexed):

    stepwise              W'_k = W_{s_k}, s = round(linspace(0, L-1, K)): evenly spaced, first and last kept
                          ("Fixed-ends"); numpy rounds half to even, so L=18, K=9 picks 0 2 4 6 8 11 13 15 17
    stepwise_fixed_start  W'_k = W_{k B}: the first layer, then every B-th (the last is not kept)
    average               W'_k = mean of the layers whose depths block k serves (for cycle: k, k+K, k+2K, ...)
    lower / upper         the first / last K layers
    random_layers         a seeded random subset of K layers, in depth order (MoR Table 9's "Rand")
    random                no pretrained weights at all: every parameter, embeddings included, drawn afresh

Middle-* orders always take the first and last blocks from layers 0 and L-1; the rules above pick the middle
blocks among layers 1..L-2. Under `average`, norm weights are averaged too (`norm_init="average"`, the paper's
default), copied from the first tied layer (`"choice"`) or zeroed (`"zero"`: the identity for Gemma's (1 + w)
norms, a dead layer for Llama's w norms; Fig. F.1b). Embeddings, final norm and LM head are copied.

Gemma 3 interleaves sliding-window and global layers (5:1). A shared block can serve depths of both kinds; by
default (`geometry="depth"`) every depth keeps the source model's window and rope theta at that depth, so the
looped model has the source's attention pattern and KV footprint and the shared weights learn to serve both.
`geometry="block"` instead runs each block with the geometry of its first source layer at every depth.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from rlib.config import Checked, ConfigError
from rlib.model import Decoder, ExecutionPlan
from rlib.model.convert import empty_decoder
from rlib.model.init import DEFAULT_STD, init_weights

__all__ = [
    "GEOMETRIES",
    "INITS",
    "NORM_INITS",
    "SHARINGS",
    "Looping",
    "block_order",
    "convert",
    "from_scratch",
    "layer_mapping",
    "source_layers",
    "truncated",
]

SHARINGS = ("cycle", "sequence", "middle_cycle", "middle_sequence")
INITS = ("stepwise", "stepwise_fixed_start", "average", "lower", "upper", "random_layers", "random")
NORM_INITS = ("average", "choice", "zero")
GEOMETRIES = ("depth", "block")


def _choose(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} unknown; choose from {list(allowed)}")


def valid_loops(n_layers: int, sharing: str = "cycle") -> list[int]:
    """Loop counts B that `sharing` allows for an `n_layers`-layer source (B = 1 is the untied model)."""
    _choose("sharing", sharing, SHARINGS)
    looped = n_layers - 2 if sharing.startswith("middle") else n_layers
    return [b for b in range(1, looped + 1) if looped % b == 0]


def block_order(sharing: str, n_layers: int, n_loops: int) -> tuple[int, ...]:
    """The unique block that runs at each of the L depths (see the module docstring)."""
    _choose("sharing", sharing, SHARINGS)
    if n_loops not in valid_loops(n_layers, sharing):
        what = "L - 2" if sharing.startswith("middle") else "L"
        raise ConfigError(f"n_loops={n_loops} does not divide {what} for a {n_layers}-layer model under {sharing!r} "
                          f"sharing; choose from {valid_loops(n_layers, sharing)}")
    if sharing in ("cycle", "sequence"):
        k = n_layers // n_loops
        return tuple(d % k if sharing == "cycle" else d // n_loops for d in range(n_layers))
    m = (n_layers - 2) // n_loops
    middle = [1 + (d % m if sharing == "middle_cycle" else d // n_loops) for d in range(n_layers - 2)]
    return (0, *middle, m + 1)


def _served_depths(order: tuple[int, ...]) -> list[list[int]]:
    """For each block, the depths it runs at."""
    served: list[list[int]] = [[] for _ in range(max(order) + 1)]
    for depth, block in enumerate(order):
        served[block].append(depth)
    return served


def _picks(init: str, first: int, last: int, count: int, n_loops: int, seed: int) -> list[int]:
    """`count` layers out of first..last (inclusive) for the single-source initializations."""
    span = list(range(first, last + 1))
    if init == "stepwise":
        return [int(i) for i in np.round(np.linspace(first, last, count))]
    if init == "stepwise_fixed_start":
        return [first + k * n_loops for k in range(count)]
    if init == "lower":
        return span[:count]
    if init == "upper":
        return span[-count:]
    rng = np.random.default_rng(seed)  # random_layers
    return sorted(int(i) for i in rng.choice(span, size=count, replace=False))


def source_layers(init: str, sharing: str, n_layers: int, n_loops: int, seed: int = 0) -> list[tuple[int, ...]]:
    """For each unique block, the source layers its weights come from (one, or several averaged; () = random)."""
    _choose("init", init, INITS)
    order = block_order(sharing, n_layers, n_loops)
    served = _served_depths(order)
    if init == "random":
        return [() for _ in served]
    if init == "average":
        return [tuple(depths) for depths in served]
    if sharing.startswith("middle"):
        inner = _picks(init, 1, n_layers - 2, len(served) - 2, n_loops, seed)
        return [(0,), *[(i,) for i in inner], (n_layers - 1,)]
    return [(i,) for i in _picks(init, 0, n_layers - 1, len(served), n_loops, seed)]


@dataclass(frozen=True)
class Looping(Checked):
    """A conversion recipe: B loops, a sharing order, an initialization (see the module docstring)."""

    n_loops: int
    sharing: str = "cycle"
    init: str = "stepwise"
    norm_init: str = "average"
    geometry: str = "depth"
    seed: int = 0  # random_layers' subset and random's weights
    std: float = DEFAULT_STD  # random's weights

    def __post_init__(self) -> None:
        _choose("sharing", self.sharing, SHARINGS)
        _choose("init", self.init, INITS)
        _choose("norm_init", self.norm_init, NORM_INITS)
        _choose("geometry", self.geometry, GEOMETRIES)
        if self.norm_init != "average" and self.init != "average":
            raise ConfigError(f"norm_init={self.norm_init!r} applies to init='average' only (got init={self.init!r})")
        if self.n_loops < 1:
            raise ConfigError(f"n_loops={self.n_loops} must be >= 1")

    @property
    def label(self) -> str:
        parts = [self.sharing, self.init] + ([f"norm-{self.norm_init}"] if self.norm_init != "average" else [])
        return f"B={self.n_loops} " + " ".join(parts)


def _check_plain(source: Decoder) -> None:
    config = source.config
    if not source.plan.is_identity(config.n_layers):
        raise ConfigError("convert a plain decoder (identity plan); this one is already looped or reordered")
    adapters = [n for n, _ in source.named_parameters() if ".adapters." in n]
    if adapters:
        raise ConfigError(f"convert a decoder without per-depth adapters (found {adapters[0]})")


def _block_layers(sources: list[tuple[int, ...]], served: list[list[int]]) -> list[int]:
    """The source layer whose attention geometry (window, theta) each block is built with: its first source
    layer, or (random init) the first depth it serves."""
    return [src[0] if src else depths[0] for src, depths in zip(sources, served)]


def _geometry_plan(source: Decoder, order: tuple[int, ...], block_layers: list[int], geometry: str) -> ExecutionPlan:
    """The plan over `order`; with geometry "depth", steps whose block was built for another kind get overrides."""
    plan = ExecutionPlan.from_blocks(order)
    if geometry == "block":
        return plan
    config = source.config
    steps = []
    for depth, step in enumerate(plan.steps):
        own = block_layers[step.block]
        same = (config.sliding_windows[own], config.rope_thetas[own]) == (
            config.sliding_windows[depth], config.rope_thetas[depth])
        steps.append(step if same else dataclasses.replace(step, window=config.sliding_windows[depth],
                                                           rope_theta=config.rope_thetas[depth]))
    return ExecutionPlan(tuple(steps))


@torch.no_grad()
def convert(source: Decoder, recipe: Looping) -> Decoder:
    """A Recursive Transformer of `source` following `recipe`; `source` is left unchanged.

    B = 1 with cycle sharing and any pretrained init returns an exact copy of the source model.
    """
    _check_plain(source)
    n_layers = source.config.n_layers
    order = block_order(recipe.sharing, n_layers, recipe.n_loops)
    sources = source_layers(recipe.init, recipe.sharing, n_layers, recipe.n_loops, recipe.seed)
    served = _served_depths(order)
    block_layers = _block_layers(sources, served)
    config = source.config.with_layers(block_layers)
    plan = _geometry_plan(source, order, block_layers, recipe.geometry)
    weight = source.embed.weight
    looped = empty_decoder(config, plan, weight.dtype, weight.device)
    if recipe.init == "random":
        return init_weights(looped, seed=recipe.seed, std=recipe.std).train(source.training)
    ours, theirs = looped.state_dict(), source.state_dict()
    for name, tensor in ours.items():
        if not name.startswith("blocks."):
            tensor.copy_(theirs[name])
            continue
        _, block, rest = name.split(".", 2)
        layers = sources[int(block)]
        if "norm" in rest and recipe.norm_init != "average":
            if recipe.norm_init == "zero":
                tensor.zero_()
            else:  # choice
                tensor.copy_(theirs[f"blocks.{layers[0]}.{rest}"])
            continue
        stack = torch.stack([theirs[f"blocks.{i}.{rest}"].float() for i in layers])  # [n_sources, ...]
        tensor.copy_(stack.mean(dim=0).to(tensor.dtype))
    return looped.train(source.training)


def truncated(source: Decoder, n_layers: int) -> Decoder:
    """The first `n_layers` layers of `source` with its embeddings and head, no looping (the paper's baseline)."""
    _check_plain(source)
    if not 1 <= n_layers <= source.config.n_layers:
        raise ConfigError(f"n_layers={n_layers} must be in 1..{source.config.n_layers}")
    config = source.config.with_layers(range(n_layers))
    weight = source.embed.weight
    model = empty_decoder(config, None, weight.dtype, weight.device)
    theirs = source.state_dict()
    model.load_state_dict({name: theirs[name] for name in model.state_dict()}, strict=True)
    return model.train(source.training)


def from_scratch(source: Decoder, n_layers: int, seed: int = 0, std: float = DEFAULT_STD) -> Decoder:
    """A plain `n_layers`-layer model with `source`'s width and tokenizer, every weight random ("reduced size")."""
    model = truncated(source, n_layers)
    return init_weights(model, seed=seed, std=std)


def layer_mapping(source_config, recipe: Looping) -> pd.DataFrame:
    """One row per depth: loop, block, the source layers that initialize the block, and the depth's attention.

    The table the chapter draws as Figure 2 / B.1: which weights run where, and where they come from.
    """
    n_layers = source_config.n_layers
    order = block_order(recipe.sharing, n_layers, recipe.n_loops)
    sources = source_layers(recipe.init, recipe.sharing, n_layers, recipe.n_loops, recipe.seed)
    served = _served_depths(order)
    block_layers = _block_layers(sources, served)
    rows = []
    for depth, block in enumerate(order):
        geometry_layer = depth if recipe.geometry == "depth" else block_layers[block]
        window = source_config.sliding_windows[geometry_layer]
        rows.append({
            "depth": depth,
            "loop": 1 + served[block].index(depth),
            "block": block,
            "source_layers": ",".join(map(str, sources[block])) or "random",
            "attention": "global" if window is None else f"sliding {window}",
            "rope_theta": source_config.rope_thetas[geometry_layer],
        })
    return pd.DataFrame(rows)
