"""Ahead-of-time compile of the book's Triton kernels for GPUs that are not here: every launch configuration the
launchers can choose, for sm_80 (A100) and sm_90 (H100), with each compiled kernel's registers, shared memory and
register spills (issue 26; `cuobjdump -res-usage`, which ships in the triton wheel with ptxas).

    python -m kernels.aot                     # all of it; writes benchmarks/results/aot.{csv,md}
    python -m kernels.aot --targets sm_90 --dtypes bf16 --no-write --jobs 1

What is compiled, per target and dtype (fp16, bf16):

    tiled_prefill   `_update_tile_kernel` at every `tile_configs(head_dim)`, head dims 64 and 128
    lora_batch      the segmented and per-row shrink and expand kernels (expand with and without the fused base GEMM)
                    at every `lora_configs(variant)` entry, for the given LoRA ranks and d_model 576 and 4096

Each launch is compiled twice. "aligned": the argument specialization Triton's own launcher derives at run time
from the launch arguments (16-byte aligned pointers, which the caching allocator gives, and the strides of
contiguous tensors of those shapes; the binder of `triton.runtime.jit` decides, as on a GPU). "unaligned": the same
with no divisibility known (a misaligned pointer, or a stride that is not a multiple of 16), which makes Triton give up
vectorized addressing and is where register pressure is worst. Identical compiles (e.g. d_model 576 and 4096, whose
specializations agree) are done once and list every shape they cover.

The run fails (exit status 1) on a compile error, on a spill (STACK or LOCAL bytes > 0 per thread) or on shared
memory over the target's per-block limit. The launch arguments come from the launchers themselves
(`launch_args`, `launches`), so this checks what would really run. Needs triton 3.7's JIT internals
(`create_function_from_signature`, `JITFunction._pack_args`); it does not run under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import csv
import io
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

TARGETS = {"sm_80": 80, "sm_90": 90}
# the largest shared memory one block may use (opt-in), bytes: A100 163 KiB, H100 227 KiB (CUDA programming guide)
SHARED_LIMIT = {"sm_80": 163 * 1024, "sm_90": 227 * 1024}
DTYPES = ("fp16", "bf16")
HEAD_DIMS = (64, 128)
# every LoRA rank of the book's presets (rlib.relaxed: ranks + extra_ranks over all profiles; a test keeps them equal)
RANKS = (8, 16, 32, 64, 128, 256, 512)
D_MODELS = (576, 4096)  # SmolLM2-135M's width and a 7B-class width (the GPU benchmark's two)
SPECIALIZATIONS = ("aligned", "unaligned")
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
COLUMNS = ("kernel", "variant", "target", "dtype", "config", "specialization", "covers", "registers", "spill_bytes",
           "local_bytes", "shared_bytes", "shared_limit", "status")


class FakeTensor:
    """What a launcher reads of a tensor (shape, dtype, strides, pointer) without memory: a contiguous tensor at a
    16-byte aligned address, like the caching allocator's."""

    def __init__(self, dtype, *shape: int):
        self.dtype, self.shape = dtype, tuple(shape)
        strides, step = [], 1
        for size in reversed(self.shape):
            strides.append(step)
            step *= size
        self._strides = tuple(reversed(strides))

    def stride(self, dim: int | None = None):
        return self._strides if dim is None else self._strides[dim]

    def dim(self) -> int:
        return len(self.shape)

    def columns(self, start: int, stop: int) -> FakeTensor:
        """The view [:, start:stop] of a 2-D tensor (its strides; the address offset is left to the unaligned
        specialization)."""
        view = FakeTensor(self.dtype, self.shape[0], stop - start)
        view._strides = self._strides
        return view

    @staticmethod
    def data_ptr() -> int:
        return 0


@dataclass
class Compile:
    """One distinct compile: where the kernel lives, its specialized signature and the target."""

    module: str
    name: str
    kernel: str  # the label in the table (kernel name)
    variant: str
    target: str
    dtype: str
    config: str
    specialization: str
    signature: dict
    constexprs: dict
    attrs: dict
    options: dict
    covers: list[dict] = field(default_factory=list)  # the shapes this compile serves, e.g. {"rank": 8, "d": 576}

    def covers_label(self) -> str:
        """"rank 16, 32; d 576, 4096": each shape parameter's values over everything this compile covers."""
        keys = list(dict.fromkeys(k for cover in self.covers for k in cover))
        return "; ".join(f"{k} " + ", ".join(map(str, sorted({c[k] for c in self.covers}))) for k in keys)


def _dtype(name: str):
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[name]


