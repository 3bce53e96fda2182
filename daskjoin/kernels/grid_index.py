"""The ε-grid index (Gowanlock & Karsin): non-empty cells only, found by sorted linear cell ids.

Cells are at least ``eps`` wide in each indexed dimension, so every pair within
``eps`` lies in the same or in adjacent cells.  Only the dimensions of largest
spread are indexed (at most ``max_dims``); the others are checked in the exact
distance.  Memory is O(n): the points sorted by cell, their original row ids,
the ids and starts of the non-empty cells, and - when the grid has at most a few
cells per point - a dense table from cell id to first point (O(1) look-ups,
counting sort instead of a comparison sort).
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from .grid_geometry import (DENSE_CELLS_PER_POINT, MAX_CELL_ID, MIN_USEFUL_CELLS, PATTERNS,  # noqa: F401 - re-exported
                            GridSpec, boundary_slack, choose_grid)
from .array_pool import empty as pooled_empty
from .parallel_guard import serialised

@dataclass(frozen=True)
class GridIndex:
    """Points of one join side, sorted by cell, with their non-empty cells."""

    points: np.ndarray  # float64 (n, d), sorted by cell id
    perm: np.ndarray  # int64 (n,), original row of each sorted point
    cell_ids: np.ndarray  # int64 (c,), sorted linear ids of the non-empty cells
    cell_start: np.ndarray  # int64 (c + 1,), first sorted point of each cell
    cell_coords: np.ndarray  # int64 (c, k)
    dense_start: np.ndarray  # int64 (total_cells + 1,) or empty: first point with id >= cell

    def as_tuple(self):
        """The arrays in the order the Numba drivers take them."""
        return (
            self.points, self.cell_ids, self.cell_start, self.cell_coords, self.perm,
            self.dense_start,
        )


@numba.njit(cache=True, nogil=True, parallel=True)
def _cell_ids(x, dims, origin, widths, ncells, strides, ids=None):
    n = x.shape[0]
    if ids is None:
        ids = np.empty(n, np.int64)
    for p in numba.prange(n):
        lid = 0
        for m in range(dims.shape[0]):
            c = np.int64(np.floor((np.float64(x[p, dims[m]]) - origin[m]) / widths[m]))
            c = min(max(c, 0), ncells[m] - 1)
            lid += c * strides[m]
        ids[p] = lid
    return ids


@numba.njit(cache=True, nogil=True)
def _counting_sort(ids, total, perm):
    """``perm`` (n, filled): the points in cell order, stable; returns the first point of each cell (total + 1)."""
    counts = np.zeros(total + 1, np.int64)
    for p in range(ids.shape[0]):
        counts[ids[p] + 1] += 1
    for c in range(total):
        counts[c + 1] += counts[c]
    cursor = counts[:-1].copy()
    for p in range(ids.shape[0]):
        perm[cursor[ids[p]]] = p
        cursor[ids[p]] += 1
    return counts


@numba.njit(cache=True, nogil=True, parallel=True)
def _gather(x, perm, out):
    n, d = perm.shape[0], x.shape[1]
    for p in numba.prange(n):
        src = perm[p]
        for k in range(d):
            out[p, k] = x[src, k]
    return out


@numba.njit(cache=True, nogil=True)
def _runs(sorted_ids):
    """The distinct ids of a sorted array and where each run starts (the end appended)."""
    n = sorted_ids.shape[0]
    count = 0
    for p in range(n):
        if p == 0 or sorted_ids[p] != sorted_ids[p - 1]:
            count += 1
    cell_ids = np.empty(count, np.int64)
    cell_start = np.empty(count + 1, np.int64)
    c = 0
    for p in range(n):
        if p == 0 or sorted_ids[p] != sorted_ids[p - 1]:
            cell_ids[c] = sorted_ids[p]
            cell_start[c] = p
            c += 1
    cell_start[count] = n
    return cell_ids, cell_start


@numba.njit(cache=True, nogil=True)
def _cells_of_sorted(sorted_ids, strides, ncells):
    cell_ids, cell_start = _runs(sorted_ids)
    count = cell_ids.shape[0]
    k = strides.shape[0]
    coords = np.empty((count, k), np.int64)
    for c in range(count):
        rest = cell_ids[c]
        for m in range(k):
            coords[c, m] = rest // strides[m]
            rest -= coords[c, m] * strides[m]
    return cell_ids, cell_start, coords


@numba.njit(cache=True, nogil=True, parallel=True)
def _sort_cells_by(x, perm, cell_start, dim):
    """Order the points of each cell by coordinate ``dim`` (ties by row), in place in ``perm``.

    The join then stops scanning a neighbour cell along the last indexed
    dimension as soon as the points get too far.
    """
    for c in numba.prange(cell_start.shape[0] - 1):
        s, e = cell_start[c], cell_start[c + 1]
        if e - s <= 32:
            for t in range(s + 1, e):
                p = perm[t]
                key = x[p, dim]
                u = t - 1
                while u >= s and (x[perm[u], dim] > key or (x[perm[u], dim] == key and perm[u] > p)):
                    perm[u + 1] = perm[u]
                    u -= 1
                perm[u + 1] = p
        else:
            rows = np.sort(perm[s:e])  # ties by row, whatever order the cell's points came in
            keys = np.empty(e - s, np.float64)
            for t in range(e - s):
                keys[t] = x[rows[t], dim]
            order = np.argsort(keys, kind="mergesort")
            for t in range(e - s):
                perm[s + t] = rows[order[t]]


@dataclass
class CellOrder:
    """Points of one join side in cell order of a grid (``spec``), before the index is finished: the
    order serves every grid of a prefix of its dimensions too (row-major ids: sorted by a cell id, sorted by
    its prefix), so the number of dimensions indexed can be chosen after sorting once (:mod:`.grid_dims`)."""

    spec: GridSpec
    perm: np.ndarray  # int64 (n,): the rows in cell order (stable)
    sorted_ids: np.ndarray  # int64 (n,): their cell ids
    dense_start: np.ndarray  # at spec's grid (counting sort), or empty
    spent: bool = False  # finish_index took it (its perm then sorted within the index's cells)

    def runs(self):
        """The non-empty cells' ids and first positions (``cell_start``, with the end appended)."""
        return _runs(self.sorted_ids)


