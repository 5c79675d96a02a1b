"""Results folders of `make gpu-check`: put a finished run into place, merging with an earlier run of other sections
on the same device and commit (the lent machine runs at most 10 minutes a command, so the check runs as two
`--only` calls), and unpack the archives such calls bring back into benchmarks/results/gpu/."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from benchmarks.gpu_check import summary


def section_of(table: Path, sections: list[str]) -> str | None:
    """The section a table belongs to: `prefill.csv` and `prefill_bandwidth.csv` -> "prefill"."""
    found = [s for s in sections if table.stem == s or table.stem.startswith(f"{s}_")]
    return max(found, key=len, default=None)


def _same_run(old: dict, new: dict) -> bool:
    return all(old.get(k) == new.get(k) for k in ("device", "commit", "dry_run", "date"))


def place(staging: Path, final: Path, sections: list[str]) -> dict:
    """Move `staging` (a finished run, meta.json written) to `final`, keeping the tables of sections it did not run
    from an earlier run of the same device, commit and date already there; rewrites the summary. Returns the meta."""
    meta = json.loads((staging / "meta.json").read_text())
    if final.exists():
        old = json.loads((final / "meta.json").read_text()) if (final / "meta.json").exists() else {}
        if _same_run(old, meta):
            ran = {s["section"] for s in meta["sections"]}
            for table in final.glob("*.csv"):
                section = section_of(table, sections)
                if section is not None and section not in ran and not (staging / table.name).exists():
                    shutil.copy2(table, staging / table.name)
            kept = [s for s in old.get("sections", []) if s["section"] not in ran]
            meta["sections"] = sorted(kept + meta["sections"], key=lambda s: sections.index(s["section"]))
            meta["seconds"] = round(sum(s["seconds"] for s in meta["sections"]), 1)
            (staging / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    summary.write(staging, meta)
    if final.exists():
        shutil.rmtree(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging, final)
    return meta


def unpack(archive: Path, parent: Path, sections: list[str]) -> Path:
    """Extract a `--archive` file into `parent`, merged with what is there (`place`); returns the folder."""
    if not archive.is_file():
        raise FileNotFoundError(f"{archive}: no such archive (the .tgz that `--archive` wrote)")
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix=".unpack-") as tmp, tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.12: refuse links and paths out of the folder
            tar.extractall(tmp, filter="data")
        else:
            tar.extractall(tmp)  # noqa: S202 (our own archive, written by --archive)
        folders = [p for p in Path(tmp).iterdir() if p.is_dir()]
        if len(folders) != 1 or not (folders[0] / "meta.json").exists():
            raise ValueError(f"{archive}: expected one results folder with a meta.json, found {folders}")
        staging = parent / f"{folders[0].name}.partial"
        if staging.exists():
            shutil.rmtree(staging)
        shutil.move(str(folders[0]), staging)
    final = parent / staging.name.removesuffix(".partial")
    place(staging, final, sections)
    return final
