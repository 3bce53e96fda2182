"""Planning: block statistics and box distances, the sampled estimate, chunk pairs, slabs, sorted copies,
the cache and its invalidation, ``cost.choose_*`` and ``Plan.explain()``.

Partitions are checked against the oracle independently of the kernels: the
oracle's pairs of every partition, mapped back to original row ids, must
together be exactly the oracle's pairs of the whole join (nothing lost by
pruning, nothing reported twice).
"""
from __future__ import annotations

import os

import dask
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import daskjoin as dj
from daskjoin.execution.cluster import ClusterRunner
from daskjoin.io.zarr_in import MemorySource, open_points
from daskjoin.planning import cost
from daskjoin.planning.bounds import block_stats, box_d2
from daskjoin.planning.chunk_pairs import block_rows_for, plan_block_pairs
from daskjoin.planning.estimate import estimate_pairs
from daskjoin.kernels import get_kernel
from daskjoin.planning.plan import PAIR_BYTES, row_bytes
from daskjoin.planning.slabs import owner_rows, plan_slabs, reach, split_dimension, work_cuts
from daskjoin.planning.sorted_copy import KEY_STRIDE, SortedCopy, sort_in_memory
from joinhelpers import budget_for_tasks, check_frame, frame_triple, oracle, write_zarr
from oracle import (assert_same_pairs, oracle_cross_count, oracle_cross_pairs, oracle_self_count, oracle_self_pairs,
                    pair_set, squared_distances)

# --------------------------------------------------------------------------- helpers


def _read_rows(reader, rows):
    """Points and original ids of rows [s, e) of a reader (an input source or a sorted copy)."""
    s, e = rows
    if isinstance(reader, SortedCopy):
        return reader.read(s, e)
    return reader.read(s, e), np.arange(s, e, dtype=np.int64)


def _pairs_of_partitions(reader_a, reader_b, partitions, eps, selfjoin):
    """The oracle's pairs of each partition, in original ids, concatenated (duplicates kept)."""
    all_i, all_j = [], []
    for part in partitions:
        pa, ia = _read_rows(reader_a, part.a)
        if part.self_part:
            i, j, _ = oracle_self_pairs(pa, eps)
            gi, gj = ia[i], ia[j]
            all_i.append(np.minimum(gi, gj))
            all_j.append(np.maximum(gi, gj))
        if part.b is not None:
            pb, ib = _read_rows(reader_b if reader_b is not None else reader_a, part.b)
            i, j, _ = oracle_cross_pairs(pa, pb, eps)
            gi, gj = ia[i], ib[j]
            if selfjoin:
                gi, gj = np.minimum(gi, gj), np.maximum(gi, gj)
            all_i.append(gi)
            all_j.append(gj)
    if not all_i:
        return np.empty((0, 2), np.int64)
    return pair_set(np.concatenate(all_i), np.concatenate(all_j))


def _assert_partitions_exact(reader_a, reader_b, partitions, eps, a, b, context=""):
    got = _pairs_of_partitions(reader_a, reader_b, partitions, eps, selfjoin=b is None)
    exp = oracle(a, b, eps)
    expected = pair_set(exp[0], exp[1])
    dup = int((got[1:] == got[:-1]).all(axis=1).sum()) if len(got) > 1 else 0
    assert dup == 0, f"{context}: {dup} pairs reported by more than one partition"
    if not np.array_equal(got, expected):
        gs, es = set(map(tuple, got.tolist())), set(map(tuple, expected.tolist()))
        raise AssertionError(f"{context}: {len(es - gs)} pairs lost (e.g. {sorted(es - gs)[:5]}), "
                             f"{len(gs - es)} extra (e.g. {sorted(gs - es)[:5]})")


def _sorted_uniform(n, d, seed, axis=0):
    x = np.random.default_rng(seed).random((n, d))
    return x[np.argsort(x[:, axis], kind="stable")]


# --------------------------------------------------------------------------- box_d2


def test_box_d2_of_points_equals_oracle_distance():
    rng = np.random.default_rng(0)
    for d in (1, 2, 3, 8, 64):
        p = 1e6 + rng.random((200, d))
        q = 1e6 + rng.random((200, d))
        got = box_d2(p, p, q, q)
        assert np.array_equal(got, squared_distances(p, q)), d  # same summation order: bit-identical


def test_box_d2_overlapping_and_touching_boxes_are_zero():
    lo_a, hi_a = np.array([0.0, 0.0]), np.array([1.0, 1.0])
    assert box_d2(lo_a, hi_a, np.array([0.5, 0.5]), np.array([2.0, 2.0])) == 0.0
    assert box_d2(lo_a, hi_a, np.array([1.0, -5.0]), np.array([3.0, 5.0])) == 0.0
    assert box_d2(lo_a, hi_a, np.array([4.0, 5.0]), np.array([6.0, 7.0])) == 3.0**2 + 4.0**2
    # symmetric
    assert box_d2(np.array([4.0, 5.0]), np.array([6.0, 7.0]), lo_a, hi_a) == 25.0


def test_box_d2_broadcasts():
    lo = np.random.default_rng(1).random((5, 3))
    hi = lo + 0.1
    got = box_d2(lo[:, None, :], hi[:, None, :], lo[None, :, :], hi[None, :, :])
    assert got.shape == (5, 5)
    assert np.all(np.diag(got) == 0) and np.array_equal(got, got.T)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    d=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
    offset=st.sampled_from([0.0, 1e6, -1e6, 1e12]),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_box_d2_never_exceeds_any_pair_distance(d, seed, scale, offset, dtype):
    """Pruning on box_d2 > eps**2 is exact: no pair inside the boxes is closer than the boxes."""
    rng = np.random.default_rng(seed)
    p = (offset + scale * rng.standard_normal((7, d))).astype(dtype)
    q = (offset + scale * (rng.standard_normal((6, d)) + rng.integers(-3, 4, d))).astype(dtype)
    lo_p, hi_p = p.min(0).astype(np.float64), p.max(0).astype(np.float64)
    lo_q, hi_q = q.min(0).astype(np.float64), q.max(0).astype(np.float64)
    bound = box_d2(lo_p, hi_p, lo_q, hi_q)
    s = squared_distances(np.repeat(p, len(q), 0), np.tile(q, (len(p), 1)))
    assert bound <= s.min()


@given(x=hnp.arrays(np.float64, (2, 3), elements=st.floats(-1e6, 1e6, allow_nan=False)),
       y=hnp.arrays(np.float64, (2, 3), elements=st.floats(-1e6, 1e6, allow_nan=False)))
@settings(max_examples=100, deadline=None)
def test_box_d2_bound_hypothesis(x, y):
    bound = box_d2(x.min(0), x.max(0), y.min(0), y.max(0))
    for p in x:
        for q in y:
            assert bound <= squared_distances(p, q)[0]