def is_dense(spec: GridSpec, n: int) -> bool:
    """Whether a side of ``n`` points gets the dense cell table (:data:`DENSE_CELLS_PER_POINT`)."""
    return spec.k > 0 and spec.total_cells <= max(DENSE_CELLS_PER_POINT * n, 1 << 16)


def order_by_cells(x: np.ndarray, spec: GridSpec) -> CellOrder:
    """Sort ``x`` by cell (counting sort on dense grids, argsort otherwise)."""
    n = x.shape[0]
    if spec.k == 0 or n == 0:
        ids = np.zeros(n, np.int64)
    else:
        with serialised():
            ids = _cell_ids(x, spec.dims, spec.origin, spec.widths, spec.ncells, spec.strides, pooled_empty(n, np.int64))
    if is_dense(spec, n):
        perm = pooled_empty(n, np.int64)
        dense_start = _counting_sort(ids, spec.total_cells, perm)
    else:
        perm = np.argsort(ids, kind="stable").astype(np.int64)
        dense_start = np.zeros(0, np.int64)
    sorted_ids = np.take(ids, perm, out=pooled_empty(n, np.int64), mode="clip")  # (not "raise": it buffers)
    return CellOrder(spec=spec, perm=perm, sorted_ids=sorted_ids, dense_start=dense_start)


def finish_index(x: np.ndarray, order: CellOrder, m: int | None = None) -> GridIndex:
    """The index of ``x`` (sorted in ``order``) over the first ``m`` of the order's dimensions (all by default):
    the same index :func:`build_index` makes for ``order.spec.prefix(m)``.  Takes ``order.perm``."""
    if order.spent:
        raise ValueError("this cell order was finished into an index already (its perm is the index's now)")
    order.spent = True
    full = order.spec
    m = full.k if m is None else m
    spec = full.prefix(m) if m < full.k else full
    n = x.shape[0]
    perm, sorted_ids, dense_start = order.perm, order.sorted_ids, order.dense_start
    order.sorted_ids = order.dense_start = None  # (not held beyond the index they make)
    if m < full.k:
        sorted_ids = sorted_ids // (full.strides[m - 1] if m else full.total_cells)
        dense_start = np.zeros(0, np.int64)
    cell_ids, cell_start, coords = _cells_of_sorted(sorted_ids, spec.strides, spec.ncells)
    if m < full.k and is_dense(spec, n):
        dense_start = _dense_table(cell_ids, cell_start, spec.total_cells)
    if spec.k:
        with serialised():
            _sort_cells_by(x, perm, cell_start, spec.dims[-1])
    with serialised():
        points = _gather(x, perm, pooled_empty((n, x.shape[1]), np.float64))
    return GridIndex(
        points=points,
        perm=perm,
        cell_ids=cell_ids,
        cell_start=cell_start,
        cell_coords=coords,
        dense_start=dense_start,
    )


def build_index(x: np.ndarray, spec: GridSpec) -> GridIndex:
    """Sort ``x`` by cell and index it."""
    return finish_index(x, order_by_cells(x, spec))


@numba.njit(cache=True, nogil=True)
def _dense_table(cell_ids, cell_start, total):
    """First point of each cell id 0 .. total (an empty cell: the next non-empty one's), as the counting sort gives."""
    table = np.empty(total + 1, np.int64)
    c = 0
    for lid in range(total + 1):
        while c < cell_ids.shape[0] and cell_ids[c] < lid:
            c += 1
        table[lid] = cell_start[c]
    return table
