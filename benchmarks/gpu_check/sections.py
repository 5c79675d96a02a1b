"""The sections of `make gpu-check` (issue 26): each takes a `Context` and returns {part: table}.

    tests        the GPU test subset in a pytest subprocess: kernels compiled (not interpreted) against their
                 references incl. bf16, the graphed RT prefill vs eager vs the naive loop, the graphed LoRA batch
    prefill      one RT layer at the paper's Table 2 shape (B = 32, D = 1024, 16 heads, bf16), N = 512 ... 8192:
                 naive loop, PyTorch tiles, Triton tiles (and the Transformer layer), eager and from one CUDA graph;
                 then the tile updates alone against the measured copy bandwidth and the device's nominal one
    prefill_batch
                 RT Table 2 itself: the Triton-tiled layer at N = 512 (the paper's N is not stated; 512 is where its
                 B = 32 row sits in `prefill`), D = 1024, 16 heads, B = 32 ... 2048, eager and from one CUDA graph,
                 beside the paper's ms per layer
    lora         the depth-indexed LoRA batch (Triton) vs the base GEMM alone vs a per-depth loop of PyTorch matmuls
                 vs the paper's merged LoRA, batch 1 ... 256, rank 8 ... 64, d 576 and 4096, launched eagerly and
                 (on a GPU) each captured in a CUDA graph
    end_to_end   `benchmarks.gpu_check.end_to_end`

Every section checks its time cap between cases and skips (with a row saying so) what would overrun it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree

import pandas as pd

from benchmarks.gpu_check import end_to_end
from benchmarks.gpu_check.runner import ROOT, Context, device_name
from rlib.recurrent.table2 import PAPER_TABLE2_MS

PAPER_TABLE2 = PAPER_TABLE2_MS  # RT paper, Table 2: batch -> (ms per layer eager, graphed), H100 (N likely 512)
# nominal memory bandwidth, TB/s (vendor data sheets), matched by substring of the lower-cased device name
NOMINAL_TBPS = {"h100 80gb hbm3": 3.35, "h100 pcie": 2.0, "h100 nvl": 3.9, "h200": 4.8, "a100-sxm4-80gb": 2.039,
                "a100-sxm4-40gb": 1.555, "a100 80gb pcie": 1.935}
# (test file, -k selection on a GPU, in a dry run, in a dry run whose interpreter cannot run the kernels; None = none):
# all of the kernel and graph tests on a GPU (bf16 included there), a few quick ones in a dry run
GPU_TESTS = [("tests/test_tiled_prefill.py", "", "match_the_reference and shape2 and False and dtype0",
              "bit_exactly and reference"),
             ("tests/test_lora_batch.py", "", "rows_without_adapter and per_row", "three_pytorch_references"),
             ("tests/test_recurrent_graphed.py", "", "refuses_a_cpu_layer or eager_tiled_prefill",
              "refuses_a_cpu_layer or eager_tiled_prefill"),
             ("tests/test_recurrent.py", "tiled_equals", None, None)]


def nominal_bandwidth(device: str) -> float:
    """Bytes/s of the device's data sheet, NaN when the name is not in `NOMINAL_TBPS`."""
    name = device.lower()
    return next((tbps * 1e12 for key, tbps in NOMINAL_TBPS.items() if key in name), float("nan"))


def _junit_rows(report) -> list[dict]:
    rows = []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome, message = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag], \
                    (found.get("message") or "")[:300]
        rows.append({"file": case.get("classname", ""), "test": case.get("name", ""), "outcome": outcome,
                     "seconds": float(case.get("time") or 0), "message": message})
    return rows


