"""Chapter 03's analyses of the trained models (paper 001, Figs. 5b/c, 7, 8, 9, Table 14, Table 2): which runs
they read, and the text rendering of per-token depth. The notebook only calls these."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from rlib import data
from rlib.mor import analysis
from rlib.mor.grid import ROUTER_ABLATIONS, MoRConfig, MoRVariant, heldout, load_model
from rlib.mor.spec import MoRSpec
from rlib.mor.tables import kv_bytes_table
from rlib.vocab import CompactVocab

__all__ = ["MAIN", "depth_text", "kv_bytes", "main_model", "router_output_tables"]

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


def test_windows(cfg: MoRConfig, vocab: CompactVocab | None, n: int) -> torch.Tensor:
    return heldout(cfg, vocab, "test", n, seed=0)


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
