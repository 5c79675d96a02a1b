"""Chapter 03's tables and claims from the run records of `rlib.mor.grid` (paper 001: Table 3, Fig. 3, Tables
4/10/11, Table 8, Table 12, Fig. 5c, Table 2's cost model)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch

from rlib.mor.flops import cache_bytes, kv_memory_ratio
from rlib.mor.model import MoRDecoder
from rlib.mor.spec import MoRSpec

__all__ = ["claims_table", "curves", "depth_table", "kv_bytes_table", "kv_table", "main_table", "router_table",
           "sharing_table"]


def _flat(results: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for r in results:
        spec = r["spec"] or {}
        routing = r["after"].get("routing", {})
        rows.append({"name": r["name"], "label": r["label"], "tag": r["tag"], "budget": r["budget"], "seed": r["seed"],
                     "routing": spec.get("routing", "vanilla"), "kv": spec.get("kv", ""),
                     "sharing": spec.get("sharing", ""), "nr": spec.get("n_recursions", 0), "n_layers": r["n_layers"],
                     "params_m": r["params"] / 1e6, "flops_per_token_m": r["flops_per_token"] / 1e6,
                     "train_flops_e12": r["train_flops"] / 1e12, "tokens_m": r["tokens"] / 1e6,
                     "nll": r["after"]["nll"], "nll_causal": r["after"].get("nll_causal", np.nan),
                     "tokens_per_s": r["tokens_per_s"], "seconds": r["seconds"], **routing})
    return pd.DataFrame(rows)


def _mean_std(df: pd.DataFrame, by: list[str], cols: list[str]) -> pd.DataFrame:
    agg = {c: "mean" for c in cols}
    out = df.groupby(by, sort=False).agg({**agg, "nll": ["mean", "std", "count"]})
    out.columns = [c if isinstance(c, str) else (c[0] if c[1] == "mean" and c[0] != "nll" else "_".join(c))
                   for c in out.columns]
    return out.reset_index().rename(columns={"nll_mean": "nll", "nll_std": "nll_std", "nll_count": "seeds"})


def main_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Table 3: every untagged run at the isoFLOP budget and at vanilla's tokens (mean and std over seeds)."""
    df = _flat(results)
    df = df[df["budget"].isin(["flops", "tokens"]) & (df["tag"] == "")]
    cols = ["params_m", "flops_per_token_m", "train_flops_e12", "tokens_m", "nll_causal", "tokens_per_s"]
    return _mean_std(df, ["label", "budget", "routing", "kv", "sharing", "nr"], cols)


