"""Mixed precision that the machine computes natively: the presets' `precision="auto"`.

bf16 autocast halves the bytes every matmul moves, and on a CPU with native bf16 arithmetic (AVX512-BF16 or AMX,
e.g. recent Intel Xeons) it trains the book's models about 2.4x faster than fp32. A CPU without it (AVX2 only, e.g.
many AMD EPYC cloud machines) emulates bf16 instead: the same training step then runs about 20x *slower* than in
fp32 (a [4096, 256] -> 768 -> 256 MLP forward and backward: 0.07 s fp32 vs 1.65 s bf16 on a 2-core AVX2 machine), and
a chapter that fits its budget on one machine takes most of a day on the other. So a preset asks for

    "auto"  bf16 autocast where the device computes bf16 natively (a CUDA GPU that supports it, a CPU with
            AVX512-BF16 or AMX), fp32 elsewhere
    "bf16"  bf16 autocast wherever it runs (slow where emulated)
    "no"    fp32

and every chapter config resolves its field once, when it is built (`resolve`), so a run's cache key, its recorded
config and its training all say the precision it actually used: fp32 and bf16 runs never share a key.
"""

from __future__ import annotations

import functools
import logging

from rlib.config import ConfigError

__all__ = ["PRECISIONS", "bf16_native", "describe", "resolve"]

PRECISIONS = ("auto", "bf16", "no")
log = logging.getLogger("rlib.precision")


@functools.cache
def bf16_native() -> bool:
    """Whether the device the book trains on (CUDA if available, else the CPU) computes bf16 natively."""
    import torch

    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    probes = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(bool(probe()) for probe in probes if probe is not None)


@functools.cache
def _note_fallback() -> None:
    import torch

    log.warning(f"[precision] this CPU ({torch.backends.cpu.get_cpu_capability()}) has no native bf16 (AVX512-BF16 "
                "or AMX), where bf16 autocast runs ~20x slower than fp32: precision 'auto' trains in fp32 here "
                "(ask for 'bf16' explicitly to use it anyway)")


def resolve(precision: str) -> str:
    """A config's precision field -> "bf16" or "no" on this machine; an unknown value is a ConfigError."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision={precision!r}: choose from {list(PRECISIONS)} ('auto': bf16 where the device "
                          "computes it natively, else fp32)")
    if precision != "auto":
        return precision
    if bf16_native():
        return "bf16"
    _note_fallback()
    return "no"


def describe() -> dict:
    """What `environment.json` records: whether 'auto' means bf16 on this machine, and the CPU's vector ISA."""
    import torch

    return {"bf16_native": bf16_native(), "auto": "bf16" if bf16_native() else "no",
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}
