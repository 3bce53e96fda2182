"""Query shares (daskjoin.kernels.shares): each backend's grid driver cuts its queries into shares whose
pairs partition the join exactly, on the adversarial cases and on skewed data."""
from __future__ import annotations

import functools
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import CASES  # noqa: E402
from oracle import assert_same_pairs, oracle_cross_pairs, oracle_self_pairs  # noqa: E402

from daskjoin.kernels import get_kernel  # noqa: E402
from daskjoin.kernels.gpu_common import gpu_available  # noqa: E402
from daskjoin.kernels.shares import cell_range, point_range  # noqa: E402

_ON_GPU = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy")]
BACKENDS = ["cpu", pytest.param("gpu", marks=_ON_GPU)]
#: (method, backend) of every driver that takes shares
SHARING = [pytest.param("grid", "cpu", id="grid-cpu"), pytest.param("grid", "gpu", id="grid-gpu", marks=_ON_GPU),
           pytest.param("brute", "gpu", id="brute-gpu", marks=_ON_GPU)]
_BY_NAME = {c.name: c for c in CASES}
_B = {c.name: c.cross_b() for c in CASES}


@functools.lru_cache(maxsize=None)
def _expected(name: str, mode: str):
    case = _BY_NAME[name]
    return oracle_self_pairs(case.a, case.eps) if mode == "self" else oracle_cross_pairs(case.a, _B[name], case.eps)


def _joined(backend, a, b, eps, parts, *, batches=None, method="grid", **options):
    """The shares' pairs concatenated, and their counts summed."""
    k = get_kernel(method, backend, **options)
    got, count = [], 0
    for s in range(parts):
        share = (s, parts)
        if batches:
            run = k.self_batches(a, eps, batches, share=share) if b is None else \
                k.cross_batches(a, b, eps, batches, share=share)
            for batch in run:
                assert len(batch[0]) <= batches
                got.append(batch)
        else:
            got.append(k.self_join(a, eps, share=share) if b is None else k.cross_join(a, b, eps, share=share))
        count += k.self_count(a, eps, share=share) if b is None else k.cross_count(a, b, eps, share=share)
    if not got:
        return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)), count
    return tuple(np.concatenate([g[t] for g in got]) for t in range(3)), count


@pytest.mark.parametrize("method, backend", SHARING)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_shares_partition_the_pairs(method, backend, case, mode):
    b = None if mode == "self" else _B[case.name]
    expected = _expected(case.name, mode)
    for parts in (2, 3, 7):
        got, count = _joined(backend, case.a, b, case.eps, parts, method=method)
        assert_same_pairs(got, expected, context=f"{case.name}/{mode}/{parts} shares", a=case.a, b=b, eps=case.eps)
        assert count == len(expected[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_shares_of_skewed_data_in_bounded_batches(backend):
    """A dense cluster (one cell far heavier than the rest) and duplicates, in batches of at most 500 pairs."""
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.random((2000, 3)), rng.normal(0.3, 0.004, (700, 3)), np.repeat(rng.random((5, 3)), 20, 0)])
    eps = 0.03
    expected = oracle_self_pairs(x, eps)
    for parts in (1, 2, 4):
        got, count = _joined(backend, x, None, eps, parts, batches=500)
        assert_same_pairs(got, expected, context=f"skewed/{parts} shares", a=x, eps=eps)
        assert count == len(expected[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_unicomp_shares_partition_the_pairs(backend):
    """The grid's UNICOMP pattern under query shares, whole and in batches small enough to cut single cells."""
    for case in CASES[::2]:
        expected = _expected(case.name, "self")
        for parts, batches in ((2, None), (3, None), (3, 64)):
            got, count = _joined(backend, case.a, None, case.eps, parts, batches=batches, pattern="unicomp")
            assert_same_pairs(got, expected, context=f"{case.name}/{parts} shares/{batches}", a=case.a, eps=case.eps)
            assert count == len(expected[0])
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.random((2000, 3)), rng.normal(0.3, 0.004, (700, 3)), np.repeat(rng.random((5, 3)), 20, 0)])
    got, count = _joined(backend, x, None, 0.03, 4, batches=500, pattern="unicomp")
    assert_same_pairs(got, oracle_self_pairs(x, 0.03), context="skewed, unicomp", a=x, eps=0.03)


