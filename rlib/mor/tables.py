"""Chapter 03's tables from the run records of `rlib.mor.experiments` (paper 001: Table 3, Fig. 3, Tables 4/10/11,
Table 8, Table 12, Fig. 5c, Table 2's cost model, Table 9's up-training)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from rlib import data
from rlib.counting import executed_flops
from rlib.mor import analysis
from rlib.mor.budget_sweep import sweep_variants
from rlib.mor.config import SHORT, MoRConfig, unrolled_layers, variants
from rlib.mor.experiments import main_model, run_steps
from rlib.mor.flops import (
    PAPER_360M,
    PAPER_MAX_BATCH,
    RELEASED_360M_STEPS,
    cache_bytes,
    kv_memory_ratio,
    paper_flops_per_token,
    relative_max_batch,
    tokens_for_budget,
)
from rlib.mor.model import MoRDecoder
from rlib.mor.spec import MoRSpec
from rlib.vocab import CompactVocab

__all__ = ["budget_sweep_table", "budgets_table", "compute_optimal_table", "curves", "depth_table", "depth_text",
           "fewshot_table", "gate_table", "kv_bytes", "kv_bytes_table", "kv_geometry_tables", "kv_table",
           "load_imbalance_table", "load_trace_table", "main_table", "paper_budget_table", "router_output_tables",
           "router_separation_table", "router_table", "sharing_table", "smoothed_maxvio", "token_depth_table",
           "uptrain_table"]


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


def fewshot_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Table 3's accuracy column on the local tasks: one row per scored run (first seed of each main run) and task,
    its primary metric (`rlib.tasks.PRIMARY_METRIC`: length-normalised for the next line, as the paper normalises by
    byte length; plain for the cloze word, as for LAMBADA) with its binomial s.e., and an "average" row per run (the
    paper's average column; s.e. of the mean of independent tasks)."""
    from rlib.tasks import CHANCE as chance
    from rlib.tasks import PRIMARY_METRIC

    rows = []
    for r in results:
        scores = r["after"].get("fewshot")
        if not scores:
            continue
        spec = r["spec"] or {}
        base = {"label": r["label"], "budget": r["budget"], "routing": spec.get("routing", "vanilla"),
                "nr": spec.get("n_recursions", 0), "seed": r["seed"]}
        values, errors = [], []
        for task, score in scores.items():
            metric = PRIMARY_METRIC.get(task, "acc")
            value, error = score[metric], score[f"{metric}_stderr"]
            rows.append({**base, "task": task, "metric": metric, "n": score["n"], "value": value, "stderr": error,
                         "chance": chance.get(task, np.nan)})
            values.append(value)
            errors.append(error)
        rows.append({**base, "task": "average", "metric": "mean", "n": min(s["n"] for s in scores.values()),
                     "value": float(np.mean(values)), "stderr": float(np.sqrt(np.sum(np.square(errors))) / len(errors)),
                     "chance": np.nan})
    return pd.DataFrame(rows, columns=["label", "budget", "routing", "nr", "seed", "task", "metric", "n", "value",
                                       "stderr", "chance"])


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


def load_trace_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """App. F.3's "struggles to achieve balance during quite long initial stage" in numbers: MaxVio of each training
    step's tokens (`MoRLoss.load_trace`) for every token-choice run, with the step's share of the run's steps and the
    run's end-of-training MaxVio on the test windows (`val_maxvio`, Table 11's column). Runs cached before the trace
    existed have none."""
    rows = []
    for r in results:
        trace = r.get("load_trace") or {}
        if not trace.get("step"):
            continue
        spec = MoRSpec(**r["spec"])
        for step, tokens, maxvio in zip(trace["step"], trace["tokens"], trace["maxvio"]):
            rows.append({"label": r["label"], "name": r["name"], "row": r["tag"] or "final design",
                         "budget": r["budget"], "seed": r["seed"], "nr": spec.n_recursions, "balance": spec.balance,
                         "step": step, "progress": (step + 1) / r["steps"], "tokens": tokens, "maxvio": maxvio,
                         "val_maxvio": r["after"].get("routing", {}).get("maxvio", np.nan)})
    return pd.DataFrame(rows, columns=["label", "name", "row", "budget", "seed", "nr", "balance", "step", "progress",
                                       "tokens", "maxvio", "val_maxvio"])


