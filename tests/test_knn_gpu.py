"""The kNN-join's GPU drivers give the CPU drivers' rows, byte for byte (marked gpu)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import daskjoin as dj
from daskjoin.kernels.gpu_common import gpu_available
from daskjoin.kernels.knn import empty_lists
from daskjoin.kernels.registry import make

from test_knn import clumps, oracle, same

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy")]


def _datasets():
    rng = np.random.default_rng(0)
    yield "clumps", clumps(1500), None
    yield "lattice", rng.integers(0, 6, (800, 3)).astype(np.float64), None
    yield "dups", np.repeat(rng.random((50, 2)), 8, axis=0).astype(np.float32), None
    yield "offset", (rng.random((600, 2)) * 1e-3 + 1e6), None
    yield "d1", rng.random((700, 1)).astype(np.float32), None
    yield "d8", rng.random((500, 8)), None
    yield "cross-far", rng.random((300, 3)) + 50.0, rng.random((900, 3)).astype(np.float32)
    yield "cross", clumps(400, seed=2), clumps(700, seed=3)
    # the GEMM-form brute force (d >= 4, knn_gemm.GEMM_MIN_D): clusters, ties on a binary lattice, offsets, tiny scales, far queries
    centres = rng.random((20, 64))
    yield "d64-clusters", (centres[rng.integers(0, 20, 900)] + 0.05 * rng.standard_normal((900, 64))).astype(
        np.float32), None
    yield "d16-binary-offset", 1e6 + rng.integers(0, 2, (600, 16)).astype(np.float64), None
    yield "d8-tiny", rng.random((500, 8)) * 1e-35, None
    yield "d32-cross-far", rng.random((200, 32)) + 40.0, rng.random((700, 32)).astype(np.float32)


@pytest.mark.parametrize("method", ["grid", "brute", "szl"])
@pytest.mark.parametrize("name,a,b", list(_datasets()), ids=[n for n, _, _ in _datasets()])
def test_gpu_rows_equal_the_oracle_and_the_cpu(method, name, a, b):
    for k in (1, 7, 40):
        cpu = dj.knn_join(a, b, k=k, method=method, backend="cpu").compute().reset_index(drop=True)
        gpu = dj.knn_join(a, b, k=k, method=method, backend="gpu").compute().reset_index(drop=True)
        pd.testing.assert_frame_equal(gpu, cpu)
        if len(a) <= 800:
            same(gpu, oracle(a, b, k))


def test_gpu_lists_continue_across_blocks_and_backends():
    """A query's lists carried from a CPU block into a GPU block (and back) give the one-block answer."""
    x = clumps(900)
    best = empty_lists(len(x), 9)
    for (lo, hi), backend in (((0, 300), "cpu"), ((300, 700), "gpu"), ((700, 900), "cpu")):
        make("knn", "grid", backend, x[lo:hi], 9, lo).search(x, np.arange(len(x)), *best, True)
    whole = empty_lists(len(x), 9)
    make("knn", "brute", "gpu", x, 9, 0).search(x, np.arange(len(x)), *whole, True)
    np.testing.assert_array_equal(np.sort(best[1], axis=1), np.sort(whole[1], axis=1))


def test_gpu_small_budget_and_large_k():
    x = clumps(3000)
    got = dj.knn_join(x, k=600, backend="gpu", memory_budget="8MB").compute().reset_index(drop=True)
    want = dj.knn_join(x, k=600, backend="cpu", memory_budget="8MB").compute().reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want)
    assert len(got) == 3000 * 600


def test_gpu_gemm_filter_runs_and_agrees_with_the_cpu_lists():
    """From 4 dimensions the GPU brute force can filter by float32 products first (``filter="fp32"``; the
    default from 16 dimensions is the tensor cores, tests/test_knn_tc_gpu.py): same lists as the CPU."""
    from daskjoin.kernels.knn_gpu import KnnBruteGpu

    rng = np.random.default_rng(5)
    x = (rng.random((30, 48))[rng.integers(0, 30, 5000)] + 0.03 * rng.standard_normal((5000, 48)))
    driver = KnnBruteGpu(x, 12, filter="fp32")
    assert driver.gemm is not None
    gpu, cpu = empty_lists(len(x), 12), empty_lists(len(x), 12)
    ids = np.arange(len(x))
    driver.search(x, ids, *gpu, True)
    make("knn", "brute", "cpu", x, 12, 0).search(x, ids, *cpu, True)
    np.testing.assert_array_equal(gpu[0], cpu[0])
    np.testing.assert_array_equal(gpu[1], cpu[1])


