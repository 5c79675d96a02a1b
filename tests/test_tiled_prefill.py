"""kernels.tiled_prefill: the dyadic schedule, the Triton UpdateTile against its PyTorch reference (odd shapes,
tolerance per dtype), and bit-exact tests that no summation order can pass by luck. On CPU the kernel runs under
TRITON_INTERPRET=1 (set in conftest); on a GPU the same tests compile it and add bf16."""

from __future__ import annotations

import pytest
import torch

from kernels.tiled_prefill import alibi_bias, lowbit, resolve_impl, tile_backward, tile_traffic, tiles, update_tile

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}
IMPLS = ["reference", "triton"]

# (batch, heads, kv heads, positions N, head dim d): odd N and d, one position, GQA, a tile wider than a block
SHAPES = [(2, 4, 2, 37, 24), (1, 1, 1, 1, 16), (1, 3, 3, 9, 8), (1, 2, 1, 130, 64)]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 64, 100])
def test_tiles_cover_every_causal_pair_once_before_its_query_is_read(n):
    seen = torch.zeros(n, n, dtype=torch.int64)
    for q0, q1, k0, k1 in tiles(n):
        assert k1 == q0 and k1 - k0 == lowbit(q0) and q1 - q0 <= k1 - k0  # keys just finished, queries next
        seen[q0:q1, k0:k1] += 1  # query j is read at step j, after every tile with q0 <= j
    assert torch.equal(seen, torch.ones(n, n, dtype=torch.int64).tril(-1))


def test_traffic_is_n_log_n_for_tiles_and_quadratic_for_the_loop():
    keys_read = sum(k1 - k0 for _, _, k0, k1 in tiles(512))
    assert keys_read == 256 * 9  # sum of lowbit(s), s < N = 2^9: (N / 2) log2 N
    small, large = (tile_traffic(n, 64) for n in (1024, 4096))
    naive_small, naive_large = (tile_traffic(n, 64, "naive") for n in (1024, 4096))
    assert small["pairs"] == naive_small["pairs"] == 1024 * 1023 // 2
    assert 15 < naive_large["elements"] / naive_small["elements"] <= 16.1  # x16 for 4x N
    assert 4 < large["elements"] / small["elements"] < 6  # x4 log(4096)/log(1024) = 4.8
    # Sec. 6.3: a tiled step reads lowbit(s) keys, (log2 N) / 2 on average; the loop reads the whole prefix
    tiled, naive = tile_traffic(512, 64), tile_traffic(512, 64, "naive")
    assert tiled["kv_slice_mean"] == pytest.approx(256 * 9 / 511) and tiled["kv_slice_max"] == 256
    assert naive["kv_slice_mean"] == 255.5 and naive["pairs"] == tiled["pairs"] == 512 * 511 // 2
    assert tile_traffic(100, 8)["pairs"] == 100 * 99 // 2  # N not a power of two: the last tiles are cut, not lost
    with pytest.raises(ValueError, match="schedule='flash'"):
        tile_traffic(8, 4, "flash")


