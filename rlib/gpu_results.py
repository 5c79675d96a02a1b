"""The newest GPU results (`make gpu-check`, issue 26) for the chapters: RT Table 2 / Fig. 4 (chapter 04), the LoRA
batch and depth-wise batching of RRT Fig. 8 (chapter 02), MoR Fig. 4a (chapter 03), self-speculative decoding
(chapter 05).

    from rlib import gpu_results
    run = gpu_results.latest_run()                 # GpuRun (folder, device, date, commit) or None
    gpu_results.chapter_table("04")                # the chapter's headline rows, with device / date / commit columns

A folder counts only if its `meta.json` says it ran on CUDA and was not a dry run; `*.partial` folders (an interrupted
run) never count. Without one, the table has one row per section whose metric is "not measured on a GPU" and whose
value is empty: a CPU number never appears in a GPU column.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rlib import paths

__all__ = ["CHAPTER_SECTIONS", "NOT_MEASURED", "GpuRun", "chapter_table", "gpu_table", "latest_run", "results_root",
           "section_table"]

NOT_MEASURED = "not measured on a GPU"
COLUMNS = ("section", "metric", "value", "target", "note", "device", "date", "commit")
# chapter -> (section of the summary, prefix of its metric or "" for all)
CHAPTER_SECTIONS = {
    "02": (("lora", ""), ("end_to_end", "depth_batching")),
    "03": (("end_to_end", "mor_decode"),),
    "04": (("prefill", ""), ("prefill_batch", "")),
    "05": (("end_to_end", "self_speculative"),),
}


def results_root() -> Path:
    return paths.ROOT / "benchmarks" / "results" / "gpu"


@dataclass(frozen=True)
class GpuRun:
    """One `make gpu-check` results folder."""

    folder: Path
    meta: dict

    @property
    def device(self) -> str:
        return self.meta["device"]

    @property
    def date(self) -> str:
        return self.meta["date"]

    @property
    def commit(self) -> str:
        return self.meta["commit"]

    @property
    def label(self) -> str:
        return f"{self.device}, {self.date}, commit {self.commit}"

    def table(self, name: str) -> pd.DataFrame:
        """One of the folder's tables by name: "summary", "prefill", "prefill_bandwidth", "lora_ratios", ..."""
        path = self.folder / f"{name}.csv"
        if not path.exists():
            tables = sorted(p.stem for p in self.folder.glob("*.csv"))
            raise FileNotFoundError(f"{path} does not exist; this run has {tables}")
        return pd.read_csv(path)


def _run_of(folder: Path) -> GpuRun | None:
    """The folder as a GpuRun if it is a complete run on CUDA (not a dry run, not interrupted)."""
    if folder.name.endswith(".partial") or not (folder / "summary.csv").exists():
        return None
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if meta.get("device_type") != "cuda" or meta.get("dry_run", True):
        return None
    return GpuRun(folder, meta)


def latest_run(root: Path | None = None, section: str | None = None, table: str | None = None) -> GpuRun | None:
    """The newest complete GPU run under `root` (default benchmarks/results/gpu), by its date, then folder name; with
    `section`, the newest that ran that section, with `table`, the newest that has that table (a later check of some
    sections alone leaves the others' newest numbers where they were)."""
    root = results_root() if root is None else root
    runs = [run for folder in root.glob("*/") if (run := _run_of(folder)) is not None] if root.is_dir() else []
    if section is not None:
        runs = [r for r in runs if any(s.get("section") == section for s in r.meta.get("sections", []))]
    if table is not None:
        runs = [r for r in runs if (r.folder / f"{table}.csv").exists()]
    return max(runs, key=lambda r: (r.date, r.folder.name), default=None)


def gpu_table(sections: tuple[tuple[str, str], ...], root: Path | None = None) -> pd.DataFrame:
    """The headline rows of (section, metric prefix) pairs, each from the newest GPU run of its section, with device,
    date and commit; one "not measured on a GPU" row per pair without a run (or without rows for it)."""
    rows = []
    for section, prefix in sections:
        run = latest_run(root, section=section)
        summary = run.table("summary") if run is not None else None
        found = pd.DataFrame()
        if summary is not None:
            found = summary[(summary["section"] == section) & summary["metric"].astype(str).str.startswith(prefix)]
        if found.empty:
            rows.append({"section": section, "metric": f"{prefix or section}: {NOT_MEASURED}", "value": float("nan"),
                         "target": "", "note": "run `make gpu-check` on a GPU and commit its benchmarks/results/gpu/ "
                                               "folder", "device": "", "date": "", "commit": ""})
            continue
        for record in found.to_dict("records"):
            rows.append({**record, "device": run.device, "date": run.date, "commit": run.commit})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def section_table(name: str, root: Path | None = None) -> pd.DataFrame:
    """One detailed table ("prefill", "lora", "end_to_end" ...) of the newest GPU run that has it, with its device,
    date and commit as columns, or one row whose `note` says "not measured on a GPU" (the chapters' claims read it: an
    empty measurement never passes for a GPU number)."""
    run = latest_run(root, table=name)
    if run is None:
        return pd.DataFrame([{"note": f"{name}: {NOT_MEASURED}", "device": "", "date": "", "commit": ""}])
    table = run.table(name)
    return table.assign(device=run.device, date=run.date, commit=run.commit)


def chapter_table(chapter: str, root: Path | None = None) -> pd.DataFrame:
    """The GPU rows of chapter "02", "03", "04" or "05" (`CHAPTER_SECTIONS`)."""
    if chapter not in CHAPTER_SECTIONS:
        raise ValueError(f"chapter={chapter!r}: choose from {sorted(CHAPTER_SECTIONS)}")
    return gpu_table(CHAPTER_SECTIONS[chapter], root)