# --------------------------------------------------------------------------- block statistics


def test_block_stats_zarr_per_chunk(client, tmp_path):
    x = np.random.default_rng(2).normal(size=(1000, 3))
    x[333, 1] = np.nan  # excluded from the box of its chunk, reported as the first bad row
    x[700, 2] = np.inf
    src = open_points(write_zarr(tmp_path / "x.zarr", x, 64), "A")
    stats = block_stats(src, ClusterRunner(client).map)
    assert stats.starts.tolist() == list(range(0, 1000, 64)) + [1000]
    assert stats.first_bad == 333
    for b in range(stats.nblocks):
        block = x[stats.starts[b]:stats.starts[b + 1]]
        good = block[np.isfinite(block).all(axis=1)]
        assert np.array_equal(stats.lo[b], good.min(0)) and np.array_equal(stats.hi[b], good.max(0))
    assert np.array_equal(stats.lo_all, np.nanmin(np.where(np.isfinite(x), x, np.nan), axis=0))


def test_block_stats_sample_spread_over_input(client, tmp_path):
    x = np.random.default_rng(3).random((5000, 2)).astype(np.float32)
    src = open_points(write_zarr(tmp_path / "x.zarr", x, 300), "A")
    with dask.config.set({"daskjoin.sample-rows": 500}):
        stats = block_stats(src, ClusterRunner(client).map)
    rows = stats.sample_rows
    assert rows.dtype == np.int64 and np.all(np.diff(rows) > 0)
    assert 400 <= len(rows) <= 700
    assert rows.min() < 300 and rows.max() >= 5000 - 300  # spread over every block
    assert np.array_equal(stats.sample, x[rows].astype(np.float64))


def test_block_stats_whole_input_when_small():
    x = np.random.default_rng(4).random((777, 2))
    stats = block_stats(MemorySource(x))
    assert np.array_equal(stats.sample, x) and np.array_equal(stats.sample_rows, np.arange(777))
    assert stats.first_bad == -1


def test_block_stats_empty(client, tmp_path):
    src = open_points(write_zarr(tmp_path / "x.zarr", np.zeros((0, 4)), 8), "A")
    stats = block_stats(src, ClusterRunner(client).map)
    assert stats.nblocks == 0 and stats.first_bad == -1 and stats.sample.shape == (0, 4)
    assert stats.lo_all.shape == (4,)


# --------------------------------------------------------------------------- estimate


@pytest.mark.parametrize("eps", [1e-6, 0.01, 0.05, 0.3, 2.0])
def test_estimate_exact_when_sample_is_whole_input(eps):
    x = np.random.default_rng(5).random((1500, 2))
    y = np.random.default_rng(6).random((900, 2))
    est = estimate_pairs(x, 1500, eps)
    n = oracle_self_count(x, eps)
    assert est.sampled_pairs == n and est.pairs == pytest.approx(n, rel=1e-12)
    assert n <= est.upper <= 1500 * 1499 / 2
    est = estimate_pairs(x, 1500, eps, y, 900)
    n = oracle_cross_count(x, y, eps)
    assert est.sampled_pairs == n and est.pairs == pytest.approx(n, rel=1e-12)
    assert n <= est.upper <= 1500 * 900
    assert f"{est.sampled_pairs} pairs in a sample" in est.describe()


def test_estimate_scales_sampled_count():
    x = np.random.default_rng(7).random((400, 3))
    est = estimate_pairs(x, 40_000, 0.1)
    hits = oracle_self_count(x, 0.1)
    assert est.sampled_pairs == hits
    assert est.pairs == pytest.approx(hits * (40_000 * 39_999) / (400 * 399))
    assert est.upper > est.pairs
    est = estimate_pairs(x, 40_000, 0.1, x[:100], 1000)
    hits = oracle_cross_count(x, x[:100], 0.1)
    assert est.sampled_pairs == hits and est.pairs == pytest.approx(hits * 40_000 * 1000 / (400 * 100))


def test_estimate_zero_hits_still_bounded_above():
    x = np.random.default_rng(8).random((100, 2)) * 1000
    est = estimate_pairs(x, 10_000, 1e-9)
    assert est.pairs == 0 and est.sampled_pairs == 0 and est.upper > 0


@pytest.mark.parametrize("m", [0, 1])
def test_estimate_tiny_samples(m):
    est = estimate_pairs(np.zeros((m, 2)), m, 1.0)
    assert est.pairs == 0 and est.upper == 0  # no pair exists
    est = estimate_pairs(np.zeros((m, 2)), m, 1.0, np.zeros((3, 2)), 3)
    assert est.pairs == 3 * m and est.upper == 3 * m


# --------------------------------------------------------------------------- chunk pairs


def test_block_rows_for_fits_budget():
    for budget in (2**14, 2**18, 2**22):
        for upper in (0.0, 1e3, 1e6):
            for chunk in (1, 64, 1000):
                rows = block_rows_for(budget, 10_000, 8_000, 3, upper, chunk)
                assert 1 <= rows <= 10_000
                if rows >= chunk:
                    assert rows % chunk == 0
                density = upper / (10_000 * 8_000)
                if rows > 1:
                    assert 2 * rows * row_bytes(3, 8) + 2 * density * rows**2 * PAIR_BYTES <= budget * (1 + 1e-9)


@pytest.mark.parametrize("layout", ["sorted", "shuffled", "clustered"])
@pytest.mark.parametrize("rows", [30, 64, 200, 1000])
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_chunk_pairs_cover_every_pair_once(client, tmp_path, layout, rows, mode):
    rng = np.random.default_rng(9)
    if layout == "sorted":
        a, b = _sorted_uniform(900, 2, 10), _sorted_uniform(600, 2, 11)
    elif layout == "shuffled":
        a, b = rng.random((900, 2)), rng.random((600, 2))
    else:
        centers = rng.random((6, 3)) * 10
        a = np.repeat(centers, 150, 0) + 0.05 * rng.standard_normal((900, 3))
        b = np.repeat(centers[::-1], 100, 0) + 0.05 * rng.standard_normal((600, 3))
    eps = 0.04
    sa = open_points(write_zarr(tmp_path / "a.zarr", a, 64), "A")
    sb = open_points(write_zarr(tmp_path / "b.zarr", b, 64), "B")
    mapper = ClusterRunner(client).map
    stats_a = block_stats(sa, mapper)
    stats_b = None if mode == "self" else block_stats(sb, mapper)
    parts, kept = plan_block_pairs(stats_a, stats_b, eps, rows, 1000.0)
    assert [p.index for p in parts] == list(range(len(parts)))
    assert 0 < kept <= 1
    for p in parts:
        if mode == "self":
            assert p.self_part == (p.b is None)  # a diagonal block, or an off-diagonal pair of blocks a < b
            assert p.b is None or p.a[0] < p.b[0]
        else:
            assert not p.self_part and p.b is not None
    _assert_partitions_exact(sa, None if mode == "self" else sb, parts, eps, a, None if mode == "self" else b,
                             context=f"{layout} rows={rows}")
    if layout in ("sorted", "clustered") and rows <= 64:
        assert kept < 0.5, f"spatially coherent blocks should prune, kept {kept:.0%}"


