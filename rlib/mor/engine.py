"""Continuous depth-wise batching for Mixture-of-Recursions (paper 001, Sec. 2.1 and 3.3, App. D; Fig. 4a).

The official code trains only; the paper measured throughput with an engine it did not release. This one runs it.
Each request holds one slot. A slot's current token is at one of three stages:

    pre   embedding and the unique first layer(s), then the router decides whether it enters recursion 1
    rec   recursion r of the shared block; after the pass the router of r + 1 decides: continue or leave
    post  the unique last layer(s), the LM head, the next token (back to "pre", or the request is done)

Every engine iteration runs one *recursion pass* over all slots at stage "rec", whatever their recursion (the
shared weights are the same; each row reads and writes the keys of its own depth), then the "post" and "pre" work
of the slots that left. Free slots take the next request at once. Keys and values live in fixed stores
[slots, cache slots, H_kv, T, D] with a position store (-1 = empty), so recursion-wise caching keeps only the
tokens that reached a depth and recursive KV sharing reads recursion 1's keys. The decoder's own blocks run on
the rows through a row-addressed view of those stores (`_RowStores`), so no attention code is duplicated.

Expert-choice decides with the causal rule (router sigmoid >= 0.5; capacity-1 steps keep everyone), as
`MoRDecoder(..., mode="causal")` does; the engine's tokens equal that model's cached greedy decoding
(`tests/test_mor_engine.py`).
"""

from __future__ import annotations

import time
from collections import deque

import torch

from rlib.cdb import Completion, EngineResult, Request, check_requests
from rlib.config import ConfigError
from rlib.mor import routers as R
from rlib.mor.model import MoRDecoder

__all__ = ["MoREngine", "greedy_generate"]

PRE, REC, POST, IDLE = 0, 1, 2, 3


class _RowStores:
    """A KV cache view for one block call on b rows: row i reads/writes store slot `slots[i]`, cache slot
    `cache_slots[i]`; rows with `write[i]` False only read (recursive KV sharing's deeper recursions)."""

    def __init__(self, k_store: torch.Tensor, v_store: torch.Tensor, pos_store: torch.Tensor):
        self.k_store, self.v_store, self.pos_store = k_store, v_store, pos_store

    def bind(self, slots: torch.Tensor, cache_slots: torch.Tensor, write: torch.Tensor, span: int) -> None:
        self.slots, self.cache_slots, self.write, self.span = slots, cache_slots, write, span

    def length(self, slot: int) -> int:
        return 1  # never "keys are the queries": masks come from positions

    def append(self, slot: int, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor):
        rows = self.write.nonzero(as_tuple=True)[0]
        if len(rows):
            s, c, p = self.slots[rows], self.cache_slots[rows], positions[rows, 0]
            self.k_store[s, c, :, p] = keys[rows, :, 0]
            self.v_store[s, c, :, p] = values[rows, :, 0]
            self.pos_store[s, c, p] = p
        return self.read(slot)

    def read(self, slot: int):
        keys = self.k_store[self.slots, self.cache_slots, :, : self.span]  # [b, H_kv, span, D]
        values = self.v_store[self.slots, self.cache_slots, :, : self.span]
        return keys, values, self.pos_store[self.slots, self.cache_slots, : self.span]  # [b, span]


@torch.no_grad()
def greedy_generate(model: MoRDecoder, prompt: list[int], max_new_tokens: int, eos_ids: tuple[int, ...] = ()):
    """Reference decoding: the model's own cached forward, one token at a time, causal routing."""
    model.eval()
    device = next(model.parameters()).device
    cache = model.new_cache()
    logits = model(torch.tensor([prompt], device=device), cache=cache, mode="causal", last_only=True)
    out: list[int] = []
    for _ in range(max_new_tokens):
        token = int(logits[0, -1].float().argmax())
        out.append(token)
        if token in eos_ids or len(out) == max_new_tokens:
            break
        logits = model(torch.tensor([[token]], device=device), cache=cache, mode="causal", last_only=True)
    return out