def tests(ctx: Context) -> dict[str, pd.DataFrame]:
    """One pytest process per file (a file stopped at the time cap loses only its own results)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows = []
    for path, gpu_selection, dry_selection, dry_no_triton in GPU_TESTS:
        selection = gpu_selection if not ctx.dry_run else dry_selection if ctx.triton else dry_no_triton
        if selection is None:
            continue
        report = ctx.folder / ".pytest.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", path]
        cmd += ["-k", selection] if selection else []
        try:
            out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=max(5, ctx.time_left()))
            ctx.log(f"{path}: {out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-300:]}")
        except subprocess.TimeoutExpired:
            ctx.notes.append(f"{path}: pytest stopped at the section's time cap")
        if report.exists():
            rows += _junit_rows(report)
            report.unlink()
        else:
            rows.append({"file": path, "test": "", "outcome": "not run (time cap or pytest error)",
                         "seconds": float("nan"), "message": ""})
    table = pd.DataFrame(rows)
    bad = int((~table["outcome"].isin(["passed", "skipped"])).sum())
    if bad:
        ctx.failures.append(f"{bad} of {len(table)} tests failed or did not run")
    return {"": table}


def _predicted(history: dict, key, n: int, exponent: float) -> float:
    """Wall seconds the next case would take (warm-up, capture and repeats), from the last case of the same kind at a
    smaller N."""
    if key not in history:
        return 0.0
    last_n, last_wall = history[key]
    return last_wall * (n / last_n) ** exponent


def _fits(nbytes: int, device: str) -> bool:
    """Whether `nbytes` fit in half the free memory of the GPU (always on CPU, where the shapes are tiny)."""
    import torch

    return device != "cuda" or nbytes < torch.cuda.mem_get_info()[0] / 2


def _time_case(ctx: Context, row: dict, history: dict, key, size: int, need: float, too_big: str,
               layer_args: tuple, label: str) -> dict:
    """`row` with its "seconds" from `rlib.recurrent.latency.time_layer(*layer_args)`, unless the predicted `need`
    seconds overrun the section's cap or `too_big` says why the case does not fit (its note then says so); records
    the case's wall time under `key` for the next prediction and logs it."""
    import torch

    from rlib.recurrent.latency import time_layer

    if need > ctx.time_left():
        row["note"] = f"skipped: would take ~{need:.0f} s, {max(0, ctx.time_left()):.0f} s left"
    elif too_big:
        row["note"] = too_big
    else:
        try:
            wall = time.perf_counter()
            row["seconds"] = time_layer(*layer_args)
            history[key] = (size, time.perf_counter() - wall)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
            row["note"] = f"failed: {str(error).splitlines()[0][:200]}"
        if ctx.device == "cuda":
            torch.cuda.empty_cache()
    ctx.log(f"{label}{' graph' if layer_args[-1] else ''}: {row['seconds'] * 1e3:.2f} ms {row['note']}")
    return row


def _graph_modes(ctx: Context) -> tuple[bool, ...]:
    """Eager, and on a GPU also CUDA-graph replay: the two columns of the prefill studies."""
    return (False, True) if ctx.device == "cuda" else (False,)


