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

from .parallel_guard import serialised

#: Largest linear cell id we allow (ids are int64; headroom for neighbour arithmetic).
MAX_CELL_ID = 1 << 60
#: the self-join's cell access pattern (option ``pattern``) -> the ``selfjoin`` code the grid kernels
#: take (0 is an A x B join): which of two neighbour cells searches the pair (``grid.py``)
PATTERNS = {"lid-unicomp": 1, "unicomp": 2}
#: Use a dense cell table when the grid has at most this many cells per point.
DENSE_CELLS_PER_POINT = 4
#: Dimensions with fewer cells than this prune nothing and are left out of the index.
MIN_USEFUL_CELLS = 3


@dataclass(frozen=True)
class GridSpec:
    """Geometry shared by both sides of a join: which dims, origin, cell widths, cell counts."""

    dims: np.ndarray  # int64 (k,), indexed dimensions, in id order (last varies fastest)
    origin: np.ndarray  # float64 (k,)
    widths: np.ndarray  # float64 (k,), each >= eps
    ncells: np.ndarray  # int64 (k,)
    strides: np.ndarray  # int64 (k,), row-major strides of the linear id

    @property
    def k(self) -> int:
        return int(self.dims.shape[0])

    @property
    def total_cells(self) -> int:
        return int(np.prod(self.ncells.astype(object))) if self.k else 1


def boundary_slack(spec: "GridSpec") -> np.ndarray:
    """Per indexed dimension, an absolute amount by which computed cell boundaries may be off.

    Gaps from a point to a neighbour cell's nominal boundary are shrunk by it before
    pruning, so rounding in ``origin + c * width`` never prunes a true pair.
    """
    magnitude = np.abs(spec.origin) + spec.ncells * spec.widths
    return 1e-9 * magnitude + 1e-300


def _safe_width(eps: float, extent: float) -> float:
    """A cell width >= eps with room for the rounding of ``(x - origin) / width``.

    Both the subtraction and the division are monotone under round-to-nearest, but
    each may move a cell coordinate by a few ulps of the number of cells; widening
    by a relative margin far larger than that keeps pairs at distance <= eps within
    one cell of each other.
    """
    cells = extent / eps + 2.0
    margin = max(1e-9, 16.0 * cells * np.finfo(np.float64).eps)
    return eps * (1.0 + margin)


def choose_grid(lo: np.ndarray, hi: np.ndarray, eps: float, *, max_dims: int = 6) -> GridSpec:
    """Pick the indexed dimensions (largest spread first) and the cell geometry.

    ``lo``/``hi`` bound every point of both join sides.  A dimension is kept while
    it has at least ``MIN_USEFUL_CELLS`` cells and the product of cell counts stays
    below ``MAX_CELL_ID``.
    """
    lo = np.asarray(lo, np.float64)
    hi = np.asarray(hi, np.float64)
    extent = np.maximum(hi - lo, 0.0)
    order = np.argsort(-extent, kind="stable")
    dims, widths, ncells = [], [], []
    total = 1
    for dim in order[: max(0, max_dims)]:
        width = _safe_width(eps, float(extent[dim]))
        count = int(np.floor(extent[dim] / width)) + 1
        if count < MIN_USEFUL_CELLS or total * count > MAX_CELL_ID:
            continue
        dims.append(int(dim))
        widths.append(width)
        ncells.append(count)
        total *= count
    ncells_arr = np.asarray(ncells, np.int64)
    strides = np.ones(len(dims), np.int64)
    for m in range(len(dims) - 2, -1, -1):
        strides[m] = strides[m + 1] * ncells_arr[m + 1]
    return GridSpec(
        dims=np.asarray(dims, np.int64),
        origin=lo[np.asarray(dims, np.int64)] if dims else np.zeros(0),
        widths=np.asarray(widths, np.float64),
        ncells=ncells_arr,
        strides=strides,
    )


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
def _cell_ids(x, dims, origin, widths, ncells, strides):
    n = x.shape[0]
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
def _counting_sort(ids, total):
    counts = np.zeros(total + 1, np.int64)
    for p in range(ids.shape[0]):
        counts[ids[p] + 1] += 1
    for c in range(total):
        counts[c + 1] += counts[c]
    cursor = counts[:-1].copy()
    perm = np.empty(ids.shape[0], np.int64)
    for p in range(ids.shape[0]):
        perm[cursor[ids[p]]] = p
        cursor[ids[p]] += 1
    return perm, counts


@numba.njit(cache=True, nogil=True, parallel=True)
def _gather(x, perm):
    n, d = perm.shape[0], x.shape[1]
    out = np.empty((n, d), np.float64)
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
            ids = _cell_ids(x, spec.dims, spec.origin, spec.widths, spec.ncells, spec.strides)
    total = spec.total_cells
    dense = spec.k > 0 and total <= max(DENSE_CELLS_PER_POINT * n, 1 << 16)
    if dense:
        perm, dense_start = _counting_sort(ids, total)
    else:
        perm = np.argsort(ids, kind="stable").astype(np.int64)
        dense_start = np.zeros(0, np.int64)
    sorted_ids = ids[perm]
    cell_ids, cell_start, coords = _cells_of_sorted(sorted_ids, spec.strides, spec.ncells)
    if spec.k:
        with serialised():
            _sort_cells_by(x, perm, cell_start, spec.dims[-1])
    with serialised():
        points = _gather(x, perm)
    return GridIndex(
        points=points,
        perm=perm,
        cell_ids=cell_ids,
        cell_start=cell_start,
        cell_coords=coords,
        dense_start=dense_start,
    )
