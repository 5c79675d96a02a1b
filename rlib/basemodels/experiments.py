"""Chapter 00's measurements of the base models on held-out documents: perplexity, generations, latency and the
zero-shot task suite (the analog of Relaxed Recursive Transformers Table D.1), so every later number has a baseline.
"""

from __future__ import annotations

import pandas as pd
import torch

from rlib import assets, data
from rlib import eval as rl_eval
from rlib.basemodels.config import DTYPES, PRETRAINING, ModelsDataConfig
from rlib.precision import resolve as resolve_precision
from rlib.progress import progress

__all__ = ["corpus_table", "device", "evaluate_models", "suite_dtype", "task_suite_table"]


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def corpus_table(cfg: ModelsDataConfig) -> pd.DataFrame:
    """Documents, characters and tokens per (corpus, split) and tokenizer."""
    return data.corpus_stats(cfg.stats_corpora, cfg.models)


def evaluate_models(cfg: ModelsDataConfig, seed: int = 0) -> dict[str, pd.DataFrame]:
    """Held-out perplexity, greedy generations and forward latency, one model load per (model, dtype).

    Every dtype scores the same seeded windows; fp32, the reference, scores only the first
    `cfg.reference_windows(n)` of them (a bf16 forward costs a third of an fp32 one here), and `precision_check`
    compares every other dtype with it on exactly those windows, window by window.

    Returns frames `perplexity` (model, dtype, corpus, ppl, nll, nll_se, n_tokens, n_windows, ...),
    `precision_check` (`tables.precision_check`), `generations` (model, dtype, prompt, continuation) and
    `latency` (model, dtype, median_s, ...).
    """
    from rlib.basemodels.tables import precision_check

    dev = device()
    windows = {(m, c): data.heldout_windows(c, m, cfg.seq_len, _n_windows(c, m, cfg), split="test", seed=seed)
               for m in cfg.models for c in cfg.eval_corpora}  # [N, T] each
    paired = "float32" in cfg.dtypes and len(cfg.dtypes) > 1
    ppl_rows, gen_rows, lat_rows, per_window = [], [], [], {}
    combos = [(m, d) for m in cfg.models for d in cfg.dtypes]
    for model_name, dtype_name in progress(combos, desc="models x dtypes"):
        model = assets.load_model(model_name, dtype=DTYPES[dtype_name], device=dev)
        tok = assets.load_tokenizer(model_name)
        for corpus in cfg.eval_corpora:
            scored = windows[(model_name, corpus)]  # [N, T]
            if paired and dtype_name == "float32":
                scored = scored[: cfg.reference_windows(len(scored))]  # [N_ref, T]: the first windows, paired
            res = rl_eval.perplexity(model, scored, batch_size=cfg.batch_size, device=dev, progress=False,
                                     per_window=True)
            per_window[(model_name, corpus, dtype_name)] = res.pop("per_window")
            ppl_rows.append({"model": model_name, "dtype": dtype_name, "corpus": corpus, **res})
        for prompt, text in zip(cfg.prompts, rl_eval.greedy_generate(model, tok, list(cfg.prompts),
                                                                      cfg.max_new_tokens)):
            gen_rows.append({"model": model_name, "dtype": dtype_name, "prompt": prompt, "continuation": text})
        lat = rl_eval.forward_latency(model, seq_len=cfg.latency_seq_len, repeats=cfg.latency_repeats)
        lat_rows.append({"model": model_name, "dtype": dtype_name, "device": dev, **lat})
        del model
    return {"perplexity": pd.DataFrame(ppl_rows), "precision_check": precision_check(per_window),
            "generations": pd.DataFrame(gen_rows), "latency": pd.DataFrame(lat_rows)}


def suite_dtype(cfg: ModelsDataConfig) -> str:
    """The task suite's dtype on this machine: "bfloat16" where `task_precision` resolves to bf16, else "float32"."""
    return "bfloat16" if resolve_precision(cfg.task_precision) == "bf16" else "float32"


def task_suite_table(cfg: ModelsDataConfig) -> tuple[pd.DataFrame, str]:
    """Every base model on the profile's task suite through lm-eval, zero-shot, in `suite_dtype(cfg)`.

    The suite runs in the precision later chapters score their models in (chapter 01 scores bf16 copies where the
    machine computes bf16 natively); `heldout_perplexity` measures what bf16 changes on these models.
    Returns (long table of `rlib.eval.suite_table` with the dtype, the model's non-embedding parameter count and
    pretraining data added, a note naming the suite that ran and why).
    """
    from rlib import counting, tasks
    from rlib.model import convert

    names, note = tasks.resolve_suite(cfg.task_suite)
    dtype = suite_dtype(cfg)
    rows = []
    for name in progress(cfg.models, desc="task suite"):
        model = convert.from_transformers(assets.load_model(name, dtype=DTYPES[dtype], device=device()))
        table = rl_eval.suite_table({name: model}, names, limit=cfg.task_limit, batch_size=cfg.batch_size,
                                    tokenizer=assets.load_tokenizer(name), dtype=dtype)
        counts = counting.count_parameters(model)
        data_name, tokens = PRETRAINING.get(name, ("see the model card", "?"))
        rows.append(table.assign(dtype=dtype, non_embedding_params=counts["non_embedding"], pretraining_data=data_name,
                                 pretraining_tokens=tokens))
        del model
    return pd.concat(rows, ignore_index=True), f"{note}; scored in {dtype} (task_precision={cfg.task_precision!r})"


def _n_windows(corpus: str, model: str, cfg: ModelsDataConfig) -> int:
    """The preset's window count, capped by what the test split holds (HumanEval is small)."""
    cache = data.token_cache(corpus, model, "test", progress=False)
    available = len(data.PackedWindows(cache, cfg.seq_len, bos_id=cache.bos_id))
    return min(cfg.n_eval_windows, available)
