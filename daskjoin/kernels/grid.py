"""``grid`` method, CPU driver: ε-grid join in Numba (Gowanlock & Karsin; Gallet & Gowanlock).

Self-join: each pair of neighbour cells is searched from one side only, so each
distance is computed once.  ``pattern`` picks the side: LID-UNICOMP (Gallet &
Gowanlock; the default), the cell of lower linear id; UNICOMP (Gowanlock &
Karsin), the cell whose coordinate is odd in the first dimension where the two
cells differ (the two coordinates there differ by one, so exactly one is odd).
Because ids are row-major, the neighbour cells that differ only in the last
indexed dimension are consecutive ids: one *row* of up to three cells is one
contiguous span of sorted points.  Per query point, a neighbour row is skipped
when the point is farther than eps from it (measured from the point to its own
cell's faces), and the row's end cells are dropped likewise: in 6-d this
prunes most of the 3^6 cells a plain grid visits.

Work is dealt to a fixed number of lanes block-cyclically (blocks of
neighbouring cells round-robin), which balances skewed data without a sort by
workload and keeps the output order independent of the thread count.
Output: one pass writing into per-lane regions sized from a sampled count, with
the cells of any lane that overflows redone exactly (count, prefix sum, fill);
or, for bounded batches, a count pass then fills over ranges of cells (a cell with more
pairs than a batch holds: over ranges of its points, counted one by one).
"""
from __future__ import annotations

import numba
import numpy as np

from .exact import eps_squared
from .within import WHOLE_ROWS, dist2, within
from .grid_dims import indexed_dims
from .grid_index import PATTERNS, boundary_slack, choose_grid, finish_index, order_by_cells
from .memory import pair_buffers
from .pair_sort import sort_lanes
from .parallel_guard import serialised
from .registry import SortedRun, bounded_ranges, split_batch
from .shares import cell_range
from .summary import column_bounds

CELLS_PER_BLOCK = 16
#: Fixed lane count: the output order depends on it, so it must not follow the thread count.
LANES = 64
#: Below this many blocks the sampled single pass is not worth it: count, then fill.
SAMPLE_MIN_BLOCKS = 8 * LANES
SAMPLE_EVERY = 64
CAPACITY_SLACK = 1.15
#: the most a lane's room in the one pass exceeds the mean lane's (:meth:`GridJoin._lane_room`)
MAX_LANE_SKEW = 2.0
#: rows of at most this many dimensions are decided without a branch on the data (:func:`_visit_points`)
SHORT_ROWS = 4


@numba.njit(cache=True, nogil=True, inline="always")
def _first_at(ids, start, dense, lid):
    """Sorted position of the first point whose cell id is >= lid."""
    if dense.shape[0] > 0:
        return dense[lid]
    return start[np.searchsorted(ids, lid, side="left")]


@numba.njit(cache=True, nogil=True)
def _neighbour_rows(coords, lid, strides, ncells, half, ids, start, dense, rows, offs):
    """The rows of neighbour cells of one cell; returns how many.

    A row holds the cells whose coordinates differ from the cell's by an offset
    prefix ``offs[r]`` in the first k-1 indexed dimensions and by -1, 0 or +1 in
    the last; ``rows[r]`` gets the four sorted-point boundaries of those three
    cells (empty where they fall outside the grid).  ``half`` (a :data:`PATTERNS`
    code) keeps only the rows this cell searches in a self-join: 1, those of
    lexicographically positive prefix (higher linear ids: LID-UNICOMP); 2, those
    whose first non-zero offset is in a dimension where the cell's coordinate is
    odd (UNICOMP).  The cell's own row is then left to the caller.
    """
    k = strides.shape[0]
    count = 0
    if k == 0:
        if not half:
            end = start[start.shape[0] - 1]
            rows[0, 0] = 0
            rows[0, 1] = 0
            rows[0, 2] = end
            rows[0, 3] = end
            rows[0, 4] = 0
            count = 1
        return count
    last = coords[k - 1]
    has_lo = last > 0
    has_hi = last + 1 < ncells[k - 1]
    nprefix = _nprefix(strides)
    for code in range(nprefix):
        rest = code
        base = lid
        valid = True
        first_nonzero = 0
        first_dim = -1
        faces = 0
        for m in range(k - 1):
            off = rest % 3 - 1
            rest //= 3
            c = coords[m] + off
            if c < 0 or c >= ncells[m]:
                valid = False
                break
            if first_nonzero == 0 and off != 0:
                first_nonzero = off
                first_dim = m
            if off != 0:
                offs[count, faces] = 2 * m + (1 if off > 0 else 0)
                faces += 1
            base += off * strides[m]
        if not valid:
            continue
        if half == 1 and first_nonzero <= 0:
            continue
        if half == 2 and (first_dim < 0 or coords[first_dim] % 2 == 0):
            continue
        mid0 = _first_at(ids, start, dense, base)
        mid1 = _first_at(ids, start, dense, base + 1)
        rows[count, 0] = _first_at(ids, start, dense, base - 1) if has_lo else mid0
        rows[count, 1] = mid0
        rows[count, 2] = mid1
        rows[count, 3] = _first_at(ids, start, dense, base + 2) if has_hi else mid1
        rows[count, 4] = faces
        if rows[count, 3] > rows[count, 0]:
            count += 1
    return count


