"""The ε-grid's geometry: which dimensions are indexed, the cells' origin, widths and counts.

Kept apart from :mod:`.grid_index` (the CPU index, Numba) so that what plans and runs a join
on a GPU, and ``import daskjoin``, need not import Numba.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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

    def prefix(self, m: int) -> "GridSpec":
        """The grid of the first ``m`` indexed dimensions (its cell ids: this grid's, floor-divided by
        ``strides[m - 1]``, since ids are row-major)."""
        ncells = self.ncells[:m]
        strides = np.ones(m, np.int64)
        for j in range(m - 2, -1, -1):
            strides[j] = strides[j + 1] * ncells[j + 1]
        return GridSpec(dims=self.dims[:m], origin=self.origin[:m], widths=self.widths[:m], ncells=ncells,
                        strides=strides)


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


