"""Running a decoder's plan depths on the engine's rows: row-addressed KV stores and one block call per depth mix.

The serving engine (`rlib.serving.engine`) keeps one row per slot. Row r computes the token at `positions[r]` and
sits at its own depth of the plan; one call of a block runs every row whose depth uses that block. Keys and values
live in fixed stores [slots, cache slots, H_kv, T, D] with a position store (-1 = empty), so a depth that a token
skipped (an early exit, a router that sent it out) is simply masked, and a plan step that reuses an earlier slot's
keys (recursive KV sharing) reads them without writing.

    rows = DepthRows(decoder, max_batch, max_len)
    rows.load(slot, cache)                       # after the model's own cached prefill of a prompt
    x = rows.run(x, slots, depths, positions)    # x [b, D]; every depth of the call runs the same block
"""

from __future__ import annotations

import torch

from rlib.model.cache import KVCache
from rlib.model.layers import StepContext
from rlib.model.rows import RowAdapters, RowGeometry

__all__ = ["DepthRows", "RowStores"]


class RowStores:
    """A KV-cache view for one block call on b rows: row i reads and writes store slot `slots[i]`, cache slot
    `cache_slots[i]`; rows whose `write[i]` is False only read (a step that reuses an earlier step's keys)."""

    def __init__(self, n_slots: int, n_cache: int, n_kv_heads: int, max_len: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype):
        shape = (n_slots, n_cache, n_kv_heads, max_len, head_dim)
        self.k_store = torch.zeros(shape, device=device, dtype=dtype)
        self.v_store = torch.zeros(shape, device=device, dtype=dtype)
        self.pos_store = torch.full((n_slots, n_cache, max_len), -1, dtype=torch.long, device=device)

    def bind(self, slots: torch.Tensor, cache_slots: torch.Tensor, write: torch.Tensor, span: int) -> None:
        self.slots, self.cache_slots, self.write, self.span = slots, cache_slots, write, span

    def length(self, slot: int) -> int:
        return 1  # never "the keys are this call's queries": masks come from the stored positions

    def append(self, slot: int, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor):
        """keys, values [b, H_kv, 1, D] at positions [b, 1] into the rows that write; returns `read`."""
        self.store(keys, values, positions[:, 0], self.write)
        return self.read(slot)

    def store(self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor,
              write: torch.Tensor | None = None) -> None:
        if write is None:
            write = torch.ones(len(positions), dtype=torch.bool, device=positions.device)
        rows = write.nonzero(as_tuple=True)[0]
        if len(rows):
            s, c, p = self.slots[rows], self.cache_slots[rows], positions[rows]
            self.k_store[s, c, :, p] = keys[rows, :, 0]
            self.v_store[s, c, :, p] = values[rows, :, 0]
            self.pos_store[s, c, p] = p

    def read(self, slot: int):
        keys = self.k_store[self.slots, self.cache_slots, :, : self.span]  # [b, H_kv, span, D]
        values = self.v_store[self.slots, self.cache_slots, :, : self.span]
        return keys, values, self.pos_store[self.slots, self.cache_slots, : self.span]  # [b, span]

    def clear(self, slot: int) -> None:
        self.pos_store[slot].fill_(-1)

    def load(self, slot: int, cache: KVCache) -> None:
        """Copy a one-sequence KVCache (the model's own prefill) into store slot `slot`."""
        self.clear(slot)
        for c in range(cache.n_slots):
            if cache.keys[c] is None:
                continue
            keys, values, positions = cache.read(c)  # [1, H_kv, S, D], [1, S]
            keep = positions[0] >= 0
            pos = positions[0][keep]
            self.k_store[slot, c, :, pos] = keys[0][:, keep]
            self.v_store[slot, c, :, pos] = values[0][:, keep]
            self.pos_store[slot, c, pos] = pos

    def entries(self) -> int:
        """Cache entries in use (a position stored in some slot and cache slot)."""
        return int((self.pos_store >= 0).sum())


class DepthRows:
    """A decoder's plan, run row-wise: per-row depth (adapters, window, rope theta, cache slot) and position."""

    def __init__(self, decoder, max_batch: int, max_len: int, lora_impl: str = "auto"):
        param = next(decoder.parameters())
        self.decoder, self.device, self.dtype = decoder, param.device, param.dtype
        steps = decoder.plan.steps
        cfg = decoder.config
        self.stores = RowStores(max_batch, decoder.plan.n_slots, cfg.n_kv_heads, max_len, cfg.head_dim,
                                self.device, self.dtype)
        self.geometry = RowGeometry(decoder, max_len)
        self.adapters = RowAdapters(decoder, len(steps), impl=lora_impl)
        self.block_of = [s.block for s in steps]
        self.cache_slot = torch.tensor([s.slot for s in steps], device=self.device)  # [depths]
        self.writes = torch.tensor([not s.reuse_kv for s in steps], device=self.device)  # [depths]

    def context(self, slots: torch.Tensor, depths: torch.Tensor, positions: torch.Tensor) -> StepContext:
        """The step context of one block call: rows' positions [b], their depths' adapters, geometry and slots."""
        self.stores.bind(slots, self.cache_slot[depths], self.writes[depths], int(positions.max()) + 1)
        return StepContext(positions=positions[:, None], rope={"rows": self.geometry.rope(depths, positions)},
                           depth=self.adapters.at(depths), cache=self.stores,
                           window=self.geometry.windows(depths), rope_theta="rows")

    def run(self, x: torch.Tensor, slots: torch.Tensor, depths: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Run depth depths[r] of the plan on row r (every depth of the call uses the same block): x [b, D]."""
        block = self.block_of[int(depths[0])]
        if any(self.block_of[d] != block for d in depths.tolist()):
            raise ValueError(f"one block call runs one block; depths {depths.tolist()} use blocks "
                             f"{[self.block_of[d] for d in depths.tolist()]}")
        ctx = self.context(slots, depths, positions)
        return self.decoder.blocks[block](x[:, None], ctx)[:, 0]

    def write_keys_values(self, x: torch.Tensor, slots: torch.Tensor, depths: torch.Tensor,
                          positions: torch.Tensor) -> None:
        """Store depth depths[r]'s keys/values of hidden state x[r] [b, D] without running the rest of the block
        (an early-exiting token's skipped depths, from its exit state: CALM's state propagation)."""
        block = self.decoder.blocks[self.block_of[int(depths[0])]]
        ctx = self.context(slots, depths, positions)
        h = block.attn_norm(x[:, None], ctx.depth)  # [b, 1, D]
        keys, values = block.attn.keys_values(h, ctx)  # [b, H_kv, 1, D]
        self.stores.store(keys, values, positions, self.writes[depths])
