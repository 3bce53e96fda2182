"""How many of its candidate dimensions the CPU ε-grid indexes, chosen per join from a cost model.

Each indexed dimension prunes exact decisions, but a cell searches 3^(k-1) rows of neighbour cells
with k dimensions indexed, each found by look-ups.  Where cells hold about one point (small eps for
the density, 4-d and up), the look-ups cost far more than the decisions they save: 400k uniform 6-d
points with one neighbour a point took 4.4 s with all six indexed and 0.37 s with four; scipy's
cKDTree 3.5 s (2-core VM, ``bench_grid_dims.py``).  A fixed count fits no data: with 30 neighbours
five won, on 300k 8-d points six.

The model prices a choice of the first m dimensions (largest spread first, :func:`.choose_grid`) as

    DECISION_NS * d * decisions(m) + lookup(m) * query cells(m) * rows(m) + POINT_ROW_NS * n * rows(m)

rows(m) = 3^(m-1) (halved in a self-join, which searches each pair of cells from one side); the
query cells at each m are counted exactly from the sorted cell ids (a prefix of a row-major id is its
cell at fewer dimensions); the decisions are estimated by walking the neighbour rows of a spread
sample of query points with the join's own pruning (a row farther than eps from the point's cell is
skipped, the row's end cells are scanned as far as eps reaches: the fraction of the cell width),
counting the data points of each cell range from the sorted ids.  The constants were fitted to 16
joins × 2–5 choices of m (uniform and clustered, 4-, 6- and 8-d, 0.01 to 5,000 pairs a point; the
2-core VM); with exact decision counts the model's choice was the fastest or within 1.6× of it in
every case, against up to 20× for the fixed six.  Exactness does not depend on the choice: every
pair within eps lies in neighbouring cells of any prefix grid.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .grid_index import CellOrder, is_dense
from .parallel_guard import serialised

#: nanoseconds a dimension of an exact decision (2 threads of the 2-core VM, as the others)
DECISION_NS = 0.32
#: nanoseconds a neighbour row costs a cell: the dense table's look-ups, or a binary search's per level
DENSE_ROW_NS = 25.0
SEARCH_ROW_NS = 4.6
#: nanoseconds a neighbour row costs a query point (its gap to the row, the loop)
POINT_ROW_NS = 13.0
#: query points sampled for the decisions' estimate
SAMPLE = 512
#: choices of fewer dimensions are weighed from this many candidates up (at two the rows cost little); and up
#: to this many (the sample's walk grows as 3^(m-1))
CHOOSE_FROM, CHOOSE_UP_TO = 3, 8
#: and only where the rows of all candidates would cost at least this many nanoseconds by the model (a query
#: point's and a cell's, as if every point had a cell of its own): below, the choice's own cost (a few to tens of
#: milliseconds) could exceed what it saves.  6-d from about 7,000 query rows, 4-d 60,000, 3-d 185,000
WEIGH_FROM_NS = 5e7
#: a choice of fewer dimensions keeps at least this many non-empty query cells for each query share
CELLS_A_SHARE = 16


@numba.njit(cache=True, nogil=True)
def _points_in(cell_ids, cell_start, lo, hi):
    """Points of the cells with ids in [lo, hi)."""
    return cell_start[np.searchsorted(cell_ids, hi)] - cell_start[np.searchsorted(cell_ids, lo)]


@numba.njit(cache=True, nogil=True, parallel=True)
def _sampled_candidates(pts, dims, origin, widths, ncells, strides, eps2, cell_ids, cell_start):
    """out[s, m - 1]: the exact decisions sample point s makes against the data (its sorted cell ids and
    starts at the full grid) with the first m dimensions indexed, both sides of a self-join counted."""
    S, k = pts.shape[0], dims.shape[0]
    out = np.zeros((S, k), np.float64)
    for s in numba.prange(S):
        coords = np.empty(k, np.int64)
        gl = np.empty(k, np.float64)  # squared gaps to the cell's lower and upper faces
        gu = np.empty(k, np.float64)
        for m in range(k):
            x = pts[s, dims[m]]
            c = np.int64(np.floor((x - origin[m]) / widths[m]))
            c = min(max(c, 0), ncells[m] - 1)
            coords[m] = c
            lower = origin[m] + c * widths[m]
            g = max(x - lower, 0.0)
            gl[m] = g * g
            g = max(lower + widths[m] - x, 0.0)
            gu[m] = g * g
        for m in range(1, k + 1):  # the first m dimensions indexed; dimension m - 1 the row's
            last, total = m - 1, 0.0
            span = strides[last]  # the full grid's ids of one cell of this grid
            nprefix = 1
            for j in range(m - 1):
                nprefix *= 3
            for code in range(nprefix):
                rest, base, g, valid = code, np.int64(0), 0.0, True
                for j in range(m - 1):
                    off = rest % 3 - 1
                    rest //= 3
                    c = coords[j] + off
                    if c < 0 or c >= ncells[j]:
                        valid = False
                        break
                    if off < 0:
                        g += gl[j]
                    elif off > 0:
                        g += gu[j]
                    base += c * strides[j]
                if not valid or g > eps2:
                    continue
                mid = base + coords[last] * span
                total += _points_in(cell_ids, cell_start, mid, mid + span)
                reach = math.sqrt(eps2 - g)
                if coords[last] > 0 and g + gl[last] <= eps2:
                    frac = min(1.0, (reach - math.sqrt(gl[last])) / widths[last])
                    total += frac * _points_in(cell_ids, cell_start, mid - span, mid)
                if coords[last] + 1 < ncells[last] and g + gu[last] <= eps2:
                    frac = min(1.0, (reach - math.sqrt(gu[last])) / widths[last])
                    total += frac * _points_in(cell_ids, cell_start, mid + span, mid + 2 * span)
            out[s, last] = total
    return out


def _distinct_prefixes(cell_ids: np.ndarray, strides: np.ndarray) -> np.ndarray:
    """Non-empty cells of each prefix grid (m = 1 .. k) from the full grid's sorted non-empty cell ids."""
    counts = np.empty(strides.shape[0], np.int64)
    for m in range(strides.shape[0]):
        p = cell_ids // strides[m]
        counts[m] = int(np.count_nonzero(p[1:] != p[:-1])) + (1 if p.shape[0] else 0)
    return counts