# --------------------------------------------------------------------------- slabs


def test_split_dimension_and_reach():
    assert split_dimension(np.array([0.0, 0.0, 0.0]), np.array([1.0, 3.0, 2.0])) == 1
    assert split_dimension(np.array([0.0, 0.0]), np.array([2.0, 2.0])) == 0  # first of equals
    assert split_dimension(np.array([]), np.array([])) == 0
    for eps, key in [(1.0, 0.0), (1e-9, 1e6), (0.5, -1e12)]:
        assert reach(eps, key) > eps


@pytest.mark.parametrize("rows", [1, 3, 17, 256, 257, 1000, 5000])
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_slabs_cover_every_pair_once(mode, rows):
    """Including slabs far thinner than eps (rows=1, 3: the extension spans many later slabs)."""
    rng = np.random.default_rng(12)
    a = rng.random((1200, 2))
    a[:50] = a[50:100]  # duplicate keys: the (key, row) order breaks the ties
    b = rng.random((700, 2))
    eps = 0.05
    dim = split_dimension(np.minimum(a.min(0), b.min(0)), np.maximum(a.max(0), b.max(0)))
    sa = sort_in_memory(MemorySource(a), dim)
    sb = None if mode == "self" else sort_in_memory(MemorySource(b), dim)
    parts = plan_slabs(sa, sb, eps, rows, 1000.0)
    starts = [p.a for p in parts]
    if mode == "self":  # the slabs tile the sorted rows
        assert starts[0][0] == 0 and starts[-1][1] == 1200
        assert all(x[1] == y[0] for x, y in zip(starts, starts[1:]))
        assert all(p.self_part for p in parts)
    _assert_partitions_exact(sa, sb, parts, eps, a, None if mode == "self" else b, context=f"rows={rows}")


@pytest.mark.parametrize("mode", ["self", "cross"])
def test_work_sized_slabs_cover_every_pair_once_and_follow_the_work(mode):
    """Slabs cut by where the sampled pairs lie (exponential data: dense near 0) tile the sorted rows, give
    every pair once, and are thinner where the pairs are dense."""
    rng = np.random.default_rng(21)
    a = rng.exponential(0.05, (6000, 2))
    a[:40] = a[40:80]  # duplicate keys
    b = rng.exponential(0.05, (3000, 2))
    eps = 0.01
    dim = 0
    sa = sort_in_memory(MemorySource(a), dim)
    sb = None if mode == "self" else sort_in_memory(MemorySource(b), dim)
    sample = np.arange(0, len(a), 3)
    if mode == "self":
        i, j = oracle_self_pairs(a[sample], eps)[:2]
        owners = owner_rows(sa, a[sample][i, dim], a[sample][j, dim])
    else:
        i, j = oracle_cross_pairs(a[sample], b[::3], eps)[:2]
        owners = owner_rows(sa, a[sample][i, dim], None)
    cuts = work_cuts(len(a), 600, owners, 1e6, 1e12, 100.0)
    assert cuts[0] == 0 and cuts[-1] == len(a) and np.all(np.diff(cuts) > 0)
    rows = np.diff(cuts)
    assert 2 * rows[0] < rows[:-1].max()  # the dense end (small keys) is cut thinner than the sparse end
    parts = plan_slabs(sa, sb, eps, 600, 1e6, cuts, owners)
    if mode == "self":
        assert [p.a for p in parts] == list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))
    est = [p.est_pairs for p in parts]
    assert abs(sum(est) - 1e6) < 1e-3 * 1e6  # the estimate is spread, not lost or doubled
    _assert_partitions_exact(sa, sb, parts, eps, a, None if mode == "self" else b, context=mode)


def test_work_cuts_keep_each_slab_within_the_budget_and_fall_back_to_rows():
    owners = np.repeat(np.array([10, 5000, 9000]), [900, 50, 50])  # most pairs owned near row 10
    cuts = work_cuts(10000, 1000, owners, 1e6, budget=1e5 * PAIR_BYTES + 1000 * 10.0, bytes_per_row=10.0)
    rows = np.diff(cuts)
    for s, e in zip(cuts[:-1], cuts[1:]):
        held = 1e6 / len(owners) * (np.searchsorted(np.sort(owners), e) - np.searchsorted(np.sort(owners), s))
        assert (e - s) * 10.0 + held * PAIR_BYTES <= 1e5 * PAIR_BYTES + 1000 * 10.0 or e - s == 1
    assert rows.min() >= 1 and cuts[-1] == 10000
    np.testing.assert_array_equal(work_cuts(2500, 1000, None, 1e6, 1e12, 10.0), [0, 1000, 2000, 2500])


def test_slabs_thinner_than_eps_on_lattice_ties():
    """A 1-d lattice of spacing eps/8: every row pairs with 8 rows each side, exactly at eps included."""
    a = (np.arange(2000, dtype=np.float64) * 0.125)[:, None]
    sa = sort_in_memory(MemorySource(a[::-1].copy()), 0)
    parts = plan_slabs(sa, None, 1.0, 2, 10.0)
    assert len(parts) == 1000
    _assert_partitions_exact(sa, None, parts, 1.0, a[::-1].copy(), None)


def test_slabs_through_api_thinner_than_eps(client, tmp_path):
    x = _sorted_uniform(1500, 2, 13)[::-1].copy()
    eps = 0.2
    path = write_zarr(tmp_path / "x.zarr", x, 100)
    budget, ntasks = budget_for_tasks(path, None, eps, "slabs", 40, client)
    plan = dj.plan_join(path, eps=eps, partitioning="slabs", memory_budget=budget, client=client)
    keys = np.asarray(zarr.open_group(plan.reader_a.group_path, mode="r")["keys"][:])
    spans = [keys[p.a[1] - 1] - keys[p.a[0]] for p in plan.partitions]
    assert max(spans) < eps, "the budget should give slabs thinner than eps"
    got = client.compute(dj.similarity_join(path, eps=eps, partitioning="slabs", memory_budget=budget,
                                            client=client)).result()
    check_frame(got, selfjoin=True)
    assert_same_pairs(frame_triple(got), oracle(x, None, eps), a=x, eps=eps)


# --------------------------------------------------------------------------- sorted copies


