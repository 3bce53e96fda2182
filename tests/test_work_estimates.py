"""Partitions sized by estimated work: each block pair's pairs estimated from where the sampled pairs lie,
and a block pair whose pairs would not fit its budget (or, for several workers, that alone holds more than a
worker's share) halved until it does; the pairs stay exactly the oracle's."""
from __future__ import annotations

import dask
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial import cKDTree

import daskjoin as dj
from daskjoin.execution.inprocess import in_process
from daskjoin.planning.chunk_pairs import _Estimator, _halves, _split_heavy
from daskjoin.planning.plan import PAIR_BYTES, row_bytes
from joinhelpers import write_zarr


def _row_pairs(ra, rb, same):
    if same:
        return {(i, j) for i in range(*ra) for j in range(i + 1, ra[1])}
    return {(i, j) for i in range(*ra) for j in range(*rb)}


@settings(max_examples=60, deadline=None)
@given(s=st.integers(0, 20), n=st.integers(2, 24), m=st.integers(1, 24), same=st.booleans())
def test_halves_cover_each_row_pair_once(s, n, m, same):
    ra = (s, s + n)
    rb = None if same else (s + n + 3, s + n + 3 + m)
    parts = _halves(ra, rb, same)
    pieces = [_row_pairs(a, b, sm) for a, b, sm in parts]
    assert sum(len(p) for p in pieces) == len(_row_pairs(ra, rb, same))
    assert set().union(*pieces) == _row_pairs(ra, rb, same)
    for a, b, sm in parts:  # a self-join's cross pieces keep their earlier rows first (i < j)
        assert sm or a[1] <= b[0] or not same


def test_estimator_follows_the_sampled_pairs_and_falls_back_to_the_share():
    rows = (np.array([0, 1, 2, 3, 50]), np.array([5, 6, 7, 8, 90]))
    est = _Estimator(1000.0, rows, 100, 100, selfjoin=True)
    dense, sparse = est((0, 10), None, True), est((50, 100), None, True)
    assert dense > sparse > 0
    total = sum(est(*cell) for cell in [((0, 50), None, True), ((0, 50), (50, 100), False), ((50, 100), None, True)])
    assert total == pytest.approx(1000.0, rel=0.02)  # a diagonal block counts n^2/2 row pairs, not n(n-1)/2
    flat = _Estimator(1000.0, None, 100, 100, selfjoin=True)
    assert flat((0, 50), (50, 100), False) == pytest.approx(1000.0 * 2500 / 4950)


def test_split_heavy_stops_at_the_limit_and_at_small_blocks():
    est = _Estimator(1e6, None, 1 << 16, 1 << 16, selfjoin=True)
    out = _split_heavy([((0, 1 << 16), None, True)], est, lambda rows, e: e > 1e5)
    assert all(e <= 1e5 for *_, e in out)
    assert sum(e for *_, e in out) == pytest.approx(1e6, rel=1e-3)
    tiny = _split_heavy([((0, 100), None, True)], est, lambda rows, e: True)
    assert len(tiny) == 1  # below MIN_SPLIT_ROWS nothing is cut


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    """120k 3-d rows: the first 12k a tight cluster (nearly all the pairs), the rest spread thin."""
    rng = np.random.default_rng(11)
    dense = 0.5 + 0.004 * rng.standard_normal((12_000, 3))
    sparse = rng.random((108_000, 3))
    x = np.concatenate([dense, sparse])
    eps = 0.002
    path = write_zarr(str(tmp_path_factory.mktemp("skew") / "x.zarr"), x, chunk_rows=4000)
    want = cKDTree(x).query_pairs(eps, output_type="ndarray")
    return x, path, eps, want


