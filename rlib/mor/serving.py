"""Continuous depth-wise batching for Mixture-of-Recursions (paper 001, Sec. 2.1 and 3.3, App. D; Fig. 4a).

The official code trains only; the paper measured throughput with an engine it did not release. `MoRProgram` is the
MoR side of the book's one serving engine (`rlib.serving.engine`). A slot's current token is at one of three stages:

    pre   embedding and the unique first layer(s), then the router decides whether it enters recursion 1
    rec   recursion r of the shared block; after the pass the router of r + 1 decides: continue or leave
    post  the unique last layer(s), the LM head, the next token (back to "pre", or the request is done)

Every engine iteration runs one *recursion pass* over all slots at stage "rec", whatever their recursion (the shared
weights are the same; each row reads and writes the keys of its own depth), then the "post" work of the slots that
left. Keys and values live in the engine's row stores with a position store (-1 = empty), so recursion-wise caching
keeps only the tokens that reached a depth and recursive KV sharing reads recursion 1's keys. The decoder's own blocks
run on the rows (`rlib.serving.rows`), so no attention code is duplicated.

Expert-choice decides with the causal rule (router sigmoid >= 0.5; capacity-1 steps keep everyone), as
`MoRDecoder(..., mode="causal")` does; the engine's tokens equal that model's cached greedy decoding
(`tests/test_mor_serving.py`).

    engine = ServingEngine(MoRProgram(model), max_batch=8, max_len=256)
"""

from __future__ import annotations

import torch

from rlib.config import ConfigError
from rlib.mor import routers as R
from rlib.mor.model import MoRDecoder
from rlib.serving.rows import DepthRows

__all__ = ["MoRProgram", "greedy_generate"]

PRE, REC, POST, IDLE = 0, 1, 2, 3


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


class MoRProgram:
    """The `DepthProgram` of a MoRDecoder (expert-choice, token-choice or the Recursive model)."""

    def __init__(self, model: MoRDecoder):
        if not model.recursions:
            raise ConfigError("the engine needs a model with recursions (cycle or middle-cycle sharing)")
        self.model = model.eval()
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.n_loops = len(model.recursions)
        self.kv_entries = 0  # cache entries written (the engine's KV memory in use at the end of a run)

    def allocate(self, max_batch: int, max_len: int) -> None:
        self.rows = DepthRows(self.model.decoder, max_batch, max_len)
        self.state = _Slots(max_batch, self.model.config.d_model, self.device, self.dtype)

    def release(self, slot: int) -> None:
        self.state.stage[slot] = IDLE
        self.kv_entries = self.rows.stores.entries()

    # ---- running depth lists on rows -------------------------------------------------------------------------

    def _tensor(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, device=self.device)

    def _run(self, x: torch.Tensor, slots: list[int], depth_lists: list[list[int]]) -> torch.Tensor:
        """Rows each run their own list of depths (equal lengths, the same blocks in order): x [b, D]."""
        rows, positions = self._tensor(slots), self._tensor([self.state.position[s] for s in slots])
        for j in range(len(depth_lists[0])):
            x = self.rows.run(x, rows, self._tensor([d[j] for d in depth_lists]), positions)
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

    # ---- the program -----------------------------------------------------------------------------------------

    def prefill(self, slot: int, prompt: list[int]) -> int:
        cache = self.model.new_cache()
        logits = self.model(torch.tensor([prompt], device=self.device), cache=cache, mode="causal", last_only=True)
        self.rows.stores.load(slot, cache)
        return int(logits[0, -1].float().argmax())

    def begin(self, slot: int, token: int, position: int) -> None:
        st = self.state
        st.position[slot], st.token[slot], st.stage[slot] = position, token, PRE

    def step(self, slots: list[int]) -> tuple[list[tuple[int, int, int]], int]:
        st = self.state
        self._pre([s for s in slots if st.stage[s] == PRE])
        busy = [s for s in slots if st.stage[s] == REC]
        if busy:
            self._recursion_pass(busy)
        return self._post([s for s in slots if st.stage[s] == POST]), len(busy)

    def _pre(self, slots: list[int]) -> None:
        """Embed the new tokens, run the first unique layer(s), decide entry into recursion 1."""
        if not slots:
            return
        model, spec, st = self.model, self.model.spec, self.state
        rows = self._tensor(slots)
        h = model.decoder.embed_tokens(self._tensor([[st.token[s]] for s in slots]))[:, 0]  # [b, D]
        if model.prefix:
            h = self._run(h, slots, [model.prefix] * len(slots))
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
        rows = self._tensor(slots)
        out = self._run(st.x[rows], slots, [model.recursions[st.rec[s]] for s in slots])
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

    def _post(self, slots: list[int]) -> list[tuple[int, int, int]]:
        """The last unique layer(s), the head, and the next token of every slot that left its recursions."""
        if not slots:
            return []
        model, st = self.model, self.state
        h = st.x[self._tensor(slots)]
        if model.suffix:
            h = self._run(h, slots, [model.suffix] * len(slots))
        for s in slots:
            st.stage[s] = IDLE  # until the engine begins its next token
        tokens = model.decoder.head(h).float().argmax(-1).tolist()
        return [(s, token, st.rec[s]) for s, token in zip(slots, tokens)]


class _Slots:
    """Per-slot decode state."""

    def __init__(self, n: int, d_model: int, device, dtype):
        self.stage = [IDLE] * n
        self.x = torch.zeros(n, d_model, device=device, dtype=dtype)  # the state being routed [n, D]
        self.h1 = torch.zeros_like(self.x)  # token-choice: the state entering recursion 1
        self.gate = torch.zeros(n, device=device)
        self.rec = [0] * n  # recursions run so far for the current token
        self.last = [0] * n  # token-choice: the chosen last recursion (0-based)
        self.position = [0] * n
        self.token = [0] * n
