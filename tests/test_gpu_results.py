"""rlib.gpu_results: the chapters read the newest complete GPU run, with its device, date and commit, and otherwise
show "not measured on a GPU" with no value (never a dry run's CPU number, never an interrupted run)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from rlib import gpu_results


def make_run(root, name, device_type="cuda", dry_run=False, date="2026-12-01", value=12.5,
             sections=("prefill", "end_to_end")):
    folder = root / name
    folder.mkdir(parents=True)
    meta = {"device": "NVIDIA H100 80GB HBM3" if device_type == "cuda" else "cpu", "device_type": device_type,
            "dry_run": dry_run, "date": date, "commit": name[-7:],
            "sections": [{"section": s, "status": "ok"} for s in sections]}
    (folder / "meta.json").write_text(json.dumps(meta))
    rows = {"prefill": {"section": "prefill", "metric": "ms per layer, tiled-triton, CUDA graph, N=512, B=32",
                        "value": value, "target": "paper Table 2: 38.85", "note": ""},
            "end_to_end": {"section": "end_to_end",
                           "metric": "self_speculative: self-speculative E=8 d=4 / autoregressive", "value": 1.4,
                           "target": "", "note": ""}}
    pd.DataFrame([rows[s] for s in sections]).to_csv(folder / "summary.csv", index=False)
    return folder


def test_without_a_gpu_run_every_section_says_not_measured(tmp_path):
    make_run(tmp_path, "cpu-2026-12-02-aaaaaaa", device_type="cpu", dry_run=True, value=5063.0)  # a dry run
    make_run(tmp_path, "nvidia-h100-2026-12-03-bbbbbbb.partial")  # interrupted
    assert gpu_results.latest_run(tmp_path) is None
    for chapter in ("02", "03", "04", "05"):
        table = gpu_results.chapter_table(chapter, tmp_path)
        assert table["metric"].str.endswith(gpu_results.NOT_MEASURED).all()
        assert table["value"].isna().all() and (table["device"] == "").all()
    assert gpu_results.latest_run(tmp_path / "missing") is None


def test_the_newest_complete_gpu_run_is_read_with_its_device_date_and_commit(tmp_path):
    make_run(tmp_path, "nvidia-h100-2026-12-01-1111111", value=40.0)
    make_run(tmp_path, "nvidia-h100-2026-12-05-2222222", date="2026-12-05", value=39.0)
    make_run(tmp_path, "cpu-2026-12-09-3333333", device_type="cpu", dry_run=True, date="2026-12-09", value=5063.0)
    run = gpu_results.latest_run(tmp_path)
    assert run.commit == "2222222" and run.label == "NVIDIA H100 80GB HBM3, 2026-12-05, commit 2222222"
    table = gpu_results.chapter_table("04", tmp_path).set_index("section")
    assert table.loc["prefill", "value"] == 39.0 and table.loc["prefill", "commit"] == "2222222"
    assert table.loc["prefill_batch", "metric"] == f"prefill_batch: {gpu_results.NOT_MEASURED}"  # Table 2 not run
    chapter_05 = gpu_results.chapter_table("05", tmp_path)
    assert list(chapter_05["value"]) == [1.4]
    chapter_03 = gpu_results.chapter_table("03", tmp_path)  # this run has no MoR row: said so, not left blank
    assert chapter_03["metric"].iloc[0] == f"mor_decode: {gpu_results.NOT_MEASURED}" and math.isnan(
        chapter_03["value"].iloc[0])
    with pytest.raises(FileNotFoundError, match="this run has"):
        run.table("nope")
    with pytest.raises(ValueError, match="chapter='01'"):
        gpu_results.chapter_table("01", tmp_path)


def test_a_check_of_some_sections_alone_leaves_the_others_newest_numbers(tmp_path):
    make_run(tmp_path, "nvidia-h100-2026-12-01-1111111", value=40.0)
    newer = make_run(tmp_path, "nvidia-h100-2026-12-05-2222222", date="2026-12-05", value=39.0, sections=("prefill",))
    pd.DataFrame([{"n": 512, "mode": "naive", "seconds": 0.4}]).to_csv(newer / "prefill.csv", index=False)
    assert gpu_results.latest_run(tmp_path).commit == "2222222"
    chapter_04 = gpu_results.chapter_table("04", tmp_path)
    assert list(chapter_04.loc[chapter_04["section"] == "prefill", "commit"]) == ["2222222"]
    chapter_05 = gpu_results.chapter_table("05", tmp_path)  # the newer run did not measure it: the older one's row
    assert list(chapter_05["value"]) == [1.4] and list(chapter_05["commit"]) == ["1111111"]
    assert gpu_results.section_table("prefill", tmp_path)["commit"].iloc[0] == "2222222"
    assert gpu_results.section_table("end_to_end", tmp_path)["note"].iloc[0].endswith(gpu_results.NOT_MEASURED)


def test_a_section_table_carries_its_run_or_says_not_measured(tmp_path):
    assert gpu_results.section_table("prefill", tmp_path)["note"].iloc[0] == f"prefill: {gpu_results.NOT_MEASURED}"
    folder = make_run(tmp_path, "nvidia-h100-2026-12-01-1111111")
    pd.DataFrame([{"n": 512, "mode": "naive", "seconds": 0.5}]).to_csv(folder / "prefill.csv", index=False)
    table = gpu_results.section_table("prefill", tmp_path)
    assert table.to_dict("records") == [{"n": 512, "mode": "naive", "seconds": 0.5, "device": "NVIDIA H100 80GB HBM3",
                                         "date": "2026-12-01", "commit": "1111111"}]