def prefill(ctx: Context) -> dict[str, pd.DataFrame]:
    import torch

    from kernels.tiled_prefill.bench import DTYPES, copy_bandwidth, tile_bytes, time_tile_updates
    from rlib.recurrent.latency import MODES

    if ctx.dry_run:
        lengths, batch, d_model, heads, dtype, repeats = [8], 1, 32, 2, "fp32", 1
    else:
        lengths, batch, d_model, heads, dtype, repeats = [512, 1024, 2048, 4096, 8192], 32, 1024, 16, "bf16", 3
    dev, torch_dtype = torch.device(ctx.device), DTYPES[dtype]
    graphs, name = _graph_modes(ctx), device_name(ctx.device)
    rows, history = [], {}
    for n in lengths:
        for mode in [m for m in MODES if ctx.triton or m != "tiled-triton"]:
            for graph in graphs:
                key = (mode, graph)
                row = {"n": n, "mode": mode, "cuda_graph": graph, "batch": batch, "d_model": d_model, "heads": heads,
                       "dtype": dtype, "device": name, "seconds": float("nan"), "note": ""}
                need = _predicted(history, key, n, 2.0 if mode in ("naive", "transformer") else 1.2)
                too_big = mode == "transformer" and not _fits(4 * 3 * batch * heads * n * n, ctx.device)
                rows.append(_time_case(ctx, row, history, key, n, need,
                                       "skipped: its [B, H, N, N] scores do not fit in free GPU memory" if too_big
                                       else "", (mode, n, d_model, heads, batch, dev, torch_dtype, repeats, graph),
                                       f"prefill n={n} {mode}"))
    layer = pd.DataFrame(rows)
    layer["ms_per_layer"] = layer["seconds"] * 1e3
    naive = layer[(layer["mode"] == "naive") & ~layer["cuda_graph"]].set_index("n")["seconds"]
    layer["speedup_vs_naive_eager"] = [naive.get(n, float("nan")) / s for n, s in zip(layer["n"], layer["seconds"])]
    layer["paper_ms_per_layer"] = [PAPER_TABLE2[32][1] if (batch == 32 and n == 512 and g and m.startswith("tiled"))
                                   else float("nan") for n, m, g in zip(layer["n"], layer["mode"], layer["cuda_graph"])]
    # the tile updates alone: bytes they must move per second vs a measured copy and the data sheet
    copy_bps = copy_bandwidth(dev, 4 if ctx.dry_run else 1024)
    nominal = nominal_bandwidth(name)
    element = torch.tensor([], dtype=torch_dtype).element_size()
    band, impl = [], "triton" if ctx.triton else "reference"
    for n in lengths:
        for graph in graphs:
            moved = batch * heads * tile_bytes(n, d_model // heads, element)
            row = {"n": n, "impl": impl, "cuda_graph": graph, "seconds": float("nan"), "bytes": moved, "note": ""}
            need = _predicted(history, ("tiles", graph), n, 1.2)
            if need > ctx.time_left():
                row["note"] = "skipped: section time cap"
            else:
                wall = time.perf_counter()
                row["seconds"] = time_tile_updates(n, d_model, heads, batch, dev, torch_dtype, impl, repeats, graph)
                history[("tiles", graph)] = (n, time.perf_counter() - wall)
            band.append(row)
    bandwidth = pd.DataFrame(band)
    bandwidth["gb_per_s"] = bandwidth["bytes"] / bandwidth["seconds"] / 1e9
    bandwidth["copy_gb_per_s"] = copy_bps / 1e9
    bandwidth["fraction_of_copy"] = bandwidth["bytes"] / bandwidth["seconds"] / copy_bps
    bandwidth["nominal_gb_per_s"] = nominal / 1e9
    bandwidth["fraction_of_nominal"] = bandwidth["bytes"] / bandwidth["seconds"] / nominal
    return {"": layer, "bandwidth": bandwidth}


def prefill_batch(ctx: Context) -> dict[str, pd.DataFrame]:
    """RT Table 2: ms per layer over batch sizes at one N, eager and graph-replayed, with the paper's two columns and
    each setting's graph speed-up (the paper's reading: flat in B without graphs, tracking compute with them). The
    paper's layer is PyTorch tiles with no custom kernels (Sec. 6), timed first; the book's Triton tiles after it."""
    import torch

    from kernels.tiled_prefill.bench import DTYPES

    if ctx.dry_run:
        batches, n, d_model, heads, dtype, repeats = [1, 2], 8, 32, 2, "fp32", 1
    else:
        batches, n, d_model, heads, dtype, repeats = list(PAPER_TABLE2), 512, 1024, 16, "bf16", 3
    modes = ("tiled-reference",) + (("tiled-triton",) if ctx.triton else ())
    dev, torch_dtype = torch.device(ctx.device), DTYPES[dtype]
    graphs, name = _graph_modes(ctx), device_name(ctx.device)
    element = torch.tensor([], dtype=torch_dtype).element_size()
    rows, histories = [], {mode: {} for mode in modes}  # each mode's timings predict its own next case
    for mode, batch in [(mode, batch) for mode in modes for batch in batches]:
        history = histories[mode]
        for graph in graphs:
            paper = PAPER_TABLE2.get(batch, (float("nan"), float("nan")))
            row = {"batch": batch, "n": n, "mode": mode, "cuda_graph": graph, "d_model": d_model, "heads": heads,
                   "dtype": dtype, "device": name, "seconds": float("nan"),
                   "paper_ms_per_layer": paper[1] if graph else paper[0], "note": ""}
            # eager time is launch-bound (flat in B); the graph's grows with B
            need = _predicted(history, graph, batch, 1.0 if graph else 0.3)
            too_big = not _fits(8 * batch * n * d_model * element, ctx.device)
            rows.append(_time_case(ctx, row, history, graph, batch, need,
                                   "skipped: the layer's activations and KV do not fit in free GPU memory" if too_big
                                   else "", (mode, n, d_model, heads, batch, dev, torch_dtype, repeats, graph),
                                   f"prefill_batch {mode} B={batch}"))
    table = pd.DataFrame(rows)
    table["ms_per_layer"] = table["seconds"] * 1e3
    eager = table[~table["cuda_graph"]].set_index(["mode", "batch"])["ms_per_layer"]
    table["graph_speedup"] = [eager.get((m, b), float("nan")) / ms if g else float("nan")
                              for m, b, g, ms in zip(table["mode"], table["batch"], table["cuda_graph"],
                                                     table["ms_per_layer"])]
    table["paper_graph_speedup"] = [PAPER_TABLE2[b][0] / PAPER_TABLE2[b][1] if g and b in PAPER_TABLE2 else float("nan")
                                    for b, g in zip(table["batch"], table["cuda_graph"])]
    return {"": table}


LORA_IMPLS = ("base", "triton_seg", "triton_seg_fused", "triton_row", "triton_stacked_row", "triton_stacked_seg",
              "loop", "concat")
# captured in a CUDA graph too (the loop reads `depth` back to the host and cannot be captured): a decode step of a
# serving engine replays its layers from a graph, where the kernels' own cost shows instead of the Python launch cost
LORA_GRAPHED = ("base", "triton_seg", "triton_seg_fused", "triton_row", "triton_stacked_row", "triton_stacked_seg",
                "concat")


def _lora_graph_us(fn, ctx: Context) -> tuple[float, str]:
    """Microseconds per replay of `fn` captured in a CUDA graph, and a note ('' or why it was not timed)."""
    import torch

    from kernels.lora_batch.bench import time_call
    from kernels.tiled_prefill.bench import graphed

    try:
        replay = graphed(fn, torch.device(ctx.device))
        return time_call(replay, ctx.device, 10) * 1e6, ""
    except RuntimeError as error:
        return float("nan"), f"graph failed: {str(error).splitlines()[0][:160]}"


def lora(ctx: Context) -> dict[str, pd.DataFrame]:
    import torch

    from kernels.lora_batch.bench import case, implementations, time_call

    if ctx.dry_run:
        widths, ranks, batches, dtype, repeats = [32], [8], [1, 16], torch.float32, 1
    else:
        widths, ranks, batches, dtype, repeats = [576, 4096], [8, 16, 32, 64], [1, 4, 16, 64, 256], torch.bfloat16, 10
    n_depths, rows = 3, []
    for d in widths:
        for rank in ranks:
            for n in batches:
                if ctx.time_left() <= 0:
                    rows.append({"d": d, "rank": rank, "batch": n, "impl": "", "us": float("nan"),
                                 "note": "skipped: section time cap"})
                    continue
                x, w, a, b, depth = case(d, d, rank, n, n_depths, dtype, ctx.device)
                impls = implementations(x, w, a, b, depth, rank, with_triton=ctx.triton)
                base = {"d": d, "rank": rank, "batch": n, "depths": n_depths,
                        "dtype": str(dtype).removeprefix("torch.")}
                for impl in [i for i in LORA_IMPLS if i in impls]:
                    rows.append({**base, "impl": impl, "us": time_call(impls[impl], ctx.device, repeats) * 1e6,
                                 "note": ""})
                if ctx.device == "cuda":
                    for impl in [i for i in LORA_GRAPHED if i in impls]:
                        us, note = _lora_graph_us(impls[impl], ctx)
                        rows.append({**base, "impl": f"{impl}_graph", "us": us, "note": note})
                    torch.cuda.empty_cache()
            ctx.log(f"lora d={d} rank={rank} done")
    table = pd.DataFrame(rows)
    timed = table[table["impl"] != ""]
    wide = timed.pivot_table(index=["d", "rank", "batch"], columns="impl", values="us").reset_index()
    return {"": table, "ratios": lora_ratios(wide)} if _triton_columns(wide, "") else {"": table}


def _triton_columns(wide: pd.DataFrame, suffix: str) -> list[str]:
    return [f"{c}{suffix}" for c in LORA_IMPLS if c.startswith("triton") and f"{c}{suffix}" in wide.columns]


def lora_ratios(wide: pd.DataFrame) -> pd.DataFrame:
    """Per case: the best Triton variant's time over the base GEMM's and the loop's over it, launched eagerly and
    (where timed) replayed from CUDA graphs, both sides the same way; the paper's merged LoRA (`concat`) beside it."""
    eager = _triton_columns(wide, "")
    wide["best_triton"] = wide[eager].idxmin(axis=1)
    best = wide[eager].min(axis=1)
    wide["ratio_to_base"] = best / wide["base"]
    wide["speedup_vs_loop"] = wide["loop"] / best
    if "concat" in wide:
        wide["concat_to_base"] = wide["concat"] / wide["base"]
    graphed = _triton_columns(wide, "_graph")
    if graphed and "base_graph" in wide:
        wide["best_triton_graph"] = wide[graphed].idxmin(axis=1)
        best_graph = wide[graphed].min(axis=1)
        wide["ratio_to_base_graph"] = best_graph / wide["base_graph"]
        if "concat_graph" in wide:
            wide["concat_to_base_graph"] = wide["concat_graph"] / wide["base_graph"]
    return wide


SECTIONS = {"tests": tests, "prefill": prefill, "prefill_batch": prefill_batch, "lora": lora,
            "end_to_end": end_to_end.section}
