"""kernels.lora_batch: the Triton depth-indexed multi-LoRA linear against its PyTorch reference, and the references
against each other. On CPU the kernels run under TRITON_INTERPRET=1 (set in conftest); on a GPU the same tests
compile them and add bf16."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from kernels.lora_batch import concat_adapters, lora_batch, lora_batch_concat, lora_batch_loop, lora_batch_reference
from rlib import paths

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])
# fp32 is exact in the interpreter but uses TF32 tensor cores on a GPU
TOLERANCE = {torch.float32: 1e-4 if DEVICE == "cpu" else 2e-2, torch.float16: 1e-2, torch.bfloat16: 6e-2}

# (rows N, in K, out M, rank R, depths D): odd sizes, rank 1, more rows than one tile, more depths than rows
SHAPES = [(7, 33, 45, 5, 3), (1, 17, 19, 1, 1), (70, 40, 36, 24, 4), (3, 16, 16, 8, 6)]


def make_case(n, k, m, r, n_depths, dtype, seed=0, depth=None, bias=True):
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *s, fan=1: (torch.randn(*s, generator=gen) / fan**0.5).to(DEVICE, dtype)  # noqa: E731
    x, weight = rand(n, k), rand(m, k, fan=k)
    lora_a, lora_b = rand(n_depths, r, k, fan=k), rand(n_depths, m, r, fan=r)
    if depth is None:
        depth = torch.randint(-1, n_depths, (n,), generator=gen)
    return x, weight, lora_a, lora_b, depth.to(DEVICE), rand(m) if bias else None


def assert_close(y, ref, dtype):
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(y.float(), ref.float(), atol=tol, rtol=tol)


def test_the_three_pytorch_references_agree():
    for shape in SHAPES:
        x, w, a, b, d, bias = make_case(*shape, torch.float32)
        ref = lora_batch_reference(x, w, a, b, d, bias, scale=0.5)
        torch.testing.assert_close(lora_batch_loop(x, w, a, b, d, bias, scale=0.5), ref, atol=1e-5, rtol=1e-5)
        a_cat, b_cat = concat_adapters(a, b)
        torch.testing.assert_close(lora_batch_concat(x, w, a_cat, b_cat, d, shape[3], bias, scale=0.5), ref,
                                   atol=1e-5, rtol=1e-5)


def test_reference_is_the_per_row_formula():
    x, w, a, b, d, bias = make_case(5, 12, 10, 3, 2, torch.float64 if DEVICE == "cpu" else torch.float32)
    y = lora_batch_reference(x, w, a, b, d, bias, scale=2.0)
    for n in range(5):
        expect = w @ x[n] + bias + (2.0 * b[d[n]] @ (a[d[n]] @ x[n]) if d[n] >= 0 else 0)
        torch.testing.assert_close(y[n], expect)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fuse_base", [False, True], ids=["cublas_base", "fused_base"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_segmented_kernel_matches_reference(shape, fuse_base, dtype):
    x, w, a, b, d, bias = make_case(*shape, dtype)
    ref = lora_batch_reference(x, w, a, b, d, bias, scale=0.7)
    y = lora_batch(x, w, a, b, d, bias, scale=0.7, impl="triton", variant="segmented", fuse_base=fuse_base)
    assert y.dtype == dtype and y.shape == ref.shape
    assert_close(y, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fuse_base", [False, True], ids=["cublas_base", "fused_base"])
@pytest.mark.parametrize("shape", SHAPES[:2], ids=lambda s: "x".join(map(str, s)))
def test_per_row_kernel_matches_reference(shape, fuse_base, dtype):
    x, w, a, b, d, bias = make_case(*shape, dtype)
    y = lora_batch(x, w, a, b, d, bias, scale=0.7, impl="triton", variant="per_row", fuse_base=fuse_base)
    assert_close(y, lora_batch_reference(x, w, a, b, d, bias, scale=0.7), dtype)


@pytest.mark.parametrize("variant", ["segmented", "per_row"])
def test_rows_without_adapter_get_exactly_the_base_product(variant):
    x, w, a, b, _, _ = make_case(9, 20, 24, 4, 2, torch.float32)
    depth = torch.tensor([-1, 0, -1, -1, 1, -1, 1, 0, -1], device=DEVICE)
    y = lora_batch(x, w, a, b, depth, impl="triton", variant=variant, fuse_base=False)
    base = F.linear(x, w)
    assert torch.equal(y[depth < 0], base[depth < 0])  # untouched rows are not even rewritten
    assert not torch.allclose(y[depth >= 0], base[depth >= 0])
    none = torch.full((9,), -1, device=DEVICE)
    for fuse in (False, True):
        y = lora_batch(x, w, a, b, none, impl="triton", variant=variant, fuse_base=fuse)
        assert_close(y, base, torch.float32)


def test_one_depth_for_all_rows_equals_a_plain_lora():
    x, w, a, b, _, bias = make_case(33, 24, 20, 6, 3, torch.float32)
    depth = torch.full((33,), 2, device=DEVICE)
    plain = F.linear(x, w, bias) + F.linear(F.linear(x, a[2]), b[2])
    assert_close(lora_batch(x, w, a, b, depth, bias, impl="triton"), plain, torch.float32)


def test_non_contiguous_input_and_empty_batch():
    x, w, a, b, d, bias = make_case(8, 30, 12, 4, 2, torch.float32)
    wide = torch.cat([x, x], dim=1)[:, ::2]  # strided view
    assert_close(lora_batch(wide, w, a, b, d, bias, impl="triton"),
                 lora_batch_reference(wide, w, a, b, d, bias), torch.float32)
    empty = lora_batch(x[:0], w, a, b, d[:0], bias, impl="triton")
    assert empty.shape == (0, 12)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", ["per_row", "segmented"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_stacked_schedule_matches_reference(shape, variant, dtype):
    """One GEMM against [W; A_0; ...] for the base product and every shrink, then the gathered expand in place."""
    from kernels.lora_batch.triton_ops import lora_batch_stacked, stack_weights

    x, w, a, b, d, bias = make_case(*shape, dtype)
    stacked = stack_weights(w, a, bias)
    y = lora_batch_stacked(x, stacked, b, d, scale=0.7, variant=variant)
    ref = lora_batch_reference(x, w, a, b, d, bias, scale=0.7)
    assert y.dtype == dtype and y.shape == ref.shape
    assert_close(y, ref, dtype)
    assert torch.equal(y[d < 0], F.linear(x, stacked.weight, stacked.bias)[d < 0, :w.shape[0]])  # base rows untouched


def test_stacked_schedule_checks_its_adapters_and_handles_an_empty_batch():
    from kernels.lora_batch.triton_ops import lora_batch_stacked, stack_weights

    x, w, a, b, d, _ = make_case(6, 20, 12, 4, 3, torch.float32)
    stacked = stack_weights(w, a)
    assert stacked.weight.shape == (12 + 3 * 4, 20) and stacked.bias is None
    with pytest.raises(ValueError, match="lora_b must be"):
        lora_batch_stacked(x, stacked, b[:2], d)
    with pytest.raises(ValueError, match="variant='fast'"):
        lora_batch_stacked(x, stacked, b, d, variant="fast")
    assert lora_batch_stacked(x[:0], stacked, b, d[:0]).shape == (0, 12)


def test_bad_inputs_name_the_argument_and_the_fix():
    x, w, a, b, d, bias = make_case(4, 8, 6, 2, 2, torch.float32)
    with pytest.raises(ValueError, match=r"x must be \[N, K\]"):
        lora_batch(x[None], w, a, b, d)
    with pytest.raises(ValueError, match=r"lora_b must be \[D, M, R\] = \(2, 6, 2\)"):
        lora_batch(x, w, a, b.transpose(1, 2), d)
    with pytest.raises(ValueError, match=r"depth values must be -1 \(no adapter\) or 0..1; got min -1, max 2"):
        lora_batch(x, w, a, b, torch.tensor([0, 2, -1, 1], device=DEVICE))
    with pytest.raises(ValueError, match="must share a dtype"):
        lora_batch(x.half(), w, a, b, d)
    with pytest.raises(ValueError, match="impl='fast'"):
        lora_batch(x, w, a, b, d, impl="fast")


def test_importing_our_kernels_package_does_not_change_how_transformers_loads_models(tmp_path):
    """transformers probes for the PyPI package `kernels` (the HF kernel hub); ours must not look like it."""
    script = r"""
