"""Torch's thread count, set once from the cores this process may actually use.

Torch sizes its intra-op pool from the machine's physical cores, not from the cores a container,
`taskset` or a cgroup quota leave to the process, and it ignores a busy machine; two chapters'
worth of threads on two cores then fight over them. `configure()` sets it once, early (chapter
start through `rlib.book.start`, the test suite's conftest, the command lines):

    RLIB_THREADS=N      an explicit count (capped at the available cores: never oversubscribe)
    OMP_NUM_THREADS=N   honoured the same way when RLIB_THREADS is unset
    otherwise           the cores available to the process: `os.sched_getaffinity`, lowered by a
                        cgroup v2 CPU quota (`cpu.max`) when one is set

`describe()` is what `environment.json` records.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

ENV = "RLIB_THREADS"
_CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
_configured: dict | None = None
log = logging.getLogger("rlib.threads")


def available_cores() -> int:
    """Cores this process may run on: its CPU affinity, lowered by a cgroup CPU quota if there is one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    try:
        quota, period = _CGROUP_CPU_MAX.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.floor(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def _requested() -> tuple[int | None, str]:
    for name in (ENV, "OMP_NUM_THREADS"):
        text = os.environ.get(name, "").strip()
        if not text:
            continue
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            from rlib.config import ConfigError

            raise ConfigError(f"{name}={text!r} is not a positive thread count; unset it or give e.g. {name}=2")
        return value, name
    return None, "sched_getaffinity"


def configure() -> dict:
    """Set torch's intra-op threads (once per process; later calls return the first result)."""
    global _configured
    if _configured is not None:
        return _configured
    import torch

    cores = available_cores()
    requested, source = _requested()
    threads = cores if requested is None else min(requested, cores)
    if requested is not None and requested > cores:
        log.warning(f"[threads] {source}={requested} but only {cores} core(s) are available; using {cores}")
    torch.set_num_threads(threads)
    _configured = {"torch": torch.get_num_threads(), "available_cores": cores, "source": source,
                   "requested": requested}
    return _configured


def describe() -> dict:
    """The thread settings of this process, for `environment.json`."""
    import torch

    info = dict(_configured) if _configured else {"torch": None, "source": "not configured"}
    info["torch_now"] = torch.get_num_threads()
    info["available_cores"] = available_cores()
    return info
