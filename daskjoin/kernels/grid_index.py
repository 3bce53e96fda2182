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
def _cells_of_sorted(sorted_ids, strides, ncells):
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
            rows = perm[s:e].copy()
            keys = np.empty(e - s, np.float64)
            for t in range(e - s):
                keys[t] = x[rows[t], dim]
            order = np.argsort(keys, kind="mergesort")
            for t in range(e - s):
                perm[s + t] = rows[order[t]]


def build_index(x: np.ndarray, spec: GridSpec) -> GridIndex:
    """Sort ``x`` by cell (counting sort on dense grids, argsort otherwise)."""
    n = x.shape[0]
    if spec.k == 0 or n == 0:
        ids = np.zeros(n, np.int64)
    else:
        with serialised():
            ids = _cell_ids(x, spec.dims, spec.origin, spec.widths, spec.ncells, spec.strides, pooled_empty(n, np.int64))
    total = spec.total_cells
    dense = spec.k > 0 and total <= max(DENSE_CELLS_PER_POINT * n, 1 << 16)
    if dense:
        perm = pooled_empty(n, np.int64)
        dense_start = _counting_sort(ids, total, perm)
    else:
        perm = np.argsort(ids, kind="stable").astype(np.int64)
        dense_start = np.zeros(0, np.int64)
    sorted_ids = np.take(ids, perm, out=pooled_empty(n, np.int64), mode="clip")  # (not "raise": it buffers)
    del ids
    cell_ids, cell_start, coords = _cells_of_sorted(sorted_ids, spec.strides, spec.ncells)
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
