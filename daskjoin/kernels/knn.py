"""kNN-join, CPU drivers (Numba): each query's k nearest rows of a data block, merged into running lists.

A driver is built on one block of data rows, ``Driver(data, k, first_id)`` (``first_id``: the
original id of its first row), and updates the running neighbour lists of a batch of queries::

    driver.search(queries, query_ids, best_d2, best_j, exclude_self)

``best_d2`` (float64) and ``best_j`` (int64), shape (m, k), hold each query's candidates as a
max-heap ordered by ``(d2, j)``; empty slots are ``(inf, INT64_MAX)``.  A query's lists can
therefore be carried from one data block to the next (the task merges blocks), and a block can
be skipped for every query whose k-th distance is already below the block's box distance.

Decisions are the ε-join's: the float64 squared distance of the stored values summed in
dimension order (:mod:`.exact`); ties broken by the smaller ``j``, so the k nearest are one set.
``exclude_self`` drops the pair of a row with itself (same id) in a self-join; duplicates of a
point (other rows) are neighbours at distance 0.

Methods:

- ``grid``: the ε-grid index of the block with cells about as wide as the expected k-th distance (measured best
  of 0.5-1.8 times it, 2-d and 3-d uniform);
  per query, rings of cells around its cell until the k-th distance found is below the distance
  to any cell not yet visited (cells beyond the current k-th distance skipped); a query whose
  rings would cover more cells than the block has non-empty ones scans those instead.  From 4-d a range pass
  comes first (:mod:`.knn_range`): the ε-grid's pairs within a sampled radius, offered in parallel; the rings
  then search only the queries still short of k, offered only rows beyond the radius (``floor``).
- ``brute``: every row of the block, the distance sum stopped once it passes the k-th distance.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .grid_index import _cell_ids, boundary_slack, build_index, choose_grid
from .parallel_guard import serialised
from .registry import KNN_ROW_VALUE
from .summary import column_bounds

NO_ID = np.iinfo(np.int64).max
#: rounding headroom of a lower bound on a float64 squared distance (relative; far above d * 2**-52)
_BOUND_SHRINK = 1.0 - 1e-12
#: lists of at least this many neighbours start from an upper bound of the k-th distance (``_seed``)
SEED_MIN_K = 64
#: the grid indexes at most this many dimensions (ring enumeration grows as 3^dims)
GRID_MAX_DIMS = 3


def empty_lists(m: int, k: int):
    """Running neighbour lists of ``m`` queries, all slots empty."""
    return np.full((m, k), np.inf), np.full((m, k), NO_ID, np.int64)


# ------------------------------------------------------------------ one query's max-heap of (d2, j)


@numba.njit(cache=True, nogil=True, inline="always")
def _before(d1, j1, d2, j2):
    return d1 < d2 or (d1 == d2 and j1 < j2)


@numba.njit(cache=True, nogil=True)
def _offer(hd, hj, d, j):
    """Put (d, j) in the full max-heap (hd, hj) if it sorts before the root (the current k-th)."""
    k = hd.shape[0]
    if not _before(d, j, hd[0], hj[0]):
        return
    at = 0
    while True:  # sift the new entry down from the root
        left = 2 * at + 1
        if left >= k:
            break
        big = left
        right = left + 1
        if right < k and _before(hd[left], hj[left], hd[right], hj[right]):
            big = right
        if not _before(d, j, hd[big], hj[big]):
            break
        hd[at] = hd[big]
        hj[at] = hj[big]
        at = big
    hd[at] = d
    hj[at] = j


@numba.njit(cache=True, nogil=True, inline="always")
def _bounded_d2(q, x, b, bound):
    """Squared distance of query row ``q`` (float64) and ``x[b]`` summed in dimension order, or -1
    once the partial sum exceeds ``bound`` (terms are non-negative: the decision is unchanged)."""
    s = 0.0
    for t in range(q.shape[0]):
        u = q[t] - np.float64(x[b, t])
        s += u * u
        if s > bound:
            return -1.0
    return s


@numba.njit(cache=True, nogil=True, inline="always")
def _visit(q, qid, exclude, x, b, jid, hd, hj):
    s = _bounded_d2(q, x, b, hd[0])
    if s >= 0.0 and not (exclude and jid == qid):
        _offer(hd, hj, s, jid)


# ------------------------------------------------------------------ brute


@numba.njit(cache=True, nogil=True, parallel=True)
def _brute(queries, qids, exclude, x, first_id, best_d2, best_j):
    m, d = queries.shape
    chunks = min(m, 1024)
    for c in numba.prange(chunks):
        q = np.empty(d, np.float64)  # scratch per chunk of queries
        for t in range(c * m // chunks, (c + 1) * m // chunks):
            for v in range(d):
                q[v] = queries[t, v]
            hd, hj = best_d2[t], best_j[t]
            for b in range(x.shape[0]):
                _visit(q, qids[t], exclude, x, b, first_id + b, hd, hj)


def rows(driver, queries, query_ids, exclude_self: bool):
    """Every query's k nearest rows of the driver's block as output rows: fresh lists, searched, finished."""
    best = empty_lists(len(queries), driver.k)
    driver.search(queries, query_ids, *best, exclude_self)
    return finish(*best, query_ids)


class KnnBrute:
    """``brute`` on the CPU: every row of the block against every query."""

    backend = "cpu"
    rows = rows

    def __init__(self, data: np.ndarray, k: int, first_id: int = 0):
        from .knn_gemm import GEMM_MIN_D, GemmBrute

        self.data = np.ascontiguousarray(data)
        self.k, self.first_id = int(k), int(first_id)
        # from GEMM_MIN_D dimensions, float32 products filter the rows first (kernels/knn_gemm.py)
        wide = self.data.ndim == 2 and self.data.shape[1] >= GEMM_MIN_D and len(self.data)
        self.gemm = GemmBrute(self.data, self.first_id) if wide else None

    def search(self, queries, query_ids, best_d2, best_j, exclude_self: bool) -> None:
        if not len(queries) or not len(self.data):
            return
        shifted = self.gemm.prepare(queries) if self.gemm is not None else None
        if shifted is not None:
            self.gemm.search(queries, shifted, query_ids, best_d2, best_j, exclude_self)
            return
        with serialised():
            _brute(np.ascontiguousarray(queries), np.ascontiguousarray(query_ids, np.int64), bool(exclude_self),
                   self.data, self.first_id, best_d2, best_j)


# ------------------------------------------------------------------ grid


@numba.njit(cache=True, nogil=True, inline="always")
def _cell_range(lid, ids, start, dense):
    """Sorted-point range [s, e) of the cell with linear id ``lid`` (empty if it has no points)."""
    if dense.shape[0] > 0:
        return dense[lid], dense[lid + 1]
    at = np.searchsorted(ids, lid)
    if at < ids.shape[0] and ids[at] == lid:
        return start[at], start[at + 1]
    return 0, 0


@numba.njit(cache=True, nogil=True, inline="always")
def _cell_bound(q, dims, origin, widths, slack, coords):
    """Lower bound of the squared distance from ``q`` to any point of the cell at ``coords`` (indexed dims)."""
    s = 0.0
    for m in range(dims.shape[0]):
        lo = origin[m] + coords[m] * widths[m] - slack[m]
        hi = lo + widths[m] + 2.0 * slack[m]
        x = q[dims[m]]
        g = lo - x if x < lo else (x - hi if x > hi else 0.0)
        s += g * g
    return s * _BOUND_SHRINK


@numba.njit(cache=True, nogil=True)
def _scan_cell(q, qid, exclude, pts, perm, first_id, s, e, hd, hj, floor):
    """Offer the points at sorted positions [s, e) to the query's list: those whose squared distance is above
    ``floor`` (-1: every point; the range pass of :mod:`.knn_range` offered the others already)."""
    for b in range(s, e):
        d2 = _bounded_d2(q, pts, b, hd[0])
        if d2 > floor:  # (-1 where the sum passed the k-th) the row id looked up only for a point that made the cut
            jid = first_id + perm[b]
            if not (exclude and jid == qid):
                _offer(hd, hj, d2, jid)


@numba.njit(cache=True, nogil=True)
def _grid_query(q, qid, exclude, index, grid, stencil, box, first_id, hd, hj, coords, lo, hi, cur, floor):
    pts, ids, start, ccoords, perm, dense = index
    dims, origin, widths, ncells, strides, slack = grid
    offsets, coarse, outside = stencil
    kd = dims.shape[0]
    if kd == 0:
        _scan_cell(q, qid, exclude, pts, perm, first_id, 0, pts.shape[0], hd, hj, floor)
        return
    inside = True
    for m in range(kd):
        c = np.int64(np.floor((q[dims[m]] - origin[m]) / widths[m]))
        inside = inside and 0 <= c < ncells[m]
        coords[m] = min(max(c, 0), ncells[m] - 1)
    if not inside:  # (an A×B query outside the data's grid) rings from its nearest cell
        _rings(q, qid, exclude, index, grid, first_id, hd, hj, coords, lo, hi, cur, 0, floor)
        return
    if hd.shape[0] >= SEED_MIN_K and hd[0] == np.inf:
        _seed(q, exclude, index, grid, stencil, box, hd, hj, coords, cur)
    # the cube of cells around the query's, nearest first by a bound that holds wherever the query
    # lies in its cell: once that bound passes the k-th distance, no later cell of the cube can help
    for s in range(offsets.shape[0]):
        if coarse[s] > hd[0]:
            break
        lid = 0
        valid = True
        for m in range(kd):
            cur[m] = coords[m] + offsets[s, m]
            if cur[m] < 0 or cur[m] >= ncells[m]:
                valid = False
            lid += cur[m] * strides[m]
        if not valid or _cell_bound(q, dims, origin, widths, slack, cur) > hd[0]:
            continue
        a, b = _cell_range(lid, ids, start, dense)
        if b > a:
            _scan_cell(q, qid, exclude, pts, perm, first_id, a, b, hd, hj, floor)
    if outside > hd[0]:  # every cell beyond the cube is farther than the k-th
        return
    _rings(q, qid, exclude, index, grid, first_id, hd, hj, coords, lo, hi, cur, (offsets.shape[0] and
           np.abs(offsets).max()) + 1, floor)


@numba.njit(cache=True, nogil=True)
def _seed(q, exclude, index, grid, stencil, box, hd, hj, coords, cur):
    """Fill an empty list with k copies of (U, NO_ID), U an upper bound of the query's k-th distance in this
    block: the farthest corner of the nearest cells that hold k points (k + 1 with the query's own row).
    Every true neighbour sorts before (U, NO_ID), so none is lost, and farther points are cut at once
    instead of filling the list first (k in the thousands: most of the work)."""
    pts, ids, start, ccoords, perm, dense = index
    dims, origin, widths, ncells, strides, slack = grid
    offsets, coarse, outside = stencil
    blo, bhi, indexed = box
    for j in range(hj.shape[0]):
        if hj[j] != NO_ID:
            return  # lists carried from an earlier block: nothing to seed
    rest = 0.0  # the dimensions the grid does not index: the block's box bounds them
    for t in range(q.shape[0]):
        if not indexed[t]:
            g = max(abs(q[t] - blo[t]), abs(q[t] - bhi[t]))
            rest += g * g
    need = hd.shape[0] + (1 if exclude else 0)
    have = 0
    far = 0.0
    for s in range(offsets.shape[0]):
        lid = 0
        valid = True
        for m in range(dims.shape[0]):
            cur[m] = coords[m] + offsets[s, m]
            if cur[m] < 0 or cur[m] >= ncells[m]:
                valid = False
            lid += cur[m] * strides[m]
        if not valid:
            continue
        a, b = _cell_range(lid, ids, start, dense)
        if b <= a:
            continue
        corner = rest
        for m in range(dims.shape[0]):
            c0 = origin[m] + cur[m] * widths[m] - slack[m]
            c1 = c0 + widths[m] + 2.0 * slack[m]
            x = q[dims[m]]
            g = max(abs(x - c0), abs(x - c1))
            corner += g * g
        far = max(far, corner)
        have += b - a
        if have >= need:
            bound = far * (1.0 + 1e-9)  # above any rounding of a computed squared distance within it
            for j in range(hd.shape[0]):
                hd[j] = bound
            return


@numba.njit(cache=True, nogil=True)
def _rings(q, qid, exclude, index, grid, first_id, hd, hj, coords, lo, hi, cur, r, floor):
    """Rings of cells at Chebyshev distance r, r + 1, ... from the query's (clamped) cell until nothing
    outside the rings visited can sort before the k-th."""
    pts, ids, start, ccoords, perm, dense = index
    dims, origin, widths, ncells, strides, slack = grid
    kd = dims.shape[0]
    ncell = ids.shape[0]
    while True:
        cube = 1
        for m in range(kd):
            lo[m] = max(coords[m] - r, 0)
            hi[m] = min(coords[m] + r, ncells[m] - 1)
            cube *= hi[m] - lo[m] + 1
        if cube > 4 * ncell:  # rings now cost more than the non-empty cells: scan those, pruned by box
            for c in range(ncell):
                inner = True
                for m in range(kd):
                    if abs(ccoords[c, m] - coords[m]) >= r:
                        inner = False
                if inner:
                    continue  # visited by an earlier ring
                if _cell_bound(q, dims, origin, widths, slack, ccoords[c]) > hd[0]:
                    continue
                _scan_cell(q, qid, exclude, pts, perm, first_id, start[c], start[c + 1], hd, hj, floor)
            return
        # the cells of ring r (Chebyshev distance r from the query's cell), odometer over the cube
        for m in range(kd):
            cur[m] = lo[m]
        while True:
            ring = False
            lid = 0
            for m in range(kd):
                if abs(cur[m] - coords[m]) == r:
                    ring = True
                lid += cur[m] * strides[m]
            if ring and _cell_bound(q, dims, origin, widths, slack, cur) <= hd[0]:
                s, e = _cell_range(lid, ids, start, dense)
                if e > s:
                    _scan_cell(q, qid, exclude, pts, perm, first_id, s, e, hd, hj, floor)
            m = kd - 1
            while m >= 0:
                cur[m] += 1
                if cur[m] <= hi[m]:
                    break
                cur[m] = lo[m]
                m -= 1
            if m < 0:
                break
        # stop once nothing outside the cube can sort before the k-th: the nearest uncovered side
        left = np.inf
        for m in range(kd):
            if lo[m] > 0:
                g = q[dims[m]] - (origin[m] + lo[m] * widths[m] + slack[m])
                left = min(left, g * g if g > 0.0 else 0.0)
            if hi[m] < ncells[m] - 1:
                g = origin[m] + (hi[m] + 1) * widths[m] - slack[m] - q[dims[m]]
                left = min(left, g * g if g > 0.0 else 0.0)
        if left == np.inf or left * _BOUND_SHRINK > hd[0]:
            return
        r += 1


@numba.njit(cache=True, nogil=True, parallel=True)
def _grid(queries, qids, exclude, index, grid, stencil, box, first_id, best_d2, best_j, order, floor):
    kd, d, m = grid[0].shape[0], queries.shape[1], order.shape[0]
    chunks = min(m, 1024)
    for c in numba.prange(chunks):
        coords = np.empty(kd, np.int64)  # scratch per chunk of queries, not per query (allocations cost here)
        lo = np.empty(kd, np.int64)
        hi = np.empty(kd, np.int64)
        cur = np.empty(kd, np.int64)
        q = np.empty(d, np.float64)
        for u in range(c * m // chunks, (c + 1) * m // chunks):
            t = order[u]
            for v in range(d):
                q[v] = queries[t, v]
            _grid_query(q, qids[t], exclude, index, grid, stencil, box, first_id, best_d2[t], best_j[t], coords, lo,
                        hi, cur, floor)


def _query_order(queries: np.ndarray, spec) -> np.ndarray:
    """Query rows ordered by the cell they fall in."""
    if spec.k == 0 or len(queries) < 2:
        return np.arange(len(queries), dtype=np.int64)
    ids = _cell_ids(queries, spec.dims, spec.origin, spec.widths, spec.ncells, spec.strides)
    return np.argsort(ids, kind="stable").astype(np.int64)


#: cells of the sorted stencil around a query's cell, at most (its cube's radius follows the dimensions)
STENCIL_CELLS = 400


def stencil(grid):
    """The cube of cell offsets around a query's cell, sorted by a lower bound of the squared distance from a
    query anywhere in its cell to a point of that cell (points and query may each lie ``slack`` outside their
    cells by rounding), and the bound for any cell outside the cube: (offsets, bounds, outside)."""
    dims, _, widths, _, _, slack = grid
    kd = len(dims)
    if kd == 0:
        return np.zeros((0, 0), np.int64), np.zeros(0), np.inf
    radius = 1
    while (2 * (radius + 1) + 1) ** kd <= STENCIL_CELLS:
        radius += 1
    axes = np.meshgrid(*[np.arange(-radius, radius + 1)] * kd, indexing="ij")
    offsets = np.stack([a.ravel() for a in axes], axis=1).astype(np.int64)
    gaps = np.maximum((np.abs(offsets) - 1) * widths - 2.0 * slack, 0.0)
    bound = np.zeros(len(offsets))
    for m in range(kd):
        bound = bound + gaps[:, m] * gaps[:, m]
    # equal bounds (the 3^d cells touching the query's): the query's own cell first, then faces, edges,
    # corners, so the k-th distance shrinks early and prunes the rest
    order = np.lexsort((np.arange(len(offsets)), (offsets * offsets).sum(axis=1), bound))
    outside = float(np.min(np.maximum(radius * widths - 2.0 * slack, 0.0) ** 2))
    return offsets[order], bound[order] * _BOUND_SHRINK, outside * _BOUND_SHRINK


def _unit_ball(dims: int) -> float:
    return math.pi ** (dims / 2) / math.gamma(dims / 2 + 1)


def cell_width(lo: np.ndarray, hi: np.ndarray, n: int, k: int, dims: int = GRID_MAX_DIMS) -> float:
    """The k-th neighbour distance expected of ``n`` uniform points over the ``dims`` widest extents."""
    extent = np.sort(np.maximum(np.asarray(hi, np.float64) - np.asarray(lo, np.float64), 0.0))[::-1][:dims]
    extent = extent[extent > 0]
    if not len(extent) or n == 0:
        return 1.0
    # in logarithms: the product of extents may underflow or overflow a float (1e-200 or 1e120 wide data)
    dims_used = len(extent)
    log_radius = (np.log(k) - np.log(n) - np.log(_unit_ball(dims_used)) + np.log(extent).sum()) / dims_used
    radius = float(np.exp(min(log_radius, 700.0)))
    return min(max(radius, float(extent[0]) * 1e-9, np.finfo(np.float64).tiny), float(extent[0]))


class GridGeometry:
    """A block's grid for the kNN search, from its box alone (both backends): the cells (``spec``), the
    arrays the kernels take (``grid``: dims, origin, widths, ncells, strides, slack), the sorted
    ``stencil`` and ``box`` (lo, hi, which dimensions are indexed)."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray, n: int, k: int):
        d = len(lo)
        width = cell_width(lo, hi, n, k, min(GRID_MAX_DIMS, d))
        self.spec = s = choose_grid(lo, hi, width, max_dims=GRID_MAX_DIMS)
        self.grid = (s.dims, s.origin, s.widths, s.ncells, s.strides, boundary_slack(s))
        self.stencil = stencil(self.grid)
        indexed = np.zeros(d, np.bool_)
        indexed[s.dims] = True
        self.box = (np.asarray(lo, np.float64), np.asarray(hi, np.float64), indexed)
        self.n = int(n)


class KnnGrid:
    """``grid`` on the CPU: the block's ε-grid index, searched in growing rings per query."""

    backend = "cpu"
    rows = rows

    def __init__(self, data: np.ndarray, k: int, first_id: int = 0):
        data = np.ascontiguousarray(data)
        self.k, self.first_id, self.n = int(k), int(first_id), int(data.shape[0])
        if self.n:
            lo, hi = column_bounds(data)
        else:
            lo = hi = np.zeros(data.shape[1])
        geometry = GridGeometry(lo, hi, self.n, self.k)
        self.spec, self.grid, self.stencil, self.box = geometry.spec, geometry.grid, geometry.stencil, geometry.box
        self.index = build_index(data, self.spec).as_tuple()
        self.data = data  # the range pass's ε-grid (kernels/knn_range.py)

    def search(self, queries, query_ids, best_d2, best_j, exclude_self: bool) -> None:
        if not len(queries) or not self.n:
            return
        from .knn_range import range_pass, sampled_bound

        queries = np.ascontiguousarray(queries)
        sampled = sampled_bound(self, queries, query_ids, exclude_self)
        if sampled is None:
            self.rings(queries, query_ids, best_d2, best_j, exclude_self, None, -1.0)
            return
        bound2, pairs = sampled
        rest = range_pass(self, queries, query_ids, best_d2, best_j, exclude_self, bound2, pairs)
        if rest.size:
            self.rings(queries, query_ids, best_d2, best_j, exclude_self, rest, bound2)

    def rings(self, queries, query_ids, best_d2, best_j, exclude_self: bool, rows, floor: float) -> None:
        """The rings search of the queries ``rows`` (None: all), offering only points farther than ``floor``."""
        with serialised():
            # queries visited in cell order: neighbouring queries read the same cells (cache), and the
            # threads' shares stay spread over the data
            order = _query_order(queries, self.spec)
            if rows is not None:
                order = order[np.isin(order, rows)]
            _grid(queries, np.ascontiguousarray(query_ids, np.int64), bool(exclude_self),
                  self.index, self.grid, self.stencil, self.box, self.first_id, best_d2, best_j, order, float(floor))


# ------------------------------------------------------------------ the lists as output rows


@numba.njit(cache=True, nogil=True)
def _sift(key1, key2, other, at, n):
    """Sift entry ``at`` down the max-heap [0, n) ordered by (key1, key2)."""
    while True:
        left = 2 * at + 1
        if left >= n:
            return
        big = left
        if left + 1 < n and (key1[left] < key1[left + 1] or (key1[left] == key1[left + 1] and key2[left] < key2[left + 1])):
            big = left + 1
        if key1[at] > key1[big] or (key1[at] == key1[big] and key2[at] >= key2[big]):
            return
        key1[at], key1[big] = key1[big], key1[at]
        key2[at], key2[big] = key2[big], key2[at]
        other[at], other[big] = other[big], other[at]
        at = big


@numba.njit(cache=True, nogil=True)
def _sort_by(key1, key2, other, n, heap):
    """Sort [0, n) ascending by (key1, key2), ``other`` moved along: insertion sort for short runs; else
    ``heap`` (the arrays are a max-heap by those keys) the heapsort's extraction, in place, or ``key1``
    distinct, an argsort of it."""
    if n <= 32:
        for u in range(1, n):
            k1, k2, o = key1[u], key2[u], other[u]
            v = u - 1
            while v >= 0 and (key1[v] > k1 or (key1[v] == k1 and key2[v] > k2)):
                key1[v + 1], key2[v + 1], other[v + 1] = key1[v], key2[v], other[v]
                v -= 1
            key1[v + 1], key2[v + 1], other[v + 1] = k1, k2, o
        return
    if not heap:  # distinct key1 (the j sort): numba's quicksort beats a heapsort 2-3x at k ~ 1000
        order = np.argsort(key1[:n])
        k1, k2, o = key1[:n][order], key2[:n][order], other[:n][order]
        key1[:n], key2[:n], other[:n] = k1, k2, o
        return
    for end in range(n - 1, 0, -1):
        key1[0], key1[end] = key1[end], key1[0]
        key2[0], key2[end] = key2[end], key2[0]
        other[0], other[end] = other[end], other[0]
        _sift(key1, key2, other, 0, end)


@numba.njit(cache=True, nogil=True, parallel=True)
def _finish(best_d2, best_j, qids, oi, dist, rank):
    """Each query's k neighbours ranked by (d2, j) and written back in order of ``j``: ``j`` into ``best_j``,
    the float32 distance and the rank into ``dist``/``rank`` (float32/int32 views of ``best_d2``'s memory:
    written only after the query's row was read)."""
    m, k = best_d2.shape
    chunks = min(m, 256)
    for c in numba.prange(chunks):
        d = np.empty(k, np.float64)  # scratch per chunk of queries, not per query (allocation is slow here)
        j = np.empty(k, np.int64)
        r = np.empty(k, np.int32)
        for t in range(c * m // chunks, (c + 1) * m // chunks):
            for u in range(k):
                d[u], j[u], r[u] = best_d2[t, u], best_j[t, u], 0
            _sort_by(d, j, r, k, True)  # rank order: by (d2, j) (the lists are max-heaps by those keys)
            for u in range(k):
                r[u] = u + 1
            _sort_by(j, r, d, k, False)  # then by j (distinct), ranks moved along
            for u in range(k):
                oi[t * k + u] = qids[t]
                best_j[t, u] = j[u]
                dist[t, 2 * u] = np.float32(np.sqrt(d[u]))
                rank[t, 2 * u + 1] = r[u]




def finish(best_d2: np.ndarray, best_j: np.ndarray, query_ids: np.ndarray):
    """Rows ``(i, j, value)`` of full lists, per query in order of ``j``; ``value`` records of :data:`KNN_ROW_VALUE`
    (``dist`` float32, ``rank`` int32: 1 = nearest by (d2, j)).

    In place: ``j`` is ``best_j``'s memory and ``value`` ``best_d2``'s (fresh memory costs more than the
    sort on some hosts: page faults at ~2 s/GiB on the 2-core VM); the lists are consumed.
    """
    m, k = best_d2.shape
    if m and (best_j == NO_ID).any():
        raise RuntimeError("a kNN query found fewer than k neighbours (a bug in daskjoin: please report it)")
    oi = np.empty(m * k, np.int64)
    assert best_d2.flags.c_contiguous and best_j.flags.c_contiguous
    if m:
        with serialised():
            _finish(best_d2, best_j, np.ascontiguousarray(query_ids, np.int64), oi,
                    best_d2.view(np.float32), best_d2.view(np.int32))
    return oi, best_j.reshape(-1), best_d2.view(KNN_ROW_VALUE).reshape(-1)
