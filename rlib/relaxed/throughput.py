"""Chapter 02's throughput study (Relaxed Recursive Transformers Sec. 3.8, Fig. 8, App. K, Tables K.1-K.4).

The real engine (`rlib.serving`) on held-out prompts: the source model with static and continuous batching, the
recursive and relaxed models with continuous depth-wise batching with and without early exit; and the paper's
simulation (`rlib.serving.simulate`) with this machine's measured pass times and the models' exit loops.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from rlib import data
from rlib.model import Decoder, convert
from rlib.relaxed import early_exit
from rlib.relaxed.config import RelaxedConfig, main_variants
from rlib.serving import Request, make_engine, simulate

__all__ = ["prompts", "throughput_tables"]


def prompts(cfg: RelaxedConfig) -> list[Request]:
    """Held-out prompts: the first `prompt_len` tokens of test windows of the uptraining corpus."""
    n = cfg.throughput_requests
    windows = data.heldout_windows(cfg.train_corpus, cfg.model, max(cfg.prompt_len, 2), n, split="test", seed=7)
    return [Request(i, windows[i, :cfg.prompt_len].tolist(), cfg.new_tokens) for i in range(n)]


def throughput_tables(cfg: RelaxedConfig, source: Decoder, work: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measured, simulated): the engine's tokens/s per model and scheduler, and the paper's simulation with this
    machine's pass times and each model's exit loops on the same prompts."""
    reqs = prompts(cfg)
    max_len = cfg.prompt_len + cfg.new_tokens + 1
    models = {"vanilla (source)": source}
    for main in main_variants(cfg):
        post = dataclasses.replace(main, exit="aggressive_kd", phase="post")
        folder = work / post.name / "model"
        if (folder / convert.CONFIG_FILE).exists():
            label = "recursive" if main.rank == 0 else f"relaxed r={main.rank}"
            models[label] = convert.load(folder).to(next(source.parameters()).dtype)
    measured, simulated = [], []
    for label, model in models.items():
        vanilla = label.startswith("vanilla")
        settings = [("static", None), ("continuous", None)] if vanilla else \
            [("continuous", None), *[("continuous", t) for t in cfg.exit_thresholds]]
        for admission, threshold in settings:
            engine = make_engine(model, cfg.max_batch, max_len, exit_threshold=threshold, admission=admission)
            runs = sorted((engine.run(reqs) for _ in range(cfg.throughput_repeats)), key=lambda r: r.tokens_per_s)
            res = runs[len(runs) // 2]  # the median run
            scheduler = "static" if admission == "static" else ("csb" if vanilla else "cdb")
            measured.append({"model": label, "scheduler": scheduler, "exit_threshold": threshold,
                             "tokens": res.tokens, "seconds": res.seconds, "prefill_s": res.prefill_seconds,
                             "tokens_per_s": res.tokens_per_s,
                             "decode_tokens_per_s": res.decode_tokens_per_s,
                             "mean_exit_loop": res.mean_exit_loop, "mean_busy": res.mean_busy,
                             "passes": res.passes,
                             "tokens_per_s_spread": runs[-1].tokens_per_s - runs[0].tokens_per_s})
            if threshold is None and admission == "continuous":
                batches = sorted({1, max(1, cfg.max_batch // 2), cfg.max_batch})
                pos = cfg.prompt_len + cfg.new_tokens // 2
                timing = simulate.per_batch_timing(batches, [engine.program.pass_seconds(b, pos) for b in batches])
                loops = _exit_loops(res, vanilla)
                for sched in (["static", "csb"] if vanilla else ["cdb"]):
                    sim = simulate.simulate(loops, cfg.max_batch, timing, sched, n_loops=engine.n_loops)
                    simulated.append({"model": label, "scheduler": sched, "exits": "none",
                                      "tokens_per_s": sim.tokens_per_s, "mean_busy": sim.mean_busy})
                if not vanilla:
                    for name, exit_loops in _exit_variants(model, cfg, res, reqs).items():
                        sim = simulate.simulate(exit_loops, cfg.max_batch, timing, "cdb", n_loops=engine.n_loops)
                        simulated.append({"model": label, "scheduler": "cdb", "exits": name,
                                          "tokens_per_s": sim.tokens_per_s, "mean_busy": sim.mean_busy,
                                          "mean_exit_loop": float(np.mean([j for r in exit_loops for j in r]))})
    return pd.DataFrame(measured), pd.DataFrame(simulated)


def _exit_loops(res, vanilla: bool) -> list[list[int]]:
    """Per request, the decode tokens' exit loops as the engine ran them (all B without early exit)."""
    return [c.exit_loops[1:] or [res.n_loops] for c in res.completions.values()] if not vanilla else \
        [[1] * max(1, len(c.tokens) - 1) for c in res.completions.values()]


def _exit_variants(model: Decoder, cfg: RelaxedConfig, res, reqs: list[Request]) -> dict[str, list[list[int]]]:
    """Oracle and confidence exit loops, teacher-forced on each request's prompt + generated text (as the paper
    records them on held-out text), one list per request."""
    exits = early_exit.loop_exits(model, cfg.n_loops)
    out: dict[str, list[list[int]]] = {"oracle": []}
    out.update({f"confidence {t:g}": [] for t in cfg.exit_thresholds})
    for req in reqs:
        c = res.completions[req.id]
        text = torch.tensor([req.prompt + c.tokens])
        top, prob = early_exit.exit_predictions(model, text, exits)
        span = slice(len(req.prompt), text.shape[1] - 1)  # positions that predict generated tokens 2..n
        out["oracle"].append(early_exit.oracle_exit_loops(top)[0, span].tolist() or [cfg.n_loops])
        for t in cfg.exit_thresholds:
            out[f"confidence {t:g}"].append(early_exit.confidence_exit_loops(prob, t)[0, span].tolist()
                                            or [cfg.n_loops])
    return out
