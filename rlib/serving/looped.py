"""Continuous depth-wise batching of looped decoders, with early exit (Relaxed Recursive Transformers, Sec. 2.4 and
3.8, Fig. 3). The paper only simulates it (`rlib.serving.simulate`); this program runs it in the serving engine.

A looped model applies the same K blocks B times. One engine iteration is one *pass* through those K blocks for every
busy slot, and the slots of one pass may sit at different loops: slot s holds one token at loop j_s, with the hidden
state that loop j_s - 1 left. Block k runs all rows at once, row s at depth j_s K + k, with that depth's LoRA, norm
deltas, sliding window, rope theta and keys/values (`rlib.serving.rows`). After a pass every slot has advanced one
loop; a slot whose token finished its last loop, or whose intermediate answer is confident enough (early exit), emits
the token and starts the request's next token (loop 0) in the same slot. So the batch stays full without waiting for
the deepest token. A plain decoder is the B = 1 case (continuous sequence-wise batching).

Whether a token may leave early is an exit rule (`rlib.serving.exits`): the head's softmax confidence (which costs the
[V, D] head on every row that could leave) or a linear classifier on the hidden state (D multiply-adds per row; the
head then runs only on rows that leave). On a CPU, `seconds` splits step time into blocks, exit decision, head and
KV filling, so the decision's share of a pass is measured, not assumed.

When a token exits after loop j < B, the depths it skipped have no keys/values for its position. They are filled from
the exiting hidden state (each skipped depth's K/V projection of it: CALM's state propagation), which costs a K/V
projection per skipped depth; the paper's simulation ignores this cost.

    engine = ServingEngine(LoopedProgram(model, exit_rule=calibrated_rule), max_batch=16, max_len=256)
"""

from __future__ import annotations

import time

import torch

from rlib.config import ConfigError
from rlib.model import Decoder
from rlib.serving.exits import ExitRule, SoftmaxExit
from rlib.serving.rows import DepthRows

__all__ = ["PARTS", "LoopedProgram"]

PARTS = ("blocks", "exit_decision", "head", "kv_fill")  # the timed parts of a step


