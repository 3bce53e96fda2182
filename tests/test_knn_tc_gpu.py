"""The kNN brute force's tensor-core filter (kernels/knn_tc.py) gives the CPU driver's rows, byte for byte
(marked gpu): ties on lattices, duplicates, offsets, tiny scales, queries far outside the data's grid (clipped),
values that round badly to fp16, k from 1 to n - 1, lists continued across blocks."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskjoin.kernels.gpu_common import gpu_available
from daskjoin.kernels.knn import empty_lists
from daskjoin.kernels.registry import make

from test_knn_gpu import _datasets

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy")]

FILTERS = ["fp16", "int8"]


def _rows(backend, a, b, k, **options):
    data = a if b is None else b
    ids = np.arange(len(a), dtype=np.int64)
    driver = make("knn", "brute", backend, data, k, 7, **options)
    if options.get("filter") in FILTERS:
        assert driver.tc is not None  # the tensor cores ran, not a fallback
    return driver.rows(a, ids + (7 if b is None else 0), b is None)


def _same_rows(got, want):
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g).view(np.uint8), np.asarray(w).view(np.uint8))


def _more_datasets():
    rng = np.random.default_rng(5)
    # coordinates that fp16 cannot hold (1 + 2^-12 steps) beside large ones: residuals matter
    fine = 1.0 + rng.integers(0, 64, (700, 8)) * 2.0 ** -12
    fine[::50] *= 3000.0
    yield "fp16-badly-rounded", fine, None
    # queries far outside the data's grid: clipped to its ends, residuals large
    yield "queries-outside-grid", rng.random((300, 6)) * 100.0 - 50.0, rng.random((900, 6))
    # every row at one of two distances: ties at the k-th by the dozen
    yield "binary-64d", rng.integers(0, 2, (400, 64)).astype(np.float32), None
    yield "one-point-cross", rng.random((1, 5)), rng.random((1, 5))
    yield "far-clumps-64d", np.concatenate([rng.random((300, 64)), rng.random((300, 64)) + 1e4]), None


ALL = list(_datasets()) + list(_more_datasets())


@pytest.mark.parametrize("fmt", FILTERS)
@pytest.mark.parametrize("name,a,b", ALL, ids=[n for n, _, _ in ALL])
def test_tc_rows_equal_the_cpu_rows(fmt, name, a, b):
    most = (len(a) - 1) if b is None else len(b)
    for k in sorted(k for k in {1, 2, 16, most} if 1 <= k <= most):
        _same_rows(_rows("gpu", a, b, k, filter=fmt), _rows("cpu", a, b, k))


@pytest.mark.parametrize("ring", [0, 3])
@pytest.mark.parametrize("fmt", FILTERS)
def test_every_pass_runs_and_the_filter_filters(fmt, ring, monkeypatch):
    """Enough tiles that pass 2's box-pruned tile pairs exist (with and without the ring): every pass lists
    tile pairs, the filtered passes keep fewer candidates than their tile pairs hold, and the rows are exact."""
    from daskjoin.kernels import knn_tc

    calls = []
    original = knn_tc.listed_candidates

    def counting(launch, npairs, room, per_pair=False):
        kept = 0
        for item in original(launch, npairs, room, per_pair):
            kept += item[2]
            yield item
        calls.append((int(npairs), kept))

    monkeypatch.setattr(knn_tc, "RING", ring)
    monkeypatch.setattr(knn_tc, "listed_candidates", counting)
    x = np.random.default_rng(8).random((6000, 16))
    _same_rows(_rows("gpu", x, None, 5, filter=fmt), _rows("cpu", x, None, 5))
    assert len(calls) == (3 if ring else 2)
    assert all(npairs > 0 for npairs, _ in calls)
    for npairs, kept in calls[1:]:  # pass 1 keeps every pair of its tiles; the others filter
        assert 0 < kept < npairs * 128 * 128 // 4


@pytest.mark.parametrize("fmt", FILTERS)
def test_tc_large_k_spans_several_tiles(fmt):
    x = np.random.default_rng(1).random((2000, 16))
    _same_rows(_rows("gpu", x, None, 700, filter=fmt), _rows("cpu", x, None, 700))


@pytest.mark.parametrize("fmt", FILTERS)
def test_tc_lists_continue_across_blocks_and_filters(fmt):
    """A query's lists built on the CPU over one block, by the tensor cores over the next, by the GEMM over
    the last: the lists of one search of everything."""
    x = np.random.default_rng(2).standard_normal((1500, 24))
    ids = np.arange(len(x), dtype=np.int64)
    whole = empty_lists(len(x), 11)
    make("knn", "brute", "cpu", x, 11, 0).search(x, ids, *whole, True)
    parts = empty_lists(len(x), 11)
    for (lo, hi), backend, options in (((0, 500), "cpu", {}), ((500, 1100), "gpu", {"filter": fmt}),
                                       ((1100, 1500), "gpu", {"filter": "fp32"})):
        make("knn", "brute", backend, x[lo:hi], 11, lo, **options).search(x, ids, *parts, True)
    def ordered(lists):  # heaps of one content may differ in layout: compare them in (d, j) order
        order = np.lexsort((lists[1], lists[0]))
        return [np.take_along_axis(v, order, axis=1) for v in lists]

    (pd2, pj), (wd2, wj) = ordered(parts), ordered(whole)
    np.testing.assert_array_equal(pd2.view(np.uint64), wd2.view(np.uint64))
    np.testing.assert_array_equal(pj, wj)


def test_auto_takes_the_tensor_cores_from_tc_from_d_and_any_filter_when_asked():
    from daskjoin.kernels.knn_tc import TC_FROM_D

    rng = np.random.default_rng(3)
    for d in (8, 63, 64, 300):
        auto = make("knn", "brute", "gpu", rng.random((300, d)), 5, 0)
        tc = TC_FROM_D is not None and d >= TC_FROM_D
        assert (auto.tc is not None) == tc and (auto.gemm is None) == tc
        assert make("knn", "brute", "gpu", rng.random((300, d)), 5, 0, filter="int8").tc is not None
    assert make("knn", "brute", "gpu", rng.random((300, 80)), 5, 0, filter="fp32").tc is None
    with pytest.raises(ValueError, match="filter"):
        make("knn", "brute", "gpu", rng.random((30, 8)), 5, 0, filter="tf32")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 300), st.integers(1, 12), st.integers(0, 3), st.sampled_from(FILTERS), st.integers(0, 2 ** 32 - 1))
def test_tc_rows_on_random_lattices(n, d, spread, fmt, seed):
    """Small integer lattices (many ties), offset and scaled: the CPU driver's rows."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2 + spread, (n + 1, d)).astype(np.float64) * (10.0 ** rng.integers(-3, 4)) + rng.choice([0.0, 1e6])
    k = int(rng.integers(1, n + 1))
    _same_rows(_rows("gpu", x, None, k, filter=fmt), _rows("cpu", x, None, k))


