"""Fig. 4a's measurement (Mixture-of-Recursions, paper 001, Sec. 3.3, Fig. 4a, Table 2): decode throughput of the
vanilla model (continuous sequence-wise batching) and the MoR / Recursive models (continuous depth-wise batching),
all through the book's one serving engine (`rlib.serving`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rlib.mor.config import MoRConfig, MoRVariant
from rlib.mor.experiments import MAIN, load_model
from rlib.mor.flops import relative_max_batch
from rlib.serving import Request, make_engine

__all__ = ["throughput_table"]


def throughput_table(cfg: MoRConfig, work: Path, results: list[dict],
                     repeats: int = 3) -> pd.DataFrame:
    """Fig. 4a's measurement: decode tokens/s of vanilla (continuous sequence-wise batching) and the MoR /
    Recursive models (continuous depth-wise batching), one engine (`rlib.serving`), on held-out prompts, at a fixed
    batch B and at the paper's "relative maximum batch" B / KV-memory ratio (Table 2). Median of `repeats` runs.

    Derived from the preset: 4 x `decode_windows` requests, prompts and generations of seq_len / 8 tokens each,
    B = batch_size / 2."""
    n_req, length, batch = 4 * cfg.decode_windows, max(2, cfg.seq_len // 8), max(1, cfg.batch_size // 2)
    prompts = cfg.text().heldout("test", n_req, seed=3)[:, :length]
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
            engine = make_engine(model, max_batch, 2 * length + 1)
            runs = sorted((engine.run(requests) for _ in range(repeats)), key=lambda r: r.tokens_per_s)
            res = runs[len(runs) // 2]
            rows.append({"model": label, "setting": setting, "max_batch": max_batch, "nll": nll[name],
                         "decode_tokens_per_s": res.decode_tokens_per_s, "tokens_per_s": res.tokens_per_s,
                         "mean_depth": res.mean_exit_loop, "mean_busy": res.mean_busy})
    table = pd.DataFrame(rows)
    base = table.loc[(table["model"] == "Vanilla"), "decode_tokens_per_s"].iloc[0]
    table["speedup_vs_vanilla"] = table["decode_tokens_per_s"] / base
    return table
