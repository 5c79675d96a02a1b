"""`KVCache`: keys and values addressed by *cache slot*, not by layer.

Each step of a decoder's execution plan names the slot it writes (or reads). A plain model has one
slot per layer; a looped model either keeps one slot per depth (recursion-wise caching: every
recursion of a shared block has its own keys/values) or lets later recursions read the slot of the
first one (recursive KV sharing, Mixture-of-Recursions). Each slot also stores the *positions* of
its keys, so masks stay correct when a slot holds only some of the tokens (a router's selection)
and when slots have different lengths.

Sliding-window layers keep every key and rely on the mask; nothing is evicted.
"""

from __future__ import annotations

import torch


class KVCache:
    """Per-slot keys/values [B, H_kv, S, D] and their positions [B, S]; `seen_tokens` counts the decoder's input."""

    def __init__(self, n_slots: int):
        self.n_slots = n_slots
        self.keys: list[torch.Tensor | None] = [None] * n_slots
        self.values: list[torch.Tensor | None] = [None] * n_slots
        self.positions: list[torch.Tensor | None] = [None] * n_slots
        self.seen_tokens = 0  # tokens fed through the decoder so far (the default next position)

    def length(self, slot: int) -> int:
        """How many keys `slot` holds (0 if never written)."""
        keys = self.keys[slot]
        return 0 if keys is None else keys.shape[2]

    def append(
        self, slot: int, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Add keys, values [B, H_kv, T, D] at positions [B, T]; return the slot's whole contents."""
        if self.keys[slot] is None:
            self.keys[slot], self.values[slot] = keys, values
            self.positions[slot] = positions.expand(keys.shape[0], -1)
        else:
            self.keys[slot] = torch.cat((self.keys[slot], keys), dim=2)  # [B, H_kv, S + T, D]
            self.values[slot] = torch.cat((self.values[slot], values), dim=2)
            self.positions[slot] = torch.cat((self.positions[slot], positions.expand(keys.shape[0], -1)), dim=1)
        return self.read(slot)

    def read(self, slot: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The slot's keys, values [B, H_kv, S, D] and positions [B, S]."""
        if self.keys[slot] is None:
            raise RuntimeError(f"KV cache slot {slot} is read before any step wrote it")
        return self.keys[slot], self.values[slot], self.positions[slot]

    def crop(self, length: int, slots: range | list[int] | None = None) -> None:
        """Keep the first `length` keys of each slot in `slots` (default: all); speculative decoding drops rejected
        drafts this way. Slots already shorter are left as they are."""
        if length < 0:
            raise ValueError(f"length={length} must be >= 0")
        for slot in range(self.n_slots) if slots is None else slots:
            if self.keys[slot] is None or self.keys[slot].shape[2] <= length:
                continue
            if length == 0:
                self.keys[slot] = self.values[slot] = self.positions[slot] = None
                continue
            self.keys[slot] = self.keys[slot][:, :, :length]
            self.values[slot] = self.values[slot][:, :, :length]
            self.positions[slot] = self.positions[slot][:, :length]

    def memory_bytes(self) -> int:
        tensors = [t for t in (*self.keys, *self.values) if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)

    def __repr__(self) -> str:
        lengths = [self.length(s) for s in range(self.n_slots)]
        return f"KVCache(slots={self.n_slots}, lengths={lengths}, seen_tokens={self.seen_tokens})"