def _specialize(kernel, target: str, args: tuple, kwargs: dict) -> tuple[dict, dict, dict, dict]:
    """(signature, constexprs, attrs, options) exactly as `JITFunction.run` derives them for these arguments."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", TARGETS[target], 32))
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kwargs = {**kwargs, "debug": bool(kernel.debug)}
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    return signature, constexprs, attrs, dict(options.__dict__)


def _add(found: dict, kernel, label: str, variant: str, target: str, dtype: str, config: str, cover: dict,
         args: tuple, kwargs: dict) -> None:
    """Specialize one launch both ways and file it under its compile key (merging what it covers)."""
    signature, constexprs, attrs, options = _specialize(kernel, target, args, kwargs)
    for spec in SPECIALIZATIONS:
        spec_attrs = attrs if spec == "aligned" else {}
        key = (kernel.fn.__qualname__, target, repr(sorted(signature.items())), repr(sorted(constexprs.items())),
               repr(sorted(spec_attrs.items())), repr(sorted(options.items())))
        if key not in found:
            found[key] = Compile(kernel.fn.__module__, kernel.fn.__qualname__, label, variant, target, dtype, config,
                                 spec, signature, constexprs, spec_attrs, options)
        if cover not in found[key].covers:
            found[key].covers.append(cover)


def tile_compiles(targets, dtypes, head_dims, found: dict, configs=None) -> None:
    """The tile kernel's compiles; `configs` overrides the launcher's `tile_configs(head_dim)` (a test's baseline)."""
    from kernels.tiled_prefill import triton_ops as tile

    batch, heads, n = 32, 16, 512  # the paper's Table 2 shape (only divisibility by 16 reaches the compiler)
    for target in targets:
        for dtype in dtypes:
            for head_dim in head_dims:
                q = FakeTensor(_dtype(dtype), batch, heads, n, head_dim)
                acc = FakeTensor(_dtype("fp32"), batch, heads, n, head_dim)
                stat = FakeTensor(_dtype("fp32"), batch, heads, n)
                slopes = FakeTensor(_dtype("fp32"), heads)
                for config in configs or tile.tile_configs(head_dim):
                    _, args, kwargs = tile.launch_args(q, q, q, acc, stat, stat, 33, 34, 32, 33, slopes, config)
                    _add(found, tile._update_tile_kernel, "update_tile", "", target, dtype, config.label,
                         {"head_dim": head_dim}, args, kwargs)


def lora_compiles(targets, dtypes, ranks, d_models, found: dict) -> None:
    import torch

    from kernels.lora_batch import triton_ops as lora

    n_depths, f32, i32 = 3, torch.float32, torch.int32
    for target in targets:
        for dtype in dtypes:
            for d in d_models:
                for rank in ranks:
                    for variant in ("segmented", "per_row"):
                        for config in lora.lora_configs(variant):
                            n = 64  # rows only size the grid
                            x, weight, y = FakeTensor(_dtype(dtype), n, d), FakeTensor(_dtype(dtype), d, d), \
                                FakeTensor(_dtype(dtype), n, d)
                            lora_a = FakeTensor(_dtype(dtype), n_depths, rank, d)
                            lora_b = FakeTensor(_dtype(dtype), n_depths, d, rank)
                            shrunk, depth = FakeTensor(f32, n, rank), FakeTensor(i32, n)
                            seg = lora.Segments(depth, FakeTensor(i32, n_depths + 1), FakeTensor(i32, n_depths + 1))
                            for fuse in (False, True):
                                plan = lora.launches(x, weight, lora_a, lora_b, depth, seg, shrunk, y, None, 0.5,
                                                     variant, fuse, config)
                                for kernel, _, args, kwargs in plan:
                                    expand = "expand" in kernel.fn.__name__
                                    label = f"{variant} {'expand' if expand else 'shrink'}"
                                    _add(found, kernel, label, ("fused base" if fuse else "") if expand else "",
                                         target, dtype, config.label, {"rank": rank, "d": d}, args, kwargs)
                            # the stacked schedule: the expand alone, reading S (x's dtype) beside Y in one GEMM output
                            out = FakeTensor(_dtype(dtype), n, d + n_depths * rank)
                            plan = lora.launches(x, weight, None, lora_b, depth, seg,
                                                 out.columns(d, d + n_depths * rank), out.columns(0, d), None, 0.5,
                                                 variant, False, config, shrink=False)
                            for kernel, _, args, kwargs in plan:
                                _add(found, kernel, f"{variant} expand", "stacked", target, dtype, config.label,
                                     {"rank": rank, "d": d}, args, kwargs)


def _cuobjdump() -> str:
    from triton import knobs

    return knobs.nvidia.cuobjdump.path


def resource_usage(cubin: bytes) -> dict[str, int]:
    """REG, STACK, SHARED, LOCAL of the one kernel in `cubin` (cuobjdump -res-usage)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([_cuobjdump(), "-res-usage", str(path)], capture_output=True, text=True, check=True)
    return parse_resource_usage(out.stdout)


def parse_resource_usage(text: str) -> dict[str, int]:
    """The numbers of a `cuobjdump -res-usage` report of one function (a clear error if there is not exactly one)."""
    found = re.findall(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", text)
    if len(found) != 1:
        raise ValueError(f"expected one function in the cuobjdump report, found {len(found)}:\n{text[:2000]}")
    return dict(zip(("REG", "STACK", "SHARED", "LOCAL"), map(int, found[0])))


def compile_one(job: Compile) -> dict:
    """Compile `job` (in a worker process) -> its table row."""
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = getattr(importlib.import_module(job.module), job.name)
    row = {"kernel": job.kernel, "variant": job.variant, "target": job.target, "dtype": job.dtype,
           "config": job.config, "specialization": job.specialization, "covers": job.covers_label(),
           "shared_limit": SHARED_LIMIT[job.target]}
    try:
        compiled = triton.compile(ASTSource(kernel, job.signature, job.constexprs, job.attrs),
                                  target=GPUTarget("cuda", TARGETS[job.target], 32), options=job.options)
        usage = resource_usage(compiled.asm["cubin"])
    except Exception as error:  # noqa: BLE001 - a compile error is a result: it goes in the table
        return {**row, "registers": "", "spill_bytes": "", "local_bytes": "", "shared_bytes": "",
                "status": f"compile error: {str(error).splitlines()[0][:200] if str(error) else type(error).__name__}"}
    shared = compiled.metadata.shared + usage["SHARED"]  # Triton's dynamic shared memory + any static
    problems = []
    if usage["STACK"] or usage["LOCAL"]:
        problems.append(f"spills {usage['STACK']} B stack, {usage['LOCAL']} B local per thread")
    if shared > SHARED_LIMIT[job.target]:
        problems.append(f"shared memory {shared} B over the {SHARED_LIMIT[job.target]} B limit")
    return {**row, "registers": usage["REG"], "spill_bytes": usage["STACK"], "local_bytes": usage["LOCAL"],
            "shared_bytes": shared, "status": "; ".join(problems) or "ok"}


def compiles(targets=tuple(TARGETS), dtypes=DTYPES, head_dims=HEAD_DIMS, ranks=RANKS,
             d_models=D_MODELS) -> list[Compile]:
    """Every distinct compile, in table order."""
    found: dict = {}
    tile_compiles(targets, dtypes, head_dims, found)
    lora_compiles(targets, dtypes, ranks, d_models, found)
    return list(found.values())


def run(jobs: list[Compile], workers: int) -> list[dict]:
    """Compile every job (in `workers` processes) -> rows in job order."""
    if workers <= 1:
        return [compile_one(job) for job in jobs]
    with futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(compile_one, jobs))


def to_markdown(rows: list[dict], header: str) -> str:
    lines = [header, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(row[c]) for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _write_atomic(path: Path, text: str) -> None:
    """Write to a temporary name beside `path`, then rename into place (a failed run leaves the old file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)


def write_tables(rows: list[dict], out_dir: Path, header: str) -> tuple[Path, Path]:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    csv_path, md_path = out_dir / "aot.csv", out_dir / "aot.md"
    _write_atomic(csv_path, buffer.getvalue())
    _write_atomic(md_path, to_markdown(rows, header))
    return csv_path, md_path


def _choices(values: list[str], allowed, flag: str) -> list[str]:
    bad = [v for v in values if v not in allowed]
    if bad:
        raise SystemExit(f"{flag} {bad}: choose from {list(allowed)}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="+", default=list(TARGETS))
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES))
    parser.add_argument("--head-dims", type=int, nargs="+", default=list(HEAD_DIMS))
    parser.add_argument("--ranks", type=int, nargs="+", default=list(RANKS))
    parser.add_argument("--d-models", type=int, nargs="+", default=list(D_MODELS))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compiler processes (default: cores)")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help="where aot.csv/.md go")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("kernels.aot compiles for real GPUs: run it without TRITON_INTERPRET=1")
    _choices(args.targets, TARGETS, "--targets")
    _choices(args.dtypes, DTYPES, "--dtypes")
    bad = [v for v in [*args.head_dims, *args.ranks, *args.d_models] if v < 1]
    if bad:
        raise SystemExit(f"head dims, ranks and d_models must be >= 1; got {bad}")
    import triton

    started = time.perf_counter()
    jobs = compiles(args.targets, args.dtypes, args.head_dims, args.ranks, args.d_models)
    rows = run(jobs, max(1, args.jobs))
    seconds = time.perf_counter() - started
    header = (f"# Triton kernels compiled ahead of time (`python -m kernels.aot`, triton {triton.__version__})\n\n"
              "registers per thread, spill_bytes = STACK and local_bytes = LOCAL per thread (cuobjdump -res-usage), "
              "shared_bytes per block (Triton's dynamic + static); aligned = the specialization Triton's launcher "
              "derives for contiguous tensors of the covered shapes, unaligned = no divisibility known.")
    print(to_markdown(rows, header))
    if not args.no_write:
        for path in write_tables(rows, args.out_dir, header):
            print(f"wrote {path}", file=sys.stderr)
    failed = [r for r in rows if r["status"] != "ok"]
    print(f"{len(rows)} compiles in {seconds:.0f} s with {args.jobs} processes; {len(failed)} failed", file=sys.stderr)
    for r in failed:
        print(f"FAILED {r['kernel']} {r['variant']} {r['target']} {r['dtype']} {r['config']} {r['specialization']} "
              f"({r['covers']}): {r['status']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
