"""The RT prefill captured in one CUDA graph (rlib.recurrent.graphed) equals the eager tiled schedule and the naive
loop; a depth-indexed LoRA batch captured in a graph keeps every adapter delta when the replay's depth mix differs
from the captured one; the layer latency benchmark (rlib.recurrent.latency) reports its ratios. The graph tests need a
CUDA device and are skipped on CPU (where the eager path is tested in test_recurrent.py and here)."""

from __future__ import annotations

import copy

import pytest
import torch

from rlib.recurrent.config import RTConfig
from rlib.recurrent.graphed import GraphedPrefill
from rlib.recurrent.layer import RTLayer
from rlib.recurrent.naive import naive_layer
from rlib.recurrent.tiled import tiled_forward

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="CUDA graphs need a CUDA device: these run on a GPU "
                                                 "(`make gpu-check` runs them); the eager path is tested on CPU")
DEVICE = "cuda" if CUDA else "cpu"
FP32_TOLERANCE = 1e-5  # vs the naive loop in fp32 (another summation order)
# bf16 vs the fp64 loop: the graphed path's error may exceed the bf16 naive loop's by this factor at most (largest
# element: one bf16 unit at the values' scale is 0.016-0.031, so two roundings can differ by that much; root mean
# square: the tiled path was the more accurate of the two on CPU, 0.0053-0.0063 against 0.0056-0.0064)
BF16_SLACK = {"max": 2.0, "rms": 1.25}
SAME = {torch.float32: {"atol": 1e-6, "rtol": 1e-6}, torch.bfloat16: {"atol": 1e-2, "rtol": 1e-2}}


def assert_as_accurate_as(mine: torch.Tensor, low: torch.Tensor, truth: torch.Tensor, name: str) -> None:
    """`mine`, computed in a low precision, is within BF16_SLACK of the naive loop's error `low` against `truth`
    (the naive loop in fp64 on the same weights): two bf16 computations may differ by a unit in the last place
    of their largest values, so an absolute tolerance between them fails on rounding alone (seen on an H200)."""
    mine_err, low_err = (mine.double() - truth).abs(), (low.double() - truth).abs()
    for stat, of in (("max", torch.amax), ("rms", lambda e: e.pow(2).mean().sqrt())):
        assert of(mine_err) <= BF16_SLACK[stat] * of(low_err), (
            f"{name}: {stat} error vs fp64 {float(of(mine_err)):.4g}, the bf16 naive loop's {float(of(low_err)):.4g} "
            f"(at most {BF16_SLACK[stat]}x allowed)")


def make_layer(dtype, kv_heads=None, d=64, heads=4, seed=0):
    torch.manual_seed(seed)
    layer = RTLayer(RTConfig(vocab_size=8, d_model=d, n_layers=2, n_heads=heads, n_kv_heads=kv_heads))
    with torch.no_grad():
        for param in layer.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    return layer.to(DEVICE, dtype).eval()