@numba.njit(cache=True, nogil=True, inline="always")
def _boundary_gaps(pts, a, dims, origin, widths, coords, slack, gf):
    """Squared distances (shrunk by the slack) from point a to its cell's faces: gf[2m] lower, gf[2m+1] upper."""
    for m in range(dims.shape[0]):
        lower = origin[m] + coords[m] * widths[m]
        x = pts[a, dims[m]]
        g = x - lower - slack[m]
        gf[2 * m] = g * g if g > 0.0 else 0.0
        g = lower + widths[m] - x - slack[m]
        gf[2 * m + 1] = g * g if g > 0.0 else 0.0


@numba.njit(cache=True, nogil=True)
def _visit_cell(c, qi, di, eps2, selfjoin, grid, work, fill, oi, oj, od, pos, end):
    """Count or write the pairs of query cell ``c``; returns the new position or -1 on overflow."""
    return _visit_points(c, qi[2][c], qi[2][c + 1], qi, di, eps2, selfjoin, grid, work, fill, oi, oj, od, pos, end)


@numba.njit(cache=True, nogil=True)
def _visit_points(c, a0, a1, qi, di, eps2, selfjoin, grid, work, fill, oi, oj, od, pos, end):
    """Count or write the pairs of the query points at sorted positions [a0, a1) of cell ``c``.

    Returns the new position or -1 on overflow.  Per query point, a neighbour row is
    skipped when the point's distance to it (over the offset dimensions, from the cell
    faces) exceeds eps, and the row's first or last cell is dropped likewise: this
    prunes most of the 3^k cells of the plain grid in 6-d.
    """
    dims, origin, widths, ncells, strides, slack = grid
    rows, offs, gf = work
    s, e = qi[2][c], qi[2][c + 1]
    coords = qi[3][c]
    qpts, dpts, qperm, dperm = qi[0], di[0], qi[4], di[4]
    k = strides.shape[0]
    nrows = _neighbour_rows(coords, qi[1][c], strides, ncells, selfjoin, di[1], di[2], di[5], rows, offs)
    # the own row of a self-join: the own cell, and its last-dimension neighbours that this
    # cell searches (LID-UNICOMP: the next; UNICOMP: both, where the last coordinate is odd)
    own_start, own_end = s, e
    if selfjoin and k > 0 and (selfjoin == 1 or coords[k - 1] % 2 == 1):
        if coords[k - 1] + 1 < ncells[k - 1]:
            own_end = _first_at(di[1], di[2], di[5], qi[1][c] + 2)
        if selfjoin == 2 and coords[k - 1] > 0:
            own_start = _first_at(di[1], di[2], di[5], qi[1][c] - 1)
    short = qpts.shape[1] <= SHORT_ROWS
    whole = qpts.shape[1] <= WHOLE_ROWS
    for a in range(max(a0, s), min(a1, e)):
        pa = qperm[a]
        if k > 0:
            _boundary_gaps(qpts, a, dims, origin, widths, coords, slack, gf)
        xa = qpts[a, dims[k - 1]] if k > 0 else 0.0
        for r in range(-1 if selfjoin else 0, nrows):
            if r < 0:
                # own row of a self-join: later points of the own cell, then the neighbours above
                g = 0.0
                mid0, mid1 = a + 1, e
                hi = own_end if (k > 0 and gf[2 * k - 1] <= eps2) else e
                # UNICOMP's cell below, scanned downwards from the own cell's first point
                top = s
                lo = own_start if (own_start < s and gf[2 * k - 2] <= eps2) else s
            else:
                g = 0.0
                for t in range(rows[r, 4]):
                    g += gf[offs[r, t]]
                if g > eps2:
                    continue
                mid0, mid1 = rows[r, 1], rows[r, 2]
                top = mid0
                if k > 0:
                    lo = rows[r, 0] if g + gf[2 * k - 2] <= eps2 else mid0
                    hi = rows[r, 3] if g + gf[2 * k - 1] <= eps2 else mid1
                else:
                    lo, hi = rows[r, 0], rows[r, 3]
            # cells are ordered by the last indexed coordinate: scan the middle cell whole,
            # the lower cell downwards (from ``top``) and the upper cell upwards until the
            # points are out of reach
            reach2 = (eps2 - g) + 1e-9 * eps2 + slack[k - 1] * slack[k - 1] if k > 0 else np.inf
            for part in range(3):
                if part == 0:
                    b, stop, step = mid0, mid1, 1
                elif part == 1:
                    b, stop, step = top - 1, lo - 1, -1
                else:
                    b, stop, step = mid1, hi, 1
                while b != stop:
                    if part > 0:
                        gap = dpts[b, dims[k - 1]] - xa
                        if gap * gap > reach2:
                            break
                    if fill == 2:  # the work report: candidates, not pairs (``fill`` is a bool otherwise)
                        pos += 1
                        b += step
                        continue
                    # the whole sum where rows are not long (the same float64 sum in dimension order as within's,
                    # which stops once past eps2: the same decisions): its per-dimension exit mispredicted and kept
                    # the sum scalar.  200k uniform rows, the kernel on the 2-core VM: 5-d 0.41 -> 0.26-0.31 s, 6-d
                    # 0.78 -> 0.49 s, 8-d 10.3 -> 3.1 s; 12-d 30k rows 17.6 -> 4.9 s, 32-d 20k rows 11.6 -> 6.5 s
                    if whole:
                        d2 = dist2(qpts, a, dpts, b)
                        found = d2 <= eps2
                    else:
                        d2 = within(qpts, a, dpts, b, eps2)
                        found = d2 >= 0.0
                    if short:
                        # short rows: the slot written whether or not a pair (kept by moving on): the pair's 50/50
                        # branch cost more than the write (2-d 0.047-0.050 -> 0.040-0.044 s, 3-d 0.096 -> 0.064 s,
                        # 4-d 0.189 -> 0.127 s); at 5- and 6-d, pairs rarer among the candidates, the two ways tie
                        if fill:
                            if pos < end:
                                pb = dperm[b]
                                oi[pos] = min(pa, pb) if selfjoin else pa
                                oj[pos] = max(pa, pb) if selfjoin else pb
                                od[pos] = np.float32(np.sqrt(d2))
                            elif found:
                                return -1
                        pos += found
                    elif found:
                        if fill:
                            if pos >= end:
                                return -1
                            pb = dperm[b]
                            if selfjoin and pb < pa:
                                oi[pos], oj[pos] = pb, pa
                            else:
                                oi[pos], oj[pos] = pa, pb
                            od[pos] = np.float32(np.sqrt(d2))
                        pos += 1
                    b += step
    return pos


