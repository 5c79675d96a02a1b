"""Parameters validated inside the notebook: stock `papermill -p` gets the same clear error as `rlib.book`,
before any work and before any chapter output is written; config objects reject wrong types with ConfigError.

The stock-papermill tests run the tiny fixture chapter (tests/fixtures/tiny_chapter.py) converted to .ipynb,
as JupyterLab's jupytext pairing leaves it next to each chapter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlib import paths
from rlib.config import ConfigError

TINY = Path(__file__).parent / "fixtures" / "tiny_chapter.py"


@pytest.fixture(scope="module")
def tiny_ipynb(tmp_path_factory) -> Path:
    import jupytext

    nb = jupytext.read(TINY)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    out = tmp_path_factory.mktemp("nb") / "tiny_chapter.ipynb"
    jupytext.write(nb, out)
    return out


def _stock_papermill(notebook: Path, tmp_path: Path, *params: str) -> tuple[subprocess.CompletedProcess, float]:
    """`python -m papermill NB out.ipynb -p ...` in a clean folder, the chapter's outputs going to tmp_path/runs."""
    env = {**os.environ, "RLIB_RUNS": str(tmp_path / "runs"), "PYTHONPATH": str(paths.ROOT),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("RLIB_BOOK_RUNNER", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "papermill", str(notebook), str(tmp_path / "out.ipynb"), *params],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return proc, time.perf_counter() - t0


def _chapter_outputs(tmp_path: Path) -> list[Path]:
    runs = tmp_path / "runs"
    return sorted(p for p in runs.rglob("*") if p.is_file()) if runs.exists() else []


@pytest.mark.parametrize("params, message", [
    (("-p", "unknown_param", "1"), "unknown parameter 'unknown_param'"),
    (("-p", "seed", "notanumber"), "parameter 'seed' must be int, got 'notanumber' (str)"),
    (("-p", "n_rows", "2.5"), "parameter 'n_rows' must be int, got 2.5 (float)"),
    (("-p", "seed", "-1"), "parameter 'seed' = -1 is out of its range [0..4294967295]"),
])
def test_stock_papermill_bad_parameter_fails_fast_with_no_chapter_output(tiny_ipynb, tmp_path, params, message):
    proc, seconds = _stock_papermill(tiny_ipynb, tmp_path, *params, "-p", "sleep_s", "60")
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "ConfigError" in text and message in text, text
    assert seconds < 60, f"the bad parameter was caught only after {seconds:.0f} s (the chapter sleeps 60 s)"
    assert _chapter_outputs(tmp_path) == []  # nothing written but papermill's own out.ipynb holding the error


def test_stock_papermill_good_parameters_run_the_chapter(tiny_ipynb, tmp_path):
    proc, _ = _stock_papermill(tiny_ipynb, tmp_path, "-p", "n_rows", "2", "-p", "scale", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(p.name.startswith("numbers") for p in _chapter_outputs(tmp_path))


@pytest.mark.parametrize("build, message", [
    (lambda: __import__("rlib.looping", fromlist=["Looping"]).Looping(n_loops="3"),
     "Looping.n_loops must be int, got '3' (str)"),
    (lambda: __import__("rlib.relax", fromlist=["Relaxation"]).Relaxation(rank="8"),
     "Relaxation.rank must be int, got '8'"),
    (lambda: __import__("rlib.mor.spec", fromlist=["MoRSpec"]).MoRSpec(alpha="x"),
     "MoRSpec.alpha must be float, got 'x'"),
    (lambda: __import__("rlib.recurrent.config", fromlist=["RTConfig"]).RTConfig(
        vocab_size=10, d_model="16", n_layers=1, n_heads=2), "RTConfig.d_model must be int, got '16'"),
    (lambda: __import__("rlib.train", fromlist=["TrainConfig"]).TrainConfig().override(seed="1"),
     "TrainConfig.seed must be int, got '1'"),
])
def test_config_objects_reject_wrong_types_with_the_configuration_error(build, message):
    with pytest.raises(ConfigError) as err:
        build()
    assert message in str(err.value)


def test_decoder_config_rejects_a_wrong_type():
    import dataclasses

    from tests.test_looping import tiny_config

    with pytest.raises(ConfigError, match=r"DecoderConfig.d_model must be int, got '32' \(str\)"):
        dataclasses.replace(tiny_config(2), d_model="32")
