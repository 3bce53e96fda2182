"""The CPU kNN grid's range pass: every point within a sampled radius offered through the ε-grid first.

From 4 dimensions the kNN grid's rings (3 indexed dimensions, cells about one k-th distance wide) visit
thousands of cells a query: each cell is a slab across the dimensions not indexed.  The ε-grid
(:mod:`.grid`) indexes up to six dimensions and skips neighbour rows per point, so it finds the pairs
within a radius far faster.  So where a batch of queries is large enough to sample:

1. ``bound2``: a high quantile (:data:`QUANTILE`) of the block-local k-th squared distances of a sample of
   the queries, searched the usual way; the pass is skipped where the sample's points within it would be
   too many (:data:`MAX_PER_QUERY`: skewed data, a radius set by sparse rows).
2. The ε-grid's pairs of queries and block rows within ``sqrt(bound2)`` (a hair more: a pair's ε-grid
   distance and its kNN distance are the same float64 sum, the margin only covers ``eps_squared``), in
   segments of disjoint queries, offered in parallel: each point whose squared distance is at most
   ``bound2``.
3. A query whose k-th is still above ``bound2`` (fewer than k points within it) is searched again the usual
   way, offered only the points beyond ``bound2`` (``floor``): each point is offered once.

Exact: the list takes every point at most ``bound2`` away (step 2); a point farther cannot enter a list
whose k-th is at most ``bound2``, and for the other lists step 3 offers the rest.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .grid import GridJoin
from .knn import _offer, _query_order, empty_lists
from .parallel_guard import serialised

#: the range pass from this many dimensions (below, the rings alone were faster; see docs/knn.md)
MIN_D = 4
#: ... for at least this many queries (a kNN task holds at least 1,024: planning/knn.py, so tasks cut small at
#: 7- and 8-d, where auto takes the grid, still get the pass) and block rows
MIN_QUERIES = 1024
MIN_ROWS = 4096
#: queries sampled for the radius, and the quantile of their k-th distances taken
SAMPLE = 256
QUANTILE = 0.98
#: the sample's points within the radius, a query, at most this many times k (else no range pass).  2-core VM,
#: k = 16 (``benchmarks/bench_knn.py --workloads range``): uniform rows (4- to 6-d) have 2.2-3.5 times k
#: within the radius and gain 1.6-5.7x; 5-d embeddings 6.5 tie; 6-d clusters 14.6 lose 1.6x; 6-d exponential
#: rows 340
MAX_PER_QUERY = 5
#: pairs listed at a time (20 bytes each): the queries are taken in runs of rows whose pairs are expected to fit,
#: so that each run's ε-grid fills its pairs in one pass (a batch that overflowed counted them first: 6-d uniform,
#: 300k rows, 16.7M pairs, 3.2 -> 2.2 s)
BATCH_PAIRS = 1 << 22
#: the room a run's one pass gets, over its expected pairs (a few cells per lane vary more than the ε-join's many)
ROOM = 1.5
#: the ε-grid's radius over sqrt(bound2): covers eps_squared's rounding, far below any gap between distances
_MARGIN = 1.0 + 1e-9


@numba.njit(cache=True, nogil=True, parallel=True)
def _offer_segments(queries, qids, exclude, data, first_id, oi, oj, rows, first, length, bound2, best_d2, best_j):
    """Offer each pair (query ``rows[oi[p]]``, block row ``oj[p]``) of every segment whose squared distance (the
    kNN grid's: float64 differences summed in dimension order) is at most ``bound2``; segments in parallel (their
    queries are disjoint)."""
    d = queries.shape[1]
    for g in numba.prange(first.shape[0]):
        for p in range(first[g], first[g] + length[g]):
            i, b = rows[oi[p]], oj[p]
            s = 0.0
            for t in range(d):
                u = np.float64(queries[i, t]) - np.float64(data[b, t])
                s += u * u
            if s <= bound2:
                jid = first_id + b
                if not (exclude and jid == qids[i]):
                    _offer(best_d2[i], best_j[i], s, jid)


def sampled_bound(driver, queries, query_ids, exclude_self: bool):
    """``(bound2, pairs)`` of the range pass (step 1: ``pairs`` its pairs, estimated from the sample's), or None
    where the pass does not pay or cannot be sampled."""
    m, d = queries.shape
    if d < MIN_D or m < MIN_QUERIES or driver.n < MIN_ROWS:
        return None
    pick = np.unique(np.linspace(0, m - 1, SAMPLE).astype(np.int64))
    sample, ids = np.ascontiguousarray(queries[pick]), np.ascontiguousarray(query_ids[pick], np.int64)
    best_d2, best_j = empty_lists(len(pick), driver.k)
    driver.rings(sample, ids, best_d2, best_j, exclude_self, np.arange(len(pick), dtype=np.int64), -1.0)
    kth = np.sort(best_d2[:, 0])
    bound2 = float(kth[min(len(kth) - 1, int(math.ceil(QUANTILE * len(kth))) - 1)])
    if not (0.0 < bound2 < math.inf):
        return None  # a block of fewer than k rows, or duplicates at the quantile: the rings alone
    within = GridJoin(sample, driver.data, math.sqrt(bound2) * _MARGIN).count()
    if within > MAX_PER_QUERY * driver.k * len(pick):
        return None
    return bound2, within * (m / len(pick))


def range_pass(driver, queries, query_ids, best_d2, best_j, exclude_self: bool, bound2: float,
               pairs: float) -> np.ndarray:
    """Step 2 of the range pass: the queries' lists offered every block row within ``bound2`` (about ``pairs``
    pairs); returns the queries (rows) whose k-th is still above it (step 3's)."""
    qids = np.ascontiguousarray(query_ids, np.int64)
    m = len(queries)
    runs = max(1, math.ceil(pairs * ROOM / BATCH_PAIRS))
    # runs of queries in the kNN grid's cell order (slabs of space: each run's ε-grid reads its part of the block;
    # runs of rows in input order read all of it each, 25% slower at 6-d)
    order = _query_order(queries, driver.spec) if runs > 1 else np.arange(m, dtype=np.int64)
    step = -(-m // runs)
    for r0 in range(0, m, step):
        rows = order[r0:r0 + step]
        join = GridJoin(queries[rows] if runs > 1 else queries, driver.data, math.sqrt(bound2) * _MARGIN)
        for oi, oj, first, length in join.segments(BATCH_PAIRS, estimate=ROOM * pairs * len(rows) / m):
            with serialised():
                _offer_segments(queries, qids, bool(exclude_self), driver.data, driver.first_id, oi, oj, rows, first,
                                length, bound2, best_d2, best_j)
            del oi, oj  # one batch of pairs held at a time (the planner counts one: planning/knn.py)
        del join
    return np.flatnonzero(best_d2[:, 0] > bound2).astype(np.int64)