@numba.njit(cache=True, nogil=True)
def _workspace(strides):
    n, k = _nprefix(strides), strides.shape[0]
    return (
        np.empty((n, 5), np.int64),
        np.zeros((n, max(k - 1, 1)), np.int64),
        np.zeros(max(2 * k, 2), np.float64),
    )


@numba.njit(cache=True, nogil=True)
def _nprefix(strides):
    n = 1
    for m in range(strides.shape[0] - 1):
        n *= 3
    return n


@numba.njit(cache=True, nogil=True, parallel=True)
def _count_cells(qi, di, eps2, selfjoin, grid, cells, decisions=False):
    """Exact pair count of each cell listed in ``cells``; ``decisions``: its candidates instead (the work report)."""
    counts = np.zeros(cells.shape[0], np.int64)
    nblocks = (cells.shape[0] + CELLS_PER_BLOCK - 1) // CELLS_PER_BLOCK
    dummy_i = np.empty(0, np.int64)
    dummy_d = np.empty(0, np.float32)
    big = np.int64(1) << 62
    for lane in numba.prange(LANES):
        work = _workspace(grid[4])
        for block in range(lane, nblocks, LANES):
            for t in range(block * CELLS_PER_BLOCK, min((block + 1) * CELLS_PER_BLOCK, cells.shape[0])):
                if decisions:  # (a call of its own: the count's keeps its constant False)
                    counts[t] = _visit_cell(cells[t], qi, di, eps2, selfjoin, grid, work, 2, dummy_i, dummy_i,
                                            dummy_d, 0, big)
                else:
                    counts[t] = _visit_cell(cells[t], qi, di, eps2, selfjoin, grid, work, False, dummy_i, dummy_i,
                                            dummy_d, 0, big)
    return counts


