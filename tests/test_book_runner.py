"""The book runner: parameter validation, artifacts, provenance, resumability, kills, the report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlib import paths
from rlib.book import params as params_mod
from rlib.config import ConfigError

TINY_BOOK = paths.ROOT / "tests" / "fixtures" / "tiny_book.toml"
TINY_SOURCE = paths.ROOT / "tests" / "fixtures" / "tiny_chapter.py"


def book_cli(tmp_path: Path, *args: str, manifest: Path = TINY_BOOK, **popen) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLIB_BOOK": str(manifest), "RLIB_RUNS": str(tmp_path / "runs")}
    return subprocess.run([sys.executable, "-m", "rlib.book", *args], cwd=paths.ROOT, env=env,
                          capture_output=True, text=True, timeout=600, **popen)


# --------------------------------------------------------------------------- parameters


def test_parameters_are_read_with_types_defaults_and_help():
    declared = params_mod.declared(TINY_SOURCE)
    assert list(declared)[:3] == ["profile", "out_dir", "seed"]
    assert declared["scale"].type == "float" and declared["scale"].default == 1.0
    assert declared["out_dir"].optional and declared["out_dir"].default is None
    assert declared["n_rows"].help == "rows in the table"


@pytest.mark.parametrize(
    "name,text,value",
    [("n_rows", "7", 7), ("scale", "2", 2.0), ("fail", "true", True), ("fail", "0", False), ("out_dir", "None", None)],
)
def test_cli_values_are_parsed_to_the_declared_type(name, text, value):
    param = params_mod.declared(TINY_SOURCE)[name]
    assert params_mod.parse_cli_value(param, text, "tiny") == value


@pytest.mark.parametrize("name,text", [("n_rows", "abc"), ("n_rows", "1.5"), ("scale", "x"), ("fail", "maybe"),
                                       ("n_rows", "None")])
def test_ill_typed_cli_values_are_errors_naming_the_value(name, text):
    param = params_mod.declared(TINY_SOURCE)[name]
    with pytest.raises(ConfigError, match=f"{name}.*{text}"):
        params_mod.parse_cli_value(param, text, "tiny")


@pytest.mark.parametrize(
    "cell,message",
    [
        ('profile: str = "smoke"  # p\nout_dir: str | None = None  # o\nseed: int = 0  # s\nx: int = 1 + 2  # bad\n',
         "literal"),
        ('profile: str = "smoke"  # p\nseed: int = 0  # s\n', "out_dir"),
        ('profile: str = "smoke"  # p\nout_dir: str | None = None  # o\nseed: int = "zero"  # s\n', "seed"),
        ('profile: str = "smoke"  # p\nout_dir: str | None = None  # o\nseed: int = 0  # s\nxs: list = []  # l\n',
         "type"),
        ('profile = "smoke"\n', "name: type = literal"),
    ],
)
def test_bad_parameters_cells_are_rejected(tmp_path, cell, message):
    nb = tmp_path / "ch.py"
    nb.write_text(f'# %% tags=["parameters"]\n{cell}\n# %%\nprint(1)\n')
    with pytest.raises(ConfigError, match=message):
        params_mod.declared(nb)


def test_a_notebook_needs_exactly_one_parameters_cell(tmp_path):
    nb = tmp_path / "ch.py"
    nb.write_text("# %%\nx = 1\n")
    with pytest.raises(ConfigError, match="exactly one"):
        params_mod.declared(nb)


def test_unknown_parameter_fails_fast_with_its_name(tmp_path):
    t0 = time.perf_counter()
    out = book_cli(tmp_path, "run", "--profile", "smoke", "-p", "bogus=1")
    elapsed = time.perf_counter() - t0
    assert out.returncode == 2
    assert "bogus" in out.stderr and "Known parameters" in out.stderr
    assert elapsed < 10
    assert not (tmp_path / "runs" / "smoke" / "tiny").exists()


def test_ill_typed_parameter_fails_before_anything_runs(tmp_path):
    out = book_cli(tmp_path, "run", "--profile", "smoke", "-p", "n_rows=three")
    assert out.returncode == 2 and "n_rows" in out.stderr and "three" in out.stderr
    assert not (tmp_path / "runs" / "smoke").exists()


def test_runner_owned_parameters_cannot_be_overridden(tmp_path):
    out = book_cli(tmp_path, "run", "--profile", "smoke", "-p", "out_dir=/tmp/x")
    assert out.returncode == 2 and "out_dir" in out.stderr


def test_the_real_book_rejects_bogus_in_under_10_s(tmp_path):
    t0 = time.perf_counter()
    out = book_cli(tmp_path, "run", "--profile", "smoke", "-p", "bogus=1", manifest=paths.ROOT / "book.toml")
    assert out.returncode == 2 and "'bogus'" in out.stderr
    assert time.perf_counter() - t0 < 10


# --------------------------------------------------------------------------- running


def artifacts_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_run_writes_every_artifact_provenance_and_report(tmp_path):
    out = book_cli(tmp_path, "run", "--profile", "smoke", "-p", "n_rows=4")
    assert out.returncode == 0, out.stdout + out.stderr
    folder = tmp_path / "runs" / "smoke" / "tiny"
    for name in ("numbers.csv", "numbers.md", "line.png", "line.svg", "metrics.json", "tiny.ipynb", "tiny.html"):
        assert (folder / name).is_file(), name
    assert json.loads((folder / "metrics.json").read_text()) == {"total": 6.0}
    prov = json.loads((folder / "provenance.json").read_text())
    assert prov["status"] == "complete" and prov["parameters"]["n_rows"] == 4 and prov["profile"] == "smoke"
    assert prov["cells"] and all("duration_s" in c for c in prov["cells"])
    assert prov["environment"]["versions"]["torch"].startswith("2.")
    assert set(prov["artifacts"]) == {"metrics.json", "numbers.csv", "numbers.md", "line.png", "line.svg"}
    index = (tmp_path / "runs" / "smoke" / "index.html").read_text()
    assert 'src="tiny/line.png"' in index and "tiny/numbers" in index and 'href="tiny/tiny.html"' in index


def test_second_run_skips_and_a_changed_parameter_reruns(tmp_path):
    assert book_cli(tmp_path, "run", "--profile", "smoke").returncode == 0
    folder = tmp_path / "runs" / "smoke" / "tiny"
    first = (folder / "provenance.json").read_text()
    again = book_cli(tmp_path, "run", "--profile", "smoke")
    assert again.returncode == 0 and "up to date" in again.stdout
    assert (folder / "provenance.json").read_text() == first
    changed = book_cli(tmp_path, "run", "--profile", "smoke", "-p", "scale=2")
    assert changed.returncode == 0 and "up to date" not in changed.stdout
    assert json.loads((folder / "metrics.json").read_text()) == {"total": 6.0}


def test_a_failing_chapter_keeps_the_previous_outputs(tmp_path):
    assert book_cli(tmp_path, "run", "--profile", "smoke").returncode == 0
    folder = tmp_path / "runs" / "smoke" / "tiny"
    before = artifacts_of(folder)
    failed = book_cli(tmp_path, "run", "--profile", "smoke", "-p", "fail=true", "-p", "n_rows=9")
    assert failed.returncode == 1 and "FAILED" in failed.stdout
    assert artifacts_of(folder) == before
    assert (tmp_path / "runs" / "smoke" / ".failed" / "tiny").is_dir()
    index = (tmp_path / "runs" / "smoke" / "index.html").read_text()
    assert 'src="tiny/line.png"' in index  # the report still shows the last complete run
    fixed = book_cli(tmp_path, "run", "--profile", "smoke", "-p", "n_rows=9")
    assert fixed.returncode == 0 and not (tmp_path / "runs" / "smoke" / ".failed" / "tiny").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_run_leaves_no_broken_artifact_and_the_next_run_completes(tmp_path, sig):
    assert book_cli(tmp_path, "run", "--profile", "smoke").returncode == 0
    folder = tmp_path / "runs" / "smoke" / "tiny"
    before = artifacts_of(folder)
    env = {**os.environ, "RLIB_BOOK": str(TINY_BOOK), "RLIB_RUNS": str(tmp_path / "runs")}
    proc = subprocess.Popen([sys.executable, "-m", "rlib.book", "run", "--profile", "smoke", "-p", "sleep_s=30",
                             "-p", "n_rows=8"], cwd=paths.ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    staging = tmp_path / "runs" / "smoke" / ".staging"
    deadline = time.time() + 120
    while time.time() < deadline and not list(staging.glob("tiny-*/numbers.csv")):
        time.sleep(0.2)  # killed only once the chapter is midway: its first table is written
    assert list(staging.glob("tiny-*/numbers.csv")), "the chapter never got midway"
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    assert artifacts_of(folder) == before  # the previous complete outputs, untouched
    rerun = book_cli(tmp_path, "run", "--profile", "smoke", "-p", "n_rows=8")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert json.loads((folder / "metrics.json").read_text()) == {"total": 28.0}
    assert not list(staging.glob("*"))
    prov = json.loads((folder / "provenance.json").read_text())
    from rlib.fsutil import sha256_file

    assert all(sha256_file(folder / f) == h for f, h in prov["artifacts"].items())


def test_report_and_promote(tmp_path, monkeypatch):
    assert book_cli(tmp_path, "run", "--profile", "smoke").returncode == 0
    monkeypatch.setattr(paths, "FIGURES", tmp_path / "figures")
    monkeypatch.setattr(paths, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(paths, "BOOK_MANIFEST", TINY_BOOK)
    from rlib.book import promote
    copied = promote.promote("smoke")
    assert "tiny/line.svg" in copied
    assert promote.promoted_dir("smoke") == tmp_path / "figures" / "smoke"  # only the cpu profile fills figures/
    index = json.loads((tmp_path / "figures" / "smoke" / "MANIFEST.json").read_text())
    assert index["tiny"]["profile"] == "smoke" and "line.png" in index["tiny"]["files"]


def test_promote_refuses_an_incomplete_profile(tmp_path):
    out = book_cli(tmp_path, "promote", "--profile", "cpu")
    assert out.returncode == 2 and "no complete cpu run" in out.stderr


def test_a_profile_may_skip_declared_artifacts_that_a_longer_profile_makes(tmp_path):
    from rlib.book import manifest

    def book(skip: str) -> Path:
        path = tmp_path / "book.toml"
        path.write_text('[book]\ntitle = "t"\n\n[[chapter]]\nid = "tiny"\nsource = "tests/fixtures/tiny_chapter.py"\n'
                        f'tables = ["a", "b"]\nfigures = ["f"]\n{skip}\n')
        return path

    (chapter,) = manifest.load(book('skip.cpu = ["b", "f"]')).chapters
    assert chapter.artifact_files("cpu") == ["metrics.json", "a.csv", "a.md"]
    assert len(chapter.artifact_files("smoke")) == len(chapter.artifact_files()) == 7
    assert chapter.skipped("cpu") == ("b", "f") and chapter.skipped("cpu-long") == ()
    with pytest.raises(ConfigError, match=r"skips \['z'\] under 'cpu'"):
        manifest.load(book('skip.cpu = ["z"]'))
    with pytest.raises(ConfigError, match="nightly"):
        manifest.load(book('skip.nightly = ["a"]'))
    (real,) = [c for c in manifest.load().chapters if c.id == "05_layerskip"]
    assert "parse_runs.csv" in real.artifact_files("cpu-long") and "parse_runs.csv" not in real.artifact_files("cpu")


def test_a_profile_runs_exactly_the_chapters_whose_presets_it_has():
    """book.toml's `chapters` of a profile agree with the chapters' own presets (read from each notebook's
    `<module>.<Class>.preset(profile)` calls), and naming another chapter is an error that says which it runs."""
    import importlib
    import re

    from rlib.book import manifest

    book = manifest.load()
    for profile in ("smoke", "cpu", "cpu-long", "gpu"):
        runs = {c.id for c in book.runs_in(profile)}
        for chapter in book.chapters:
            text = chapter.source.read_text()
            classes = re.findall(r"config\.(\w+)\.preset\(profile\)", text)
            package = re.search(r"from (rlib\.\w+) import \(?[\s\w,]*\bconfig\b", text).group(1)
            module = importlib.import_module(f"{package}.config")
            has = all(profile in getattr(module, name).PRESETS for name in classes)
            assert classes and has == (chapter.id in runs), (profile, chapter.id)
    with pytest.raises(ConfigError, match="has no cpu-long preset; the cpu-long profile runs 01_recursive"):
        book.select(["00"], "cpu-long")
    assert [c.id for c in book.select(None, "cpu-long")] == ["01_recursive_conversion", "02_relaxed_recursion",
                                                            "03_mixture_of_recursions", "04_recurrent_transformer",
                                                            "05_layerskip"]


def test_a_cell_timeout_names_the_cell_and_the_full_command_that_fixes_it(tmp_path):
    run = book_cli(tmp_path, "run", "--profile", "smoke", "-p", "sleep_s=60", "--cell-timeout", "5")
    text = run.stdout + run.stderr
    assert run.returncode != 0
    assert "cell timeout 5 s (--cell-timeout)" in text
    assert "timed out after 5 s in cell " in text and " of chapter " in text, text[-2000:]
    assert "--cell-timeout 10" in text and "--profile smoke" in text  # the fix, as one full command
    failure = json.loads((tmp_path / "runs" / "smoke" / ".failed" / "tiny" / "failure.json").read_text())
    assert "timed out after 5 s" in json.dumps(failure)
    assert not (tmp_path / "runs" / "smoke" / "tiny").exists()  # nothing half-written in place
