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
raise SystemExit(main(["--dry-run", "--out", sys.argv[1], "--commit", "abc1234", "--archive", sys.argv[2],
                       "--budget-scale", "8"]))
"""
# the caps times 8: on a loaded host (CI's `pytest -n auto`, or a chapter running beside the tests) the dry-run's
# 10-45 s caps stopped sections and failed this test; the caps themselves are tested on their own below


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
    assert [s["section"] for s in meta["sections"]] == ["tests", "prefill", "prefill_batch", "lora", "end_to_end"]
    assert all(s["status"] == "ok" for s in meta["sections"]), meta["sections"]
    summary = pd.read_csv(folder / "summary.csv")
    assert set(summary["section"]) == {"tests", "prefill", "prefill_batch", "lora", "end_to_end"}
    batch = pd.read_csv(folder / "prefill_batch.csv")
    # the paper's PyTorch tiles first (Sec. 6: no custom kernels), the book's Triton tiles after them
    assert list(batch["mode"].unique())[0] == "tiled-reference" and batch["ms_per_layer"].notna().all()
    assert all(list(part["batch"]) == [1, 2] for _, part in batch.groupby("mode"))
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


def test_the_lent_machine_parts_cover_every_section_once_and_each_fits_one_command():
    from benchmarks.gpu_check import sections
    from benchmarks.gpu_check.runner import BUDGETS, LENT_SCALE, PARTS, main

    parted = [s for part in PARTS.values() for s in part]
    assert sorted(parted) == sorted(sections.SECTIONS) and len(parted) == len(set(parted))
    assert set(BUDGETS) == set(sections.SECTIONS)
    for part, names in PARTS.items():  # the lent machine stops a command at 600 s; leave room for start-up and writing
        assert sum(BUDGETS[s] for s in names) * LENT_SCALE <= 540, (part, names)
    assert sum(BUDGETS.values()) <= 20 * 60  # issue 26: <= 20 minutes on one H100
    for bad in (["--part", "1", "--only", "tests"], ["--part", "3"]):
        with pytest.raises(SystemExit):
            main(bad)


def test_table2_rows_read_flatness_and_graph_speedups():
    from benchmarks.gpu_check.sections import PAPER_TABLE2
    from benchmarks.gpu_check.summary import prefill_batch_rows

    rows = []
    for batch in (32, 64, 2048):
        eager, graph = 300.0 + batch / 100, 30.0 + batch / 10
        paper_eager, paper_graph = PAPER_TABLE2[batch]
        rows += [{"mode": "tiled-reference", "batch": batch, "cuda_graph": False, "ms_per_layer": eager,
                  "graph_speedup": float("nan"), "paper_ms_per_layer": paper_eager,
                  "paper_graph_speedup": float("nan")},
                 {"mode": "tiled-reference", "batch": batch, "cuda_graph": True, "ms_per_layer": graph,
                  "graph_speedup": eager / graph, "paper_ms_per_layer": paper_graph,
                  "paper_graph_speedup": paper_eager / paper_graph}]
    rows += [dict(row, mode="tiled-triton", ms_per_layer=row["ms_per_layer"] / 2) for row in rows]
    out = pd.DataFrame(prefill_batch_rows(pd.DataFrame(rows)))
    assert out["value"].iloc[0] == round(320.48 / 300.32, 3) and "1.066" in out["target"].iloc[0]
    assert list(out["metric"].iloc[1:3]) == ["tiled-reference: CUDA graph speed-up over eager, B=32",
                                             "tiled-reference: CUDA graph speed-up over eager, B=2048"]
    assert out["target"].iloc[1] == "paper Table 2: 7.1x" and out["target"].iloc[2] == "paper Table 2: 1.2x"
    assert len(out) == 6 and out["metric"].iloc[3].startswith("tiled-triton: eager")  # each implementation apart


def _tiny_carried(folder, temperature: float):
    """What `carry.py` writes, for a tiny random model (the plumbing; the real one is chapter 05's trained model)."""
    import torch
    from transformers import LlamaConfig

    from benchmarks.gpu_check.end_to_end import TINY
    from rlib.model import Decoder, DecoderConfig, convert
    from rlib.model.init import init_weights

    model = init_weights(Decoder(DecoderConfig.from_hf(LlamaConfig(**TINY)).replace(eos_ids=())), seed=0)
    convert.save(model, folder / "model")
    torch.save(torch.randint(3, TINY["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(0)),
               folder / "prompts.pt")
    meta = {"run": "ld_ee-s0", "profile": "smoke", "n_layers": TINY["num_hidden_layers"], "exits": [2, 3],
            "drafts": [2], "temperature": temperature, "new_tokens": 6, "prompts": 2, "repeats": 1}
    (folder / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_carried_trained_model_is_decoded_as_chapter_05_does_and_exactly(tmp_path, temperature):
    from benchmarks.gpu_check import end_to_end
    from benchmarks.gpu_check.runner import Context
    from benchmarks.gpu_check.summary import end_to_end_rows

    _tiny_carried(tmp_path, temperature)
    ctx = Context("cpu", False, 60, tmp_path)
    assert end_to_end.carried_layerskip(ctx, tmp_path / "absent") is None
    rows = pd.DataFrame(end_to_end.self_speculative_trained(ctx, end_to_end.carried_layerskip(ctx, tmp_path)))
    assert list(rows["model"]) == ["autoregressive", "self_speculative E=2 d=2 kvq", "self_speculative E=3 d=2 kvq"]
    assert (rows["study"] == "self_speculative_trained").all() and rows["weights"].str.contains("trained").all()
    assert not rows["note"].str.contains("DIFFERS").any()  # the same tokens as autoregressive decoding (same noise)
    assert rows["headline"].sum() == 2  # the autoregressive row and the best setting
    assert rows["acceptance"].iloc[1:].between(0, 1).all()
    headline = end_to_end_rows(rows)
    assert len(headline) == 1 and headline[0]["metric"].startswith("self_speculative_trained: ")
    assert headline[0]["metric"].endswith("/ autoregressive")


def test_carry_exports_chapter_05s_model_or_says_how_to_train_it(tmp_path, monkeypatch):
    from benchmarks.gpu_check import carry
    from rlib import experiments

    monkeypatch.setattr(experiments, "work_dir", lambda profile, chapter: tmp_path / "work" / chapter)
    with pytest.raises(SystemExit, match="run chapter 05 first"):
        carry.export_layerskip("smoke", tmp_path / "carry")
    assert not (tmp_path / "carry" / carry.LAYERSKIP).exists()
    (tmp_path / "work" / "05_layerskip" / "ld_ee-s0").mkdir(parents=True)
    _tiny_carried(tmp_path / "work" / "05_layerskip" / "ld_ee-s0", 1.0)
    target = carry.export_layerskip("smoke", tmp_path / "carry")
    meta = json.loads((target / "meta.json").read_text())
    assert meta["run"] == "ld_ee-s0" and meta["profile"] == "smoke" and meta["exits"]
    import torch

    prompts = torch.load(target / "prompts.pt")
    assert prompts.shape == (meta["prompts"], meta["prompt_len"])
    assert (target / "model" / "decoder.json").exists() and not list((tmp_path / "carry").glob(".*partial"))


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