def make_state(b, h, hkv, n, d, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    q, k, v = (rand(b, h, n, d) / d**0.5).to(DEVICE, dtype), rand(b, hkv, n, d).to(DEVICE, dtype), rand(
        b, hkv, n, d).to(DEVICE, dtype)
    acc, m, l = rand(b, h, n, d).to(DEVICE), rand(b, h, n).to(DEVICE), (rand(b, h, n).abs() + 1).to(DEVICE)  # noqa: E741
    slopes = (torch.rand(h, generator=gen) * 0.5).to(DEVICE)
    return q, k, v, acc, m, l, slopes


def run_schedule(impl, q, k, v, acc, m, l, slopes):  # noqa: E741
    acc, m, l = acc.clone(), m.clone(), l.clone()  # noqa: E741
    for q0, q1, k0, k1 in tiles(q.shape[2]):
        update_tile(q, k, v, acc, m, l, q0, q1, k0, k1, slopes, impl=impl)
    return acc, m, l


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alibi", [True, False])
def test_triton_tiles_match_the_reference(shape, dtype, alibi):
    q, k, v, acc, m, l, slopes = make_state(*shape, dtype)  # noqa: E741
    slopes = slopes if alibi else None
    ref = run_schedule("reference", q, k, v, acc, m, l, slopes)
    out = run_schedule("triton", q, k, v, acc, m, l, slopes)
    tol = TOLERANCE[dtype]
    # acc and l are sums of exp(s - m): compare the normalised outputs and the log-denominators
    torch.testing.assert_close(out[0] / out[2][..., None], ref[0] / ref[2][..., None], atol=tol, rtol=tol)
    torch.testing.assert_close(out[1] + out[2].log(), ref[1] + ref[2].log(), atol=tol, rtol=tol)


def test_a_precomputed_alibi_bias_gives_the_slopes_result_bit_exactly():
    """`rlib.recurrent.tiled` hands the reference each tile's bias, computed once per tile size from a larger tile of
    the same size (rows sliced); forward and backward must equal the per-tile computation from the slopes exactly."""
    q, k, v, acc, m, l, slopes = make_state(2, 4, 2, 37, 24, torch.float32)  # noqa: E741
    by_slopes, by_bias = run_schedule("reference", q, k, v, acc, m, l, slopes), (acc.clone(), m.clone(), l.clone())
    for q0, q1, k0, k1 in tiles(q.shape[2]):
        size = k1 - k0
        bias = alibi_bias(slopes, k1, k1 + size, k0, k1, torch.float32)[:, :q1 - q0]  # [H, tq, T]
        update_tile(q, k, v, *by_bias, q0, q1, k0, k1, None, impl="reference", bias=bias)
    for mine, ref in zip(by_bias, by_slopes):
        assert torch.equal(mine, ref)
    kf, vf = (x.repeat_interleave(2, dim=1).float() for x in (k, v))
    lse, grad_a, delta = m + l.log(), torch.randn_like(acc), torch.randn_like(m)
    grads = [[torch.zeros_like(acc) for _ in range(3)] for _ in range(2)]
    for q0, q1, k0, k1 in tiles(q.shape[2]):
        size = k1 - k0
        bias = alibi_bias(slopes, k1, k1 + size, k0, k1, torch.float32)[:, :q1 - q0]
        tile_backward(q, kf, vf, lse, grad_a, delta, *grads[0], q0, q1, k0, k1, slopes)
        tile_backward(q, kf, vf, lse, grad_a, delta, *grads[1], q0, q1, k0, k1, bias=bias)
    for mine, ref in zip(*grads):
        assert torch.equal(mine, ref)


@pytest.mark.parametrize("impl", IMPLS)
def test_uniform_attention_counts_every_pair_bit_exactly(impl):
    """Q = 0 and no ALiBi: every score is 0, every rescale exp(0) = 1, so with integer values the accumulators are
    exact integer prefix sums, whatever the summation order."""
    b, h, n, d = 2, 2, 45, 16
    gen = torch.Generator().manual_seed(3)
    q = torch.zeros(b, h, n, d, device=DEVICE)
    k = torch.randn(b, h, n, d, generator=gen).to(DEVICE)
    v = torch.randint(-50, 50, (b, h, n, d), generator=gen).float().to(DEVICE)
    v_tmp = torch.randint(-50, 50, (b, h, n, d), generator=gen).float().to(DEVICE)
    acc, m, l = run_schedule(impl, q, k, v, v_tmp.clone(), torch.zeros(b, h, n, device=DEVICE),  # noqa: E741
                             torch.ones(b, h, n, device=DEVICE), None)
    prefix = torch.cumsum(v, dim=2) - v  # sum over keys i < j
    assert torch.equal(acc, prefix + v_tmp)
    assert torch.equal(l, torch.arange(1, n + 1, device=DEVICE).float().expand(b, h, n))
    assert torch.equal(m, torch.zeros(b, h, n, device=DEVICE))


@pytest.mark.parametrize("impl", IMPLS)
def test_one_hot_values_show_each_pair_arrives_exactly_once(impl):
    n = 40
    q = torch.zeros(1, 1, n, 64, device=DEVICE)
    k = torch.zeros(1, 1, n, 64, device=DEVICE)
    v = torch.eye(64, device=DEVICE)[:n][None, None]  # value i = e_i
    acc, _, _ = run_schedule(impl, q, k, v, torch.zeros(1, 1, n, 64, device=DEVICE),  # no temporary pair mass
                             torch.zeros(1, 1, n, device=DEVICE), torch.ones(1, 1, n, device=DEVICE), None)
    expected = torch.ones(n, 64, device=DEVICE).tril(-1)  # query j holds e_i for every i < j, once
    expected[:, n:] = 0
    assert torch.equal(acc[0, 0], expected)


def test_the_kernel_is_deterministic():
    state = make_state(2, 4, 2, 37, 24, torch.float32, seed=5)
    first, second = run_schedule("triton", *state), run_schedule("triton", *state)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_impl_choice_is_checked():
    with pytest.raises(ValueError, match="impl='fast'"):
        resolve_impl("fast", "cpu")
    assert resolve_impl("reference", "cpu") == "reference"


def test_tile_update_benchmark_reports_bandwidth_on_cpu(tmp_path, capsys):
    import pandas as pd

    from kernels.tiled_prefill import bench

    assert tiles(2) == [(1, 2, 0, 1)]
    assert bench.tile_bytes(2, 8, element_size=2) == 2 * (1 + 2) * 8 + 4 * 2 * (8 + 2)  # one tile: q, k, v, acc r+w
    bench.main(["--lengths", "16", "--d-model", "16", "--heads", "2", "--batch", "1", "--repeats", "1", "--device",
                "cpu", "--cuda-graphs", "--out", str(tmp_path / "b.csv")])
    err = capsys.readouterr().err
    assert "triton needs CUDA" in err and "cuda graphs need CUDA: skipped" in err
    updates = pd.read_csv(tmp_path / "b.csv")
    assert list(updates["impl"]) == ["reference"] and (updates["gb_per_s"] > 0).all()
    assert (updates["fraction_of_copy"] > 0).all() and not updates["cuda_graph"].any()


def test_kernels_import_nothing_from_rlib():
    import ast
    from pathlib import Path

    import kernels

    offenders = []
    for path in Path(kernels.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.name}: {n}" for n in names if n == "rlib" or n.startswith("rlib.")]
    assert not offenders, offenders
