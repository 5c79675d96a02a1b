"""Continuous depth-wise batching: a real generation engine for looped models (Relaxed Recursive Transformers,
Sec. 2.4 and 3.8, Fig. 3). The paper only simulates it (see `rlib.throughput`); this engine runs it.

A looped model applies the same K blocks B times. The engine's unit of work is one *pass* through those K blocks
for a batch of slots, and the slots of one pass may sit at different loops: slot s holds one token of one request,
at loop j_s, with the hidden state that loop j_s - 1 left. After a pass every slot has advanced one loop; a slot
whose token finished its last loop, or whose intermediate answer is confident enough (early exit), emits the token
and moves on to the request's next token (loop 0) in the same slot, and a slot whose request is done takes the
next request from the queue. So the batch stays full without waiting for the deepest token.

Per slot and depth d = j K + k the engine keeps its own keys/values (`k_store`, `v_store` [slots, L, H_kv, T, D]),
so loop j of block k attends to what loop j of block k wrote for earlier tokens, exactly as in sequential
decoding. A relaxed model's per-depth LoRA is applied row by row through `kernels.lora_batch` (row r uses loop
j_r's adapter), and per-depth norm deltas likewise.

When a token exits after loop j < B, the depths it skipped have no keys/values for its position. The engine fills
them from the exiting hidden state (each skipped depth's K/V projection of it: CALM's state propagation), which
costs a K/V projection per skipped depth; the paper's simulation ignores this cost.

Admission policies make the same engine the three baselines of the paper's Table K.2:
    "continuous"  a free slot takes the next request at once (CSB for a plain model, CDB for a looped one)
    "static"      a new batch starts only when every slot of the last one is free (vanilla static batching)

Prompts are prefilled one request at a time by the ordinary cached forward, and the prefill's time is part of the
measured time. With early exit off, every token runs all B loops and the output equals `Decoder.generate`'s greedy
decoding token for token (`tests/test_cdb.py`).

    engine = DepthBatchEngine(model, max_batch=16, max_len=256, exit_threshold=0.9)
    result = engine.run([Request(i, prompt, 64) for i, prompt in enumerate(prompts)])
    result.tokens_per_s, result.mean_exit_loop
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from kernels.lora_batch import lora_batch
from rlib.config import ConfigError
from rlib.model import Decoder
from rlib.model.layers import BLOCK_WINDOW, Projection, RMSNorm, apply_rotary

__all__ = ["ADMISSIONS", "Completion", "DepthBatchEngine", "EngineResult", "Request", "check_requests"]

ADMISSIONS = ("continuous", "static")


@dataclass
class Request:
    id: int
    prompt: list[int]
    max_new_tokens: int
    eos_ids: tuple[int, ...] = ()


@dataclass
class Completion:
    id: int
    tokens: list[int] = field(default_factory=list)  # generated ids
    exit_loops: list[int] = field(default_factory=list)  # loop (1..B) each token left at; the prefill's token: B


@dataclass
class EngineResult:
    completions: dict[int, Completion]
    seconds: float  # wall time of the whole run (prefills included)
    prefill_seconds: float
    passes: int  # block passes (one pass = the K shared blocks, for every busy slot)
    busy_slot_passes: int  # sum over passes of busy slots
    n_loops: int

    @property
    def tokens(self) -> int:
        return sum(len(c.tokens) for c in self.completions.values())

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def mean_busy(self) -> float:
        return self.busy_slot_passes / max(1, self.passes)

    @property
    def mean_exit_loop(self) -> float:
        loops = [j for c in self.completions.values() for j in c.exit_loops[1:]]  # decode tokens only
        return sum(loops) / max(1, len(loops))

    def exit_histogram(self) -> dict[int, int]:
        counts = dict.fromkeys(range(1, self.n_loops + 1), 0)
        for c in self.completions.values():
            for j in c.exit_loops[1:]:
                counts[j] += 1
        return counts


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


class DepthBatchEngine:
    """Continuous depth-wise batching over a cycle-looped Decoder (a plain decoder is the B = 1 case)."""

    def __init__(self, model: Decoder, max_batch: int, max_len: int, exit_threshold: float | None = None,
                 admission: str = "continuous", lora_impl: str | None = None):
        if admission not in ADMISSIONS:
            raise ConfigError(f"admission={admission!r}: choose from {ADMISSIONS}")
        if max_batch < 1 or max_len < 2:
            raise ConfigError(f"max_batch={max_batch} must be >= 1 and max_len={max_len} >= 2")
        if exit_threshold is not None and not 0 < exit_threshold <= 1:
            raise ConfigError(f"exit_threshold={exit_threshold} must lie in (0, 1] (or None: no early exit)")
        self.model = model.eval()
        self.n_blocks = len(model.blocks)
        n_steps = len(model.plan.steps)
        for depth, step in enumerate(model.plan.steps):
            if step.block != depth % self.n_blocks or step.slot != depth or step.reuse_kv:
                raise ConfigError(f"plan step {depth} is {step}; the engine needs a cycle plan (block = depth mod K) "
                                  "with one KV slot per depth")
        if n_steps % self.n_blocks:
            raise ConfigError(f"{n_steps} plan steps are not a whole number of loops over {self.n_blocks} blocks")
        self.n_loops = n_steps // self.n_blocks
        if any(len(block.attn.adapters) for block in model.blocks):
            raise ConfigError("the engine does not run prefix-relaxed models (App. H); use LoRA relaxation")
        self.max_batch, self.max_len = max_batch, max_len
        self.exit_threshold = exit_threshold
        self.admission = admission
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.lora_impl = lora_impl or ("auto" if self.device.type == "cuda" else "loop")
        cfg = model.config
        windows = [model.blocks[s.block].attn.window if s.window == BLOCK_WINDOW else s.window
                   for s in model.plan.steps]
        self.has_windows = any(w is not None for w in windows)
        self.width_of = torch.tensor([w if w is not None else max_len + 1 for w in windows], device=self.device)
        thetas = [model.blocks[s.block].attn.theta if s.rope_theta is None else s.rope_theta for s in model.plan.steps]
        distinct = sorted(set(thetas))
        self.theta_index_of = torch.tensor([distinct.index(t) for t in thetas], device=self.device)  # [depths]
        positions = torch.arange(max_len, device=self.device)[None]  # [1, T]
        tables = [model.rotary.cos_sin(positions, theta, self.dtype) for theta in distinct]  # [1, 1, T, D] each
        self.cos_table = torch.stack([cos[0, 0] for cos, _ in tables])  # [thetas, T, D]
        self.sin_table = torch.stack([sin[0, 0] for _, sin in tables])
        shape = (max_batch, n_steps, cfg.n_kv_heads, max_len, cfg.head_dim)
        self.k_store = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self.v_store = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self._loras = self._pack_loras()
        self._norm_deltas = self._pack_norm_deltas()

    # ---- per-depth adapters, stacked by loop for row-wise use ------------------------------------------------

    def _pack_loras(self) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """id(projection) -> (A [B, R, in], B [B, out, R]) over loops, for projections with per-depth LoRA."""
        packed = {}
        for k, block in enumerate(self.model.blocks):
            for proj in block.modules():
                if not isinstance(proj, Projection) or not len(proj.adapters):
                    continue
                depths = [str(j * self.n_blocks + k) for j in range(self.n_loops)]
                missing = [d for d in depths if d not in proj.adapters]
                if missing:
                    raise ConfigError(f"block {k} has LoRA at some depths but not at {missing}")
                packed[id(proj)] = (torch.stack([proj.adapters[d].lora_a.detach() for d in depths]),
                                    torch.stack([proj.adapters[d].lora_b.detach() for d in depths]))
        return packed

    def _pack_norm_deltas(self) -> dict[int, torch.Tensor]:
        packed = {}
        for k, block in enumerate(self.model.blocks):
            for norm in block.modules():
                if isinstance(norm, RMSNorm) and len(norm.adapters):
                    packed[id(norm)] = torch.stack([norm.adapters[str(j * self.n_blocks + k)].delta.detach()
                                                    for j in range(self.n_loops)])  # [B, D]
        return packed

    # ---- row-wise pieces: every row has its own loop (adapter), position and depth ------------------------------

    def _norm(self, norm: RMSNorm, x: torch.Tensor, loops: torch.Tensor) -> torch.Tensor:
        """x [..., D] with per-row loops [b] (x's first dim is the row)."""
        weight = norm.weight
        if id(norm) in self._norm_deltas:
            weight = weight + self._norm_deltas[id(norm)][loops]  # [b, D]
            weight = weight.view(weight.shape[0], *([1] * (x.dim() - 2)), weight.shape[-1])
        return norm.scaled(x, weight)

    def _linear(self, proj: Projection, x: torch.Tensor, loops: torch.Tensor) -> torch.Tensor:
        """x [b, in] -> [b, out] with row r's loop adapter."""
        if id(proj) not in self._loras:
            return F.linear(x, proj.weight, proj.bias)
        lora_a, lora_b = self._loras[id(proj)]
        return lora_batch(x, proj.weight, lora_a, lora_b, loops, proj.bias, impl=self.lora_impl)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor, depths: torch.Tensor) -> torch.Tensor:
        """x [b, H, 1, D] rotated at each row's position with its depth's theta (tables built once per engine)."""
        index = self.theta_index_of[depths]  # [b]
        cos = self.cos_table[index, positions][:, None, None]  # [b, 1, 1, D]
        sin = self.sin_table[index, positions][:, None, None]
        return apply_rotary(x, cos, sin)

    def _keys_values(self, attn, h: torch.Tensor, loops, depths, positions) -> tuple[torch.Tensor, torch.Tensor]:
        b = h.shape[0]
        k = self._linear(attn.k_proj, h, loops).view(b, attn.n_kv_heads, 1, attn.head_dim)
        v = self._linear(attn.v_proj, h, loops).view(b, attn.n_kv_heads, 1, attn.head_dim)
        if attn.k_norm is not None:
            k = self._norm(attn.k_norm, k, loops)
        return self._rope(k, positions, depths), v

    def _block(self, k: int, x: torch.Tensor, slots: torch.Tensor, loops: torch.Tensor,
               positions: torch.Tensor) -> torch.Tensor:
        """One shared block for rows at depths loops * K + k: x [b, D] -> [b, D]; writes each row's K/V."""
        block, depths = self.model.blocks[k], loops * self.n_blocks + k
        attn, b = block.attn, x.shape[0]
        h = self._norm(block.attn_norm, x, loops)
        q = self._linear(attn.q_proj, h, loops).view(b, attn.n_heads, 1, attn.head_dim)
        if attn.q_norm is not None:
            q = self._norm(attn.q_norm, q, loops)
        q = self._rope(q, positions, depths)
        key, value = self._keys_values(attn, h, loops, depths, positions)
        self.k_store[slots, depths, :, positions] = key[:, :, 0]
        self.v_store[slots, depths, :, positions] = value[:, :, 0]
        span = int(positions.max()) + 1
        keys = self.k_store[slots, depths, :, :span]  # [b, H_kv, T, D]
        values = self.v_store[slots, depths, :, :span]
        key_pos = torch.arange(span, device=x.device)[None, :]  # [1, T]
        allowed = key_pos <= positions[:, None]  # [b, T]
        if self.has_windows:
            allowed &= key_pos > (positions - self.width_of[depths])[:, None]
        out = self._attend(attn, q, keys, values, allowed[:, None, None, :])  # [b, H * D]
        update = self._linear(attn.o_proj, out, loops)
        if block.attn_out_norm is not None:
            update = self._norm(block.attn_out_norm, update, loops)
        x = x + update
        h = self._norm(block.mlp_norm, x, loops)
        mlp = block.mlp
        update = self._linear(mlp.down_proj, mlp.act(self._linear(mlp.gate_proj, h, loops))
                              * self._linear(mlp.up_proj, h, loops), loops)
        if block.mlp_out_norm is not None:
            update = self._norm(block.mlp_out_norm, update, loops)
        return x + update

    @staticmethod
    def _attend(attn, q, keys, values, mask) -> torch.Tensor:
        b = q.shape[0]
        if attn.softcap is not None:
            out = attn._attend_softcapped(q, keys, values, mask)
        else:
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scale,
                                                 enable_gqa=attn.n_heads != attn.n_kv_heads)
        return out.reshape(b, attn.n_heads * attn.head_dim)

    def _fill_skipped(self, x: torch.Tensor, slots, loops_done, positions) -> None:
        """Keys/values of the depths an early-exiting token skipped, from its exit hidden state x [b, D]."""
        for j in range(1, self.n_loops):
            rows = (loops_done <= j).nonzero(as_tuple=True)[0]  # tokens that exited before loop j + 1
            if not len(rows):
                continue
            loops = torch.full((len(rows),), j, device=x.device, dtype=torch.long)
            for k, block in enumerate(self.model.blocks):
                depths = loops * self.n_blocks + k
                h = self._norm(block.attn_norm, x[rows], loops)
                key, value = self._keys_values(block.attn, h, loops, depths, positions[rows])
                self.k_store[slots[rows], depths, :, positions[rows]] = key[:, :, 0]
                self.v_store[slots[rows], depths, :, positions[rows]] = value[:, :, 0]

    @torch.no_grad()
    def pass_seconds(self, batch: int, position: int, repeats: int = 5) -> float:
        """Median wall time of one pass (the K blocks) at `batch` busy slots whose tokens sit at `position`: the
        timing the throughput model (`rlib.throughput.simulate`) needs. Stores are scratch (overwritten later)."""
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
            for k in range(self.n_blocks):
                self._block(k, x, slots, loops, positions)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return sorted(times[1:])[len(times[1:]) // 2]

    # ---- the scheduler -----------------------------------------------------------------------------------------

    def _prefill(self, slot: int, request: Request) -> int:
        """Run the prompt through the whole model into `slot`'s stores; returns the first generated token."""
        prompt = torch.tensor([request.prompt], device=self.device)
        cache = self.model.new_cache()
        logits = self.model(prompt, cache=cache, last_only=True)  # [1, 1, V]
        length = prompt.shape[1]
        for depth in range(len(self.model.plan.steps)):
            keys, values, _ = cache.read(depth)  # [1, H_kv, T, D]
            self.k_store[slot, depth, :, :length] = keys[0]
            self.v_store[slot, depth, :, :length] = values[0]
        return int(logits[0, -1].float().argmax())

    @torch.no_grad()
    def run(self, requests: list[Request]) -> EngineResult:
        """Generate every request greedily; returns completions and timing (see the module docstring)."""
        check_requests(requests, self.max_len)
        queue = deque(requests)
        done: dict[int, Completion] = {}
        n = self.max_batch
        request_of: list[Request | None] = [None] * n
        hidden = torch.zeros(n, self.model.config.d_model, device=self.device, dtype=self.dtype)
        loop = torch.zeros(n, dtype=torch.long, device=self.device)  # loops done for the slot's current token
        position = torch.zeros(n, dtype=torch.long, device=self.device)  # position of the slot's current token
        passes = busy_total = 0
        prefill_seconds = 0.0
        t0 = time.perf_counter()

        def start_token(slot: int, token: int) -> None:
            hidden[slot] = self.model.embed_tokens(torch.tensor([[token]], device=self.device))[0, 0]
            loop[slot] = 0

        def finish_or_continue(slot: int, token: int, exit_loop: int) -> None:
            req = request_of[slot]
            comp = done[req.id]
            comp.tokens.append(token)
            comp.exit_loops.append(exit_loop)
            if len(comp.tokens) >= req.max_new_tokens or token in req.eos_ids:
                request_of[slot] = None
            else:
                position[slot] += 1
                start_token(slot, token)

        while queue or any(r is not None for r in request_of):
            free = [s for s in range(n) if request_of[s] is None]
            may_admit = self.admission == "continuous" or len(free) == n
            while may_admit and free and queue:
                slot, req = free.pop(0), queue.popleft()
                t_pre = time.perf_counter()
                first = self._prefill(slot, req)
                prefill_seconds += time.perf_counter() - t_pre
                request_of[slot] = req
                done[req.id] = Completion(req.id)
                position[slot] = len(req.prompt) - 1
                finish_or_continue(slot, first, self.n_loops)
            busy = torch.tensor([s for s in range(n) if request_of[s] is not None], dtype=torch.long,
                                device=self.device)
            if not len(busy):
                continue
            x = hidden[busy]
            loops, positions = loop[busy], position[busy]
            for k in range(self.n_blocks):
                x = self._block(k, x, busy, loops, positions)
            hidden[busy] = x
            loop[busy] = loops + 1
            passes += 1
            busy_total += len(busy)
            finished = loops + 1 == self.n_loops  # [b]
            probing = self.exit_threshold is not None and self.n_loops > 1 and not bool(finished.all())
            rows = torch.arange(len(busy), device=self.device) if probing else finished.nonzero(as_tuple=True)[0]
            if not len(rows):
                continue
            # One LM-head call per pass serves both the exit probe and the emitted tokens: on a small batch the
            # head is bound by reading its [V, D] weight, so a second call would cost as much again.
            logits = self.model.head(x[rows]).float()  # [r, V]
            tokens = logits.argmax(-1)
            if probing:  # rows == every busy row here
                confidence = (logits.amax(-1) - torch.logsumexp(logits, -1)).exp()  # top-1 probability [b]
                exits = ((confidence >= self.exit_threshold) & ~finished).nonzero(as_tuple=True)[0]
                if len(exits):
                    self._fill_skipped(x[exits], busy[exits], loops[exits] + 1, positions[exits])
                    finished[exits] = True
                tokens = tokens[finished]
            for row, token in zip(finished.nonzero(as_tuple=True)[0].tolist(), tokens.tolist()):
                finish_or_continue(int(busy[row]), token, int(loops[row]) + 1)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return EngineResult(done, time.perf_counter() - t0, prefill_seconds, passes, busy_total, self.n_loops)
