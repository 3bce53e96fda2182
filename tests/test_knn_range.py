"""The CPU kNN grid's range pass (kernels/knn_range.py): the lists it leaves are the oracle's, on random and
adversarial rows, whichever of its paths ran (one run or several, lanes that overflowed, queries searched again
beyond the radius, lists carried from another block, the pass declined)."""
from __future__ import annotations

import numpy as np
import pytest

import daskjoin.kernels.knn_range as knn_range
from daskjoin.kernels.grid import GridJoin
from daskjoin.kernels.knn import KnnGrid, empty_lists


def oracle_lists(queries, data, k, query_ids, first_id, exclude):
    """Each query's k smallest (d2, j) over the block, d2 the float64 sum of squared differences in dimension
    order (the kNN grid's), ties by j; rows padded with (inf, max int64)."""
    q, x = np.asarray(queries, np.float64), np.asarray(data, np.float64)
    s = np.zeros((len(q), len(x)))
    for t in range(q.shape[1]):
        u = q[:, t][:, None] - x[:, t][None, :]
        s = s + u * u
    js = first_id + np.arange(len(x))
    d2 = np.full((len(q), k), np.inf)
    jj = np.full((len(q), k), np.iinfo(np.int64).max)
    for r in range(len(q)):
        keep = ~(exclude & (js == query_ids[r]))
        order = np.lexsort((js[keep], s[r, keep]))[:k]
        d2[r, :len(order)], jj[r, :len(order)] = s[r, keep][order], js[keep][order]
    return d2, jj


def sorted_lists(best_d2, best_j):
    order = np.lexsort((best_j, best_d2), axis=1)
    return np.take_along_axis(best_d2, order, 1), np.take_along_axis(best_j, order, 1)


def search(blocks, queries, k, query_ids, exclude):
    lists = empty_lists(len(queries), k)
    for data, first_id in blocks:
        KnnGrid(data, k, first_id).search(queries, query_ids, *lists, exclude)
    return sorted_lists(*lists)


def case(name, rng):
    """(queries, [(block, first id)], k, query ids, exclude self) of a named case."""
    if name == "uniform-6d":
        x = rng.random((2000, 6))
        return x, [(x, 0)], 8, np.arange(2000), True
    if name == "uniform-4d-k1":
        x = rng.random((1800, 4))
        return x, [(x, 0)], 1, np.arange(1800), True
    if name == "duplicates":  # each point five times: k-th distances 0 for most, ties broken by j
        x = np.repeat(rng.random((400, 5)), 5, axis=0)
        return x, [(x, 0)], 6, np.arange(2000), True
    if name == "ties":  # integer coordinates: many equal distances at the radius
        x = rng.integers(0, 5, (2000, 4)).astype(np.float64)
        return x, [(x, 0)], 10, np.arange(2000), True
    if name == "offset":  # far from 0: the grid's cells and the sums at large magnitudes
        x = 1e6 + rng.random((2000, 5)) * 1e-2
        return x, [(x, 0)], 5, np.arange(2000), True
    if name == "float32":
        x = rng.random((2000, 5)).astype(np.float32)
        return x, [(x, 0)], 7, np.arange(2000), True
    if name == "cross":  # A x B, queries partly outside the block's box, nothing excluded
        a, b = rng.random((1700, 5)) * 1.2 - 0.1, rng.random((2500, 5))
        return a, [(b, 100)], 9, np.arange(1700), False
    if name == "two-blocks":  # lists carried from the first block into the second's range pass
        x = rng.random((3000, 5))
        return x, [(x[:1500], 0), (x[1500:], 1500)], 8, np.arange(3000), True
    if name == "k80-seeded":  # k >= SEED_MIN_K: lists short after the pass start the rings from a seeded bound
        x = rng.random((2000, 5))
        return x, [(x, 0)], 80, np.arange(2000), True
    if name == "8d":  # more dimensions than the ε-grid indexes (auto sends 7- and 8-d rows to the grid)
        x = rng.random((2000, 8))
        return x, [(x, 0)], 8, np.arange(2000), True
    if name == "skewed":  # a dense clump and sparse rows: many queries searched again beyond the radius
        x = np.concatenate([rng.random((1600, 5)) * 0.05, rng.random((400, 5))])
        return x, [(x, 0)], 12, np.arange(2000), True
    raise ValueError(name)


CASES = ["uniform-6d", "uniform-4d-k1", "duplicates", "ties", "offset", "float32", "cross", "two-blocks", "k80-seeded",
         "8d", "skewed"]


