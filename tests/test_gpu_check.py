"""`make gpu-check` known to work before a GPU is lent: the dry run (CPU, tiny shapes, Triton interpreted) goes end to
end through every section with papermill, jupytext and lm-eval unimportable (the lent machine lacks them), and
writes one complete folder that says it is a dry run on a CPU; without CUDA the real run refuses with the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pandas as pd
import pytest

from rlib import paths

MISSING_ON_THE_GPU_MACHINE = ("papermill", "jupytext", "lm_eval", "nbformat", "nbconvert", "datasets")
DRY_RUN = f"""
import sys
for name in {MISSING_ON_THE_GPU_MACHINE!r}:
    sys.modules[name] = None  # `import name` now raises ImportError, as on the lent machine
from benchmarks.gpu_check.runner import main
raise SystemExit(main(["--dry-run", "--out", sys.argv[1], "--commit", "abc1234", "--archive", sys.argv[2]]))
"""


def test_dry_run_goes_end_to_end_without_the_packages_the_gpu_machine_lacks(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(paths.ROOT)
    archive = tmp_path.parent / f"{tmp_path.name}-gpu-check.tgz"
    out = subprocess.run([sys.executable, "-c", DRY_RUN, str(tmp_path), str(archive)], cwd=paths.ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (folder,) = tmp_path.iterdir()  # one folder, renamed into place (no .partial left)
    assert folder.name.startswith("cpu-") and folder.name.endswith("-abc1234")  # renamed into place: no .partial
    with tarfile.open(archive) as tar:
        assert f"{folder.name}/summary.md" in tar.getnames()
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["dry_run"] is True and meta["device_type"] == "cpu" and meta["triton_interpret"] == "1"
    assert [s["section"] for s in meta["sections"]] == ["tests", "prefill", "lora", "end_to_end"]
    assert all(s["status"] == "ok" for s in meta["sections"]), meta["sections"]
    summary = pd.read_csv(folder / "summary.csv")
    assert set(summary["section"]) == {"tests", "prefill", "lora", "end_to_end"}
    tests = pd.read_csv(folder / "tests.csv")
    assert len(tests) >= 3 and (tests["outcome"] == "passed").all()
    e2e = pd.read_csv(folder / "end_to_end.csv")
    assert {"depth_batching", "mor_decode", "self_speculative"} <= set(e2e["study"])
    assert e2e["ratio_to_vanilla"].notna().sum() >= 6, e2e
    assert not e2e["note"].fillna("").str.contains("DIFFERS").any()  # self-speculative output == greedy output
    assert "DRY RUN on CPU" in (folder / "summary.md").read_text()


def test_the_real_run_refuses_a_machine_without_cuda(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from benchmarks.gpu_check.runner import main

    assert main([]) == 2
    assert "make gpu-check-dry" in capsys.readouterr().err


def test_bad_arguments_name_the_value():
    from benchmarks.gpu_check.runner import main

    with pytest.raises(SystemExit):
        main(["--only", "nope"])
    with pytest.raises(SystemExit):
        main(["--commit", "not a sha"])


def test_folder_names_are_device_date_commit():
    from benchmarks.gpu_check.runner import folder_name

    assert folder_name("NVIDIA H100 80GB HBM3", "2026-11-25", "1e4dcc3") == "nvidia-h100-80gb-hbm3-2026-11-25-1e4dcc3"


def _fake_run(folder, sections, commit="abc1234"):
    """A finished run of `sections` (what the runner leaves in its staging folder)."""
    folder.mkdir(parents=True)
    meta = {"device": "NVIDIA H100 80GB HBM3", "device_type": "cuda", "dry_run": False, "date": "2026-12-01",
            "commit": commit, "torch": "2.11.0", "triton": "3.6.0",
            "sections": [{"section": s, "status": "ok", "seconds": 10.0, "budget_s": 60, "notes": []}
                         for s in sections]}
    (folder / "meta.json").write_text(json.dumps(meta))
    if "prefill" in sections:
        pd.DataFrame([{"n": 512, "mode": "tiled-triton", "cuda_graph": True, "batch": 32, "ms_per_layer": 30.0,
                       "speedup_vs_naive_eager": 25.0, "seconds": 0.03}]).to_csv(folder / "prefill.csv", index=False)
    if "tests" in sections:
        pd.DataFrame([{"file": "t", "test": "x", "outcome": "passed", "seconds": 1.0, "message": ""}]).to_csv(
            folder / "tests.csv", index=False)
    return folder


def test_two_only_runs_merge_into_one_folder_and_archives_unpack(tmp_path):
    """The lent machine's 10-minute commands: `--only prefill`, then `--only tests ...`, merged per folder."""
    from benchmarks.gpu_check import folders, sections
    from benchmarks.gpu_check.runner import main

    order = list(sections.SECTIONS)
    final = tmp_path / "results" / "nvidia-h100-80gb-hbm3-2026-12-01-abc1234"
    folders.place(_fake_run(tmp_path / "a", ["prefill"]), final, order)
    folders.place(_fake_run(tmp_path / "b", ["tests"]), final, order)
    meta = json.loads((final / "meta.json").read_text())
    assert [s["section"] for s in meta["sections"]] == ["tests", "prefill"]
    assert {p.name for p in final.glob("*.csv")} == {"prefill.csv", "tests.csv", "summary.csv"}
    assert set(pd.read_csv(final / "summary.csv")["section"]) == {"tests", "prefill"}
    folders.place(_fake_run(tmp_path / "c", ["tests"], commit="def5678"), final, order)  # another commit: replaced
    assert not (final / "prefill.csv").exists()
    # archives (what `--archive` brings back) unpack and merge the same way
    for name, only in (("p", ["prefill"]), ("t", ["tests"])):
        run = _fake_run(tmp_path / name / "nvidia-h100-80gb-hbm3-2026-12-01-abc1234", only)
        with tarfile.open(tmp_path / f"{name}.tgz", "w:gz") as tar:
            tar.add(run, arcname=run.name)
    assert main(["--unpack", str(tmp_path / "p.tgz"), str(tmp_path / "t.tgz"), "--out", str(tmp_path / "gpu")]) == 0
    (merged,) = (tmp_path / "gpu").iterdir()
    assert {p.name for p in merged.glob("*.csv")} == {"prefill.csv", "tests.csv", "summary.csv"}
    with pytest.raises(FileNotFoundError, match="no such archive"):
        folders.unpack(tmp_path / "missing.tgz", tmp_path / "gpu", order)


def test_an_end_to_end_study_past_the_time_cap_is_stopped_and_the_others_kept(tmp_path, monkeypatch):
    """A study in flight at the cap stops there (the lent machine's command limit would kill the whole check)."""
    import time

    from benchmarks.gpu_check import end_to_end
    from benchmarks.gpu_check.runner import Context

    model = type("Model", (), {"to": lambda self, dtype: self})()
    monkeypatch.setattr(end_to_end, "smollm2", lambda ctx: (model, "none"))
    monkeypatch.setattr(end_to_end, "depth_batching", lambda *a: [{"study": "depth_batching", "model": "vanilla"}])
    monkeypatch.setattr(end_to_end, "self_speculative", lambda *a: time.sleep(30) or [])
    monkeypatch.setattr(end_to_end, "mor_decode", lambda *a: [{"study": "mor_decode", "model": "vanilla"}])
    ctx = Context("cpu", True, 1.5, tmp_path)
    started = time.perf_counter()
    table = end_to_end.section(ctx)[""]
    assert time.perf_counter() - started < 10
    assert list(table["study"]) == ["depth_batching", "self_speculative", "mor_decode"]
    assert list(table["note"].fillna("")) == ["", "stopped: section time cap", "skipped: section time cap"]
