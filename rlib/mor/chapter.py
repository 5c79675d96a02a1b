"""Chapter 03's analyses of the trained models (paper 001, Figs. 5b/c, 7, 8, 9, Table 14, Table 2): which runs
they read, and the text rendering of per-token depth. The notebook only calls these."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from rlib import data
from rlib.cdb import DepthBatchEngine, Request
from rlib.mor import analysis
from rlib.mor.engine import MoREngine
from rlib.mor.flops import relative_max_batch
from rlib.mor.grid import ROUTER_ABLATIONS, MoRConfig, MoRVariant, heldout, load_model
from rlib.mor.spec import MoRSpec
from rlib.mor.tables import kv_bytes_table
from rlib.vocab import CompactVocab

__all__ = ["MAIN", "depth_text", "kv_bytes", "main_model", "router_output_tables", "throughput_table"]

MAIN = {
    "ec": lambda nr: MoRSpec.expert(nr),
    "tc": lambda nr: MoRSpec.token(nr),
    "rec": lambda nr: MoRSpec.recursive(nr),
    "ec-share": lambda nr: MoRSpec.expert(nr, kv="share"),
}


def main_model(cfg: MoRConfig, work: Path, kind: str, budget: str = "flops", tag: str = ""):
    """A trained model of the grid: kind in MAIN (the main Nr), at `budget`, first seed."""
    spec = MAIN[kind](cfg.n_recursions)
    if tag:
        spec = spec.replace(**ROUTER_ABLATIONS[tag][1])
    return load_model(work, MoRVariant(spec, budget, cfg.seeds[0], tag=tag).name)


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


def depth_text(cfg: MoRConfig, model, vocab: CompactVocab | None, windows: torch.Tensor,
               n_tokens: int = 80) -> tuple[list[list[str]], list[list[int]]]:
    """Token strings and their causal-routing depths for the first `n_tokens` of each window (Table 14)."""
    tokenizer = data.load_tokenizer(cfg.tokenizer)
    x = windows[:, :n_tokens]
    depths = analysis.token_depths(model, x, mode="causal")
    source = vocab.decode(x) if vocab is not None else x
    texts = [[tokenizer.decode([i]) if i >= 0 else "⟨unk⟩" for i in row.tolist()] for row in source]
    return texts, depths.tolist()


def kv_bytes(cfg: MoRConfig, work: Path, windows: torch.Tensor) -> pd.DataFrame:
    models = {"Recursive (cache every token)": main_model(cfg, work, "rec"),
              "MoR-EC, recursion-wise caching": main_model(cfg, work, "ec"),
              "MoR-EC, recursive KV sharing": main_model(cfg, work, "ec-share")}
    return kv_bytes_table(models, windows)


def throughput_table(cfg: MoRConfig, work: Path, vocab: CompactVocab | None, results: list[dict],
                     repeats: int = 3) -> pd.DataFrame:
    """Fig. 4a's measurement: decode tokens/s of vanilla (continuous sequence-wise batching, `rlib.cdb`) and the
    MoR / Recursive models (continuous depth-wise batching, `rlib.mor.engine`) on held-out prompts, at a fixed
    batch B and at the paper's "relative maximum batch" B / KV-memory ratio (Table 2). Median of `repeats` runs.

    Derived from the preset: 4 x `decode_windows` requests, prompts and generations of seq_len / 8 tokens each,
    B = batch_size / 2."""
    n_req, length, batch = 4 * cfg.decode_windows, max(2, cfg.seq_len // 8), max(1, cfg.batch_size // 2)
    prompts = heldout(cfg, vocab, "test", n_req, seed=3)[:, :length]
    requests = [Request(i, prompts[i].tolist(), length) for i in range(n_req)]
    nll = {r["name"]: r["after"]["nll"] for r in results}
    rows = []
    specs = {"Vanilla": None, "Recursive": MAIN["rec"](cfg.n_recursions), "MoR EC": MAIN["ec"](cfg.n_recursions),
             "MoR EC KV share": MAIN["ec-share"](cfg.n_recursions), "MoR TC": MAIN["tc"](cfg.n_recursions)}
    for label, spec in specs.items():
        name = MoRVariant(spec, "flops", cfg.seeds[0]).name
        model = load_model(work, name)
        settings = [("B", batch)] + ([("B = Max", relative_max_batch(spec, batch))] if spec is not None else [])
        for setting, max_batch in settings:
            engine_cls = DepthBatchEngine if spec is None else MoREngine
            engine = engine_cls(model, max_batch, 2 * length + 1)
            runs = sorted((engine.run(requests) for _ in range(repeats)), key=lambda r: r.tokens_per_s)
            res = runs[len(runs) // 2]
            decode = (res.tokens - n_req) / (res.seconds - res.prefill_seconds)
            rows.append({"model": label, "setting": setting, "max_batch": max_batch, "nll": nll[name],
                         "decode_tokens_per_s": decode, "tokens_per_s": res.tokens_per_s,
                         "mean_depth": res.mean_exit_loop, "mean_busy": res.mean_busy})
    table = pd.DataFrame(rows)
    base = table.loc[(table["model"] == "Vanilla"), "decode_tokens_per_s"].iloc[0]
    table["speedup_vs_vanilla"] = table["decode_tokens_per_s"] / base
    return table