@numba.njit(cache=True, nogil=True, parallel=True)
def _fill_cells(qi, di, eps2, selfjoin, grid, cells, offsets, oi, oj, od):
    """Write the pairs of ``cells[t]`` at ``offsets[t] - offsets[0]`` (offsets from exact counts)."""
    nblocks = (cells.shape[0] + CELLS_PER_BLOCK - 1) // CELLS_PER_BLOCK
    base = offsets[0]
    for lane in numba.prange(LANES):
        work = _workspace(grid[4])
        for block in range(lane, nblocks, LANES):
            for t in range(block * CELLS_PER_BLOCK, min((block + 1) * CELLS_PER_BLOCK, cells.shape[0])):
                at = offsets[t] - base
                _visit_cell(cells[t], qi, di, eps2, selfjoin, grid, work, True, oi, oj, od, at, offsets[t + 1] - base)
    return 0


@numba.njit(cache=True, nogil=True, parallel=True)
def _count_points(qi, di, eps2, selfjoin, grid, c):
    """Exact pair count of every query point of cell ``c`` (for cells with more pairs than a batch)."""
    s, e = qi[2][c], qi[2][c + 1]
    counts = np.zeros(e - s, np.int64)
    dummy_i = np.empty(0, np.int64)
    dummy_d = np.empty(0, np.float32)
    big = np.int64(1) << 62
    nblocks = (e - s + CELLS_PER_BLOCK - 1) // CELLS_PER_BLOCK
    for block in numba.prange(nblocks):
        work = _workspace(grid[4])
        for t in range(block * CELLS_PER_BLOCK, min((block + 1) * CELLS_PER_BLOCK, e - s)):
            counts[t] = _visit_points(c, s + t, s + t + 1, qi, di, eps2, selfjoin, grid, work, False,
                                      dummy_i, dummy_i, dummy_d, 0, big)
    return counts


@numba.njit(cache=True, nogil=True, parallel=True)
def _candidates(qi, di, eps2, selfjoin, grid):
    """Candidates (exact decisions) of every sorted query point: the work report (:meth:`GridJoin.work`)."""
    ncell = qi[2].shape[0] - 1
    counts = np.zeros(qi[0].shape[0], np.int64)
    dummy_i = np.empty(0, np.int64)
    dummy_d = np.empty(0, np.float32)
    big = np.int64(1) << 62
    for c in numba.prange(ncell):
        work = _workspace(grid[4])
        for a in range(qi[2][c], qi[2][c + 1]):
            counts[a] = _visit_points(c, a, a + 1, qi, di, eps2, selfjoin, grid, work, 2, dummy_i, dummy_i,
                                      dummy_d, 0, big)
    return counts