class MoREngine:
    """Continuous depth-wise batching over a MoRDecoder (expert-choice, token-choice or the Recursive model)."""

    def __init__(self, model: MoRDecoder, max_batch: int, max_len: int):
        if max_batch < 1 or max_len < 2:
            raise ConfigError(f"max_batch={max_batch} must be >= 1 and max_len={max_len} >= 2")
        if not model.recursions:
            raise ConfigError("the engine needs a model with recursions (cycle or middle-cycle sharing)")
        self.model = model.eval()
        dec = model.decoder
        self.steps = dec.plan.steps
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        cfg = dec.config
        n_cache = dec.plan.n_slots
        self.k_store = torch.zeros(max_batch, n_cache, cfg.n_kv_heads, max_len, cfg.head_dim, device=self.device,
                                   dtype=self.dtype)
        self.v_store = torch.zeros_like(self.k_store)
        self.pos_store = torch.full((max_batch, n_cache, max_len), -1, dtype=torch.long, device=self.device)
        self.rows = _RowStores(self.k_store, self.v_store, self.pos_store)
        self.max_batch, self.max_len = max_batch, max_len
        self.kv_entries = 0  # cache entries written (the engine's KV memory in use at the end of a run)

    # ---- running blocks on rows ------------------------------------------------------------------------------

    def _depths(self, x: torch.Tensor, slots: torch.Tensor, depths: list[int], positions: torch.Tensor):
        """Run plan depth depths[i] for row i (all rows at the same block), x [b, D] -> [b, D]."""
        dec = self.model.decoder
        steps = [self.steps[d] for d in depths]
        block = dec.blocks[steps[0].block]
        cache_slots = torch.tensor([s.slot for s in steps], device=self.device)
        write = torch.tensor([not s.reuse_kv for s in steps], device=self.device)
        self.rows.bind(slots, cache_slots, write, int(positions.max()) + 1)
        ctx = dec.context(positions[:, None], x.dtype, cache=self.rows)
        ctx.depth = depths[0]  # per-depth adapters: MoR has none
        return block(x[:, None], ctx)[:, 0]

    def _run(self, x, slots, depth_lists: list[list[int]], positions):
        """Rows each run their own list of depths (equal lengths, same blocks in order)."""
        for j in range(len(depth_lists[0])):
            x = self._depths(x, slots, [d[j] for d in depth_lists], positions)
        return x

    # ---- routing decisions at decode -------------------------------------------------------------------------

    def _expert_enter(self, r: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(enters recursion r [b] bool, gate [b]) from router r on x [b, D]."""
        spec = self.model.spec
        logits = self.model.routers[r](x)[..., 0]
        gates = R.expert_scores(logits, spec)
        if spec.capacity(r) >= 1:
            return torch.ones_like(gates, dtype=torch.bool), gates
        decider = logits if spec.aux != "router" else self.model.aux_routers[r](x)[..., 0]
        return R.causal_decision(decider), gates

    # ---- the scheduler ----------------------------------------------------------------------------------------

    def _prefill(self, slot: int, request: Request) -> int:
        model = self.model
        cache = model.new_cache()
        logits = model(torch.tensor([request.prompt], device=self.device), cache=cache, mode="causal",
                       last_only=True)
        for c in range(cache.n_slots):
            if cache.keys[c] is None:
                continue
            keys, values, positions = cache.read(c)
            keep = positions[0] >= 0
            pos = positions[0][keep]
            self.k_store[slot, c, :, pos] = keys[0][:, keep]  # [H_kv, S, D]
            self.v_store[slot, c, :, pos] = values[0][:, keep]
            self.pos_store[slot, c, pos] = pos
        return int(logits[0, -1].float().argmax())

    @torch.no_grad()
    def run(self, requests: list[Request]) -> EngineResult:
        """Generate every request greedily; returns completions (exit_loops = recursions each token ran) and timing."""
        check_requests(requests, self.max_len)
        n = self.max_batch
        self.pos_store.fill_(-1)
        self.state = _Slots(n, self.model.config.d_model, self.device, self.dtype)
        queue, self.done = deque(requests), {}
        passes = busy_total = 0
        prefill_seconds = 0.0
        t0 = time.perf_counter()
        st = self.state
        while queue or any(r is not None for r in st.request):
            for slot in range(n):  # admission: a free slot takes the next request at once
                if st.request[slot] is None and queue:
                    t_pre = time.perf_counter()
                    self._admit(slot, queue.popleft())
                    prefill_seconds += time.perf_counter() - t_pre
            self._pre([s for s in range(n) if st.stage[s] == PRE])
            busy = [s for s in range(n) if st.stage[s] == REC]
            if busy:
                self._recursion_pass(busy)
                passes += 1
                busy_total += len(busy)
            self._post([s for s in range(n) if st.stage[s] == POST])
        self.kv_entries = int((self.pos_store >= 0).sum())
        n_rec = len(self.model.recursions)
        return EngineResult(self.done, time.perf_counter() - t0, prefill_seconds, passes, busy_total, n_rec)

    def _admit(self, slot: int, req: Request) -> None:
        st = self.state
        self.pos_store[slot].fill_(-1)
        first = self._prefill(slot, req)
        st.request[slot], self.done[req.id] = req, Completion(req.id)
        st.position[slot] = len(req.prompt) - 1
        self._emit(slot, first, len(self.model.recursions))

    def _emit(self, slot: int, token: int, depth: int) -> None:
        st = self.state
        req = st.request[slot]
        comp = self.done[req.id]
        comp.tokens.append(token)
        comp.exit_loops.append(depth)
        if len(comp.tokens) >= req.max_new_tokens or token in req.eos_ids:
            st.request[slot], st.stage[slot] = None, IDLE
        else:
            st.position[slot] += 1
            st.token[slot], st.stage[slot] = token, PRE

    def _tensor(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, device=self.device)

    def _pre(self, slots: list[int]) -> None:
        """Embed the new tokens, run the first unique layer(s), decide entry into recursion 1."""
        if not slots:
            return
        model, spec, st = self.model, self.model.spec, self.state
        rows, pos = self._tensor(slots), self._tensor([st.position[s] for s in slots])
        h = model.decoder.embed_tokens(self._tensor([[st.token[s]] for s in slots]))[:, 0]  # [b, D]
        if model.prefix:
            h = self._run(h, rows, [model.prefix] * len(slots), pos)
        st.x[rows] = h
        st.h1[rows] = h
        enter = [True] * len(slots)
        if spec.routing == "expert":
            decided, gates = self._expert_enter(0, h)
            st.gate[rows] = gates.to(st.gate.dtype)
            enter = decided.tolist()
        elif spec.routing == "token":
            probs = R.token_probs(model.routers[0](h), spec)  # as MoRDecoder._token: bias on the choice only
            choice = (probs + model.balance_bias if spec.balance == "loss_free" else probs).argmax(-1)
            st.gate[rows] = probs.gather(-1, choice[:, None])[:, 0].to(st.gate.dtype)
            for s, c in zip(slots, choice.tolist()):
                st.last[s] = c
        for s, e in zip(slots, enter):
            st.stage[s], st.rec[s] = (REC if e else POST), 0

    def _recursion_pass(self, slots: list[int]) -> None:
        """One pass of the shared block for every slot in a recursion (each at its own depth), then routing."""
        model, spec, st = self.model, self.model.spec, self.state
        rows, pos = self._tensor(slots), self._tensor([st.position[s] for s in slots])
        out = self._run(st.x[rows], rows, [model.recursions[st.rec[s]] for s in slots], pos)
        g = st.gate[rows].to(st.x.dtype)[:, None]
        if spec.routing == "expert":
            st.x[rows] = out if spec.gating == "replace" else st.x[rows] + g * out
        elif spec.routing == "token":
            st.x[rows] = g * out if spec.token_gating == "every" else out
        else:
            st.x[rows] = out
        for s in slots:
            st.rec[s] += 1
        going_on = self._continues([s for s in slots if st.rec[s] < len(model.recursions)])
        for s in slots:
            if s in going_on:
                continue
            st.stage[s] = POST
            if spec.routing == "token":  # the output: H1 + g f^(i)(H1) (or H1 + the gated state, eq. 2.2)
                extra = st.x[s] if spec.token_gating == "every" else st.gate[s].to(st.x.dtype) * st.x[s]
                st.x[s] = st.h1[s] + extra

    def _continues(self, slots: list[int]) -> set[int]:
        """Which slots go on to their next recursion (expert-choice: router r decides and sets the gate)."""
        spec, st = self.model.spec, self.state
        if spec.routing == "token":
            return {s for s in slots if st.rec[s] <= st.last[s]}
        if spec.routing != "expert":
            return set(slots)
        by_step: dict[int, list[int]] = {}
        for s in slots:
            by_step.setdefault(st.rec[s], []).append(s)
        going_on = set()
        for r, group in by_step.items():
            rows = self._tensor(group)
            enter, gates = self._expert_enter(r, st.x[rows])
            st.gate[rows] = gates.to(st.gate.dtype)
            going_on |= {s for s, e in zip(group, enter.tolist()) if e}
        return going_on

    def _post(self, slots: list[int]) -> None:
        """The last unique layer(s), the head, and the next token of every slot that left its recursions."""
        if not slots:
            return
        model, st = self.model, self.state
        rows, pos = self._tensor(slots), self._tensor([st.position[s] for s in slots])
        h = st.x[rows]
        if model.suffix:
            h = self._run(h, rows, [model.suffix] * len(slots), pos)
        for s, token in zip(slots, model.decoder.head(h).float().argmax(-1).tolist()):
            self._emit(s, token, st.rec[s])


class _Slots:
    """Per-slot decode state."""

    def __init__(self, n: int, d_model: int, device, dtype):
        self.request: list[Request | None] = [None] * n
        self.stage = [IDLE] * n
        self.x = torch.zeros(n, d_model, device=device, dtype=dtype)  # the state being routed [n, D]
        self.h1 = torch.zeros_like(self.x)  # token-choice: the state entering recursion 1
        self.gate = torch.zeros(n, device=device)
        self.rec = [0] * n  # recursions run so far for the current token
        self.last = [0] * n  # token-choice: the chosen last recursion (0-based)
        self.position = [0] * n
        self.token = [0] * n
