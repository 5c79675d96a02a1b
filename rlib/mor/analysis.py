"""Measurements on trained MoR models (paper 001): router metrics (Table 10's sampling accuracy and dead-token
ratio, Table 11's MaxVio and entropy), router output distributions (Fig. 5b, Fig. 9), test-time depth scaling
(Fig. 5c), per-token depth (Table 14), decode-time agreement with the training top-k, and key/value norms and
similarities across depths (Figs. 7, 8)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from rlib import eval as rl_eval
from rlib.mor import routers as R
from rlib.mor.model import MoRDecoder, next_token_nll

__all__ = ["decode_agreement", "depth_scaling", "kv_geometry", "router_outputs", "routing_metrics", "token_depths"]


def _batches(windows: torch.Tensor, batch_size: int):
    for start in range(0, len(windows), batch_size):
        yield windows[start:start + batch_size]


@torch.no_grad()
def routing_metrics(model: MoRDecoder, windows: torch.Tensor, batch_size: int = 8) -> dict[str, float]:
    """Expert-choice: sampling accuracy per step (causal decision == top-k among the candidates) and the dead-token
    ratio (positions never kept at the last step in any sequence). Token-choice: MaxVio, entropy, depth shares."""
    model.eval()
    spec = model.spec
    if spec.routing == "token":
        depths, probs = [], []
        for batch in _batches(windows, batch_size):
            model(batch)
            depths.append(model.last_routing.depth - 1)
            probs.append(model.last_routing.probs)
        return R.load_metrics(torch.cat(depths), torch.cat(probs), spec.n_recursions)
    if spec.routing != "expert":
        return {}
    agree = [0.0] * spec.n_recursions
    count = [0.0] * spec.n_recursions
    ever_kept_last = None
    for batch in _batches(windows, batch_size):
        model(batch, mode="topk")
        rt = model.last_routing
        for r in range(spec.n_recursions):
            cand = rt.candidates[r]
            agree[r] += float(((rt.causal[r] == rt.topk[r]) & cand).sum())
            count[r] += float(cand.sum())
        last = rt.kept[-1].any(0)  # [T]
        ever_kept_last = last if ever_kept_last is None else ever_kept_last | last
    out = {f"sampling_acc_step{r + 1}": agree[r] / max(count[r], 1) for r in range(spec.n_recursions)}
    routed = [r for r in range(spec.n_recursions) if spec.capacity(r) < 1]
    out["sampling_acc"] = sum(agree[r] for r in routed) / max(sum(count[r] for r in routed), 1)
    out["dead_ratio"] = 1.0 - float(ever_kept_last.float().mean())
    return out


@torch.no_grad()
def router_outputs(model: MoRDecoder, windows: torch.Tensor, batch_size: int = 8) -> pd.DataFrame:
    """One row per (step, token): the router's output and whether the training top-k kept the token (Fig. 5b, 9).
    Expert-choice: G(logit) of the router, or sigmoid of the auxiliary router's logit when that decides at
    inference; token-choice: p of each depth, "selected" where the token chose that depth."""
    model.eval()
    rows = []
    for batch in _batches(windows, batch_size):
        model(batch, mode="topk")
        rt = model.last_routing
        if model.spec.routing == "expert":
            for r in range(model.spec.n_recursions):
                cand = rt.candidates[r]
                decider = torch.sigmoid(rt.logits[r]) if model.spec.aux == "router" else rt.gates[r] / model.spec.alpha
                out = decider[cand].float().cpu().numpy()
                rows.append(pd.DataFrame({"step": r + 1, "output": out, "selected": rt.topk[r][cand].cpu().numpy()}))
        elif model.spec.routing == "token":
            probs = rt.probs / model.spec.alpha
            for r in range(model.spec.n_recursions):
                rows.append(pd.DataFrame({"step": r + 1, "output": probs[..., r].flatten().cpu().numpy(),
                                          "selected": (rt.depth - 1 == r).flatten().cpu().numpy()}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["step", "output", "selected"])


@torch.no_grad()
def depth_scaling(model: MoRDecoder, windows: torch.Tensor, batch_size: int = 8, mode: str = "topk") -> pd.DataFrame:
    """Held-out NLL with the recursion depth capped at 1..Nr (Fig. 5c), with the standard errors the paper's bars
    need: `step_se` of the change from cap d - 1 to d and `gain_se` of the cumulative gain nll(1) - nll(d), both
    paired over the same windows (a window's NLL varies far more across windows than across caps)."""
    model.eval()
    rows, first, previous = [], None, None
    for cap in range(1, len(model.recursions) + 1):
        capped = lambda ids, cap=cap: model(ids, mode=mode, depth_cap=cap)  # noqa: E731
        scored = rl_eval.perplexity(capped, windows, batch_size, progress=False, per_window=True)
        window = torch.tensor(scored["per_window"], dtype=torch.float64)  # [N]
        first = window if first is None else first
        rows.append({"depth_cap": cap, "nll": scored["nll"], "step_se": _paired_se(previous, window),
                     "gain_se": _paired_se(first, window) if cap > 1 else float("nan")})
        previous = window
    return pd.DataFrame(rows)


def _paired_se(before: torch.Tensor | None, after: torch.Tensor) -> float:
    """Standard error of the mean per-window difference (nan without a pair or with one window)."""
    if before is None or len(after) < 2:
        return float("nan")
    return float((before - after).std() / len(after) ** 0.5)


@torch.no_grad()
def token_depths(model: MoRDecoder, input_ids: torch.Tensor, mode: str = "causal") -> torch.Tensor:
    """Recursions each token ran [B, T] (Table 14 colours text by it)."""
    model.eval()
    model(input_ids, mode=mode)
    return model.last_routing.depth


@torch.no_grad()
def decode_agreement(model: MoRDecoder, windows: torch.Tensor, prompt_len: int = 1) -> dict[str, float]:
    """Decode each window token by token with the KV cache (causal routing) and compare every token's depth with
    the depth the training-time top-k gives it on the whole window: the share of equal depths, and of equal
    decisions per step. Also the NLL of both (teacher-forced), so the cost of causal routing is visible."""
    model.eval()
    same_depth = total = 0
    nll_topk, nll_causal = [], []
    for window in windows:
        x = window[None]
        logits_topk = model(x, mode="topk")
        depth_topk = model.last_routing.depth
        cache = model.new_cache()
        pieces = [model(x[:, :prompt_len], cache=cache, mode="causal")]
        depths = [model.last_routing.depth]
        for t in range(prompt_len, x.shape[1]):
            pieces.append(model(x[:, t:t + 1], cache=cache, mode="causal"))
            depths.append(model.last_routing.depth)
        depth_causal = torch.cat(depths, dim=1)
        same_depth += int((depth_causal == depth_topk).sum())
        total += depth_topk.numel()
        nll_topk.append(next_token_nll(logits_topk, x))
        nll_causal.append(next_token_nll(torch.cat(pieces, dim=1), x))
    return {"depth_agreement": same_depth / max(total, 1), "nll_topk": float(torch.cat(nll_topk).mean()),
            "nll_causal_decode": float(torch.cat(nll_causal).mean())}


@torch.no_grad()
def kv_geometry(model: MoRDecoder, input_ids: torch.Tensor) -> dict[str, pd.DataFrame]:
    """Per unrolled depth: mean L2 norm of the hidden state after the step, the keys and the values; and the
    depth x depth cosine similarity of each (mean over tokens) — Figs. 7 and 8, for a model whose every token runs
    every depth (the Recursive baseline, or MoR with capacity 1)."""
    model.eval()
    dec = model.decoder
    cache = dec.new_cache()
    batch, tokens = input_ids.shape
    positions = torch.arange(tokens, device=input_ids.device).expand(batch, tokens)
    ctx = dec.context(positions, dec.embed.weight.dtype, cache, plain_causal=True)
    x = dec.embed_tokens(input_ids)
    hidden, keys, values = [], [], []
    for depth, step in enumerate(dec.plan.steps):
        x = dec.run_step(depth, x, ctx)
        hidden.append(x.float().reshape(-1, x.shape[-1]))
        k, v, pos = cache.read(step.slot)
        k = k.transpose(1, 2).reshape(batch, -1, k.shape[1] * k.shape[3])[:, -tokens:]  # [B, T, H_kv * D]
        v = v.transpose(1, 2).reshape(batch, -1, v.shape[1] * v.shape[3])[:, -tokens:]
        keys.append(k.float().reshape(-1, k.shape[-1]))
        values.append(v.float().reshape(-1, v.shape[-1]))
    final = dec.final_norm(x).float().reshape(-1, x.shape[-1])
    norms = pd.DataFrame({"depth": np.arange(len(hidden)), "block": [s.block for s in dec.plan.steps],
                          "hidden": [float(h.norm(dim=-1).mean()) for h in hidden],
                          "key": [float(k.norm(dim=-1).mean()) for k in keys],
                          "value": [float(v.norm(dim=-1).mean()) for v in values]})
    out = {"norms": norms, "final_hidden_norm": pd.DataFrame({"norm": [float(final.norm(dim=-1).mean())]})}
    for name, states in (("hidden", hidden), ("key", keys), ("value", values)):
        unit = [F.normalize(s, dim=-1) for s in states]
        sim = np.array([[float((a * b).sum(-1).mean()) for b in unit] for a in unit])
        out[f"similarity_{name}"] = pd.DataFrame(sim)
    return out