@numba.njit(cache=True, nogil=True, parallel=True)
def _fill_points(qi, di, eps2, selfjoin, grid, c, a0, offsets, oi, oj, od):
    """Write the pairs of point ``a0 + t`` of cell ``c`` at ``offsets[t] - offsets[0]`` (offsets from exact counts)."""
    npts = offsets.shape[0] - 1
    base = offsets[0]
    nblocks = (npts + CELLS_PER_BLOCK - 1) // CELLS_PER_BLOCK
    for block in numba.prange(nblocks):
        work = _workspace(grid[4])
        for t in range(block * CELLS_PER_BLOCK, min((block + 1) * CELLS_PER_BLOCK, npts)):
            _visit_points(c, a0 + t, a0 + t + 1, qi, di, eps2, selfjoin, grid, work, True, oi, oj, od,
                          offsets[t] - base, offsets[t + 1] - base)
    return 0


@numba.njit(cache=True, nogil=True, parallel=True)
def _single_pass(qi, di, eps2, selfjoin, grid, cap, oi, oj, od, used, stop_at):
    """Each lane writes its blocks' pairs into its own region of ``cap`` slots.

    A lane that runs out of room records the block-order position of the cell it
    could not finish (``stop_at``) and stops; the caller redoes the rest exactly.
    """
    ncell = qi[1].shape[0]
    nblocks = (ncell + CELLS_PER_BLOCK - 1) // CELLS_PER_BLOCK
    for lane in numba.prange(LANES):
        work = _workspace(grid[4])
        pos = lane * cap
        end = pos + cap
        stop_at[lane] = -1
        stopped = False
        for block in range(lane, nblocks, LANES):
            for c in range(block * CELLS_PER_BLOCK, min((block + 1) * CELLS_PER_BLOCK, ncell)):
                r = _visit_cell(c, qi, di, eps2, selfjoin, grid, work, True, oi, oj, od, pos, end)
                if r < 0:
                    stop_at[lane] = c
                    stopped = True
                    break
                pos = r
            if stopped:
                break
        used[lane] = pos - lane * cap
    return 0


@numba.njit(cache=True, nogil=True)
def _unfinished_cells(stop_at, ncell):
    """Cells left by overflowed lanes, in lane then block order."""
    out = np.empty(ncell, np.int64)
    n = 0
    for lane in range(LANES):
        c = stop_at[lane]
        if c < 0:
            continue
        block = c // CELLS_PER_BLOCK
        while block * CELLS_PER_BLOCK < ncell:
            for t in range(max(c, block * CELLS_PER_BLOCK), min((block + 1) * CELLS_PER_BLOCK, ncell)):
                out[n] = t
                n += 1
            block += LANES
    return out[:n]


@numba.njit(cache=True, nogil=True)
def _compact_in_place(cap, used, oi, oj, od):
    """Move each lane's pairs left so all are contiguous from 0; returns their count.

    In place, to touch no fresh memory (page faults cost more than the copy on some
    hosts: 2 s/GiB on the 2-core CI machine).  A lane never moves right (its target,
    the total of the lanes before it, is at most lane * cap), so a forward copy is safe.
    """
    at = 0
    for lane in range(LANES):
        src = lane * cap
        count = used[lane]
        if src != at:
            for t in range(count):
                oi[at + t] = oi[src + t]
                oj[at + t] = oj[src + t]
                od[at + t] = od[src + t]
        at += count
    return at