def test_share_tags_say_what_cut_the_shares():
    """The grid's shares name the backend; brute force's the GPU's signature too, or none are cut."""
    from daskjoin.planning.planner import _share_tag

    assert _share_tag("grid", "cpu") == "cpu" and _share_tag("grid", "gpu:H200/132sm") == "gpu"
    assert _share_tag("brute", "gpu:H200/132sm") == "gpu:H200/132sm"
    assert _share_tag("brute", "gpu") is None and _share_tag("brute", "cpu") is None
    assert _share_tag("grid", None) is None


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy")
def test_a_brute_share_runs_only_on_the_device_that_cut_it():
    from daskjoin.kernels.gpu_common import device_signature
    from daskjoin.kinds.epsilon import _Sides
    from daskjoin.planning.plan import Partition

    job = SimpleNamespace(kernel=lambda: get_kernel("brute", "gpu"), reader_a=None)
    with pytest.raises(RuntimeError, match="this worker's GPU is"):
        _Sides(job, Partition(0, (0, 5), None, True, 0.0, share=(0, 2, "gpu:another/1sm/cuda1/cupy1")))
    name, sms, cuda, cupy_version = device_signature().split("/")  # what decides cuBLAS's bits
    assert name and sms.endswith("sm") and cuda.startswith("cuda") and cupy_version.startswith("cupy")


def test_shares_balance_the_work_of_uniform_data():
    """Uniform data: each of 4 shares holds about a quarter of the pairs (shares follow the cells' weight)."""
    x = np.random.default_rng(2).random((40000, 2))
    k = get_kernel("grid", "cpu")
    counts = [k.self_count(x, 0.01, share=(s, 4)) for s in range(4)]
    assert max(counts) < 1.15 * sum(counts) / 4, counts


def test_only_grid_cuts_into_shares_and_a_share_runs_on_its_own_backend():
    from daskjoin.kinds.epsilon import _Sides
    from daskjoin.planning.plan import Partition

    x = np.random.default_rng(0).random((50, 2))
    with pytest.raises(ValueError, match="does not cut its queries into shares on cpu"):
        get_kernel("brute", "cpu").self_count(x, 0.1, share=(0, 2))
    with pytest.raises(ValueError, match="0 <= k < parts"):
        get_kernel("grid", "cpu").self_count(x, 0.1, share=(2, 2))
    job = SimpleNamespace(kernel=lambda: get_kernel("grid", "cpu"), reader_a=None)
    part = Partition(0, (0, 50), None, True, 0.0, share=(0, 2, "gpu"))
    with pytest.raises(RuntimeError, match="query share 1 of 2 as the gpu driver cuts them"):
        _Sides(job, part)


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 60), max_size=80), parts=st.integers(1, 9))
def test_share_ranges_are_contiguous_and_cover_everything(sizes, parts):
    cell_start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n, ncell = int(cell_start[-1]), len(sizes)
    cells = [cell_range(cell_start, (k, parts)) for k in range(parts)]
    points = [point_range(cell_start, (k, parts)) for k in range(parts)]
    self_points = [point_range(cell_start, (k, parts), selfjoin=True) for k in range(parts)]
    for ranges, end in ((cells, ncell), (points, n), (self_points, n)):
        assert ranges[0][0] == 0 and ranges[-1][1] == end
        assert all(lo <= hi for lo, hi in ranges)
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    weights = np.asarray(sizes, np.int64) ** 2
    total = int(weights.sum())
    for lo, hi in cells:  # a share's weight is its target's, give or take one cell
        assert abs(int(weights[lo:hi].sum()) - total / parts) <= max(weights, default=0)


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 500), data=st.data())
def test_a_self_joins_first_points_weigh_more(m, data):
    """In a self-join the p-th point of a cell of m weighs 2(m - p) - 1 (the cell still m^2): the fewest
    points reaching a weight t are found exactly."""
    from daskjoin.kernels.shares import _points_reaching

    t = data.draw(st.integers(1, m * m))
    weights = np.cumsum([2 * (m - p) - 1 for p in range(m)])
    assert weights[-1] == m * m
    assert _points_reaching(t, m, True) == int(np.searchsorted(weights, t, side="left")) + 1
    assert _points_reaching(t, m, False) == -(-t // m)


def test_a_self_join_share_inside_one_heavy_cell_balances_its_scans():
    """One cell of 1,000 points cut in two for a self-join: the first share takes fewer points (~293), since
    each scans the points after it."""
    cell_start = np.array([0, 1000], np.int64)
    lo, hi = point_range(cell_start, (0, 2), selfjoin=True)
    assert (lo, hi) == (0, 293)
    assert point_range(cell_start, (0, 2)) == (0, 500)