def test_eager_tiled_prefill_equals_the_naive_loop_with_the_graph_path_on_cpu():
    """The function the graph captures, run eagerly on this machine's device, against the definition."""
    layer = make_layer(torch.float32, kv_heads=2)
    x = torch.randn(2, 37, 64, device=DEVICE)
    positions = torch.arange(37, device=DEVICE)
    with torch.no_grad():
        z_naive, k_naive, v_naive = naive_layer(layer, x, positions, cache="preallocated")
        out = tiled_forward(layer, x, positions, impl="reference")
    torch.testing.assert_close(out["z"], z_naive, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["k"], k_naive, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kv_heads", [None, 2])
def test_eager_tiled_prefill_in_bf16_is_as_accurate_as_the_naive_loop(kv_heads):
    """The bf16 rule the graph tests use, on this machine's device: the tiled schedule (PyTorch tiles) against the
    naive loop, both in bf16, judged by their errors against the loop in fp64 on the same weights."""
    layer = make_layer(torch.bfloat16, kv_heads)
    positions = torch.arange(77, device=DEVICE)
    for seed in (1, 2):
        x = torch.randn(3, 77, 64, generator=torch.Generator().manual_seed(seed)).to(DEVICE, torch.bfloat16)
        with torch.no_grad():
            out = tiled_forward(layer, x, positions, impl="reference")
            low = naive_layer(layer, x, positions, cache="preallocated")
            truth = naive_layer(copy.deepcopy(layer).double(), x.double(), positions, cache="preallocated")
        for name, mine, low_one, ref in zip("zkv", (out["z"], out["k"], out["v"]), low, truth):
            assert_as_accurate_as(mine, low_one, ref, name)


def test_graphed_prefill_refuses_a_cpu_layer_with_the_fix():
    layer = RTLayer(RTConfig(vocab_size=8, d_model=16, n_layers=1, n_heads=2))
    with pytest.raises(RuntimeError, match="needs the layer on a CUDA device.*tiled_forward"):
        GraphedPrefill(layer, batch=1, n=4)


@needs_cuda
@pytest.mark.parametrize("impl", ["triton", "reference"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kv_heads", [None, 2])
def test_graphed_prefill_equals_eager_and_the_naive_loop(impl, dtype, kv_heads):
    layer = make_layer(dtype, kv_heads)
    batch, n = 3, 77
    positions = torch.arange(n, device=DEVICE)
    prefill = GraphedPrefill(layer, batch, n, dtype, impl=impl)
    for seed in (1, 2):  # a second input: the replay recomputes, it does not return the captured result
        x = torch.randn(batch, n, 64, generator=torch.Generator().manual_seed(seed)).to(DEVICE, dtype)
        graphed = {name: t.clone() for name, t in prefill(x).items()}
        with torch.no_grad():
            eager = tiled_forward(layer, x, positions, impl)
            z_naive, k_naive, v_naive = naive_layer(layer, x, positions, cache="preallocated")
        for name in ("z", "k", "v", "a", "lse"):  # the same kernels in the same order (cuBLAS may pick another
            # algorithm inside a capture, hence not bit for bit: within a few units in the last place)
            torch.testing.assert_close(graphed[name], eager[name], **SAME[dtype])
        if dtype == torch.float32:
            for mine, ref in ((graphed["z"], z_naive), (graphed["k"], k_naive), (graphed["v"], v_naive)):
                torch.testing.assert_close(mine, ref, atol=FP32_TOLERANCE, rtol=FP32_TOLERANCE)
        else:  # bf16: both the graph and the naive loop round; judge each against the loop in fp64 on the same weights
            with torch.no_grad():
                truth = naive_layer(copy.deepcopy(layer).double(), x.double(), positions, cache="preallocated")
            for name, mine, low, ref in zip("zkv", (graphed["z"], graphed["k"], graphed["v"]),
                                            (z_naive, k_naive, v_naive), truth):
                assert_as_accurate_as(mine, low, ref, name)


@needs_cuda
def test_graphed_prefill_checks_the_input_shape():
    layer = make_layer(torch.float32)
    prefill = GraphedPrefill(layer, 2, 16, torch.float32)
    with pytest.raises(ValueError, match=r"captured for \(2, 16, 64\)"):
        prefill(torch.zeros(2, 17, 64, device=DEVICE))


@needs_cuda
@pytest.mark.parametrize("variant", ["segmented", "per_row"])
@pytest.mark.parametrize("fuse_base", [False, True, "stacked"])
def test_graphed_lora_batch_keeps_every_adapter_when_the_depth_mix_changes(variant, fuse_base):
    """Capture with one depth mix, replay with others (all one depth, none, all mixed): the deltas follow `depth`."""
    from kernels.lora_batch import lora_batch_reference
    from kernels.lora_batch.triton_ops import lora_batch_stacked, lora_batch_triton, stack_weights

    gen = torch.Generator().manual_seed(0)
    n, k, m, rank, depths = 40, 96, 80, 16, 3
    rand = lambda *s: (torch.randn(*s, generator=gen) * 0.2).to(DEVICE, torch.bfloat16)  # noqa: E731
    x, w, a, b, bias = rand(n, k), rand(m, k), rand(depths, rank, k), rand(depths, m, rank), rand(m)
    depth = torch.zeros(n, dtype=torch.int32, device=DEVICE)  # the captured mix: every row at depth 0
    if fuse_base == "stacked":  # one GEMM for the base and every shrink, then the expand in place
        stacked = stack_weights(w, a, bias)
        call = lambda: lora_batch_stacked(x, stacked, b, depth, 0.5, variant=variant)  # noqa: E731
    else:
        call = lambda: lora_batch_triton(x, w, a, b, depth, bias, 0.5, variant=variant,  # noqa: E731
                                         fuse_base=fuse_base)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = call()
    mixes = [torch.full((n,), 2), torch.full((n,), -1), torch.randint(-1, depths, (n,), generator=gen),
             torch.arange(n) % depths]
    for mix in mixes:
        depth.copy_(mix.to(DEVICE, torch.int32))
        graph.replay()
        ref = lora_batch_reference(x, w, a, b, depth.long(), bias, 0.5)
        torch.testing.assert_close(y.float(), ref.float(), atol=6e-2, rtol=6e-2)


def test_layer_latency_reports_ratios(tmp_path, capsys):
    import pandas as pd

    from rlib.recurrent import latency

    latency.main(["--lengths", "8", "64", "--d-model", "16", "--heads", "2", "--batch", "1", "--repeats", "1",
                  "--device", "cpu", "--modes", "naive", "tiled-reference", "transformer", "--cuda-graphs",
                  "--out", str(tmp_path / "b.csv")])
    assert "--cuda-graphs needs CUDA: skipped" in capsys.readouterr().err
    table = pd.read_csv(tmp_path / "b.csv")
    assert set(table["mode"]) == {"naive", "tiled-reference", "transformer"} and set(table["n"]) == {8, 64}
    assert (table.loc[table["mode"] == "naive", "speedup_vs_naive"] == 1.0).all()
    longest = table[table["n"] == 64]  # short sequences move more in accumulators than the loop reads
    assert (longest["tiled_elements"] < longest["naive_elements"]).all()
    with pytest.raises(ValueError, match="mode='fast'"):
        latency.time_layer("fast", 4, 16, 2, 1, torch.device("cpu"), torch.float32, 1)
