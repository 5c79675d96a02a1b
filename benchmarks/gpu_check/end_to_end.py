"""End-to-end ratios on the book's small models, each pair measured in one run (issue 26):

    depth_batching   the book's one serving engine (`rlib.serving.make_engine`): the vanilla SmolLM2-135M with
                     continuous sequence-wise batching vs its Recursive (3 loops, Stepwise) and Relaxed (LoRA per
                     depth, SVD init) conversions with continuous depth-wise batching (RRT Sec. 3.8, Fig. 8)
    mor_decode       the same engine on chapter 03's vanilla and MoR (expert-choice) / Recursive models (MoR Fig. 4a)
    self_speculative LayerSkip's self-speculative decoding vs plain autoregressive greedy decoding on SmolLM2-135M
                     (Sec. 4.3), with the acceptance rate it ran at
    self_speculative_trained
                     the same on chapter 05's trained from-scratch LD+EE model where `gpu_carry/` brings it
                     (`python -m benchmarks.gpu_check.carry`): the chapter's exits, drafts, prompts and temperature,
                     decoded by the chapter's own `benchmark_decoding` and checked exact against its autoregressive
                     decoding with the same noise

Weights: the embedded assets when `rlib.assets` finds them (this machine, after `make assets`); otherwise (the lent
GPU machine, which has no copy of them) the same architecture with random weights, said in the `weights` column.
Random weights leave the depth-batching and MoR decode costs as they are (no early exit, capacity-based routing) but
make self-speculative acceptance meaningless: its ratio is then the cost of drafting, not a speedup; the carried trained
model gives the real acceptance (a 12-layer model of 13 MB: on a GPU its decoding is bound by kernel launches, so its
speedup measures the layers skipped, not the FLOPs).
"""

from __future__ import annotations

import signal
import threading
import time

import pandas as pd

from benchmarks.gpu_check.runner import Context

# SmolLM2-135M's shape (its config.json), for a random-weight copy where the asset is not cached
SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, head_dim=64, rms_norm_eps=1e-5,
                    rope_theta=100000.0, tie_word_embeddings=True, max_position_embeddings=8192)
TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=2,
            num_key_value_heads=1, head_dim=32, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
            max_position_embeddings=512)


def smollm2(ctx: Context):
    """(Decoder in fp32 on the device, weights label)."""
    import torch
    from transformers import LlamaConfig

    from rlib import assets
    from rlib.model import Decoder, DecoderConfig, from_transformers
    from rlib.model.init import init_weights

    if not ctx.dry_run and assets.is_ready("smollm2-135m"):
        return from_transformers(assets.load_model("smollm2-135m")).to(ctx.device).eval(), "smollm2-135m (assets)"
    shape = TINY if ctx.dry_run else SMOLLM2_135M
    config = DecoderConfig.from_hf(LlamaConfig(**shape)).replace(eos_ids=())
    torch.manual_seed(0)
    model = init_weights(Decoder(config), seed=0).to(ctx.device).eval()
    label = "random (tiny Llama)" if ctx.dry_run else "random (SmolLM2-135M shape; the assets are not here)"
    return model, label


def _requests(vocab: int, n: int, prompt: int, new: int | list[int], seed: int = 0):
    """`n` requests of `prompt` random tokens each, generating `new` tokens (one count for all, or one per request)."""
    import torch

    from rlib.serving import Request

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (n, prompt), generator=gen)
    lengths = [new] * n if isinstance(new, int) else new
    return [Request(i, ids[i].tolist(), lengths[i]) for i in range(n)]


def _engine_rows(models: dict, requests, max_batch: int, lora_impl: str | None, study: str, weights: str,
                 ctx: Context) -> list[dict]:
    """Each model through the engine (one warm-up run on two requests, then the timed run), in one process."""
    from rlib.serving import make_engine

    max_len = max(len(r.prompt) + r.max_new_tokens for r in requests) + 1
    rows = []
    for label, (model, scheduler) in models.items():
        if ctx.time_left() <= 0:
            rows.append({"study": study, "model": label, "note": "skipped: section time cap"})
            continue
        kwargs = {"lora_impl": lora_impl} if not hasattr(model, "serving_program") else {}
        engine = make_engine(model, max_batch, max_len, **kwargs)
        engine.run(requests[:2])
        res = engine.run(requests)
        rows.append({"study": study, "model": label, "scheduler": scheduler, "weights": weights,
                     "requests": len(requests), "max_batch": max_batch, "tokens": res.tokens, "seconds": res.seconds,
                     "tokens_per_s": res.tokens_per_s, "decode_tokens_per_s": res.decode_tokens_per_s,
                     "mean_depth": res.mean_exit_loop, "mean_busy": res.mean_busy, "note": ""})
        ctx.log(f"{study} {label}: {res.decode_tokens_per_s:.0f} decode tokens/s")
    base = next((r["decode_tokens_per_s"] for r in rows if "decode_tokens_per_s" in r), float("nan"))
    for r in rows:
        r["ratio_to_vanilla"] = r.get("decode_tokens_per_s", float("nan")) / base
    return rows