@pytest.mark.parametrize("method,d", [("grid", 3), ("grid", 1), ("brute", 2), ("brute", 48)])
def test_gpu_lists_hold_the_cpu_distances_to_the_last_bit(method, d):
    """float64 rows whose squared differences round: a fused multiply-add on the GPU would change the last
    bit of d2 (and so a rank at a near-tie); both backends must decide on the same value."""
    rng = np.random.default_rng(11 + d)
    x = rng.standard_normal((3000, d)) * np.pi
    ids = np.arange(len(x))
    gpu, cpu = empty_lists(len(x), 10), empty_lists(len(x), 10)
    make("knn", method, "gpu", x, 10, 0).search(x, ids, *gpu, True)
    make("knn", method, "cpu", x, 10, 0).search(x, ids, *cpu, True)
    np.testing.assert_array_equal(np.sort(gpu[0], axis=1), np.sort(cpu[0], axis=1))
    np.testing.assert_array_equal(np.sort(gpu[1], axis=1), np.sort(cpu[1], axis=1))


@pytest.mark.parametrize("k", [1, 2, 33, 1500])
def test_gpu_finish_ranks_ties_by_j_for_any_k(k):
    """The device finish (heap sorts per query, no cap on k) against the CPU finish, on a lattice full of ties."""
    x = np.random.default_rng(3).integers(0, 4, (2000, 2)).astype(np.float32)
    ids = np.arange(len(x))
    for method in ("grid", "brute", "szl"):
        got = make("knn", method, "gpu", x, k, 0).rows(x, ids, True)
        want = make("knn", method, "cpu", x, k, 0).rows(x, ids, True)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_gpu_products_below_float32_range_are_not_lost():
    """CuPy compiles with -ftz=true: float32 products below 2^-126 read as 0; the filter's norm floor covers it."""
    from test_knn_gemm import flush_case

    a, b = flush_case()
    got = dj.knn_join(a, b, k=5, method="brute", backend="gpu").compute()
    assert sorted(got["j"]) == [45, 46, 47, 48, 49]
    same(got.reset_index(drop=True), oracle(a, b, 5))


def test_gpu_subnormal_distances_written_as_on_the_cpu():
    """Distances below float32's normal range: the device finish must not flush them to 0."""
    x = np.random.default_rng(4).random((50, 2)) * 1e-40
    for method in ("grid", "brute", "szl"):
        gpu = dj.knn_join(x, k=3, method=method, backend="gpu").compute().reset_index(drop=True)
        cpu = dj.knn_join(x, k=3, method=method, backend="cpu").compute().reset_index(drop=True)
        pd.testing.assert_frame_equal(gpu, cpu)
        assert (gpu["dist"] > 0).all()


@pytest.mark.parametrize("method,d", [("brute", 12), ("szl", 3), ("szl", 9)])
def test_gpu_lists_carried_across_blocks(method, d):
    """Pre-filled lists (an earlier block) searched on the device give the one-block answer."""
    rng = np.random.default_rng(7)
    x = rng.random((40, d))[rng.integers(0, 40, 1200)] + 0.01 * rng.standard_normal((1200, d))
    ids = np.arange(len(x))
    best = empty_lists(len(x), 8)
    make("knn", method, "cpu", x[:500], 8, 0).search(x, ids, *best, True)
    make("knn", method, "gpu", x[500:], 8, 500).search(x, ids, *best, True)
    whole = empty_lists(len(x), 8)
    make("knn", "brute", "cpu", x, 8, 0).search(x, ids, *whole, True)
    np.testing.assert_array_equal(np.sort(best[1], axis=1), np.sort(whole[1], axis=1))
    np.testing.assert_array_equal(np.sort(best[0], axis=1), np.sort(whole[0], axis=1))


def test_gpu_product_tiles_smaller_than_the_data(monkeypatch):
    """Many query and row tiles on the device (the slicing of queries, lists and products)."""
    from daskjoin.kernels import knn_gpu

    monkeypatch.setattr(knn_gpu, "GEMM_QUERIES", 300)
    monkeypatch.setattr(knn_gpu, "GEMM_TILE_BYTES", 4 * 300 * 256)  # 256 rows a tile: the smallest
    rng = np.random.default_rng(8)
    x = rng.random((30, 16))[rng.integers(0, 30, 2000)] + 0.02 * rng.standard_normal((2000, 16))
    ids = np.arange(len(x))
    gpu, cpu = empty_lists(len(x), 11), empty_lists(len(x), 11)
    make("knn", "brute", "gpu", x, 11, 0).search(x, ids, *gpu, True)
    make("knn", "brute", "cpu", x, 11, 0).search(x, ids, *cpu, True)
    np.testing.assert_array_equal(np.sort(gpu[1], axis=1), np.sort(cpu[1], axis=1))
    np.testing.assert_array_equal(np.sort(gpu[0], axis=1), np.sort(cpu[0], axis=1))