def test_dense_rows_get_smaller_partitions_that_fit_the_budget(skewed):
    x, path, eps, want = skewed
    budget = 24 << 20
    plan = dj.plan_join(path, eps=eps, memory_budget=budget, partitioning="chunk_pairs", client=in_process())
    assert plan.estimate.pair_rows is not None
    rb = row_bytes(3, 8)
    # the planner halves a partition by the sample's lower estimate (two standard deviations below its hits,
    # ``chunk_pairs._Estimator.floor``: noise alone never cuts one), so by the point estimate it may hold a
    # few percent more: here ~2,000 sampled pairs a partition, 2 / sqrt(2000) = 4.5%
    assert all(p.rows * rb + p.est_pairs * PAIR_BYTES <= 1.1 * budget for p in plan.partitions), plan.explain()
    # the partitions holding the cluster's rows are smaller than those of the thin rows
    dense_rows = [p.rows for p in plan.partitions if p.a[1] <= 12_000 and (p.b is None or p.b[1] <= 12_000)]
    assert dense_rows and max(dense_rows) < max(p.rows for p in plan.partitions)
    # the estimates follow the pairs: the partitions of the cluster hold most of the estimate, as of the truth
    in_dense = sum(p.est_pairs for p in plan.partitions if p.a[1] <= 12_000 and (p.b is None or p.b[1] <= 12_000))
    true_dense = int(((want[:, 0] < 12_000) & (want[:, 1] < 12_000)).sum())
    assert true_dense / len(want) > 0.9
    assert in_dense / sum(p.est_pairs for p in plan.partitions) > 0.8


def test_work_sized_partitions_give_the_oracle_pairs(skewed, client, tmp_path):
    x, path, eps, want = skewed
    result = dj.similarity_join(path, eps=eps, memory_budget=24 << 20, partitioning="chunk_pairs", client=client,
                                out=str(tmp_path / "p.parquet"))
    got = result.read().compute()
    pairs = np.stack([got["i"].to_numpy(), got["j"].to_numpy()], axis=1)
    assert result.plan.ntasks > 1 and result.pairs == len(want)
    assert np.array_equal(np.unique(pairs, axis=0), np.unique(np.sort(want, axis=1), axis=0))


def test_a_block_pair_over_a_workers_share_is_halved_for_several_workers(skewed, client, monkeypatch):
    """Blocks (where a task's worker picks the backend, so query shares are not used): the heavy ones halved."""
    import daskjoin.api
    from daskjoin.planning import cost

    x, path, eps, want = skewed
    monkeypatch.setattr(cost, "SPLIT_MIN_ROWS", 100_000)  # this small join counts as large (planning runs here)
    with dask.config.set({"daskjoin.parallel-tasks": 4}):
        shares = dj.plan_join(path, eps=eps, memory_budget="8GB", partitioning="chunk_pairs", client=client,
                              output="count")
        assert [p.share for p in shares.partitions] == [(k, 4, "cpu") for k in range(4)]
        assert dj.similarity_join(path, eps=eps, memory_budget="8GB", partitioning="chunk_pairs", client=client,
                                  output="count") == len(want)
        monkeypatch.setattr(daskjoin.api, "_one_backend", lambda *a: None)
        plan = dj.plan_join(path, eps=eps, memory_budget="8GB", partitioning="chunk_pairs", client=client,
                            output="count")
        # 4 blocks of 30k rows: the first holds the cluster (nearly every pair), halved down to blocks of
        # 3,750 rows (MIN_SPLIT_ROWS stops it there) or a quarter of the estimate
        assert plan.ntasks > 10
        for p in plan.partitions:
            longest = max(p.a[1] - p.a[0], 0 if p.b is None else p.b[1] - p.b[0])
            assert p.est_pairs <= 1.25 * plan.estimate.upper / 4 or longest < 2 * 4096
        assert dj.similarity_join(path, eps=eps, memory_budget="8GB", partitioning="chunk_pairs", client=client,
                                  output="count") == len(want)


@pytest.mark.parametrize("same", [True, False])
def test_split_heavy_leaves_cover_every_row_pair_once_through_several_halvings(same, monkeypatch):
    from daskjoin.planning import chunk_pairs

    monkeypatch.setattr(chunk_pairs, "MIN_SPLIT_ROWS", 2)
    ra, rb = (3, 40), (None if same else (40, 71))
    est = _Estimator(1e6, None, 71, 71, selfjoin=True)
    leaves = _split_heavy([(ra, rb, same)], est, lambda rows, e: rows > 9)
    assert len(leaves) > 8  # several levels deep
    pieces = [_row_pairs(a, b, sm) for a, b, sm, _ in leaves]
    assert sum(len(p) for p in pieces) == len(_row_pairs(ra, rb, same))
    assert set().union(*pieces) == _row_pairs(ra, rb, same)
    assert all(i < j for p in pieces for i, j in p)  # a self-join's pairs keep i < j in every piece