def depth_batching(ctx: Context, source, weights: str, dtype) -> list[dict]:
    from rlib import looping, relax

    rank = 4 if ctx.dry_run else 64
    looped = looping.convert(source, looping.Looping(n_loops=3 if not ctx.dry_run else 2))
    relaxed = relax.relax(looped, source, relax.Relaxation(rank=rank))
    models = {"vanilla": (source.to(dtype), "continuous sequence-wise"),
              "recursive": (looped.to(dtype), "continuous depth-wise"),
              f"relaxed r={rank}": (relaxed.to(dtype), "continuous depth-wise")}
    n, prompt, new, batch = (4, 8, 4, 2) if ctx.dry_run else (128, 64, 64, 32)
    requests = _requests(source.config.vocab_size, n, prompt, new)
    return _engine_rows(models, requests, batch, None, "depth_batching", weights, ctx)  # the kernel on GPU, loop on CPU


def mor_decode(ctx: Context, dtype) -> list[dict]:
    from rlib.mor.config import MoRConfig, MoRVariant
    from rlib.mor.experiments import MAIN, make_model
    from rlib.mor.throughput import LENGTH_SD
    from rlib.serving.workload import normal_lengths

    cfg = MoRConfig.preset("smoke" if ctx.dry_run else "gpu")
    vocab = cfg.vocab_size or 8192
    models = {}
    for label, spec in (("vanilla", None), ("recursive", MAIN["rec"](cfg.n_recursions)),
                        ("MoR expert-choice", MAIN["ec"](cfg.n_recursions))):
        model = make_model(MoRVariant(spec), cfg, vocab).to(ctx.device, dtype).eval()
        models[label] = (model, "continuous sequence-wise" if spec is None else "continuous depth-wise")
    n, prompt, new, batch = (4, 8, 4, 2) if ctx.dry_run else (128, 64, 64, 32)
    weights = f"random (chapter 03's {'smoke' if ctx.dry_run else 'gpu'} shape, d={cfg.d_model}, L={cfg.n_layers})"
    lengths = normal_lengths(n, new, LENGTH_SD * new)  # App. D's normally distributed generation lengths, as chapter 03
    return _engine_rows(models, _requests(vocab, n, prompt, lengths), batch, None, "mor_decode", weights, ctx)