class GridJoin:
    """A prepared grid join (indexes built); count, pairs or bounded batches on demand."""

    def __init__(self, a: np.ndarray, b: np.ndarray | None, eps: float, *, max_dims: int = 6, share=None,
                 pattern: str = "lid-unicomp", dims="auto"):
        """``share``: ``(k, parts)``, only the pairs of the k-th of ``parts`` query shares
        (:mod:`.shares`: runs of query cells of about equal work; the shares partition the pairs).
        ``pattern``: the self-join's cell access pattern, a key of :data:`PATTERNS`.  ``max_dims``: the
        candidate dimensions, at most this many of largest spread.  ``dims``: how many of them are indexed:
        ``"auto"``, as many as the cost model finds cheapest (:mod:`.grid_dims`; a function of the data and
        ``parts`` alone, so every share of one join makes the same choice); ``"all"``; or a number (the first
        that many)."""
        self.selfjoin = b is None
        if pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {tuple(PATTERNS)}, got {pattern!r}")
        self._mode = PATTERNS[pattern] if self.selfjoin else 0
        parts = [x for x in (a, b) if x is not None and x.shape[0]]
        if parts:
            bounds = [column_bounds(x) for x in parts]
            lo = np.min([b[0] for b in bounds], axis=0)
            hi = np.max([b[1] for b in bounds], axis=0)
        else:
            lo = hi = np.zeros(a.shape[1])
        spec = choose_grid(lo, hi, eps, max_dims=max_dims)
        self.eps2 = eps_squared(eps)
        # sorted once by the candidate dimensions' cells; indexed by as many of them as `dims` says
        qorder = order_by_cells(a, spec)
        dorder = qorder if b is None else order_by_cells(b, spec)
        if dims == "auto":
            m = indexed_dims(a, qorder, dorder, self.eps2, b is None, parts=share[1] if share is not None else 1,
                             one_pass_cells=0 if share is not None else SAMPLE_MIN_BLOCKS * CELLS_PER_BLOCK)
        elif dims == "all":
            m = spec.k
        else:
            m = min(int(dims), spec.k)
        self.spec = spec.prefix(m) if m < spec.k else spec
        self.query = finish_index(a, qorder, m).as_tuple()
        self.data = self.query if b is None else finish_index(b, dorder, m).as_tuple()
        self.ncell = int(self.query[1].shape[0])
        self.shared = share is not None
        lo, hi = cell_range(self.query[2], share) if self.shared else (0, self.ncell)
        self.cells = np.arange(lo, hi, dtype=np.int64)  # the query cells this join searches
        self._counts = None
        self._loads = None

    def _args(self):
        spec = self.spec
        grid = (spec.dims, spec.origin, spec.widths, spec.ncells, spec.strides, boundary_slack(spec))
        return self.query, self.data, self.eps2, self._mode, grid

    def work(self) -> np.ndarray:
        """Exact decisions (candidates) each query point makes, in sorted order (the work report)."""
        with serialised():
            return _candidates(*self._args())

    def decisions(self) -> int:
        """The number of exact decisions (candidates) of every query cell it searches: ``work().sum()``, counted
        a cell at a time (the work report visits each point alone, and finds its cell's neighbour rows again)."""
        with serialised():
            return int(_count_cells(*self._args(), self.cells, True).sum())

    def counts(self) -> np.ndarray:
        """Exact pair count of every query cell it searches (``self.cells``; cached)."""
        if self._counts is None:
            with serialised():
                self._counts = _count_cells(*self._args(), self.cells)
        return self._counts

    def count(self) -> int:
        return int(self.counts().sum())

    def _fill_exact(self, cells: np.ndarray, counts: np.ndarray, with_distance: bool):
        offsets = np.zeros(cells.shape[0] + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        size = int(offsets[-1])
        oi, oj, od = pair_buffers(size)
        if size:
            with serialised():
                _fill_cells(*self._args(), cells, offsets, oi, oj, od)
        return oi, oj, (od if with_distance else None)

    def _cell_loads(self) -> np.ndarray:
        """A proxy of each query cell's pairs: its points times (1 + the data points of the same cell)."""
        if self._loads is None:
            q_ids, q_start = self.query[1], self.query[2]
            sizes = np.diff(q_start).astype(np.float64)
            if self.selfjoin:
                self._loads = sizes * (sizes + 1.0)
            else:
                d_ids, d_start = self.data[1], self.data[2]
                same = np.zeros_like(sizes)
                if d_ids.shape[0]:
                    at = np.minimum(np.searchsorted(d_ids, q_ids), d_ids.shape[0] - 1)
                    same = np.where(d_ids[at] == q_ids, d_start[at + 1] - d_start[at], 0).astype(np.float64)
                self._loads = sizes * (same + 1.0)
        return self._loads

    def _estimated(self) -> float | None:
        """Pairs estimated from every ``SAMPLE_EVERY``-th block of cells, scaled by the cells' loads
        (:meth:`_cell_loads`: a plain count ratio was 0.42 of the real pairs on 400k uniform 6-d points with 5
        dimensions indexed, whose sampled blocks fall on a lattice of the grid's cells); None where counting
        all is as cheap."""
        nblocks = -(-self.ncell // CELLS_PER_BLOCK)
        if self._counts is not None or nblocks < max(1, SAMPLE_MIN_BLOCKS) or self.shared:
            return None  # (a share's cells are counted, then filled: the single pass covers all cells)
        sampled = np.concatenate(
            [np.arange(b * CELLS_PER_BLOCK, min((b + 1) * CELLS_PER_BLOCK, self.ncell)) for b in range(0, nblocks, SAMPLE_EVERY)]
        ).astype(np.int64)
        with serialised():
            sampled_count = _count_cells(*self._args(), sampled).sum()
        loads = self._cell_loads()
        return sampled_count * (loads.sum() / max(loads[sampled].sum(), 1.0))

    def _lane_room(self, estimate: float) -> int:
        """Pairs a lane of the one pass holds: its share of ``estimate`` by the cells' loads, for the fullest
        lane (blocks of cells are dealt round robin; with few points a cell the lanes' loads differ: 1.37x
        the mean on the data above), with CAPACITY_SLACK."""
        loads = self._cell_loads()[self.cells]
        lanes = np.bincount((np.arange(loads.shape[0]) // CELLS_PER_BLOCK) % LANES, weights=loads, minlength=LANES)
        skew = float(lanes.max() / lanes.mean()) if lanes.mean() > 0 else 1.0
        # every lane gets the fullest one's room: at most MAX_LANE_SKEW times the mean (a lane fuller than that,
        # around one giant cell, overflows into the exact count and fill), and no more pairs than there can be
        n_q, n_d = self.query[0].shape[0], self.data[0].shape[0]
        estimate = min(estimate, n_q * (n_q - 1) / 2 if self.selfjoin else float(n_q) * n_d)
        return int(estimate * CAPACITY_SLACK * min(MAX_LANE_SKEW, max(1.0, skew)) / LANES) + 1024

    def _single_pass(self, cap: int):
        """One pass over all cells into ``LANES`` buffers of ``cap`` pairs: (compacted head, cells left unfinished).

        Half the work of count-then-fill when the estimate holds; cells whose lane filled up are
        left for an exact count and fill.
        """
        (bi, bj, bd), used, rest = self._lanes(cap)
        head = _compact_in_place(cap, used, bi, bj, bd)
        return (bi, bj, bd, head), rest

    def _lanes(self, cap: int):
        """The one pass of :meth:`_single_pass`, its pairs left in their lanes: (buffers, pairs a lane, cells left)."""
        buffers = pair_buffers(cap * LANES)
        used = np.zeros(LANES, np.int64)
        stop_at = np.full(LANES, -1, np.int64)
        with serialised():
            _single_pass(*self._args(), cap, *buffers, used, stop_at)
        return buffers, used, _unfinished_cells(stop_at, self.ncell)

    def pairs(self, with_distance: bool = True):
        """All pairs as (i, j, dist), in an order that depends only on the inputs."""
        estimate = self._estimated()
        if estimate is None:
            return self._fill_exact(self.cells, self.counts(), with_distance)
        (bi, bj, bd, head), rest = self._single_pass(self._lane_room(estimate))
        with serialised():
            rest_counts = _count_cells(*self._args(), rest)
        ri, rj, rd = self._fill_exact(rest, rest_counts, True)
        total = head + ri.shape[0]
        if total <= bi.shape[0]:
            bi[head:total], bj[head:total], bd[head:total] = ri, rj, rd
            oi, oj, od = bi[:total], bj[:total], bd[:total]
        else:
            oi = np.concatenate([bi[:head], ri])
            oj = np.concatenate([bj[:head], rj])
            od = np.concatenate([bd[:head], rd])
        return oi, oj, (od if with_distance else None)

    def batches(self, max_pairs: int, with_distance: bool = True):
        """Yield (i, j, dist) batches of at most ``max_pairs`` pairs each.

        First one pass into buffers of at most ``max_pairs`` pairs (as ``pairs()``: no counting
        pass where the estimate holds); then the cells it left, counted, in runs of whole cells
        where they fit; a cell with more pairs is cut by its query points (counted one by one),
        and a single point with more pairs than ``max_pairs`` is filled alone and sliced (its
        pairs are at most the other side's row count).
        """
        max_pairs = max(1, int(max_pairs))
        estimate = self._estimated() if max_pairs >= LANES * 1024 else None
        if estimate is None:
            cells, counts = self.cells, self.counts()
        else:
            cap = min(self._lane_room(estimate), max_pairs // LANES)
            (bi, bj, bd), used, cells = self._lanes(cap)
            if not cells.size:  # every pair in the lanes: sorted from there, one sorted run (the task sorts nothing)
                run = sort_lanes(bi, bj, bd if with_distance else None, cap, used, self.query[0].shape[0],
                                 self.data[0].shape[0])
                if run is not None:
                    yield SortedRun(run)
                    return
            head = _compact_in_place(cap, used, bi, bj, bd)
            if head:
                yield bi[:head], bj[:head], (bd[:head] if with_distance else None)
            with serialised():
                counts = _count_cells(*self._args(), cells)
        for k0, k1 in bounded_ranges(counts, max_pairs):
            if k1 - k0 == 1 and counts[k0] > max_pairs:
                yield from self._cell_batches(int(cells[k0]), max_pairs, with_distance)
            else:
                yield self._fill_exact(cells[k0:k1], counts[k0:k1], with_distance)

    def segments(self, max_pairs: int, estimate: float | None = None):
        """The pairs (i, j), in batches of at most ``max_pairs``, each in segments whose query points are
        disjoint: ``(i, j, first, length)``, segment g the pairs ``first[g]`` to ``first[g] + length[g]``, so
        that a batch's segments may be consumed in parallel, each query's state touched by one (the kNN-join's
        range pass, :mod:`.knn_range`).  The one pass's lanes (each its own cells), then the cells it left;
        ``estimate``: the pairs expected, where the caller knows (else sampled from the cells, where they are
        enough to sample: :meth:`batches`)."""
        max_pairs = max(1, int(max_pairs))
        if max_pairs < LANES * 1024 or self.shared:  # (a share's cells are counted, then filled)
            estimate = None
        elif estimate is None:
            estimate = self._estimated()
        if estimate is None:
            cells, counts = self.cells, self.counts()
        else:
            cap = min(self._lane_room(estimate), max_pairs // LANES)
            (bi, bj, _), used, cells = self._lanes(cap)
            yield bi, bj, np.arange(LANES, dtype=np.int64) * cap, used
            del bi, bj, _  # (the caller drops its references too: the lanes are freed before the fills below)
            with serialised():
                counts = _count_cells(*self._args(), cells)
        for k0, k1 in bounded_ranges(counts, max_pairs):
            if k1 - k0 == 1 and counts[k0] > max_pairs:
                for bi, bj, _ in self._cell_batches(int(cells[k0]), max_pairs, False):
                    yield bi, bj, np.zeros(1, np.int64), np.full(1, len(bi), np.int64)  # one segment: one cell
            else:
                bi, bj, _ = self._fill_exact(cells[k0:k1], counts[k0:k1], False)
                first = np.zeros(k1 - k0, np.int64)
                np.cumsum(counts[k0:k1 - 1], out=first[1:])
                yield bi, bj, first, np.ascontiguousarray(counts[k0:k1], np.int64)

    def _cell_batches(self, c: int, max_pairs: int, with_distance: bool):
        """The pairs of one cell with more than ``max_pairs`` pairs, in batches of at most ``max_pairs``."""
        args = self._args()
        with serialised():
            counts = _count_points(*args, c)
        a0 = int(self.query[2][c])
        for t0, t1 in bounded_ranges(counts, max_pairs):
            offsets = np.zeros(t1 - t0 + 1, np.int64)
            np.cumsum(counts[t0:t1], out=offsets[1:])
            size = int(offsets[-1])
            oi, oj, od = pair_buffers(size)
            if size:
                with serialised():
                    _fill_points(*args, c, a0 + t0, offsets, oi, oj, od)
            yield from split_batch((oi, oj, od if with_distance else None), max_pairs)
