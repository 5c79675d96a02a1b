"""Profiles and presets: every preset builds, smoke stays small, and GPU/hub profiles fail clearly here."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlib import paths
from rlib.basemodels.config import ModelsDataConfig
from rlib.config import ConfigError, check_resources, get_profile


@pytest.mark.parametrize("profile", list(ModelsDataConfig.PRESETS))
def test_every_chapter_preset_builds_for_every_profile(profile):
    cfg = ModelsDataConfig.preset(profile)
    assert cfg.models and cfg.eval_corpora and len(cfg.digest()) == 12


def test_smoke_is_smaller_than_cpu():
    smoke, cpu = ModelsDataConfig.preset("smoke"), ModelsDataConfig.preset("cpu")
    assert smoke.n_eval_windows * smoke.seq_len < cpu.n_eval_windows * cpu.seq_len
    assert len(smoke.models) <= len(cpu.models)


def test_paper_profile_names_hub_models_through_the_same_loader():
    assert all(m.startswith("hf:") for m in ModelsDataConfig.preset("paper").models)


def test_override_keeps_none_and_rejects_unknown_fields():
    cfg = ModelsDataConfig.preset("smoke")
    assert cfg.override(n_eval_windows=None) == cfg
    assert cfg.override(n_eval_windows=7).n_eval_windows == 7
    with pytest.raises(ConfigError, match="bogus"):
        cfg.override(bogus=1)


def test_bad_values_are_rejected_when_the_config_is_built():
    with pytest.raises(ConfigError, match="float64"):
        ModelsDataConfig.preset("smoke").override(dtypes=("float64",))
    with pytest.raises(ConfigError, match="seq_len=1"):
        ModelsDataConfig.preset("smoke").override(seq_len=1)
    with pytest.raises(ConfigError, match="task_suite='mmlu'"):
        ModelsDataConfig.preset("smoke").override(task_suite="mmlu")
    with pytest.raises(ConfigError, match="task_limit=0"):
        ModelsDataConfig.preset("smoke").override(task_limit=0)
    with pytest.raises(ConfigError, match="task_precision='fp16'"):
        ModelsDataConfig.preset("smoke").override(task_precision="fp16")


def test_the_task_suite_runs_in_the_precision_later_chapters_score_in(monkeypatch):
    from rlib import precision
    from rlib.basemodels.experiments import suite_dtype

    cpu = ModelsDataConfig.preset("cpu")
    assert cpu.task_precision == "auto"
    for native, dtype in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(precision, "bf16_native", lambda native=native: native)
        assert suite_dtype(cpu) == dtype
    assert suite_dtype(cpu.override(task_precision="no")) == "float32"
    assert suite_dtype(cpu.override(task_precision="bf16")) == "bfloat16"


def test_unknown_profile_is_named():
    with pytest.raises(ConfigError, match="'huge'.*smoke, cpu, cpu-long, gpu, paper"):
        get_profile("huge")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("profile", ["gpu", "paper"])
def test_gpu_profiles_fail_clearly_without_a_gpu(profile):
    with pytest.raises(ConfigError, match="GPU"):
        check_resources(get_profile(profile))
    env = {**os.environ, "RLIB_RUNS": "/nonexistent/never-written"}
    out = subprocess.run([sys.executable, "-m", "rlib.book", "run", "--profile", profile], cwd=paths.ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "GPU" in out.stderr


def test_paper_profile_needs_the_hub(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from dataclasses import replace

    with pytest.raises(ConfigError, match="hub"):
        check_resources(replace(get_profile("paper"), min_gpus=0))