def _check_sorted_contents(points, ids, keys, key_index, data, dim):
    n = data.shape[0]
    assert ids.dtype == np.int64 and np.array_equal(np.sort(ids), np.arange(n))
    assert np.array_equal(points, data[ids])
    assert np.array_equal(keys, data[ids, dim].astype(np.float64))
    order = np.lexsort((ids, keys))
    assert np.array_equal(order, np.arange(n)), "rows must be ordered by (key, original row)"
    assert np.array_equal(key_index, keys[::KEY_STRIDE])


def test_sort_in_memory_contents():
    rng = np.random.default_rng(14)
    x = rng.integers(0, 20, (1000, 3)).astype(np.float32)  # many equal keys
    sc = sort_in_memory(MemorySource(x), 2)
    pts, ids = sc.read(0, sc.n)
    _check_sorted_contents(pts, ids, x[ids, 2].astype(np.float64), sc.key_index, x, 2)
    # the coarse bounds are never too tight
    keys = x[ids, 2].astype(np.float64)
    for start in (0, 1, 255, 256, 257, 999):
        assert sc.lower_key(start) <= keys[start]
        assert sc.upper_key(start + 1) >= keys[start]
    for bound in (-1.0, 0.0, 5.5, 7.0, 19.0, 100.0):
        p = sc.first_above(bound)
        assert np.all(keys[p:] > bound)
        q = sc.last_below(bound)
        assert np.all(keys[:q] < bound)