@pytest.mark.parametrize("cross", [False, True])
def test_knn_join_through_the_tensor_cores_in_blocks_and_partitions(cross):
    """knn_join's GPU brute force (the tensor cores by default from 16 dimensions) under a budget that cuts the
    data into blocks and the queries into tasks: the CPU's frame, row for row."""
    import pandas as pd

    import daskjoin as dj

    rng = np.random.default_rng(4)
    centres = rng.random((8, 32))
    x = (centres[rng.integers(0, 8, 3000)] + 0.03 * rng.standard_normal((3000, 32))).astype(np.float32)
    a, b = (x[:500] + 0.01, x) if cross else (x, None)
    plan = dj.plan_knn(a, b, k=40, method="brute", backend="gpu", memory_budget="1MB")
    blocks = int(re.search(r"the data in (\d+) block", plan.explain()).group(1))
    assert blocks > 1 and plan.ntasks > 1
    got = dj.knn_join(a, b, k=40, method="brute", backend="gpu", memory_budget="1MB").compute().reset_index(drop=True)
    want = dj.knn_join(a, b, k=40, method="brute", backend="cpu", memory_budget="1MB").compute().reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want)


@pytest.mark.parametrize("filt", ["fp32", "int8", "fp16"])
def test_knn_join_takes_the_filter_from_gpu_options(filt, monkeypatch):
    """``knn_join(..., gpu_options={"filter": ...})`` builds each GPU brute driver with that filter, and the rows
    are the CPU's, byte for byte."""
    import pandas as pd

    import daskjoin as dj
    from daskjoin.kernels import knn_gpu

    seen = []
    init = knn_gpu.KnnBruteGpu.__init__

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("filter"))
        init(self, *args, **kwargs)

    monkeypatch.setattr(knn_gpu.KnnBruteGpu, "__init__", spy)
    rng = np.random.default_rng(3)
    x = (rng.random((8, 32))[rng.integers(0, 8, 3000)] + rng.normal(0, 0.05, (3000, 32))).astype(np.float32)
    got = dj.knn_join(x, k=5, method="brute", backend="gpu", gpu_options={"filter": filt}).compute()
    want = dj.knn_join(x, k=5, method="brute", backend="cpu").compute()
    assert seen and set(seen) == {filt}
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
