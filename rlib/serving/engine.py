"""One serving engine for every model of the book: request queue, admission, prefill, slot scheduler, emit loop.

Continuous depth-wise batching (Relaxed Recursive Transformers Sec. 2.4 and 3.8, Fig. 3; Mixture-of-Recursions
Sec. 2.1 and 3.3) keeps a batch of *slots* full: each slot holds one request and the token it is computing now.
What one engine iteration does to the busy slots depends on the model family, so the engine delegates it to a
`DepthProgram`:

    LoopedProgram   (rlib.serving.looped)  plain, recursive and relaxed decoders: one pass of the shared blocks per
                                           iteration, every slot at its own loop, optional early exit
    MoRProgram      (rlib.mor.serving)     Mixture-of-Recursions: routers decide per token how many recursions run

and does the rest itself, the same for all:

    admission   "continuous": a free slot takes the next request at once (CSB for a plain model, CDB for a looped
                one); "static": a new batch starts only when every slot of the last one is free (static batching)
    prefill     the program runs the prompt through the model into the slot's stores and names the first token
    emit        every token a program finishes is appended to its request; a request ends at `max_new_tokens` or at
                one of its EOS ids and frees its slot

Every program runs the decoder's own blocks on the slots' rows (`rlib.model.rows`), so there is one attention
implementation in the book, and with early exit off the engine's output equals plain greedy decoding token for token
(`tests/test_serving.py`).

    engine = ServingEngine(LoopedProgram(model, exit_threshold=0.9), max_batch=16, max_len=256)
    result = engine.run([Request(i, prompt, 64) for i, prompt in enumerate(prompts)])
    result.tokens_per_s, result.mean_exit_loop
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import torch

from rlib.config import ConfigError

__all__ = ["ADMISSIONS", "Completion", "DepthProgram", "EngineResult", "Request", "ServingEngine", "check_requests"]

ADMISSIONS = ("continuous", "static")


@dataclass
class Request:
    id: int
    prompt: list[int]
    max_new_tokens: int
    eos_ids: tuple[int, ...] = ()
    reference: tuple[int, ...] = ()  # the corpus's own continuation where the workload has one (never decoded; App. K's
    # oracle exits are read on it, as if the model had generated it)


@dataclass
class Completion:
    id: int
    tokens: list[int] = field(default_factory=list)  # generated ids
    exit_loops: list[int] = field(default_factory=list)  # loops / recursions each token ran; the prefill's: all
    first_token_s: float = float("nan")  # seconds from the start of the run to this request's first token
    first_token_pass: int = -1  # block passes the engine had run when this request's first token came out


@dataclass
class EngineResult:
    completions: dict[int, Completion]
    seconds: float  # wall time of the whole run (prefills included)
    prefill_seconds: float
    passes: int  # engine iterations that ran blocks (one pass = the shared blocks, for every busy slot)
    busy_slot_passes: int  # sum over passes of the rows they ran
    n_loops: int  # the most loops (recursions) a token can run

    @property
    def tokens(self) -> int:
        return sum(len(c.tokens) for c in self.completions.values())

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens after each request's first (which the prefill produces) per second outside the prefills."""
        return (self.tokens - len(self.completions)) / max(1e-9, self.seconds - self.prefill_seconds)

    @property
    def mean_busy(self) -> float:
        return self.busy_slot_passes / max(1, self.passes)

    @property
    def mean_exit_loop(self) -> float:
        loops = [j for c in self.completions.values() for j in c.exit_loops[1:]]  # decode tokens only
        return sum(loops) / max(1, len(loops))

    def _mean_over_requests(self, field_name: str) -> float:
        return sum(getattr(c, field_name) for c in self.completions.values()) / max(1, len(self.completions))

    @property
    def mean_time_to_first_token(self) -> float:
        """Seconds from the start of the run (every request queued at once) to a request's first token, averaged."""
        return self._mean_over_requests("first_token_s")

    @property
    def mean_passes_to_first_token(self) -> float:
        """Block passes run before a request's first token, averaged: time to first token in units of work, which
        (unlike seconds) does not move with the host's load, so tests compare schedulers with it."""
        return self._mean_over_requests("first_token_pass")

    def exit_histogram(self) -> dict[int, int]:
        """Decode tokens per exit loop 1..n_loops (0 = tokens that ran no recursion, for MoR)."""
        counts: dict[int, int] = dict.fromkeys(range(1, self.n_loops + 1), 0)
        for c in self.completions.values():
            for j in c.exit_loops[1:]:
                counts[j] = counts.get(j, 0) + 1
        return dict(sorted(counts.items()))