@pytest.mark.parametrize("n, chunk", [(3000, 128), (1000, 1000), (700, 33), (100, 7)])
def test_zarr_sorted_copy_contents_and_reuse(client, tmp_path, n, chunk):
    rng = np.random.default_rng(n)
    x = rng.random((n, 3)).astype(np.float32)
    x[:, 1] *= 10  # dimension 1 has the largest spread
    x[: n // 10, 1] = x[n // 10 : 2 * (n // 10), 1]  # duplicate keys
    path = write_zarr(tmp_path / "x.zarr", x, chunk)
    plan = dj.plan_join(path, eps=0.05, partitioning="slabs", client=client)
    assert "split on dimension 1" in plan.partitioning_reason
    assert any("sorted copy built at" in note for note in plan.notes)
    sc = plan.reader_a
    assert isinstance(sc, SortedCopy) and sc.dim == 1
    assert os.path.dirname(sc.group_path) == str(tmp_path / "x.zarr.daskjoin")
    group = zarr.open_group(sc.group_path, mode="r")
    _check_sorted_contents(group["points"][:], group["ids"][:], group["keys"][:], group["key_index"][:], x, 1)
    assert group["points"].dtype == np.float32
    # no scratch or temporary groups left behind
    assert [p for p in os.listdir(tmp_path / "x.zarr.daskjoin") if "scratch" in p or "tmp" in p] == []
    again = dj.plan_join(path, eps=0.3, partitioning="slabs", client=client)  # another eps: the same copy
    assert any("sorted copy reused from" in note for note in again.notes)
    assert again.reader_a.group_path == sc.group_path
    got = client.compute(dj.similarity_join(path, eps=0.3, partitioning="slabs", client=client,
                                            memory_budget="64KiB")).result()
    assert_same_pairs(frame_triple(got), oracle(x, None, 0.3), a=x, eps=0.3)


def test_cache_invalidated_when_array_changes(client, tmp_path):
    rng = np.random.default_rng(15)
    x = rng.random((1000, 2))
    path = write_zarr(tmp_path / "x.zarr", x, 100)
    first = dj.plan_join(path, eps=0.05, partitioning="slabs", client=client)
    n1 = dj.similarity_join(path, eps=0.05, partitioning="slabs", client=client, output="count")
    assert n1 == oracle_self_count(x, 0.05)
    cache = tmp_path / "x.zarr.daskjoin"
    stats_files = [p for p in os.listdir(cache) if p.startswith("stats-")]
    assert len(stats_files) == 1

    # change one chunk's values in place
    y = x.copy()
    y[200:300] = rng.random((100, 2)) * 0.1  # a dense patch: many more pairs
    arr = zarr.open_array(path, mode="r+")
    arr[200:300] = y[200:300]
    second = dj.plan_join(path, eps=0.05, partitioning="slabs", client=client)
    assert any("sorted copy built at" in note for note in second.notes), second.notes
    assert second.reader_a.group_path != first.reader_a.group_path
    got = client.compute(dj.similarity_join(path, eps=0.05, partitioning="slabs", client=client,
                                            memory_budget="32KiB")).result()
    assert_same_pairs(frame_triple(got), oracle(y, None, 0.05), a=y, eps=0.05)
    assert dj.similarity_join(path, eps=0.05, partitioning="chunk_pairs", client=client, output="count") == \
        oracle_self_count(y, 0.05)

    # a NaN written after the statistics were cached is still refused
    arr[977, 1] = np.nan
    with pytest.raises(dj.InputError, match="row 977"):
        dj.similarity_join(path, eps=0.05, client=client, output="count")

    # the array replaced by a new one of the same shape and chunking
    z = rng.random((1000, 2)) * 0.5
    zarr.create_array(store=path, shape=z.shape, chunks=(100, 2), dtype=z.dtype, overwrite=True)[:] = z
    assert dj.similarity_join(path, eps=0.05, partitioning="slabs", client=client, output="count") == \
        oracle_self_count(z, 0.05)
    assert dj.similarity_join(path, eps=0.05, partitioning="chunk_pairs", client=client, output="count",
                              memory_budget="32KiB") == oracle_self_count(z, 0.05)


def test_cache_dir_config(client, tmp_path):
    x = np.random.default_rng(16).random((500, 2))
    path = write_zarr(tmp_path / "data" / "x.zarr", x, 100)
    cache = tmp_path / "cache"
    with dask.config.set({"daskjoin.cache-dir": str(cache)}):
        plan = dj.plan_join(path, eps=0.05, partitioning="slabs", client=client)
        n = dj.similarity_join(path, eps=0.05, partitioning="slabs", client=client, output="count")
    assert n == oracle_self_count(x, 0.05)
    assert not (tmp_path / "data" / "x.zarr.daskjoin").exists()
    assert str(plan.reader_a.group_path).startswith(str(cache))
    assert any(name.startswith("stats-") for _, _, files in os.walk(cache) for name in files)


# --------------------------------------------------------------------------- cost


def test_choose_method():
    assert cost.choose_method("brute", 2) == ("brute", "requested")
    assert cost.choose_method("grid", 100) == ("grid", "requested")
    method, reason = cost.choose_method("auto", 2)
    assert method == "grid" and "d=2" in reason and "grid" in reason
    assert cost.choose_method("auto", cost.CPU_BRUTE_FROM_D - 1)[0] == "grid"
    method, reason = cost.choose_method("auto", cost.CPU_BRUTE_FROM_D)
    assert method == "brute" and f"d={cost.CPU_BRUTE_FROM_D}" in reason and "CPU" in reason and "BLAS" in reason
    assert {cost.choose_method("auto", d)[0] for d in range(1, 200)} == {"grid", "brute"}  # the rest by name only
    # on the CPU at the measured dimensionalities where the join's pairs of rows are few; never on the GPU, never
    # at a dimensionality without a measured limit (7-d and below)
    assert min(cost.CPU_BRUTE_SMALL_ROW_PAIRS) == 8 and max(cost.CPU_BRUTE_SMALL_ROW_PAIRS) < cost.CPU_BRUTE_FROM_D
    for d, most in cost.CPU_BRUTE_SMALL_ROW_PAIRS.items():
        small, large = most, most * 1.01
        method, reason = cost.choose_method("auto", d, row_pairs=small)
        assert method == "brute" and "pairs of rows" in reason and "CPU" in reason and f"{d}-d" in reason
        assert cost.choose_method("auto", d, row_pairs=large)[0] == "grid"
        assert cost.choose_method("auto", d, gpu=True, row_pairs=1.0)[0] == "grid"
        assert cost.choose_method("auto", d)[0] == "grid"  # the size unknown
    assert cost.choose_method("auto", 7, row_pairs=1.0)[0] == "grid"
    assert cost.CPU_BRUTE_SMALL_ROW_PAIRS[8] < cost.CPU_BRUTE_SMALL_ROW_PAIRS[9] < cost.CPU_BRUTE_SMALL_ROW_PAIRS[10]
    assert cost.choose_method("auto", cost.CPU_BRUTE_FROM_D, row_pairs=1e30)[0] == "brute"
    assert cost.choose_method("auto", cost.GPU_BRUTE_FROM_D - 1, gpu=True)[0] == "grid"
    method, reason = cost.choose_method("auto", cost.GPU_BRUTE_FROM_D, gpu=True)
    assert method == "brute" and "GPU" in reason


def test_choose_method_by_the_grids_share():
    """On the CPU from CPU_SHARE_FROM_D dimensions a known share decides, either way of the old rules: brute force
    where kappa(d) d share reaches 1, the grid below; ignored on the GPU and below CPU_SHARE_FROM_D."""
    low = cost.CPU_SHARE_FROM_D
    assert not cost.wants_grid_share(low - 1, False) and cost.wants_grid_share(low, False)
    assert not cost.wants_grid_share(64, True)
    for d in (low, 8, 10, 12, 20, 21, 32, 64, 128):
        edge = 1.0 / (cost.cpu_grid_kappa(d) * d)
        method, reason = cost.choose_method("auto", d, row_pairs=1e30, grid_share=edge * 1.001)
        assert method == "brute" and "sampled" in reason and f"d={d}" in reason and "BLAS" in reason
        method, reason = cost.choose_method("auto", d, row_pairs=1.0, grid_share=edge * 0.999)
        assert method == "grid" and "sampled" in reason
        assert cost.choose_method("grid", d, grid_share=1.0) == ("grid", "requested")
        assert cost.choose_method("auto", d, gpu=True, grid_share=0.0)[0] == cost.choose_method("auto", d, gpu=True)[0]
    assert cost.choose_method("auto", low - 1, grid_share=1.0)[0] == "grid"
    assert cost.cpu_grid_kappa(7) == cost.cpu_grid_kappa(20) < cost.cpu_grid_kappa(32) < cost.cpu_grid_kappa(64)
    assert cost.cpu_grid_kappa(64) == cost.cpu_grid_kappa(1000)


@pytest.mark.parametrize("cross", [False, True])
def test_estimate_grid_share_is_the_samples_candidate_share(cross):
    """The share is the grid's decisions among the sample's pairs of rows, measured only where asked."""
    rng = np.random.default_rng(31)
    a = rng.random((700, 8))
    b = rng.random((400, 8)) if cross else None
    kernel = get_kernel("grid", "cpu")
    est = estimate_pairs(a, 700, 0.4, b, None if b is None else 400, grid_share=True)
    rows = 700 * 400 if cross else 700 * 699 / 2
    assert est.grid_share == kernel.decisions(a, b, 0.4) / rows
    assert 0.0 < est.grid_share <= 1.0
    assert estimate_pairs(a, 700, 0.4, b, None if b is None else 400).grid_share is None
    # every pair of rows is a candidate when eps spans the data; a count past them would be a bug
    assert estimate_pairs(a, 700, 10.0, b, None if b is None else 400, grid_share=True).grid_share == 1.0
    assert estimate_pairs(a[:1], 1, 0.4, grid_share=True).grid_share == 0.0


def test_choose_partitioning():
    assert cost.choose_partitioning("slabs", fits_one_task=True, kept_fraction=0.0, nblocks=1) == ("slabs", "requested")
    got, reason = cost.choose_partitioning("auto", fits_one_task=True, kept_fraction=1.0, nblocks=50)
    assert got == "chunk_pairs" and "fits one task" in reason
    got, reason = cost.choose_partitioning("auto", fits_one_task=False, kept_fraction=0.02, nblocks=100)
    assert got == "chunk_pairs" and "prune well" in reason and "2.0%" in reason
    got, reason = cost.choose_partitioning("auto", fits_one_task=False, kept_fraction=0.9, nblocks=100)
    assert got == "slabs" and "prune poorly" in reason and "90%" in reason
    assert cost.choose_partitioning("auto", fits_one_task=False, kept_fraction=0.02, nblocks=100)[0] == "chunk_pairs"
    assert cost.choose_partitioning("auto", fits_one_task=False, kept_fraction=0.021, nblocks=100)[0] == "slabs"
    # slabs that would read each row 3 times against block pairs that read it 4 times, or 4.5 times
    got, reason = cost.choose_partitioning("auto", fits_one_task=False, kept_fraction=1.0, nblocks=4, slab_reads=3.0)
    assert got == "chunk_pairs" and "slabs would too" in reason and "read 3.0 times its rows" in reason
    assert "block pairs read each row 4.0 times" in reason
    assert cost.choose_partitioning("auto", fits_one_task=False, kept_fraction=0.9, nblocks=5, slab_reads=3.0)[0] == "slabs"


def test_auto_partitioning_in_plans(client, tmp_path):
    rng = np.random.default_rng(17)
    shuffled = rng.random((4000, 2))
    # ten far-apart clusters, each stored in its own chunks: block boxes prune almost every block pair
    clustered = np.repeat(np.arange(10)[:, None] * np.array([[10.0, 0.0]]), 200, 0) + rng.random((2000, 2))
    p1 = dj.plan_join(write_zarr(tmp_path / "s.zarr", shuffled, 200), eps=0.02, memory_budget="64KiB", client=client)
    p2 = dj.plan_join(write_zarr(tmp_path / "c.zarr", clustered, 200), eps=0.02, memory_budget="32KiB",
                      client=client)
    p3 = dj.plan_join(shuffled, eps=0.02, client=client)
    # unit vectors in 64-d: boxes overlap, and so would slabs (eps is most of one coordinate's spread)
    sphere = rng.standard_normal((2000, 64))
    sphere /= np.linalg.norm(sphere, axis=1, keepdims=True)
    p4 = dj.plan_join(write_zarr(tmp_path / "e.zarr", sphere, 200), eps=1.0, memory_budget="256KiB", client=client)
    assert p4.partitioning == "chunk_pairs" and "slabs would too" in p4.partitioning_reason and p4.ntasks > 1
    assert p1.partitioning == "slabs" and "prune poorly" in p1.partitioning_reason
    assert p2.partitioning == "chunk_pairs" and "prune well" in p2.partitioning_reason
    assert p3.partitioning == "chunk_pairs" and p3.ntasks == 1 and "fits one task" in p3.partitioning_reason


def test_gpu_tasks_fit_by_host_rows_and_a_share_of_the_device(tmp_path):
    """A GPU task holds its rows as read on the host and their float64 copies and index on the device: a join
    fits one task where the rows fit the budget and their copies a share of the GPU (``DEVICE_SHARE``)."""
    import types

    from daskjoin.planning import planner
    from daskjoin.planning.plan import DEVICE_SHARE, host_row_bytes

    n, d = 2000, 64
    x = np.random.default_rng(21).standard_normal((n, d)).astype(np.float32)
    src = open_points(write_zarr(tmp_path / "x.zarr", x, 200), "A")
    runner = types.SimpleNamespace(map=lambda f, items: [f(i) for i in items])
    budget = 2 * n * host_row_bytes(d, 4)  # the float32 rows as read fit; their CPU working copies would not
    assert n * row_bytes(d, 8, "brute") > budget
    kw = dict(method="brute", partitioning="chunk_pairs", backend="gpu", memory_budget=budget, runner=runner,
              gpu=True, count_only=True)
    device = int(n * row_bytes(d, 8, "brute") / DEVICE_SHARE) + 1
    one = planner.make_plan(src, None, 3.0, device_memory=device, **kw)
    assert one.ntasks == 1
    text = one.explain()
    assert "device/task:" in text and "GPU of" in text
    assert one.task_memory(one.partitions[0]) == n * host_row_bytes(d, 4) <= budget  # float32 rows as read
    # a GPU too small for the copies, or no GPU known: blocks as before
    assert planner.make_plan(src, None, 3.0, device_memory=device // 2, **kw).ntasks > 1
    assert planner.make_plan(src, None, 3.0, device_memory=0, **kw).ntasks > 1
    cpu = planner.make_plan(src, None, 3.0, **{**kw, "gpu": False, "backend": "cpu"}, device_memory=device)
    assert cpu.ntasks > 1 and cpu.device_memory == 0 and "device/task" not in cpu.explain()
    # pairs held too (a budget with room for them): one task, not halved back by the CPU rows' cost
    pairs = planner.make_plan(src, None, 3.0, **{**kw, "count_only": False, "memory_budget": 1 << 30},
                              device_memory=device)
    assert pairs.ntasks == 1
    assert planner.make_plan(src, None, 3.0, **{**kw, "count_only": False, "memory_budget": 1 << 30},
                             device_memory=device // 3).ntasks > 1
    # blocks within the device's share: each task's rows at most DEVICE_SHARE of the GPU
    small = planner.make_plan(src, None, 3.0, device_memory=device // 3, **kw)
    assert max(p.rows for p in small.partitions) * row_bytes(d, 8, "brute") <= DEVICE_SHARE * (device // 3)
    # slabs too: sized by the host rows as read, their rows within the device's share
    mem = MemorySource(x)
    slab_kw = {**kw, "partitioning": "slabs", "memory_budget": 4 * n * host_row_bytes(d, 4) // 5}
    gpu_slabs = planner.make_plan(mem, None, 3.0, device_memory=device, **slab_kw)
    cpu_slabs = planner.make_plan(mem, None, 3.0, **{**slab_kw, "gpu": False, "backend": "cpu"})
    assert gpu_slabs.ntasks < cpu_slabs.ntasks
    capped = planner.make_plan(mem, None, 3.0, device_memory=device // 4, **slab_kw)
    assert max(p.a[1] - p.a[0] for p in capped.partitions) * 2 * row_bytes(d, 8, "brute") <= DEVICE_SHARE * (device // 4)


# --------------------------------------------------------------------------- the plan


def test_plan_explain_self(client, tmp_path):
    x = np.random.default_rng(18).random((3000, 3))
    path = write_zarr(tmp_path / "pts.zarr", x, 300)
    plan = dj.plan_join(path, eps=0.05, method="grid", partitioning="slabs", memory_budget="128KiB", backend="cpu",
                        client=client)
    text = plan.explain()
    assert str(plan) == text
    assert "self-join" in text and "eps=0.05" in text
    assert path in text and "3,000 × 3" in text
    assert "method:        grid on cpu - requested" in text
    assert "partitioning:  slabs - requested; split on dimension" in text
    assert f"tasks:         {plan.ntasks}\n" in text
    assert plan.estimate.describe() in text
    assert "budget 128.0 KiB" in text
    assert "sorted copy" in text
    # the estimate is exact here: the sample is the whole input
    assert f"~{oracle_self_count(x, 0.05):,} pairs" in text


def test_plan_explain_cross_and_auto(client, tmp_path):
    a = np.random.default_rng(19).random((500, 20)).astype(np.float32)
    b = np.random.default_rng(20).random((300, 20)).astype(np.float32)
    pa = write_zarr(tmp_path / "a.zarr", a, 100)
    pb = write_zarr(tmp_path / "b.zarr", b, 100)
    plan = dj.plan_join(pa, pb, eps=1.0, backend="cpu", client=client)
    text = plan.explain()
    assert "A×B join" in text and pa in text and pb in text and "(500 × 20)" in text and "(300 × 20)" in text
    assert "method:        brute on cpu" in text and "of brute force's distances (sampled)" in text
    assert "fits one task" in text and "tasks:         1" in text
    assert not plan.selfjoin and plan.d == 20


def test_auto_follows_the_grids_sampled_share_on_the_cpu(client):
    """From CPU_SHARE_FROM_D dimensions the planner measures the grid's candidates among the sample's pairs of rows
    and takes the method the model predicts faster: 2,000 10-d rows at eps 0.5 (the grid would compute every
    distance) take brute force, at eps 0.3 (4% of them) the grid, as 330k rows at eps 0.05; below 7-d the grid
    always."""
    small = np.random.default_rng(3).random((2000, 10))
    methods = set()
    for d in (7, 8, 10):
        for eps in (0.3, 0.5):
            plan = dj.plan_join(small[:, :d], eps=eps, backend="cpu", client=client)
            share = get_kernel("grid", "cpu").decisions(small[:, :d], None, eps) / (2000 * 1999 / 2)
            assert f"computes {share:.3g} of brute force's distances (sampled)" in plan.explain()  # the sample: every row
            predicted = cost.cpu_grid_kappa(d) * d * share
            assert plan.method == ("brute" if predicted >= 1.0 else "grid"), (d, eps, predicted)
            methods.add(plan.method)
    assert methods == {"grid", "brute"}
    assert dj.plan_join(small, eps=0.5, backend="cpu", client=client).method == "brute"
    assert dj.plan_join(small, eps=0.3, backend="cpu", client=client).method == "grid"
    assert dj.plan_join(small[:, :6], eps=0.5, backend="cpu", client=client).method == "grid"
    large = np.random.default_rng(4).random((330_000, 10)).astype(np.float32)
    plan = dj.plan_join(large, eps=0.05, backend="cpu", client=client)
    assert plan.method == "grid" and "sampled" in plan.method_reason
    assert dj.plan_join(small, eps=0.5, method="grid", backend="cpu", client=client).method == "grid"  # as asked


def test_plan_over_budget_note(client):
    x = np.zeros((2000, 2))  # all pairs: a slab of one row still pairs with every later row
    plan = dj.plan_join(x, eps=1.0, memory_budget="4KiB", partitioning="slabs", client=client)
    assert any("over the budget" in note for note in plan.notes)
    assert "raise memory_budget" in plan.explain()


def test_plan_over_budget_note_states_the_size(client):
    x = np.zeros((2000, 2))
    plan = dj.plan_join(x, eps=1.0, memory_budget="4KiB", partitioning="slabs", client=client)
    note = next(note for note in plan.notes if "over the budget" in note)
    assert "~0 MiB" not in note, note


@pytest.mark.parametrize("partitioning", ["chunk_pairs", "slabs"])
def test_plans_are_deterministic(client, tmp_path, partitioning):
    x = np.random.default_rng(21).random((2000, 2))
    path = write_zarr(tmp_path / "x.zarr", x, 128)
    plans = [dj.plan_join(path, eps=0.03, partitioning=partitioning, memory_budget="64KiB", client=client)
             for _ in range(2)]
    assert plans[0].partitions == plans[1].partitions
    assert [p.index for p in plans[0].partitions] == list(range(plans[0].ntasks))
    assert all(p.rows > 0 for p in plans[0].partitions)


# --------------------------------------------------------------------------- data passes as named plan steps


def test_data_passes_are_named_steps_of_the_plan(tmp_path, client):
    import daskjoin as dj
    from joinhelpers import write_zarr

    x = np.random.default_rng(7).random((5000, 3))
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=500)
    first = dj.plan_join(path, eps=0.02, client=client)
    (step,) = first.steps
    assert step.name == "statistics of A" and not step.cached and step.reads == x.nbytes
    assert "data pass:     statistics of A" in first.explain() and "read 117.2 KiB" in first.explain()
    dj.clear_cache()
    again = dj.plan_join(path, eps=0.02, client=client, partitioning="slabs", memory_budget="200KB")
    names = [s.name for s in again.steps]
    assert names == ["statistics of A", "sorted copy of A"]
    assert again.steps[0].cached and "cached: read nothing" in again.explain()
    assert not again.steps[1].cached
    dj.clear_cache()
    third = dj.plan_join(path, eps=0.02, client=client, partitioning="slabs", memory_budget="200KB")
    assert all(s.cached for s in third.steps)


def test_bad_rows_refused_by_the_statistics_step_naming_the_first(tmp_path, client):
    import daskjoin as dj
    from daskjoin.validation import InputError
    from joinhelpers import write_zarr

    x = np.random.default_rng(8).random((3000, 2))
    x[2222, 1] = np.inf
    x[2500, 0] = np.nan
    path = write_zarr(tmp_path / "bad.zarr", x, chunk_rows=400)
    with pytest.raises(InputError, match="first in row 2222"):
        dj.plan_join(path, eps=0.02, client=client)
    out = tmp_path / "out.parquet"
    with pytest.raises(InputError, match="first in row 2222"):
        dj.similarity_join(path, eps=0.02, client=client, out=out)
    assert not out.exists()


def test_slab_shape_comes_from_a_grown_radius_where_the_sample_has_few_pairs():
    """Few sampled pairs at eps: the slabs' work shape is listed at grow * eps (the kernel's exact pairs there,
    as input rows); many: the pairs at eps themselves."""
    from daskjoin.kernels import get_kernel
    from daskjoin.planning import estimate

    x = np.random.default_rng(0).standard_exponential((4000, 3)) / 40
    rows = np.arange(len(x), dtype=np.int64) * 5  # the sample's input rows: every fifth
    est = estimate.estimate_pairs(x, 5 * len(x), 0.002, rows_a=rows)
    assert 0 < est.sampled_pairs < estimate.SHAPE_PAIRS
    shape, grow = estimate.shape_pairs(est, x, 0.002, rows_a=rows)
    assert 1.0 < grow <= estimate.SHAPE_GROW
    assert len(shape[0]) == get_kernel("grid", "cpu").self_count(x, 0.002 * grow) > len(est.pair_rows[0])
    assert (shape[0] < shape[1]).all() and set(np.unique(shape)) <= set(rows)
    rich = estimate.estimate_pairs(x, len(x), 0.05, rows_a=rows)
    assert rich.sampled_pairs >= estimate.SHAPE_PAIRS
    assert estimate.shape_pairs(rich, x, 0.05, rows_a=rows) == (rich.pair_rows, 1.0)
    cross, grow = estimate.shape_pairs(est, x[:2000], 0.002, x[2000:], rows_a=rows[:2000], rows_b=rows[2000:])
    assert grow > 1.0 and len(cross[0]) == get_kernel("grid", "cpu").cross_count(x[:2000], x[2000:], 0.002 * grow)


def test_slab_plan_says_when_its_shape_comes_from_a_grown_radius():
    x = np.random.default_rng(1).standard_exponential((60_000, 3)).astype(np.float32) / 40
    with dask.config.set({"daskjoin.sample-rows": 1000}):
        dj.clear_cache()
        plan = dj.plan_join(x, eps=0.001, partitioning="slabs", memory_budget="2MB", backend="cpu")
    dj.clear_cache()
    assert "placed by the sample's pairs at" in plan.explain()


def test_sample_pairs_listed_only_for_plans_of_several_partitions():
    """One partition never reads where the sample's pairs lie: they are not listed (20 ms of a 200 ms join at
    200k x 2-d); several partitions get them, as listed by the estimate itself."""
    from daskjoin.planning import estimate

    x = np.random.default_rng(2).random((60_000, 2))
    dj.clear_cache()
    one = dj.plan_join(x, eps=0.005, backend="cpu")
    assert len(one.partitions) == 1 and one.estimate.pair_rows is None
    many = dj.plan_join(x, eps=0.005, backend="cpu", memory_budget="2MB", partitioning="chunk_pairs")
    assert len(many.partitions) > 1 and many.estimate.pair_rows is not None
    from daskjoin.planning.bounds import block_stats

    s = block_stats(many.a, None)
    direct = estimate.estimate_pairs(s.sample, len(x), 0.005, rows_a=s.sample_rows)
    for got, want in zip(many.estimate.pair_rows, direct.pair_rows):
        np.testing.assert_array_equal(got, want)
    dj.clear_cache()


def test_a_pair_is_priced_at_its_device_sort_on_either_backend_so_a_planned_slab_sorts_on_the_device():
    """A GPU task's pairs and their sort take ``OUTPUT + SORT`` bytes each on the device, within
    ``LIMITED_SHARE`` of its budget (``gpu_common.sort_room``): ``PAIR_BYTES`` prices a pair so on either
    backend, so each slab's estimated pairs fit that room and the plan is the same wherever its tasks run."""
    import types

    from daskjoin.kernels.gpu_common import LIMITED_SHARE
    from daskjoin.kernels.grid_gpu import OUTPUT_BYTES_PER_PAIR, SORT_BYTES_PER_PAIR
    from daskjoin.planning import planner

    device_bytes = OUTPUT_BYTES_PER_PAIR + SORT_BYTES_PER_PAIR
    assert PAIR_BYTES * LIMITED_SHARE >= device_bytes
    x = np.random.default_rng(5).exponential(1 / 40, (40_000, 3))
    src = MemorySource(x)  # sorted in memory: no cluster
    runner = types.SimpleNamespace(map=lambda f, items: [f(i) for i in items])
    budget = 4 << 20
    kw = dict(method="grid", partitioning="slabs", memory_budget=budget, runner=runner)
    gpu = planner.make_plan(src, None, 0.01, backend="gpu", gpu=True, **kw)
    cpu = planner.make_plan(src, None, 0.01, backend="cpu", gpu=False, **kw)
    assert gpu.partitioning == "slabs" and gpu.ntasks > 1
    assert [(p.a, p.b) for p in gpu.partitions] == [(p.a, p.b) for p in cpu.partitions]
    room = LIMITED_SHARE * budget / device_bytes  # what sort_room gives a task of this budget
    assert max(p.est_pairs for p in gpu.partitions) <= room


def test_ball_key_share_and_top_weights():
    from daskjoin.planning.slabs import ball_key_share, top_weights

    u = np.linspace(0.0, 1.0, 11)
    np.testing.assert_allclose(ball_key_share(u, 1), u / 2)  # a segment: even along its axis
    for d in (2, 3, 8):
        f = ball_key_share(u, d)
        assert f[0] == 0.0 and abs(f[-1] - 0.5) < 1e-12 and np.all(np.diff(f) > 0)
        assert f[5] > 0.25  # a ball's points crowd its middle
    assert ball_key_share(np.array([2.0]), 3)[0] == 0.5
    eps, grow = 0.01, 4.0
    keys = -np.array([0.0, 0.5, 1.0, 2.0, 3.9, 4.0, 10.0]) * eps  # t below a top of 0
    w = top_weights(keys, 0.0, eps, grow, 3)
    assert w[0] == pytest.approx(grow, rel=1e-3)  # at the top: grow times fewer grown owners than owners
    assert np.all(w[:5] > 1.0) and np.all(w[5:] == 1.0)
    assert np.all(np.diff(w[:5]) < 0)  # falling to 1 at grow * eps below the top
    assert np.all(top_weights(keys, 0.0, eps, 1.0, 3) == 1.0)  # listed at eps: nothing to restore


def test_slab_estimates_near_the_top_restored_where_pairs_are_listed_at_a_grown_radius():
    """Uniform rows, few sampled pairs (listed at ~2x eps): the last slab's owners are cut off over the grown
    radius, so without the weights its estimate was ~1.5x low; with them every slab's pairs are within 1.3x."""
    import types
    from unittest import mock

    from daskjoin.kinds.epsilon import JoinJob
    from daskjoin.planning import planner

    x = np.random.default_rng(3).random((300_000, 3))
    eps = (3 / (300_000 * 4 / 3 * np.pi)) ** (1 / 3)  # ~3 neighbours a row
    runner = types.SimpleNamespace(map=lambda f, items: [f(i) for i in items])
    kw = dict(method="grid", partitioning="slabs", memory_budget=4 << 20, runner=runner, backend="cpu", gpu=False)

    def ratios():
        plan = planner.make_plan(MemorySource(x), None, eps, **kw)
        assert plan.partitioning == "slabs" and "placed by the sample's pairs at" in plan.partitioning_reason
        job = JoinJob.from_plan(plan, with_distance=False)
        return np.array([job.count(p) / p.est_pairs for p in plan.partitions])

    weighted = ratios()
    with mock.patch.object(planner, "top_weights", lambda keys, *args: np.ones(len(keys))):
        plain = ratios()
    assert plain[-1] > 1.3  # the bias the weights undo (this sample: 1.52)
    assert weighted.max() < 1.3 and abs(np.log(weighted[-1])) < abs(np.log(plain[-1]))


def test_no_top_weights_where_keys_lie_on_levels_farther_apart_than_eps():
    """Keys on levels 1 apart, eps 0.1: pairs lie within a level, nothing above the top level is missed, so
    the top level's owners keep weight 1; the same rows spread evenly get weights near the top."""
    import types

    from daskjoin.planning import planner

    rng = np.random.default_rng(2)
    n = 4000
    for levels, weighted in ((True, False), (False, True)):
        key = rng.integers(0, 10, n).astype(np.float64) if levels else rng.random(n) * 10
        x = np.stack([key, rng.random(n)], axis=1)
        sorted_a = sort_in_memory(MemorySource(x), 0)
        rows = np.arange(n, dtype=np.int64)
        stats = types.SimpleNamespace(sample=x, sample_rows=rows, hi_all=x.max(axis=0))
        i, j = oracle_self_pairs(x, 0.3)[:2]
        owners, weights = planner._slab_owners(sorted_a, stats, None, (i, j), 0, eps=0.1, grow=3.0)
        assert len(owners) == len(i)
        assert (weights is not None and weights.max() > 1.5) if weighted else weights is None
