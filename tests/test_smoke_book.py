"""The real book, end to end, in the smoke profile: every declared artifact and the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlib import paths
from rlib.book import manifest as manifest_mod


@pytest.mark.slow
@pytest.mark.assets
def test_smoke_book_runs_end_to_end_and_reports_every_artifact(tmp_path, needs_assets):
    needs_assets("smollm2-135m", "shakespeare", "humaneval")
    env = {**os.environ, "RLIB_RUNS": str(tmp_path / "runs"), "RLIB_BOOK": str(paths.ROOT / "book.toml")}
    out = subprocess.run([sys.executable, "-m", "rlib.book", "run", "--profile", "smoke"], cwd=paths.ROOT,
                         env=env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    root = tmp_path / "runs" / "smoke"
    index = (root / "index.html").read_text()
    for ch in manifest_mod.load(paths.ROOT / "book.toml").chapters:
        folder = root / ch.id
        for f in ch.artifact_files("smoke"):  # less what smoke's presets leave to cpu (book.toml's skip.smoke)
            assert (folder / f).is_file() and (folder / f).stat().st_size > 0, f"{ch.id}/{f}"
        prov = json.loads((folder / "provenance.json").read_text())
        assert prov["status"] == "complete" and prov["profile"] == "smoke"
        skipped = set(ch.skipped("smoke"))
        for fig in set(ch.figures) - skipped:
            assert f'src="{ch.id}/{fig}.png"' in index
        for table in set(ch.tables) - skipped:
            assert f'href="{ch.id}/{table}.csv"' in index
        assert (folder / f"{ch.id}.html").stat().st_size > 10_000