def check_requests(requests: list[Request], max_len: int) -> None:
    """Unique ids, non-empty prompts, at least one new token, and prompt + new tokens within `max_len`."""
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        raise ConfigError("request ids must be unique")
    for r in requests:
        if not r.prompt or r.max_new_tokens < 1:
            raise ConfigError(f"request {r.id}: needs a non-empty prompt and max_new_tokens >= 1")
        if len(r.prompt) + r.max_new_tokens > max_len:
            raise ConfigError(f"request {r.id}: prompt {len(r.prompt)} + {r.max_new_tokens} new tokens exceeds "
                              f"max_len={max_len}; raise max_len")


class DepthProgram(Protocol):
    """What a model family supplies to the engine. Slots are 0..max_batch - 1; positions are token positions."""

    n_loops: int  # the most loops / recursions one token can run

    def allocate(self, max_batch: int, max_len: int) -> None:
        """Allocate the per-slot state and KV stores (once per engine)."""

    def prefill(self, slot: int, prompt: list[int]) -> int:
        """Run the prompt through the model into `slot`'s stores; return the first generated token."""

    def begin(self, slot: int, token: int, position: int) -> None:
        """`slot` starts computing the token after `token`, which sits at `position`."""

    def step(self, slots: list[int]) -> tuple[list[tuple[int, int, int]], int]:
        """Advance every busy slot by one engine iteration; return (slot, token, loops run) for every token that
        finished, and how many rows the iteration ran through the blocks (0: none ran)."""

    def release(self, slot: int) -> None:
        """`slot`'s request is done (free its stores' entries if the program keeps any)."""


class ServingEngine:
    """The scheduler around a `DepthProgram` (see the module docstring)."""

    def __init__(self, program: DepthProgram, max_batch: int, max_len: int, admission: str = "continuous"):
        if admission not in ADMISSIONS:
            raise ConfigError(f"admission={admission!r}: choose from {ADMISSIONS}")
        if max_batch < 1 or max_len < 2:
            raise ConfigError(f"max_batch={max_batch} must be >= 1 and max_len={max_len} >= 2")
        self.program, self.max_batch, self.max_len, self.admission = program, max_batch, max_len, admission
        program.allocate(max_batch, max_len)

    @property
    def n_loops(self) -> int:
        return self.program.n_loops

    @torch.no_grad()
    def run(self, requests: list[Request]) -> EngineResult:
        """Generate every request greedily; returns completions and timing."""
        check_requests(requests, self.max_len)
        program, n = self.program, self.max_batch
        queue, done = deque(requests), {}
        request_of: list[Request | None] = [None] * n
        position = [0] * n  # position of the token each slot computes now
        passes = busy_total = 0
        prefill_seconds = 0.0
        t0 = time.perf_counter()

        def emit(slot: int, token: int, loops: int) -> None:
            req = request_of[slot]
            completion = done[req.id]
            completion.tokens.append(token)
            completion.exit_loops.append(loops)
            if len(completion.tokens) >= req.max_new_tokens or token in req.eos_ids:
                request_of[slot] = None
                program.release(slot)
            else:
                position[slot] += 1
                program.begin(slot, token, position[slot])

        while queue or any(r is not None for r in request_of):
            free = [s for s in range(n) if request_of[s] is None]
            if self.admission == "continuous" or len(free) == n:
                for slot in free:
                    if not queue:
                        break
                    req = queue.popleft()
                    t_pre = time.perf_counter()
                    first = program.prefill(slot, req.prompt)
                    prefill_seconds += time.perf_counter() - t_pre
                    request_of[slot] = req
                    done[req.id] = Completion(req.id, first_token_s=time.perf_counter() - t0, first_token_pass=passes)
                    position[slot] = len(req.prompt) - 1
                    emit(slot, first, program.n_loops)
            busy = [s for s in range(n) if request_of[s] is not None]
            if not busy:
                continue
            finished, rows = program.step(busy)
            if rows:
                passes += 1
                busy_total += rows
            for slot, token, loops in finished:
                emit(slot, token, loops)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return EngineResult(done, time.perf_counter() - t0, prefill_seconds, passes, busy_total, program.n_loops)