def curves(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Fig. 3's data: validation loss against training FLOPs spent, for every isoFLOP run."""
    rows = []
    for r in results:
        if r["budget"] != "flops" or r["tag"]:
            continue
        for tokens, loss in zip(r["curve"]["tokens"], r["curve"]["val_loss"]):
            rows.append({"label": r["label"], "seed": r["seed"], "tokens": tokens,
                         "train_flops": tokens * r["flops_per_token"], "val_loss": loss})
    return pd.DataFrame(rows)


def router_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Tables 4/10/11: router variants at the ablation budget (the untagged rows are the final designs)."""
    df = _flat(results)
    df = df[(df["budget"] == "ablation") & df["routing"].isin(["expert", "token"]) & (df["kv"] == "cache")]
    rows = []
    for r in results:
        if r["name"] not in set(df["name"]):
            continue
        s = MoRSpec(**r["spec"])
        m = r["after"].get("routing", {})
        rows.append({"routing": s.routing, "row": r["tag"] or "final design",
                     "method": (s.aux if s.routing == "expert" else s.balance), "func": s.router_func,
                     "alpha": s.alpha, "arch": s.router_arch, "z_coef": s.z_coef,
                     "dead_ratio": m.get("dead_ratio", np.nan), "sampling_acc": m.get("sampling_acc", np.nan),
                     "maxvio": m.get("maxvio", np.nan), "entropy": m.get("entropy", np.nan),
                     "nll": r["after"]["nll"], "nll_causal": r["after"].get("nll_causal", np.nan)})
    return pd.DataFrame(rows)


def sharing_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Table 8: the Recursive model under each sharing strategy, and vanilla, at equal tokens."""
    df = _flat(results)
    df = df[(df["budget"] == "ablation") & (df["routing"].isin(["none", "vanilla"])) & (df["kv"] != "share")]
    return df[["label", "sharing", "nr", "n_layers", "params_m", "nll"]].reset_index(drop=True)


def kv_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Table 12: recursion-wise caching vs recursive KV sharing, per model kind, at equal tokens."""
    df = _flat(results)
    df = df[(df["budget"] == "ablation") & (df["tag"] == "") & (df["sharing"] == "middle_cycle")]
    wide = df.pivot_table(index="routing", columns="kv", values="nll")
    if {"cache", "share"} <= set(wide.columns):
        wide["share - cache"] = wide["share"] - wide["cache"]
    return wide.reset_index()


def depth_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Fig. 5c: test NLL with the recursion depth capped, for every routed isoFLOP run."""
    rows = []
    for r in results:
        if r["budget"] != "flops" or r["tag"] or "depth_scaling" not in r["after"]:
            continue
        for cap, nll in enumerate(r["after"]["depth_scaling"], start=1):
            rows.append({"label": r["label"], "seed": r["seed"], "depth_cap": cap, "nll": nll})
    return pd.DataFrame(rows)


@torch.no_grad()
def kv_bytes_table(models: dict[str, MoRDecoder], windows: torch.Tensor) -> pd.DataFrame:
    """Table 2's KV-memory ratios against the bytes a real cache holds after prefilling the test windows with
    top-k routing (recursion layers only; relative to the Recursive model, which caches every token per depth)."""
    rows, reference = [], None
    for label, model in models.items():
        model.eval()
        cache = model.new_cache()
        model(windows, cache=cache, mode="topk")
        depths = [d for rec in model.recursions for d in rec]
        measured = cache_bytes(cache, slots=sorted({model.decoder.plan.steps[d].slot for d in depths}))
        if model.spec.routing == "none" and model.spec.kv == "cache":
            reference = measured
        rows.append({"model": label, "kv": model.spec.kv, "bytes": measured,
                     "predicted_ratio": kv_memory_ratio(model.spec)})
    df = pd.DataFrame(rows)
    df["measured_ratio"] = df["bytes"] / reference if reference else np.nan
    return df


def claims_table(results: list[dict[str, Any]], cfg, agreement: dict[str, float] | None,
                 kv_bytes: pd.DataFrame | None,
                 uptrain_claims: list[tuple[str, bool | None, str]] = (),
                 budgets: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every claim of the issue, judged from the runs; `uptrain_claims` come from `rlib.mor.uptrain.claims`."""
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": claim, "held": {True: "held", False: "not held", None: "not measured"}[held],
                     "evidence": evidence})

    df = _flat(results)
    iso = df[(df["budget"] == "flops") & (df["tag"] == "") & (df["nr"].isin([0, cfg.n_recursions]))]

    def by_seed(routing: str, kv: str = "cache") -> pd.Series:
        sel = iso[(iso["routing"] == routing) & ((iso["kv"] == kv) | (routing == "vanilla"))]
        return sel.set_index("seed")["nll"]

    def fmt(s: pd.Series) -> str:
        return f"{s.mean():.4f}" + (f" ± {s.std(ddof=1):.4f}" if len(s) > 1 else "") + f" (seeds {list(s.index)})"

    ec, tc, rec = by_seed("expert"), by_seed("token"), by_seed("none")
    paired = ec.index.intersection(rec.index)
    add("MoR (expert-choice) beats the fixed-depth Recursive model at equal training FLOPs",
        bool(len(paired)) and bool((ec[paired] < rec[paired]).all()),
        f"test NLL: MoR-EC {fmt(ec)} vs Recursive {fmt(rec)}; lower in every paired seed")
    paired = ec.index.intersection(tc.index)
    add("Expert-choice beats token-choice at equal FLOPs",
        bool(len(paired)) and bool((ec[paired] < tc[paired]).all()), f"test NLL: EC {fmt(ec)} vs TC {fmt(tc)}")

    share = df[(df["budget"] == "ablation") & (df["routing"] == "none") & (df["kv"] == "cache")]
    if len(share) > 1:
        nll = share.set_index("sharing")["nll"]
        spread = rec.std(ddof=1) if len(rec) > 1 else 0.0
        tol = max(float(spread), 0.01)
        best = nll.min()
        held = "middle_cycle" in nll.index and nll["middle_cycle"] <= best + tol
        add("Middle-Cycle is the best or tied-best sharing strategy (tied: within the Recursive model's seed spread,"
            " at least 0.01 nats)", bool(held),
            "; ".join(f"{k}: {v:.4f}" for k, v in nll.sort_values().items()) + f"; tolerance {tol:.4f}")
    else:
        add("Middle-Cycle is the best or tied-best sharing strategy", None, "fewer than two sharing runs")

    depth = depth_table(results)
    main = depth[depth["label"] == MoRSpec.expert(cfg.n_recursions).label()]
    if len(main):
        falls = all(np.all(np.diff(g.sort_values("depth_cap")["nll"].to_numpy()) < 0) for _, g in main.groupby("seed"))
        add("Validation loss falls as the test-time recursion cap rises (MoR-EC)", falls,
            "; ".join(f"seed {s}: " + " > ".join(f"{v:.3f}" for v in g.sort_values("depth_cap")["nll"])
                      for s, g in main.groupby("seed")))
    if agreement is not None:
        add("The expert-choice router with the auxiliary loss agrees with top-k selection on >= 95% of tokens at "
            "decode", agreement["depth_agreement"] >= 0.95,
            f"same recursion depth token by token (cached causal decode vs top-k on the whole window): "
            f"{agreement['depth_agreement']:.1%}; NLL top-k {agreement['nll_topk']:.4f}, causal decode "
            f"{agreement['nll_causal_decode']:.4f}")
    if kv_bytes is not None and len(kv_bytes):
        routed = kv_bytes[kv_bytes["model"] != kv_bytes["model"].iloc[0]]
        err = (routed["measured_ratio"] - routed["predicted_ratio"]).abs()
        tol = 1.5 * cfg.n_recursions / cfg.seq_len  # int(c_r T) rounds down by < 1 token per recursion
        add("Measured KV-cache bytes match Table 2's ratios ((Nr+1)/2Nr for recursion-wise caching, 1/Nr for "
            "sharing)", bool((err <= tol).all()),
            "; ".join(f"{r.model}: measured {r.measured_ratio:.4f} vs {r.predicted_ratio:.4f}"
                      for r in routed.itertuples()))
    if budgets is not None and len(budgets):
        wide = budgets.pivot_table(index="budget_flops", columns="label", values="nll")
        mor, rec = MoRSpec.expert(cfg.n_recursions).label(), MoRSpec.recursive(cfg.n_recursions).label()
        if mor in wide and rec in wide:
            add("MoR beats the Recursive model at every isoFLOP budget (Fig. 3; first seed)",
                bool((wide[mor] < wide[rec]).all()),
                "; ".join(f"{b:.2g} FLOPs: MoR {r[mor]:.4f} vs Recursive {r[rec]:.4f}" for b, r in wide.iterrows()))
    for claim in uptrain_claims:
        add(*claim)
    return pd.DataFrame(rows)