def self_speculative(ctx: Context, model, weights: str) -> list[dict]:
    import torch

    from kernels.tiled_prefill.bench import timed
    from rlib.layerskip.speculative import self_speculative_generate

    n_layers = len(model.plan)
    exit_layer, n_draft = (max(1, n_layers // 3), 2) if ctx.dry_run else (8, 4)
    prompt_len, new = (8, 6) if ctx.dry_run else (64, 128)
    ids = torch.randint(3, model.config.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(1))
    ids = ids.to(ctx.device)
    dev = torch.device(ctx.device)
    stats = {}

    def speculative():
        stats["last"] = self_speculative_generate(model, ids, new, exit_layer, n_draft, eos_ids=())[1]

    with torch.no_grad():
        plain_s = timed(lambda: model.generate(ids, new, eos_ids=()), dev, 1 if ctx.dry_run else 3)
        spec_s = timed(speculative, dev, 1 if ctx.dry_run else 3)
        same = torch.equal(model.generate(ids, new, eos_ids=()),
                           self_speculative_generate(model, ids, new, exit_layer, n_draft, eos_ids=())[0])
    s = stats["last"]
    return [{"study": "self_speculative", "model": "autoregressive", "weights": weights, "seconds": plain_s,
             "tokens_per_s": new / plain_s, "ratio_to_vanilla": 1.0, "note": ""},
            {"study": "self_speculative", "model": f"self-speculative E={exit_layer} d={n_draft}", "weights": weights,
             "seconds": spec_s, "tokens_per_s": new / spec_s, "ratio_to_vanilla": plain_s / spec_s,
             "acceptance": s.acceptance, "tokens_per_round": s.tokens_per_round,
             "note": "" if same else "OUTPUT DIFFERS from greedy decoding"}]


def carried_layerskip(ctx: Context, folder=None):
    """(model, prompts [P, T], meta) of chapter 05's LD+EE model where `gpu_carry/` holds it (`carry.py`), else None.
    fp32: the batched verify and the one-token step then round alike, so exactness is the algorithm's."""
    import json

    import torch

    from benchmarks.gpu_check.carry import CARRY_DIR, LAYERSKIP
    from rlib.model import convert

    if folder is None:
        if ctx.dry_run:
            return None
        folder = CARRY_DIR / LAYERSKIP
    if not (folder / "meta.json").exists():
        return None
    meta = json.loads((folder / "meta.json").read_text())
    model = convert.load(folder / "model").to(ctx.device, torch.float32).eval()
    return model, torch.load(folder / "prompts.pt").to(ctx.device), meta


def self_speculative_trained(ctx: Context, carried) -> list[dict]:
    """Chapter 05's decoding table on the carried model: one row per self-speculative (E, d), the best one in the
    headline (the others in the table)."""
    from rlib.layerskip.config import sampling_of
    from rlib.layerskip.decoding import benchmark_decoding, decode_cases

    model, prompts, meta = carried
    cases = [c for c in decode_cases(tuple(meta["exits"]), tuple(meta["drafts"]), ("kvq",), peers=False)
             if c.method != "early_exit"]
    table = benchmark_decoding(model, [p[None] for p in prompts], cases, meta["new_tokens"], meta["repeats"],
                               desc="self-speculative (trained)", sampling=sampling_of(meta["temperature"]))
    weights = (f"trained: chapter 05 {meta['run']} ({meta['profile']} profile, {meta['n_layers']} layers, fp32), "
               f"{meta['prompts']} held-out prompts, T={meta['temperature']:g}")
    spec = table[table["method"] == "self_speculative"]
    best = spec["speedup"].idxmax()
    rows = []
    for index, r in table.iterrows():
        plain = r["method"] == "autoregressive"
        rows.append({"study": "self_speculative_trained", "model": "autoregressive" if plain else r["label"],
                     "weights": weights, "seconds": r["ms_per_token"] * r["new_tokens"] / 1e3,
                     "tokens_per_s": 1e3 / r["ms_per_token"], "ratio_to_vanilla": r["speedup"],
                     "acceptance": r["acceptance"], "tokens_per_round": r["tokens_per_round"],
                     "headline": plain or index == best, "distinct_2": r["distinct_2"],
                     "note": "" if plain or r["identical_to_greedy"] else "OUTPUT DIFFERS from autoregressive"})
    return rows


class StudyStopped(BaseException):
    """Raised inside a study that runs past the section's time cap (SIGALRM), so the finished studies are kept (a
    BaseException, so that no `except Exception` inside a study swallows it)."""


_ARMED = [False]


def _stop(signum, frame):
    if _ARMED[0]:
        raise StudyStopped


def section(ctx: Context) -> dict[str, pd.DataFrame]:
    import torch

    dtype = torch.float32 if ctx.dry_run else torch.bfloat16
    rows = []
    started = time.perf_counter()
    source, weights = smollm2(ctx)
    # a study in flight at the cap is stopped (the lent machine's 10-minute command limit kills the whole check
    # otherwise, losing the studies that finished); SIGALRM is the main thread's, where the runner runs
    alarm = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGALRM, _stop) if alarm else None
    try:
        carried = carried_layerskip(ctx)
        studies = [("depth_batching", lambda: depth_batching(ctx, source, weights, dtype)),
                   ("self_speculative", lambda: self_speculative(ctx, source.to(dtype), weights)),
                   ("mor_decode", lambda: mor_decode(ctx, dtype))]
        if carried is not None:  # before the random-weight row: it is the one that measures a speedup
            studies.insert(1, ("self_speculative_trained", lambda: self_speculative_trained(ctx, carried)))
        for name, study in studies:
            if ctx.time_left() <= 0:
                rows.append({"study": name, "note": "skipped: section time cap"})
                continue
            if alarm:
                _ARMED[0] = True
                signal.setitimer(signal.ITIMER_REAL, max(0.1, ctx.time_left()))
            try:
                rows += study()
            except StudyStopped:
                rows.append({"study": name, "note": "stopped: section time cap"})
                ctx.log(f"{name} stopped at the section's time cap")
            except Exception as error:  # noqa: BLE001 - one study failing leaves the others' ratios
                rows.append({"study": name, "note": f"failed: {type(error).__name__}: {str(error)[:200]}"})
                ctx.log(f"{name} failed: {error!r}")
            finally:
                _ARMED[0] = False
                if alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        if alarm:
            signal.signal(signal.SIGALRM, previous)
    ctx.log(f"end to end: {time.perf_counter() - started:.0f} s")
    return {"": pd.DataFrame(rows)}
