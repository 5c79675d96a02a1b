"""`promote`: copy a profile's complete artifacts into the committed `figures/` folder.

`figures/<chapter>/` then holds the small PNG/SVG/CSV/MD files of the latest `cpu` run (the main
job), so a reader sees the results on the repository without running anything, and
`figures/MANIFEST.json` records where every file came from (profile, git SHA, run key, sha256).

Every other profile promotes into its own folder, never over the cpu results: `cpu-long` (the studies
that need more than the cpu profile) into `figures/cpu-long/<chapter>/` with its own `MANIFEST.json`
and `README.md`, and likewise `figures/gpu/`, `figures/smoke/`. Each MANIFEST entry names its profile,
so a claim read from a promoted table can say which profile measured it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rlib.book import manifest as manifest_mod
from rlib.book.layout import MAIN_PROFILE, missing_artifacts, profile_dir, promoted_dir, run_command
from rlib.book.session import cache_phrase, write_json
from rlib.config import ConfigError, get_profile
from rlib.fsutil import atomic_path, sha256_file


def promote(profile: str = MAIN_PROFILE, only: list[str] | None = None) -> list[str]:
    get_profile(profile)
    manifest = manifest_mod.load()
    chapters = manifest.select(only, profile)
    root = profile_dir(profile)
    for ch in chapters:  # every chapter must be complete before anything is copied
        prov = root / ch.id / "provenance.json"
        if not prov.exists() or missing_artifacts(ch, root / ch.id, profile):
            raise ConfigError(f"{ch.id} has no complete {profile} run in {root / ch.id}; "
                              f"run `{run_command(profile, ch.id)}` first")
    target = promoted_dir(profile)
    index_file = target / "MANIFEST.json"
    index = json.loads(index_file.read_text()) if index_file.exists() else {}
    copied = []
    for ch in chapters:
        src, dst = root / ch.id, target / ch.id
        prov = json.loads((src / "provenance.json").read_text())
        shutil.rmtree(dst, ignore_errors=True)
        dst.mkdir(parents=True)
        for f in ch.artifact_files(profile):
            shutil.copy2(src / f, dst / f)
            copied.append(f"{ch.id}/{f}")
        index[ch.id] = {
            "profile": profile, "git": prov["git"], "key": prov["key"], "started": prov["started"],
            "wall_s": prov["wall_s"], "run_cache": prov.get("run_cache"), "parameters": prov["parameters"],
            "device": (prov.get("environment") or {}).get("device"),
            "files": {f: sha256_file(dst / f) for f in ch.artifact_files(profile)},
        }
    write_json(index_file, index)
    write_readme(manifest, index, target, profile)
    write_ledger(manifest, target, profile)
    return copied


def write_ledger(manifest, target, profile: str) -> None:
    """`CLAIMS.md` of a promoted folder: every promoted chapter's claims judged by the current code from its promoted
    tables (`rlib.book.rejudge`), with the verdict counts. For a chapter promoted by this code that is its own
    `claims.csv` (a ledger is a pure function of the tables); a chapter promoted before its ledger existed is judged
    the same way instead of being left out. Where cpu did not measure a claim that the promoted cpu-long run did, the
    row comes from there and says so in its `profile` column."""
    from rlib.book import ledger_page
    from rlib.book.rejudge import rejudge, with_extensions

    table = with_extensions(rejudge(target, profile, [ch.id for ch in manifest.chapters]), profile)
    with atomic_path(target / "CLAIMS.md") as tmp:
        tmp.write_text(ledger_page.ledger_markdown(
            table, f"Claims ledger of the promoted `{profile}` run: every chapter's tables judged by the claims code "
                   "at promotion (`python -m rlib.book ledger` re-judges them)"))


README_TABLE_ROWS = 40  # a longer table is cut in the README (a per-step curve runs to thousands of rows)


def _inline_table(path: Path, link: str) -> str:
    """A table's markdown for the README: whole up to README_TABLE_ROWS rows, else its head and a link to the file."""
    lines = path.read_text().splitlines()
    if len(lines) <= README_TABLE_ROWS + 2:  # header and rule
        return "\n".join(lines) + "\n"
    head = "\n".join(lines[:README_TABLE_ROWS + 2])
    return f"{head}\n\n*First {README_TABLE_ROWS} of {len(lines) - 2} rows; the whole table: [{link}.md]({link}.md).*\n"


def write_readme(manifest, index: dict, target, profile: str) -> None:
    """`README.md` of a promoted folder: every promoted figure and table inline, readable on the repository."""
    parts = [f"# Results of the latest promoted `{profile}` run\n",
             "Written by `python -m rlib.book promote"
             + ("" if profile == MAIN_PROFILE else f" --profile {profile}")
             + "`; provenance of every file in `MANIFEST.json`.\n"]
    for ch in manifest.chapters:
        if ch.id not in index:
            continue
        meta = index[ch.id]
        sha = (meta["git"].get("sha") or "?")[:10]
        device = (meta.get("device") or {}).get("name", "?")
        cache = f" ({cache_phrase(meta['run_cache'])})" if meta.get("run_cache") else ""
        parts.append(f"## {ch.id} · {ch.title}\n\nprofile `{meta['profile']}`, git `{sha}`, "
                     f"{meta['wall_s']:.0f} s on {device}{cache}\n")
        figures = [n for n in ch.figures if (target / ch.id / f"{n}.png").is_file()]
        tables = [n for n in ch.tables if (target / ch.id / f"{n}.md").is_file()]
        skipped = ch.skipped(meta["profile"])
        missing = [f"`{n}`" for n in (*ch.figures, *ch.tables) if n not in figures + tables and n not in skipped]
        if skipped:
            names = ", ".join(f"`{n}`" for n in skipped)
            parts.append(f"*Left to a longer profile (see its promoted folder): {names}.*\n")
        if missing:  # promoted before the chapter wrote them
            parts.append(f"*Not in this promoted run (it predates them; `{run_command(profile, ch.id)}` and "
                         f"promote write them): {', '.join(missing)}.*\n")
        parts += [f"![{ch.id}/{name}]({ch.id}/{name}.png)\n" for name in figures]
        parts += [f"### {name}\n\n{_inline_table(target / ch.id / f'{name}.md', f'{ch.id}/{name}')}" for name in tables]
    with atomic_path(target / "README.md") as tmp:
        tmp.write_text("\n".join(parts))
