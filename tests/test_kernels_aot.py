"""kernels.aot: both Triton kernels compiled ahead of time for sm_80 and sm_90 (no GPU needed), at every launch
configuration the launchers can choose; fails on a compile error, a register spill or shared memory over the target's
limit (issue 26). The compiles run in a subprocess without TRITON_INTERPRET (the test session sets it on CPU)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from kernels import aot
from rlib import paths

KEY = ("kernel", "variant", "target", "dtype", "config", "specialization", "covers")


def _compiler_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(paths.ROOT)
    return env


def _read(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_resource_usage_is_parsed_from_cuobjdump():
    report = ("Resource usage:\n Common:\n  GLOBAL:0\n Function _update_tile_kernel:\n"
              "  REG:118 STACK:16 SHARED:0 LOCAL:8 CONSTANT[0]:592 TEXTURE:0 SURFACE:0 SAMPLER:0\n")
    assert aot.parse_resource_usage(report) == {"REG": 118, "STACK": 16, "SHARED": 0, "LOCAL": 8}
    with pytest.raises(ValueError, match="expected one function"):
        aot.parse_resource_usage(report + report)


def test_the_compiled_ranks_cover_every_lora_rank_of_the_book():
    from rlib.relaxed.config import RelaxedConfig

    used = {r for profile in RelaxedConfig.PRESETS for cfg in [RelaxedConfig.preset(profile)]
            for r in (*cfg.ranks, *cfg.extra_ranks)}
    assert used <= set(aot.RANKS), f"ranks {sorted(used - set(aot.RANKS))} are used by the book but not compiled"


def test_every_launch_configuration_compiles_for_sm80_and_sm90_without_spills(tmp_path):
    out = subprocess.run([sys.executable, "-m", "kernels.aot", "--out-dir", str(tmp_path),
                          "--jobs", str(min(4, os.cpu_count() or 1))],
                         cwd=paths.ROOT, env=_compiler_env(), capture_output=True, text=True, timeout=1800)
    rows = _read(tmp_path / "aot.csv")
    failed = [f"{r['kernel']} {r['variant']} {r['target']} {r['dtype']} {r['config']} {r['specialization']} "
              f"({r['covers']}): {r['status']}" for r in rows if r["status"] != "ok"]
    assert out.returncode == 0 and not failed, "\n".join(failed) + out.stderr[-3000:]
    assert {r["target"] for r in rows} == {"sm_80", "sm_90"} and {r["dtype"] for r in rows} == {"fp16", "bf16"}
    kernels = {r["kernel"] for r in rows}
    assert "update_tile" in kernels and {"segmented shrink", "segmented expand", "per_row expand"} <= kernels
    for r in rows:  # the table's own numbers say the same as its status
        assert int(r["spill_bytes"]) == 0 and int(r["local_bytes"]) == 0
        assert int(r["shared_bytes"]) <= int(r["shared_limit"])
    committed = _read(paths.ROOT / "benchmarks" / "results" / "aot.csv")
    new, old = ({tuple(r[k] for k in KEY) for r in table} for table in (rows, committed))
    assert new == old, ("benchmarks/results/aot.csv is stale (launch configurations changed): rerun "
                        f"`python -m kernels.aot`; new {sorted(new - old)[:5]}, gone {sorted(old - new)[:5]}")


SPILLING = """
from kernels import aot
from kernels.tiled_prefill.triton_ops import TileConfig

found = {}
aot.tile_compiles(["sm_90"], ["bf16"], [128], found, configs=[TileConfig(64, 64, 4, 1)])
job = next(j for j in found.values() if j.specialization == "unaligned")
print(aot.compile_one(job)["status"])
"""


def test_the_check_fails_on_the_spilling_baseline_tile():
    """The launcher's old tile at head dim 128 (64 x 64 on 4 warps) spills on sm_90 when nothing is known of the
    pointers' alignment (584 B per thread; the research note's baseline): the check must say so."""
    out = subprocess.run([sys.executable, "-c", SPILLING], cwd=paths.ROOT, env=_compiler_env(),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().startswith("spills"), out.stdout