@pytest.mark.parametrize("batch", ["one-run", "several-runs"])
@pytest.mark.parametrize("name", CASES)
def test_range_pass_gives_the_oracles_lists(name, batch, monkeypatch):
    rng = np.random.default_rng(CASES.index(name))
    queries, blocks, k, query_ids, exclude = case(name, rng)
    ran, grids = [], []
    real, real_grid = knn_range.range_pass, knn_range.GridJoin
    monkeypatch.setattr(knn_range, "MAX_PER_QUERY", 1000)  # the pass on every case, skewed ones too
    monkeypatch.setattr(knn_range, "MIN_ROWS", 1000)  # and on blocks of a size the oracle takes quickly
    monkeypatch.setattr(knn_range, "MIN_QUERIES", 500)
    monkeypatch.setattr(knn_range, "range_pass", lambda *a, **kw: ran.append(1) or real(*a, **kw))
    monkeypatch.setattr(knn_range, "GridJoin", lambda *a, **kw: grids.append(1) or real_grid(*a, **kw))
    if batch == "several-runs":  # runs of queries, each counted and filled in ranges of cells (one pass's lanes
        # that overflow: test_grid_segments_hold_every_pair_once_with_disjoint_queries)
        monkeypatch.setattr(knn_range, "BATCH_PAIRS", 8 * 1024)
        monkeypatch.setattr(knn_range, "ROOM", 0.5)
    got = search(blocks, queries, k, query_ids, exclude)
    expected = oracle_lists(queries, np.concatenate([b for b, _ in blocks]), k, query_ids, blocks[0][1], exclude)
    np.testing.assert_array_equal(got[1], expected[1])
    np.testing.assert_array_equal(got[0], expected[0])
    assert len(ran) == len(blocks), "the range pass did not run on every block"
    if batch == "several-runs" and k >= 6:  # the sample's grid, then at least two runs of queries a block
        assert len(grids) >= 3 * len(blocks), grids
    monkeypatch.setattr(knn_range, "MIN_D", 99)  # the rings alone: the same lists
    rings = search(blocks, queries, k, query_ids, exclude)
    np.testing.assert_array_equal(rings[1], got[1])
    np.testing.assert_array_equal(rings[0], got[0])


def test_queries_beyond_the_radius_are_searched_again_without_repeats(monkeypatch):
    """A low quantile leaves many queries short of k within the radius: the rings add only farther rows, so
    no row appears twice in a list."""
    rng = np.random.default_rng(5)
    x = rng.random((5000, 5))
    monkeypatch.setattr(knn_range, "QUANTILE", 0.2)
    rests = []
    real = knn_range.range_pass

    def spy(*args, **kwargs):
        rest = real(*args, **kwargs)
        rests.append(rest.size)
        return rest

    monkeypatch.setattr(knn_range, "range_pass", spy)
    best_d2, best_j = search([(x, 0)], x, 10, np.arange(5000), True)
    expected = oracle_lists(x, x, 10, np.arange(5000), 0, True)
    np.testing.assert_array_equal(best_j, expected[1])
    np.testing.assert_array_equal(best_d2, expected[0])
    assert rests and rests[0] > 1000  # most queries went on to the rings
    assert all(len(set(row)) == len(row) for row in best_j.tolist())


def test_the_pass_declines_small_skewed_and_short_blocks(monkeypatch):
    rng = np.random.default_rng(6)
    x = rng.random((5000, 5))
    ids = np.arange(5000)
    assert knn_range.sampled_bound(KnnGrid(x, 8), x, ids, True) is not None
    assert knn_range.sampled_bound(KnnGrid(x[:, :3], 8), x[:, :3], ids, True) is None  # below MIN_D
    assert knn_range.sampled_bound(KnnGrid(x, 8), x[:100], ids[:100], True) is None  # few queries
    assert knn_range.sampled_bound(KnnGrid(x[:100], 8), x, ids, True) is None  # a short block
    assert knn_range.sampled_bound(KnnGrid(x[:4100], 5000), x, ids, True) is None  # fewer rows than k: inf
    clumped = np.concatenate([rng.random((4500, 5)) * 1e-3, rng.random((500, 5))])
    assert knn_range.sampled_bound(KnnGrid(clumped, 8), clumped, ids, True) is None  # too many within the radius


@pytest.mark.parametrize("max_pairs", [1000, 1 << 16, 1 << 30])
def test_grid_segments_hold_every_pair_once_with_disjoint_queries(max_pairs):
    rng = np.random.default_rng(8)
    a, b = rng.random((3000, 4)), rng.random((2500, 4))
    join = GridJoin(a, b, 0.3)
    pairs, batches = [], 0
    for oi, oj, first, length in join.segments(max_pairs, estimate=2_000.0):  # lanes too short: cells left
        batches += 1
        assert len(oi) >= int(length.sum()) and len(first) == len(length)
        owners = {}
        for g, (f, n) in enumerate(zip(first, length)):
            for q in set(oi[f:f + n].tolist()):
                assert owners.setdefault(q, g) == g, "a query in two segments of one batch"
            pairs.extend(zip(oi[f:f + n].tolist(), oj[f:f + n].tolist()))
    i, j, _ = GridJoin(a, b, 0.3).pairs(False)
    assert sorted(pairs) == sorted(zip(i.tolist(), j.tolist()))
    assert len(pairs) == len(set(pairs)) > 0
    assert batches >= (2 if max_pairs < 1 << 30 else 1)