def model_costs(query: np.ndarray, qorder: CellOrder, dorder: CellOrder, eps2: float, selfjoin: bool,
                parts: int = 1, one_pass_cells: int = 0) -> np.ndarray:
    """The model's cost (nanoseconds) of indexing the first m = 1 .. k dimensions of the orders' grid; infinite
    where the query side would have fewer than :data:`CELLS_A_SHARE` non-empty cells for each of ``parts``
    shares (shares are runs of whole query cells: fewer would leave them uneven or empty), or fewer than
    ``one_pass_cells`` where all dimensions give that many (the join's one pass, which writes the pairs without
    counting them first and sorts them from its lanes, needs as many: ``grid.SAMPLE_MIN_BLOCKS``)."""
    spec = qorder.spec
    k, n = spec.k, query.shape[0]
    q_ids, q_start = qorder.runs()
    d_ids, d_start = (q_ids, q_start) if dorder is qorder else dorder.runs()
    picks = qorder.perm[(np.arange(min(SAMPLE, n)) * n) // min(SAMPLE, n)]  # spread over the cells' order
    sample = np.ascontiguousarray(query[np.sort(picks)], dtype=np.float64)
    with serialised():
        per_point = _sampled_candidates(sample, spec.dims, spec.origin, spec.widths, spec.ncells, spec.strides,
                                        eps2, d_ids, d_start)
    decisions = (per_point.mean(axis=0) - (1.0 if selfjoin else 0.0)) * n  # (a sample point meets itself)
    q_cells = _distinct_prefixes(q_ids, spec.strides)
    d_cells = q_cells if dorder is qorder else _distinct_prefixes(d_ids, spec.strides)
    half = 0.5 if selfjoin else 1.0
    costs = np.empty(k, np.float64)
    for m in range(1, k + 1):
        rows = 3.0 ** (m - 1) * half
        if is_dense(spec.prefix(m), dorder.perm.shape[0]):
            lookup = DENSE_ROW_NS
        else:
            lookup = SEARCH_ROW_NS * math.log2(max(2, int(d_cells[m - 1])))
        costs[m - 1] = (DECISION_NS * query.shape[1] * decisions[m - 1] * half + lookup * q_cells[m - 1] * rows
                        + POINT_ROW_NS * n * rows)
        if parts > 1 and m < k and q_cells[m - 1] < CELLS_A_SHARE * parts:
            costs[m - 1] = np.inf
        if m < k and q_cells[m - 1] < one_pass_cells <= q_cells[k - 1]:
            costs[m - 1] = np.inf
    return costs


def indexed_dims(query: np.ndarray, qorder: CellOrder, dorder: CellOrder, eps2: float, selfjoin: bool,
                 parts: int = 1, one_pass_cells: int = 0) -> int:
    """How many of the grid's dimensions to index: the model's cheapest (on a tie the more), where the rows of
    all of them would cost enough to weigh (:data:`WEIGH_FROM_NS`), else all."""
    k, n = qorder.spec.k, query.shape[0]
    if k < CHOOSE_FROM or k > CHOOSE_UP_TO or n == 0 or dorder.perm.shape[0] == 0:
        return k
    if (POINT_ROW_NS + DENSE_ROW_NS) * n * 3.0 ** (k - 1) * (0.5 if selfjoin else 1.0) < WEIGH_FROM_NS:
        return k
    costs = model_costs(query, qorder, dorder, eps2, selfjoin, parts, one_pass_cells)
    return int(k - np.argmin(costs[::-1]))