class LoopedProgram:
    """The `DepthProgram` of a cycle-looped Decoder (a plain decoder is the one-loop case)."""

    def __init__(self, model: Decoder, exit_threshold: float | None = None, lora_impl: str | None = None,
                 exit_rule: ExitRule | None = None):
        if exit_threshold is not None and not 0 < exit_threshold <= 1:
            raise ConfigError(f"exit_threshold={exit_threshold} must lie in (0, 1] (or None: no early exit)")
        if exit_threshold is not None and exit_rule is not None:
            raise ConfigError("pass exit_threshold (a SoftmaxExit) or exit_rule, not both")
        self.model = model.eval()
        self.n_blocks = len(model.blocks)
        steps = model.plan.steps
        for depth, step in enumerate(steps):
            if step.block != depth % self.n_blocks:
                raise ConfigError(f"plan step {depth} is {step}; the engine needs a cycle plan (block = depth mod K)")
        if len(steps) % self.n_blocks:
            raise ConfigError(f"{len(steps)} plan steps are not a whole number of loops over {self.n_blocks} blocks")
        if any(len(block.attn.adapters) for block in model.blocks):
            raise ConfigError("the engine does not run prefix-relaxed models (App. H); use LoRA relaxation")
        self.n_loops = len(steps) // self.n_blocks
        self.exit_rule = SoftmaxExit(exit_threshold) if exit_threshold is not None else exit_rule
        weight = getattr(exit_rule, "weight", None)
        if weight is not None and tuple(weight.shape) != (self.n_loops - 1, model.config.d_model):
            raise ConfigError(f"exit classifier weight {tuple(weight.shape)} does not fit a {self.n_loops}-loop model "
                              f"of width {model.config.d_model}: needs [{self.n_loops - 1}, {model.config.d_model}]")
        self.seconds = dict.fromkeys(PARTS, 0.0)  # where step() spends its time (CPU only: no syncs on a GPU)
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.lora_impl = lora_impl or ("auto" if self.device.type == "cuda" else "loop")

    def allocate(self, max_batch: int, max_len: int) -> None:
        self.rows = DepthRows(self.model, max_batch, max_len, self.lora_impl)
        self.max_batch, self.max_len = max_batch, max_len
        self.hidden = torch.zeros(max_batch, self.model.config.d_model, device=self.device, dtype=self.dtype)
        self.loop = torch.zeros(max_batch, dtype=torch.long, device=self.device)  # loops done for the slot's token
        self.position = torch.zeros(max_batch, dtype=torch.long, device=self.device)

    def prefill(self, slot: int, prompt: list[int]) -> int:
        cache = self.model.new_cache()
        logits = self.model(torch.tensor([prompt], device=self.device), cache=cache, last_only=True)  # [1, 1, V]
        self.rows.stores.load(slot, cache)
        return int(logits[0, -1].float().argmax())

    def begin(self, slot: int, token: int, position: int) -> None:
        self.hidden[slot] = self.model.embed_tokens(torch.tensor([[token]], device=self.device))[0, 0]
        self.loop[slot] = 0
        self.position[slot] = position

    def release(self, slot: int) -> None:
        pass

    def _pass(self, x: torch.Tensor, slots: torch.Tensor, loops: torch.Tensor, positions: torch.Tensor):
        """The K shared blocks once for rows at loops [b]: x [b, D] -> [b, D]."""
        for k in range(self.n_blocks):
            x = self.rows.run(x, slots, loops * self.n_blocks + k, positions)
        return x

    def _clock(self) -> float:
        """perf_counter on a CPU (synchronous); on a GPU the parts are not timed (a sync per part would slow it)."""
        return time.perf_counter() if self.device.type != "cuda" else 0.0

    def step(self, slots: list[int]) -> tuple[list[tuple[int, int, int]], int]:
        t0 = self._clock()
        busy = torch.tensor(slots, dtype=torch.long, device=self.device)
        loops, positions = self.loop[busy], self.position[busy]
        x = self._pass(self.hidden[busy], busy, loops, positions)
        self.hidden[busy] = x
        self.loop[busy] = loops + 1
        finished = loops + 1 == self.n_loops  # [b]
        t1 = self._clock()
        self.seconds["blocks"] += t1 - t0
        tokens = torch.zeros(len(busy), dtype=torch.long, device=self.device)
        leaving = torch.zeros_like(finished)  # early exits of this pass
        rule = self.exit_rule
        if rule is not None and self.n_loops > 1 and not bool(finished.all()):
            mid = (~finished).nonzero(as_tuple=True)[0]
            logits = self.model.head(x[mid]) if rule.needs_logits else None  # [m, V]: the softmax rule's cost
            leave = rule.decide(self.model, x[mid], loops[mid] + 1, logits)  # [m]
            exits = mid[leave]
            if logits is not None and len(exits):
                tokens[exits] = logits[leave].float().argmax(-1)
            t2 = self._clock()
            self.seconds["exit_decision"] += t2 - t1
            if len(exits):
                self._fill_skipped(x[exits], busy[exits], loops[exits] + 1, positions[exits])
                self.seconds["kv_fill"] += self._clock() - t2
                leaving[exits] = True
        head_rows = finished if rule is not None and rule.needs_logits else finished | leaving
        self._emit(x, head_rows, tokens)
        return self._finish(slots, loops, finished | leaving, tokens), len(slots)

    def _emit(self, x: torch.Tensor, rows_mask: torch.Tensor, tokens: torch.Tensor) -> None:
        """The head's argmax for the rows in `rows_mask` [b], written into tokens [b] (one head call)."""
        rows = rows_mask.nonzero(as_tuple=True)[0]
        if len(rows):
            t0 = self._clock()
            tokens[rows] = self.model.head(x[rows]).float().argmax(-1)
            self.seconds["head"] += self._clock() - t0

    @staticmethod
    def _finish(slots: list[int], loops: torch.Tensor, finished: torch.Tensor,
                tokens: torch.Tensor) -> list[tuple[int, int, int]]:
        done = finished.nonzero(as_tuple=True)[0].tolist()
        token_list, loop_list = tokens.tolist(), loops.tolist()
        return [(slots[r], token_list[r], loop_list[r] + 1) for r in done]

    def reset_seconds(self) -> None:
        self.seconds = dict.fromkeys(PARTS, 0.0)

    def _fill_skipped(self, x: torch.Tensor, slots, loops_done, positions) -> None:
        """Keys/values of the depths an early-exiting token skipped, from its exit hidden state x [b, D]."""
        for j in range(1, self.n_loops):
            rows = (loops_done <= j).nonzero(as_tuple=True)[0]  # tokens that exited before loop j + 1
            if not len(rows):
                continue
            loops = torch.full((len(rows),), j, device=x.device, dtype=torch.long)
            for k in range(self.n_blocks):
                self.rows.write_keys_values(x[rows], slots[rows], loops * self.n_blocks + k, positions[rows])

    @torch.no_grad()
    def pass_seconds(self, batch: int, position: int, repeats: int = 5) -> float:
        """Median wall time of one pass (the K blocks) at `batch` busy slots whose tokens sit at `position`: the
        timing the throughput simulation (`rlib.serving.simulate`) needs. Stores are scratch (overwritten later)."""
        if not 1 <= batch <= self.max_batch or not 0 <= position < self.max_len:
            raise ConfigError(f"batch={batch} must be in 1..{self.max_batch} and position={position} < {self.max_len}")
        slots = torch.arange(batch, device=self.device)
        loops = torch.zeros(batch, dtype=torch.long, device=self.device)
        positions = torch.full((batch,), position, dtype=torch.long, device=self.device)
        x = torch.randn(batch, self.model.config.d_model, device=self.device, dtype=self.dtype)
        times = []
        for _ in range(repeats + 1):  # the first call warms up
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            self._pass(x, slots, loops, positions)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return sorted(times[1:])[len(times[1:]) // 2]