PAPER_FINAL_MAXVIO = 0.266  # Table 11: the final design's end-of-training MaxVio
PAPER_RANDOM_MAXVIO = 0.007  # Table 11: a random router's


def uniform_maxvio(n_tokens: int, n_experts: int, draws: int = 4000, seed: int = 0) -> tuple[float, float]:
    """The MaxVio a router that sends each of `n_tokens` tokens to one of `n_experts` uniformly at random reads on
    them: (mean, 95th percentile) over `draws` seeded multinomial draws. The floor of the estimator at a token count
    (ours): Table 11's random router reads 0.007 on 500 x 2K validation tokens, where this floor is about 0.001; a
    few thousand tokens read about 0.02 by chance alone."""
    if n_tokens < 1 or n_experts < 2:
        raise ValueError(f"n_tokens={n_tokens}, n_experts={n_experts}: give >= 1 token and >= 2 experts")
    loads = np.random.default_rng(seed).multinomial(n_tokens, [1 / n_experts] * n_experts, size=draws)  # [draws, E]
    mean = n_tokens / n_experts
    vio = (loads.max(axis=1) - mean) / mean
    return float(vio.mean()), float(np.quantile(vio, 0.95))


def smoothed_maxvio(values: pd.Series) -> pd.Series:
    """A run's per-step MaxVio (in step order) as a centred rolling median over 5% of its steps."""
    return values.rolling(max(1, len(values) // 20), min_periods=1, center=True).median()


def load_imbalance_table(trace: pd.DataFrame) -> pd.DataFrame:
    """Per run of `load_trace.csv`: steps, tokens per step, the share of steps whose MaxVio is above the paper's
    final-design 0.266, the median MaxVio of the last 10% of steps, the end-of-training MaxVio on held-out windows,
    and the first step from which a rolling median over 5% of the steps stays at or below 0.266 (NaN if never)."""
    rows = []
    for _, run in trace.groupby("name", sort=False):
        run = run.sort_values("step")
        label, row, budget, seed = run.iloc[0][["label", "row", "budget", "seed"]]
        values = run["maxvio"].to_numpy()
        rolling = smoothed_maxvio(run["maxvio"].reset_index(drop=True)).to_numpy()
        above = np.flatnonzero(rolling > PAPER_FINAL_MAXVIO)
        if len(above) and above[-1] == len(values) - 1:
            settled = np.nan  # still above at the end
        else:
            settled = int(run["step"].iloc[above[-1] + 1 if len(above) else 0])
        rows.append({"label": label, "row": row, "budget": budget, "seed": seed, "steps": len(values),
                     "tokens_per_step": int(run["tokens"].median()),
                     "share_above": float((values > PAPER_FINAL_MAXVIO).mean()),
                     "late_maxvio": float(np.median(values[-max(1, len(values) // 10):])),
                     "end_maxvio": float(run["val_maxvio"].iloc[0]), "balanced_from_step": settled})
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


GATE_ROWS = {"": "gated (alpha 0.1)", "ec_alpha1": "gated (alpha 1.0)", "ec_replace": "no gate: x <- f(x)",
             "rec_gated": "gated (alpha 0.1) on every token"}


def gate_table(results: list[dict[str, Any]], n_recursions: int) -> pd.DataFrame:
    """The gate ablation (ours): per seed at the isoFLOP budget, the Recursive baseline (no gate), MoR-EC (gated)
    and every gate variant of the config (`rlib.mor.config.GATE_ABLATIONS`), Middle-Cycle with recursion-wise
    caching at the main Nr. `routed`: only the top-k tokens recurse; `gate`: how the recursion's output enters."""
    df = _flat(results)
    df = df[(df["budget"] == "flops") & (df["nr"] == n_recursions) & (df["kv"] == "cache")
            & (df["sharing"] == "middle_cycle") & df["tag"].isin(list(GATE_ROWS))]
    df = df[((df["routing"] == "none") & (df["tag"] == "")) | (df["routing"] == "expert")]
    rows = []
    for r in df.itertuples():
        recursive = r.routing == "none"
        rows.append({"model": "Recursive" if recursive or r.tag == "rec_gated" else "MoR-EC", "tag": r.tag,
                     "routed": not recursive and r.tag != "rec_gated",
                     "gate": "none (x <- f(x))" if recursive else GATE_ROWS[r.tag], "seed": r.seed,
                     "tokens_m": r.tokens_m, "train_flops_e12": r.train_flops_e12, "nll": r.nll,
                     "nll_causal": r.nll_causal})
    columns = ["model", "tag", "routed", "gate", "seed", "tokens_m", "train_flops_e12", "nll", "nll_causal"]
    return pd.DataFrame(rows, columns=columns).sort_values(["seed", "model", "tag"]).reset_index(drop=True)


def sharing_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Table 8: the Recursive model under each sharing strategy, and vanilla, at equal tokens."""
    df = _flat(results)
    df = df[(df["budget"] == "ablation") & (df["routing"].isin(["none", "vanilla"])) & (df["kv"] != "share")
            & (df["tag"] == "")]  # Table 13's relaxed rows have tags
    return df[["label", "sharing", "nr", "n_layers", "params_m", "nll"]].reset_index(drop=True)


def relaxation_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Table 13: the Recursive Middle-Cycle model at the ablation budget, plain and relaxed (Enc, LoRA on Q and V,
    adaptation prompt), with and without recursive KV sharing; `delta` = nll - the plain model's of the same KV mode."""
    rows = []
    for r in results:
        spec = r["spec"] or {}
        if (r["budget"] != "ablation" or spec.get("routing") != "none" or spec.get("sharing") != "middle_cycle"
                or (r["tag"] and spec.get("relax", "none") == "none")):
            continue
        relax = spec.get("relax", "none")
        rows.append({"relax": relax, "rank": spec.get("relax_rank") or None, "len": spec.get("relax_len") or None,
                     "kv": spec["kv"], "params_m": r["params"] / 1e6, "nll": r["after"]["nll"]})
    table = pd.DataFrame(rows, columns=["relax", "rank", "len", "kv", "params_m", "nll"])
    plain = table[table["relax"] == "none"].set_index("kv")["nll"]
    table["delta"] = table["nll"] - table["kv"].map(plain)
    relaxed = table["relax"] != "none"  # each KV mode's plain row first, then its relaxations
    return table.iloc[np.lexsort((relaxed, table["kv"]))].reset_index(drop=True)


def kv_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Table 12: recursion-wise caching vs recursive KV sharing, per model kind, at equal tokens."""
    df = _flat(results)
    df = df[(df["budget"] == "ablation") & (df["tag"] == "") & (df["sharing"] == "middle_cycle")]
    wide = df.pivot_table(index="routing", columns="kv", values="nll")
    if {"cache", "share"} <= set(wide.columns):
        wide["share - cache"] = wide["share"] - wide["cache"]
    return wide.reset_index()


def depth_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Fig. 5c: test NLL with the recursion depth capped, for every routed isoFLOP run; `gain` = nll(cap 1) - nll(cap)
    (the figure's cumulative log-likelihood improvement, per token), with paired standard errors of that gain and of
    the step from the cap before (`gain_se`, `step_se`)."""
    rows = []
    for r in results:
        if r["budget"] != "flops" or r["tag"] or "depth_scaling" not in r["after"]:
            continue
        nlls = r["after"]["depth_scaling"]
        se = r["after"].get("depth_scaling_se", {})  # runs recorded before the paired errors have none
        for cap, nll in enumerate(nlls, start=1):
            rows.append({"label": r["label"], "seed": r["seed"], "depth_cap": cap, "nll": nll,
                         "gain": nlls[0] - nll, "gain_se": (se.get("gain") or [np.nan] * len(nlls))[cap - 1],
                         "step_se": (se.get("step") or [np.nan] * len(nlls))[cap - 1]})
    return pd.DataFrame(rows)


@torch.no_grad()
def kv_bytes_table(models: dict[str, MoRDecoder], windows: torch.Tensor) -> pd.DataFrame:
    """Table 2's KV-memory ratios against the bytes a real cache holds after prefilling the test windows with
    top-k routing (recursion layers only; relative to the Recursive model, which caches every token per depth), and
    the FLOPs that same prefill executed (Sec. 4.3's footnote: sharing adds attention FLOPs, saves K/V projections),
    counted by torch beside App. C's count for the model's shape."""
    rows, reference = [], None
    tokens = windows.numel()
    for label, model in models.items():
        model.eval()
        cache = model.new_cache()
        _, flops = executed_flops(model, windows, cache=cache, mode="topk")
        depths = [d for rec in model.recursions for d in rec]
        measured = cache_bytes(cache, slots=sorted({model.decoder.plan.steps[d].slot for d in depths}))
        if model.spec.routing == "none" and model.spec.kv == "cache":
            reference = measured
        config = model.decoder.config
        app_c = paper_flops_per_token(config.d_model, config.d_ffn, windows.shape[1], model.n_layers, model.spec)
        rows.append({"model": label, "kv": model.spec.kv, "bytes": measured,
                     "predicted_ratio": kv_memory_ratio(model.spec),
                     "mflops_per_token": flops["total"] / tokens / 1e6,
                     "attention_mflops_per_token": flops["attention"] / tokens / 1e6,
                     "app_c_mflops_per_token": app_c / 1e6})
    df = pd.DataFrame(rows)
    df["measured_ratio"] = df["bytes"] / reference if reference else np.nan
    return df


def kv_bytes(cfg: MoRConfig, work: Path, windows: torch.Tensor) -> pd.DataFrame:
    models = {"Recursive (cache every token)": main_model(cfg, work, "rec"),
              "MoR-EC, recursion-wise caching": main_model(cfg, work, "ec"),
              "MoR-EC, recursive KV sharing": main_model(cfg, work, "ec-share")}
    return kv_bytes_table(models, windows)


def budgets_table(cfg: MoRConfig) -> pd.DataFrame:
    """Per run: unrolled depth, forward FLOPs per token, optimizer steps and tokens under its budget."""
    rows = []
    for v in variants(cfg):
        if v.seed != cfg.seeds[0]:
            continue
        steps, per_token = run_steps(v, cfg)
        rows.append({"run": v.name, "model": v.label, "budget": v.budget,
                     "unrolled_layers": unrolled_layers(v.spec, cfg.n_layers), "mflops_per_token": per_token / 1e6,
                     "steps": steps, "tokens_m": steps * cfg.tokens_per_step() / 1e6})
    return pd.DataFrame(rows)


def _layers(result: dict[str, Any]) -> str:
    """The paper's N_L column: "30", "15" or "1+14+1"."""
    run, blocks = result["run"], result["n_blocks"]
    return f"1+{blocks - 2}+1" if run["kind"] != "full" and run["sharing"].startswith("middle") else str(blocks)


def uptrain_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Table 9's layout: one row per run, NLL before and after up-training (held-out test split).

    A reduced run's sharing shows only where it changes the weights (Avg averages the layers each block would
    serve); for the single-layer inits Cycle and Sequence pick the same layers, so it reads "–" as in the paper.
    """
    rows = []
    for res in results:
        run = res["run"]
        full, reduced = run["kind"] == "full", run["kind"] == "reduced"
        rows.append({
            "run": res["name"], "non_emb_M": res["params"]["non_embedding"] / 1e6, "N_L": _layers(res),
            "share": "–" if full or (reduced and run["init"] != "average") else SHORT[run["sharing"]],
            "init": "–" if full else SHORT[run["init"]], "loop": res["loops"],
            "nll_before": res["before"]["nll"], "nll": res["after"]["nll"], "nll_se": res["after"]["nll_se"],
            "train_loss": res["train"]["final_loss"], "tokens": res["train"]["tokens"],
            "minutes": res["train"]["seconds"] / 60, "trained_by": res.get("trained_by", "this chapter")})
    return pd.DataFrame(rows)


def budget_sweep_table(main_results: list[dict[str, Any]], sweep_results: list[dict[str, Any]],
                 cfg: MoRConfig) -> pd.DataFrame:
    """Test NLL per model and isoFLOP budget: the sweep's runs plus the main grid's runs of the same seed."""
    names = {v.name for v in sweep_variants(cfg)}
    rows = [{"label": r["label"], "budget_flops": cfg.budget, "nll": r["after"]["nll"], "tokens_m": r["tokens"] / 1e6,
             "params_m": r["params"] / 1e6} for r in main_results if r["name"] in names]
    rows += [{"label": r["label"], "budget_flops": r["budget_flops"], "nll": r["after"]["nll"],
              "tokens_m": r["tokens"] / 1e6, "params_m": r["params"] / 1e6} for r in sweep_results]
    return pd.DataFrame(rows).sort_values(["label", "budget_flops"]).reset_index(drop=True)


def compute_optimal_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Fig. 5a / Table 7's grid (`rlib.mor.compute_optimal.run_grid`): test NLL per model, width and budget, with the
    run's own non-embedding parameters, the vanilla model's at the same width (`base_params_m`, Table 7's "Base"),
    the tokens it trained on and the tokens per base parameter."""
    from rlib.tasks import PRIMARY_METRIC

    base = {r["width"]: r["params"] / 1e6 for r in results if r["spec"] is None}
    missing = sorted({r["width"] for r in results} - set(base))
    if missing:
        raise ValueError(f"widths {missing} have no Vanilla run: the base size of a width is its vanilla model's")
    rows = []
    for r in results:
        scores = r["after"].get("fewshot") or {}
        accuracy = [score[PRIMARY_METRIC.get(task, "acc")] for task, score in scores.items()]
        rows.append({"label": r["label"], "width": r["width"], "budget_flops": r["budget_flops"],
                     "params_m": r["params"] / 1e6, "base_params_m": base[r["width"]], "tokens_m": r["tokens"] / 1e6,
                     "tokens_per_param": r["tokens"] / (base[r["width"]] * 1e6), "nll": r["after"]["nll"],
                     "fewshot_avg": float(np.mean(accuracy)) if accuracy else np.nan})
    return pd.DataFrame(rows).sort_values(["label", "budget_flops", "width"]).reset_index(drop=True)


def router_output_tables(cfg: MoRConfig, work: Path, windows: torch.Tensor) -> dict[str, pd.DataFrame]:
    """Fig. 5b / 9's panels that the profile trained: EC with the aux loss (and the aux router), TC with the balancing
    loss (and loss-free)."""
    out = {}
    panels = (("EC, aux loss", "ec", ""), ("EC, aux router", "ec", "ec_aux_router"),
              ("TC, balancing loss", "tc", ""), ("TC, loss-free", "tc", "tc_loss_free"))
    for title, kind, tag in panels:
        if tag and tag not in cfg.router_ablations:
            continue
        model = main_model(cfg, work, kind, "ablation", tag)
        out[title] = analysis.router_outputs(model, windows, cfg.micro_batch_size)
    return out


def router_separation_table(outputs: dict[str, pd.DataFrame], decision: float = 0.5) -> pd.DataFrame:
    """Fig. 5b's separation in numbers: per panel and recursion step with both kept and unkept candidates, how many of
    each, the median router output of each, the share of each within 0.1 of its end of the scale (kept >= 0.9, not
    kept <= 0.1) and the share of candidates on the wrong side of the inference decision at `decision` (a kept token
    below it or an unkept one at or above it)."""
    rows = []
    for panel, df in outputs.items():
        for step, group in df.groupby("step"):
            kept = group.loc[group["selected"].astype(bool), "output"].to_numpy(dtype=float)
            dropped = group.loc[~group["selected"].astype(bool), "output"].to_numpy(dtype=float)
            if len(kept) == 0 or len(dropped) == 0:  # a step every candidate passes (or none): nothing to separate
                continue
            wrong = int((kept < decision).sum() + (dropped >= decision).sum())
            rows.append({"panel": panel, "step": int(step), "n_selected": len(kept), "n_unselected": len(dropped),
                         "selected_median": float(np.median(kept)), "unselected_median": float(np.median(dropped)),
                         "selected_near_1": float((kept >= 0.9).mean()),
                         "unselected_near_0": float((dropped <= 0.1).mean()),
                         "misplaced": wrong / (len(kept) + len(dropped))})
    return pd.DataFrame(rows, columns=["panel", "step", "n_selected", "n_unselected", "selected_median",
                                       "unselected_median", "selected_near_1", "unselected_near_0", "misplaced"])


def depth_text(cfg: MoRConfig, model, vocab: CompactVocab | None, windows: torch.Tensor,
               n_tokens: int = 80) -> tuple[list[list[str]], list[list[int]]]:
    """Token strings and their causal-routing depths for the first `n_tokens` of each window (Table 14)."""
    tokenizer = data.load_tokenizer(cfg.tokenizer)
    x = windows[:, :n_tokens]
    depths = analysis.token_depths(model, x, mode="causal")
    source = vocab.decode(x) if vocab is not None else x
    texts = [[tokenizer.decode([i]) if i >= 0 else "⟨unk⟩" for i in row.tolist()] for row in source]
    return texts, depths.tolist()


def token_depth_table(texts: list[list[str]], depths: list[list[int]]) -> pd.DataFrame:
    """Table 14 in numbers: one row per token of `depth_text`'s windows, with the recursions it ran."""
    return pd.DataFrame([{"window": w, "position": t, "token": token, "depth": int(depth)}
                         for w, (tokens, row) in enumerate(zip(texts, depths))
                         for t, (token, depth) in enumerate(zip(tokens, row))])


def kv_geometry_tables(geometry: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Figs. 7 and 8 in numbers, from `analysis.kv_geometry`: "kv_norms" (per unrolled depth and its block: mean
    norm of hidden state, key, value) and "kv_similarity" (per kind and depth pair, with both depths' blocks: mean
    cosine similarity)."""
    norms = geometry["norms"]
    block = norms["block"].to_numpy()
    rows = [{"kind": kind, "depth_a": a, "depth_b": b, "block_a": int(block[a]), "block_b": int(block[b]),
             "cosine": float(sim.iat[a, b])}
            for kind in ("hidden", "key", "value") for sim in [geometry[f"similarity_{kind}"]]
            for a in range(len(sim)) for b in range(len(sim))]
    return {"kv_norms": norms.copy(), "kv_similarity": pd.DataFrame(rows)}


def paper_budget_table() -> pd.DataFrame:
    """App. C / D's accounting at the paper's 360M shapes: isoFLOP optimizer steps by `rlib.mor.flops` beside the
    released configs' steps, and the relative maximum batch beside the paper's 42 / 48 / 51."""
    shape = {k: PAPER_360M[k] for k in ("d_model", "d_ffn", "seq_len")}
    rows = []
    for label, n_layers, spec, released in RELEASED_360M_STEPS:
        per_token = paper_flops_per_token(n_layers=n_layers, spec=spec, **shape)
        cached_ec = spec is not None and spec.routing == "expert" and spec.kv == "cache"
        rows.append({"model": label, "n_layers": n_layers, "mflops_per_token": per_token / 1e6,
                     "released_steps": released,
                     "formula_steps": tokens_for_budget(PAPER_360M["budget"], per_token, PAPER_360M["step_tokens"]),
                     "paper_max_batch": PAPER_MAX_BATCH.get(spec.n_recursions, np.nan) if cached_ec else np.nan,
                     "formula_max_batch": relative_max_batch(spec) if cached_ec else np.nan})
    return pd.DataFrame(rows)
