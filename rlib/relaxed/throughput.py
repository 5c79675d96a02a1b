"""Chapter 02's throughput study (Relaxed Recursive Transformers Sec. 2.4, 3.8, Fig. 3, Fig. 8, App. K, Tables K.1-K.4).

The paper simulates; this study runs the book's serving engine (`rlib.serving`) and the paper's simulation side by
side on one workload:

    workload     held-out paragraphs of a real corpus: prompt = the `prompt_len` tokens before a paragraph, reply
                 length = the paragraph's, capped at `new_tokens` (the paper's prefix 64 / decode 256, with its test
                 sets' varied lengths), every request queued at once
    memory cap   one budget, set by the vanilla model at `max_batch` sequences (weights + KV of every depth); each
                 model serves the largest batch that fits (Table K.3); the recursive model also at the vanilla batch
                 without exits (Fig. 3), and with static batches at its own batch (App. K: "even without continuous
                 batching")
    exits        the post-trained (Agg + KD, Table 3) recursive and relaxed models leave after loop j < B by a rule
                 calibrated on held-out text to `exit_precision` agreement with the last loop: a linear exit
                 classifier (cheap) and the softmax confidence (the full head), both checked against the oracle
    measured     decode tokens/s, time to first token, exit shares per loop and the time split of a step (blocks /
                 exit decision / head / KV filling) from the engine
    simulated    the paper's scheduler simulation over this machine's pass times and each model's exit loops
                 (the engine's own, and the oracle's on the generated text), and the closed-form ceiling
                 batch / (t_pass(batch) x mean exit loop)

    tables = throughput_tables(cfg, source, work)    # measured, simulated, pass_times, exit_rules, workload,
                                                     # context_share (interleaved short / long rounds)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from rlib import data
from rlib.model import Decoder, convert
from rlib.progress import progress
from rlib.relaxed import early_exit
from rlib.relaxed.config import RelaxedConfig, RelaxedVariant, main_variants
from rlib.serving import Request, make_engine, memory, simulate
from rlib.serving.exits import (
    SoftmaxExit,
    calibrate,
    decision_agreement,
    exit_report,
    fit_exit_classifier,
    teacher_forced,
)
from rlib.serving.workload import length_summary, paragraph_requests

__all__ = ["CONTEXT_ROUNDS", "VANILLA", "WARM_UP_TOKENS", "prompts", "served_models", "throughput_tables",
           "warm_up_requests"]

VANILLA = "vanilla (source)"
CONTEXT_ROUNDS = 7  # interleaved rounds of the short- vs long-context pass timing (`context_share`): a 95% interval
MIB = 2 ** 20


def prompts(cfg: RelaxedConfig) -> list[Request]:
    """The workload: `throughput_requests` held-out paragraphs of `workload_corpus` (`rlib.serving.workload`)."""
    return paragraph_requests(cfg.workload_corpus, cfg.tokenizer, cfg.throughput_requests, cfg.prompt_len,
                              cfg.new_tokens, seed=7)


def served_models(cfg: RelaxedConfig, source: Decoder, work: Path) -> dict[str, Decoder]:
    """The vanilla source and every early-exit post-trained (Agg + KD) model the grid kept (the main recursive and
    relaxed models and the `served_ranks`), by label, in rank order."""
    models = {VANILLA: source}
    dtype = next(source.parameters()).dtype
    recursive, relaxed = main_variants(cfg)
    uptrained = [recursive, relaxed, *[RelaxedVariant("average", r) for r in cfg.served_ranks if r != relaxed.rank]]
    for main in sorted(uptrained, key=lambda v: v.rank):
        folder = work / dataclasses.replace(main, exit="aggressive_kd", phase="post").name / "model"
        if (folder / convert.CONFIG_FILE).exists():
            models["recursive" if main.rank == 0 else f"relaxed r={main.rank}"] = convert.load(folder).to(dtype)
    return models


WARM_UP_TOKENS = 8  # replies of the warm-up run: enough to pass prefill, decode and the exit decision


def warm_up_requests(reqs: list[Request], batch: int) -> list[Request]:
    """The first `batch` requests with their replies cut to `WARM_UP_TOKENS`: one full batch through prefill and a few
    decode steps before the timed run (allocations, first-call costs), without decoding whole replies of up to 256
    tokens that the timing throws away."""
    return [dataclasses.replace(r, max_new_tokens=min(r.max_new_tokens, WARM_UP_TOKENS)) for r in reqs[:batch]]


def _exit_rules(model: Decoder, cfg: RelaxedConfig) -> tuple[dict[str, object], list[dict]]:
    """The calibrated classifier and softmax rules of a looped model, and their report on test windows."""
    def windows(split: str, n: int, seed: int) -> torch.Tensor:
        return data.heldout_windows(cfg.train_corpus, cfg.tokenizer, cfg.seq_len, n, split=split, seed=seed)

    with torch.no_grad():
        fit = teacher_forced(model, windows("train", cfg.exit_fit_windows, 11), cfg.n_loops)
        calib = teacher_forced(model, windows("validation", cfg.exit_fit_windows, 12), cfg.n_loops)
        test = teacher_forced(model, windows("test", cfg.n_eval_windows, 13), cfg.n_loops)
    rules = {"classifier": calibrate(fit_exit_classifier(fit), calib, cfg.exit_precision),
             "softmax": calibrate(SoftmaxExit(0.5), calib, cfg.exit_precision)}
    report = []
    for name, rule in rules.items():
        row = {"rule": name, "threshold": rule.threshold, "target_agreement": cfg.exit_precision,
               "test_tokens": int(test.nll.shape[1]), **exit_report(rule, test),
               "same_decision_as_softmax": decision_agreement(rule, rules["softmax"], test)}
        report.append(row)
    return rules, report


def _pass_ms(engine, batch: int, position: int, repeats: int) -> float:
    return 1000 * engine.program.pass_seconds(batch, position, repeats=repeats)


def throughput_tables(cfg: RelaxedConfig, source: Decoder, work: Path) -> dict[str, pd.DataFrame]:
    """The study's tables: `throughput_measured`, `throughput_simulated`, `pass_times`, `exit_rules`, `workload`,
    and `context_share` where the profile times a `long_context`."""
    reqs = prompts(cfg)
    max_len = max(len(r.prompt) + r.max_new_tokens for r in reqs) + 1
    models = served_models(cfg, source, work)
    budget = memory.budget_for(source, cfg.max_batch, max_len)
    batch_of = {label: min(memory.max_batch_under(budget, m, max_len), cfg.max_batch_cap)
                for label, m in models.items()}
    summary = length_summary(reqs)
    position = int(cfg.prompt_len + summary["reply_mean"])  # a typical decode position of the workload
    measured, simulated, passes, rules_report = [], [], [], []
    settings = [(VANILLA, "static", "none", batch_of[VANILLA]), (VANILLA, "csb", "none", batch_of[VANILLA])]
    for label in models:
        if label == VANILLA:
            continue
        settings += [(label, "cdb", rule, batch_of[label]) for rule in ("none", "classifier")]
        if label == "recursive":  # the softmax rule's cost, and the vanilla batch without exits (Fig. 3's scheduling
            # without memory: the only claim served at that batch)
            settings.append((label, "cdb", "softmax", batch_of[label]))
            if batch_of[label] != cfg.max_batch:
                settings.append((label, "cdb", "none", cfg.max_batch))
            # App. K: "even without continuous batching" - static batches at the batch its memory allows
            settings.append((label, "static", "none", batch_of[label]))
    rules: dict[str, dict[str, object]] = {}
    for label, model in models.items():
        if label != VANILLA:
            rules[label], report = _exit_rules(model, cfg)
            rules_report += [{"model": label, **row} for row in report]
    runs: dict[tuple, object] = {}
    for label, scheduler, rule, batch in progress(settings, desc="serving", unit="run"):
        model = models[label]
        engine = make_engine(model, batch, max_len, admission="static" if scheduler == "static" else "continuous",
                             exit_rule=None if rule == "none" else rules[label][rule])
        engine.run(warm_up_requests(reqs, batch))
        results = []
        for _ in range(cfg.throughput_repeats):
            engine.program.reset_seconds()
            res = engine.run(reqs)
            results.append((res, dict(engine.program.seconds)))
        results.sort(key=lambda r: r[0].decode_tokens_per_s)
        res, parts = results[len(results) // 2]  # the median run
        runs[(label, scheduler, rule, batch)] = res
        hist = res.exit_histogram()
        step_s = sum(parts.values())
        row = {"model": label, "scheduler": scheduler, "exit_rule": rule, "batch": batch,
               "memory_mib": (memory.weight_bytes(model) + batch * memory.kv_bytes_per_sequence(model, max_len)) / MIB,
               "tokens": res.tokens, "seconds": res.seconds, "prefill_s": res.prefill_seconds,
               "tokens_per_s": res.tokens_per_s, "decode_tokens_per_s": res.decode_tokens_per_s,
               "mean_ttft_s": res.mean_time_to_first_token, "mean_exit_loop": res.mean_exit_loop,
               "mean_busy": res.mean_busy, "passes": res.passes,
               "decode_tokens_per_s_spread": results[-1][0].decode_tokens_per_s - results[0][0].decode_tokens_per_s}
        total = max(1, sum(hist.values()))
        row.update({f"exit_share_loop{j}": hist.get(j, 0) / total for j in range(1, cfg.n_loops + 1)})
        row.update({f"{part}_s": s for part, s in parts.items()})
        row["exit_decision_share"] = parts["exit_decision"] / step_s if step_s else float("nan")
        measured.append(row)
    # pass times (Tables K.1 / K.3 analogs) at batch 1, the vanilla batch and each model's capped batch
    for label, model in models.items():
        batches = sorted({1, cfg.max_batch, batch_of[label]})
        engine = make_engine(model, max(batches), max_len)
        for b in batches:
            passes.append({"model": label, "batch": b, "context": "short", "position": position,
                           "ms_per_pass": _pass_ms(engine, b, position, cfg.pass_repeats)})
        if cfg.long_context > max_len:
            long_engine = make_engine(model, max(batches), cfg.long_context + 1)
            for b in batches:
                passes.append({"model": label, "batch": b, "context": "long", "position": cfg.long_context,
                               "ms_per_pass": _pass_ms(long_engine, b, cfg.long_context, cfg.pass_repeats)})
            del long_engine
    pass_table = pd.DataFrame(passes)
    context_share = (_context_share_rounds(models, cfg, cfg.max_batch, position, max_len)
                     if cfg.long_context > max_len else None)
    # the paper's simulation over those pass times, each model at its capped batch
    for label, model in models.items():
        own = pass_table[(pass_table.model == label) & (pass_table.context == "short")]
        timing = simulate.per_batch_timing(own["batch"].tolist(), (own["ms_per_pass"] / 1000).tolist())
        batch = batch_of[label]
        n_loops = 1 if label == VANILLA else cfg.n_loops
        t_full = float(np.interp(batch, own["batch"], own["ms_per_pass"])) / 1000
        if label == VANILLA:
            lengths = [[1] * max(1, r.max_new_tokens - 1) for r in reqs]
            for sched in ("static", "csb"):
                sim = simulate.simulate(lengths, batch, timing, sched)
                simulated.append({"model": label, "scheduler": sched, "exits": "none", "batch": batch,
                                  "tokens_per_s": sim.tokens_per_s, "mean_busy": sim.mean_busy,
                                  "ceiling_tokens_per_s": batch / t_full})
            continue
        variants = {"none": [[n_loops] * max(1, r.max_new_tokens - 1) for r in reqs]}
        for rule in ("classifier", "softmax"):
            if (label, "cdb", rule, batch) in runs:
                res = runs[(label, "cdb", rule, batch)]
                variants[rule] = [c.exit_loops[1:] or [n_loops] for c in res.completions.values()]
        variants["oracle"] = _oracle_loops(model, cfg, runs[(label, "cdb", "none", batch)], reqs)
        for name, loops in variants.items():
            sim = simulate.simulate(loops, batch, timing, "cdb", n_loops=n_loops)
            mean_loop = float(np.mean([j for r in loops for j in r]))
            simulated.append({"model": label, "scheduler": "cdb", "exits": name, "batch": batch,
                              "tokens_per_s": sim.tokens_per_s, "mean_busy": sim.mean_busy,
                              "mean_exit_loop": mean_loop, "ceiling_tokens_per_s": batch / (t_full * mean_loop)})
    workload = pd.DataFrame([{**summary, "corpus": cfg.workload_corpus, "prefix": cfg.prompt_len,
                              "decode_cap": cfg.new_tokens, "budget_mib": budget / MIB,
                              **{f"max_batch {m}": b for m, b in batch_of.items()}}])
    return {"throughput_measured": pd.DataFrame(measured), "throughput_simulated": pd.DataFrame(simulated),
            "pass_times": pass_table, "exit_rules": pd.DataFrame(rules_report), "workload": workload,
            **({"context_share": context_share} if context_share is not None else {})}


def _context_share_rounds(models: dict[str, Decoder], cfg: RelaxedConfig, batch: int, position: int,
                          max_len: int) -> pd.DataFrame:
    """Table K.3 / K.4's short- vs long-context comparison with its timing noise: `CONTEXT_ROUNDS` rounds, each timing
    every looped model at `batch` at the workload's `position` and at `cfg.long_context` (median of `pass_repeats`
    passes), the order reversed every other round so that a drift of the host's speed falls on every model alike.
    One row per round, model and context; a round's ratios between models share the same moment of the machine."""
    looped = [label for label in models if label != VANILLA]
    engines = {(label, context): make_engine(models[label], batch, max_len if context == "short" else
                                             cfg.long_context + 1)  # the engines of `pass_times`
               for label in looped for context in ("short", "long")}
    rows = []
    for round_ in progress(range(CONTEXT_ROUNDS), desc="context rounds", unit="round"):
        order = list(engines) if round_ % 2 == 0 else list(reversed(engines))
        for label, context in order:
            at = position if context == "short" else cfg.long_context
            rows.append({"round": round_, "model": label, "context": context, "batch": batch, "position": at,
                         "ms_per_pass": _pass_ms(engines[(label, context)], batch, at, cfg.pass_repeats)})
    return pd.DataFrame(rows)


def _oracle_loops(model: Decoder, cfg: RelaxedConfig, res, reqs: list[Request]) -> list[list[int]]:
    """The paper's oracle exit loops, teacher-forced on each request's prompt + the engine's (no-exit) generation."""
    exits = early_exit.loop_exits(model, cfg.n_loops)
    out = []
    for req in reqs:
        text = torch.tensor([req.prompt + res.completions[req.id].tokens])
        top, _ = early_exit.exit_predictions(model, text, exits)
        span = slice(len(req.prompt), text.shape[1] - 1)  # positions that predict generated tokens 2..n
        out.append(early_exit.oracle_exit_loops(top)[0, span].tolist() or [cfg.n_loops])
    return out

