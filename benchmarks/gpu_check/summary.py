"""The summary of a `make gpu-check` folder: the headline numbers the issue asks for (summary.csv) and a readable page
with them, the per-section tables and the environment (summary.md)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

HEADLINE = ("section", "metric", "value", "target", "note")


def _read(folder: Path, name: str) -> pd.DataFrame | None:
    path = folder / f"{name}.csv"
    return pd.read_csv(path) if path.exists() else None


def _row(section: str, metric: str, value, target: str = "", note: str = "") -> dict:
    return {"section": section, "metric": metric, "value": value, "target": target, "note": note}


def _first(table: pd.DataFrame, column: str, **where):
    rows = table
    for key, value in where.items():
        rows = rows[rows[key] == value]
    values = rows[column].dropna() if column in rows else []
    return values.iloc[0] if len(values) else float("nan")


def tests_rows(tests: pd.DataFrame) -> list[dict]:
    counts = tests["outcome"].value_counts()
    failed = tests[tests["outcome"].isin(["failed", "error"])]
    return [_row("tests", "GPU test subset: passed / failed / skipped",
                 f"{counts.get('passed', 0)} / {counts.get('failed', 0) + counts.get('error', 0)} / "
                 f"{counts.get('skipped', 0)}", "0 failed", "; ".join(failed["test"].head(5)))]


def prefill_rows(layer: pd.DataFrame, bandwidth: pd.DataFrame | None) -> list[dict]:
    rows = []
    n0 = int(layer["n"].min())
    batch = int(layer["batch"].iloc[0])
    for mode in ("tiled-triton", "tiled-reference", "naive"):
        for graph in (True, False):
            ms = _first(layer, "ms_per_layer", n=n0, mode=mode, cuda_graph=graph)
            if not (isinstance(ms, float) and math.isnan(ms)):
                rows.append(_row("prefill", f"ms per layer, {mode}, {'CUDA graph' if graph else 'eager'}, "
                                            f"N={n0}, B={batch}", round(float(ms), 3),
                                 "paper Table 2: 38.85 (graphs), 277.08 (eager)" if mode.startswith("tiled") else ""))
    n_mid = 2048 if (layer["n"] == 2048).any() else int(layer["n"].max())
    for graph in (True, False):
        speedup = _first(layer, "speedup_vs_naive_eager", n=n_mid, mode="tiled-triton", cuda_graph=graph)
        if not (isinstance(speedup, float) and math.isnan(speedup)):
            rows.append(_row("prefill", f"Triton tiles ({'graph' if graph else 'eager'}) vs naive loop (eager), "
                                        f"N={n_mid}", round(float(speedup), 2), ">= 20x"))
    if bandwidth is not None and bandwidth["seconds"].notna().any():
        best = bandwidth.loc[bandwidth["fraction_of_copy"].idxmax()]
        rows.append(_row("prefill", f"tile updates' bandwidth, fraction of a measured copy (N={int(best['n'])}, "
                                    f"{'graph' if best['cuda_graph'] else 'eager'})",
                         round(float(best["fraction_of_copy"]), 3), "",
                         f"{best['gb_per_s']:.0f} GB/s; of the data sheet: {best['fraction_of_nominal']:.3f}"))
    return rows


def prefill_batch_rows(table: pd.DataFrame) -> list[dict]:
    """RT Table 2's two readings per tile implementation (PyTorch tiles: the paper's; Triton: the book's): eager
    latency flat in B (max / min over B, the paper's 293.70 / 275.49 = 1.066) and the graph speed-up at the smallest
    and largest batch measured, beside the paper's at the same B."""
    rows = []
    for mode, part in table.groupby("mode", sort=False):
        eager = part[~part["cuda_graph"].astype(bool)].dropna(subset=["ms_per_layer"])
        if len(eager) > 1:
            lo, hi = eager["ms_per_layer"].min(), eager["ms_per_layer"].max()
            rows.append(_row("prefill_batch", f"{mode}: eager ms per layer, max / min over B = "
                                              f"{int(eager['batch'].min())} ... {int(eager['batch'].max())}",
                             round(float(hi / lo), 3), "paper Table 2: 1.066 (B 32 ... 2048)",
                             f"{lo:.1f} ... {hi:.1f} ms"))
        graph = part[part["cuda_graph"].astype(bool)].dropna(subset=["graph_speedup"])
        for batch in sorted({int(graph["batch"].min()), int(graph["batch"].max())}) if len(graph) else []:
            r = graph[graph["batch"] == batch].iloc[0]
            paper = r.get("paper_graph_speedup", float("nan"))
            rows.append(_row("prefill_batch", f"{mode}: CUDA graph speed-up over eager, B={batch}",
                             round(float(r["graph_speedup"]), 2),
                             "" if pd.isna(paper) else f"paper Table 2: {paper:.1f}x",
                             f"{r['ms_per_layer']:.1f} ms per layer (paper {r['paper_ms_per_layer']:g})"))
    return rows


def lora_rows(ratios: pd.DataFrame) -> list[dict]:
    small = ratios[ratios["rank"] <= 64]
    if small.empty:
        return []
    rows = []
    for suffix, how in (("", "eager"), ("_graph", "CUDA graphs")):
        column = f"ratio_to_base{suffix}"
        if column not in small or small[column].isna().all():
            continue
        worst = small.loc[small[column].idxmax()]
        rows += [_row("lora", f"LoRA batch / base GEMM ({how}), worst case at rank <= 64",
                      round(float(worst[column]), 3), "<= 1.25",
                      f"d={int(worst['d'])} rank={int(worst['rank'])} batch={int(worst['batch'])}"),
                 _row("lora", f"LoRA batch / base GEMM ({how}), median at rank <= 64",
                      round(float(small[column].median()), 3), "<= 1.25",
                      f"paper's merged LoRA / base GEMM, median: {small[f'concat_to_base{suffix}'].median():.3g}"
                      if f"concat_to_base{suffix}" in small else "")]
    rows.append(_row("lora", "per-depth loop / LoRA batch (eager), median",
                     round(float(small["speedup_vs_loop"].median()), 2), ">= 3x"))
    return rows


def end_to_end_rows(table: pd.DataFrame) -> list[dict]:
    rows = []
    for _, r in table.iterrows():
        if r.get("model") in (None, "vanilla", "autoregressive") or pd.isna(r.get("model")):
            if str(r.get("note", "")).startswith(("failed", "skipped")):
                rows.append(_row("end_to_end", r["study"], float("nan"), "", r["note"]))
            continue
        if str(r.get("headline")) == "False":  # a study's other settings (bool, or read back from CSV): table only
            continue
        note = f"weights: {r.get('weights', '')}"
        if not pd.isna(r.get("acceptance", float("nan"))):
            note += f"; acceptance {r['acceptance']:.2f}"
        if isinstance(r.get("note"), str) and r["note"]:
            note += f"; {r['note']}"
        baseline = "autoregressive" if str(r["study"]).startswith("self_speculative") else "vanilla"
        rows.append(_row("end_to_end", f"{r['study']}: {r['model']} / {baseline}",
                         round(float(r["ratio_to_vanilla"]), 3), "", note))
    return rows


def headline(folder: Path) -> pd.DataFrame:
    rows = []
    tests = _read(folder, "tests")
    if tests is not None and "outcome" in tests:
        rows += tests_rows(tests)
    layer = _read(folder, "prefill")
    if layer is not None and not layer.empty:
        rows += prefill_rows(layer, _read(folder, "prefill_bandwidth"))
    batch = _read(folder, "prefill_batch")
    if batch is not None and "ms_per_layer" in batch:
        rows += prefill_batch_rows(batch)
    ratios = _read(folder, "lora_ratios")
    if ratios is not None and not ratios.empty:
        rows += lora_rows(ratios)
    e2e = _read(folder, "end_to_end")
    if e2e is not None and not e2e.empty:
        rows += end_to_end_rows(e2e)
    return pd.DataFrame(rows, columns=list(HEADLINE))


def _markdown(table: pd.DataFrame) -> str:
    cols = list(table.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, r in table.iterrows():
        lines.append("| " + " | ".join("" if pd.isna(v) else (f"{v:.4g}" if isinstance(v, float) else str(v))
                                       for v in r) + " |")
    return "\n".join(lines)


def write(folder: Path, meta: dict) -> pd.DataFrame:
    """summary.csv (the headline rows) and summary.md in `folder`; returns the headline table."""
    table = headline(folder)
    table.to_csv(folder / "summary.csv", index=False)
    where = f"{meta['device']} ({meta['device_type']}), {meta['date']}, commit {meta['commit']}"
    title = "# gpu-check DRY RUN on CPU: plumbing only, not GPU numbers" if meta.get("dry_run") else "# gpu-check"
    parts = [title, "", where, "",
             f"torch {meta['torch']}, triton {meta['triton']}, transformers {meta.get('transformers')}; "
             f"{meta.get('seconds', 0):.0f} s in all", "", "## Headline", "", _markdown(table), "", "## Sections", "",
             _markdown(pd.DataFrame([{k: s[k] for k in ("section", "status", "seconds", "budget_s")}
                                     for s in meta.get("sections", [])]))]
    layer = _read(folder, "prefill")
    if layer is not None and "ms_per_layer" in layer:
        pivot = layer.pivot_table(index="n", columns=["mode", "cuda_graph"], values="ms_per_layer").round(3)
        pivot.columns = [f"{m} ({'graph' if g else 'eager'})" for m, g in pivot.columns]
        parts += ["", "## RT prefill, ms per layer", "", _markdown(pivot.reset_index())]
    for name, title_ in (("prefill_bandwidth", "Tile updates' bandwidth"),
                         ("prefill_batch", "RT Table 2: ms per layer over batch sizes"), ("lora_ratios", "LoRA batch"),
                         ("end_to_end", "End to end")):
        t = _read(folder, name)
        if t is not None:
            parts += ["", f"## {title_}", "", _markdown(t)]
    notes = [n for s in meta.get("sections", []) for n in s.get("notes", [])]
    if notes:
        parts += ["", "## Notes", "", *[f"- {n}" for n in notes]]
    (folder / "summary.md").write_text("\n".join(parts) + "\n")
    return table
