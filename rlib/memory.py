"""Memory of a saved model at inference: parameter bytes and the peak resident set size of a fresh process.

Relaxed Recursive Transformers' point is that a looped model stores K = L/B layers instead of L. Parameter bytes
show that directly; the peak RSS shows what a process actually holds once the model is loaded and has run one
forward pass (weights + activations + allocator slack). Peak RSS can only grow within a process, so every model
is measured in its own subprocess, which loads only that model (not the source it was converted from):

    python -m rlib.memory FOLDER --batch 1 --seq-len 256     # prints one JSON line

`peak_rss(folder)` runs that and returns the dict; `measure(models)` saves each Decoder to a temp folder first.
The peak is the process's VmHWM (Linux), read after imports (baseline), after loading and after the forward.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

__all__ = ["measure", "peak_rss", "process_peak_mib", "reset_peak_rss"]


def _status_mib(field: str) -> float:
    """One memory field of /proc/self/status (VmHWM, VmRSS ...) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {field} in /proc/self/status: process memory needs Linux")


def process_peak_mib() -> float:
    """This process's peak resident set so far (MiB): VmHWM of its own address space.

    Not `getrusage().ru_maxrss`: Linux keeps that high-water mark across fork and exec, so a child would report
    its parent's peak. VmHWM belongs to the memory map that exec created fresh.
    """
    return _status_mib("VmHWM")


def reset_peak_rss() -> float:
    """Lower this process's resident high-water mark to what it holds now (Linux: `clear_refs` 5) and return that
    (MiB), so that a later `process_peak_mib` reads what came after, not an earlier transient."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_mib("VmRSS")


def _child(folder: str, batch: int, seq_len: int) -> dict[str, float]:
    import torch

    from rlib.model import convert

    baseline = process_peak_mib()  # interpreter + torch + rlib, no model
    model = convert.load(folder)
    loaded = process_peak_mib()
    ids = torch.randint(0, model.config.vocab_size, (batch, seq_len), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        model(ids)
    unique = {id(p): p for p in model.parameters()}
    return {
        "param_mib": sum(p.numel() * p.element_size() for p in unique.values()) / 2**20,
        "baseline_rss_mib": baseline,
        "after_load_rss_mib": loaded,
        "peak_rss_mib": process_peak_mib(),
        "peak_over_baseline_mib": process_peak_mib() - baseline,
    }


def peak_rss(folder: str | Path, batch: int = 1, seq_len: int = 256, timeout_s: int = 600) -> dict[str, float]:
    """Measure a model saved by `rlib.model.convert.save` in a fresh process (see the module docstring)."""
    command = [sys.executable, "-m", "rlib.memory", str(folder), "--batch", str(batch), "--seq-len", str(seq_len)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"memory measurement of {folder} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(models: dict, batch: int = 1, seq_len: int = 256) -> pd.DataFrame:
    """{label: Decoder} -> one row per model: parameter MiB, peak RSS MiB (fresh process), and both vs the first."""
    from rlib.model import convert

    rows = []
    with tempfile.TemporaryDirectory(prefix="rlib-memory-") as tmp:
        for label, model in models.items():
            folder = convert.save(model, Path(tmp) / "model")
            rows.append({"model": label, "batch": batch, "seq_len": seq_len, **peak_rss(folder, batch, seq_len)})
    table = pd.DataFrame(rows)
    for col in ("param_mib", "peak_over_baseline_mib"):
        table[f"{col} / first"] = table[col] / table[col].iloc[0]
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlib.memory", description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=256)
    args = parser.parse_args(argv)
    print(json.dumps(_child(args.folder, args.batch, args.seq_len)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