import importlib.util, json, sys, torch
probe = sys.argv[1] == "with"
if probe:
    import kernels, kernels.lora_batch, kernels.tiled_prefill
else:
    sys.modules["kernels"] = None  # as if our package did not exist (it may be installed in the venv)
    assert "triton" not in sys.modules or sys.argv[2] == "triton-preloaded", "importing kernels must not import triton"
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils.import_utils import is_kernels_available
torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2)
LlamaForCausalLM(config).save_pretrained(sys.argv[3])
model = LlamaForCausalLM.from_pretrained(sys.argv[3])
logits = model(torch.arange(10)[None]).logits
print(json.dumps({"found": importlib.util.find_spec("kernels") is not None, "hub": is_kernels_available(),
                  "attn": model.config._attn_implementation, "logits": logits.flatten().tolist()}))
"""
    runs = {}
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(paths.ROOT)}
    for mode in ("with", "without"):
        out = subprocess.run([sys.executable, "-c", script, mode, "-", str(tmp_path / mode)], cwd=paths.ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        runs[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    assert runs["with"]["found"] and not runs["without"]["found"], "the two runs must differ in seeing our package"
    assert runs["with"]["hub"] is False and runs["without"]["hub"] is False
    assert runs["with"]["attn"] == runs["without"]["attn"]
    assert runs["with"]["logits"] == runs["without"]["logits"]


def test_benchmark_runs_and_reports_ratios(tmp_path, capsys):
    from kernels.lora_batch import bench

    bench.main(["--ranks", "4", "--tokens", "8", "--shapes", "k/v 2048->256", "--repeats", "1",
                "--out", str(tmp_path / "b.csv")])
    import pandas as pd

    table = pd.read_csv(tmp_path / "b.csv")
    assert {"base", "loop", "gather", "concat"} <= set(table["impl"])
    assert (table.loc[table["impl"] == "base", "overhead"] == 1.0).all()
    assert "speedup_vs_loop" in capsys.readouterr().out
