"""kNN ``brute`` in GEMM form: float32 products filter the candidates under a proven bound, float64 decides.

For a query q and a data row x (stored values), both shifted by one centre c and rounded to
float32 (q~, x~), the float32 GEMM gives s = |q~|^2 + |x~|^2 - 2 q~.x~.  With D the distance
of the stored values, N = |q~| + |x~| + 2 NORM_FLOOR (:data:`daskjoin.kernels.exact.NORM_FLOOR`,
2^-50 each), u = 2^-24 and (c1, c2) of :func:`daskjoin.kernels.exact.error_constants` (each twice
the tight constant):

- rounding the shifted rows to float32 moves them by at most u|x| each (plus 2^-126 a coordinate
  below float32's normal range, flushed or not), so ``D >= |q~ - x~| - c1 N``;
- s is within ``c2 N^2`` of ``|q~ - x~|^2`` (norms and dot product in any summation order, FMA or
  not; the floor in N covers float32 underflow, gradual or flushed to zero as CuPy's kernels and
  cuBLAS may do: at most 2d 2^-126);
- the float64 decision value D64^2 (:mod:`.exact`) is at least ``(1 - 1e-9) D^2`` for d < 10^6, less
  at most d 2^-1074 lost to underflow, which the test below never meets: a ruled-out row has
  ``D > |q~ - x~| - c1 N / 2 > c1 N / 2 >= 2^-74`` (c1 is twice the rounding bound).

Let ``root`` be the query's current k-th D64^2 and ``R = sqrt(root (1 + 2e-9))``.  If
``s > c2 N^2 + (c1 N + R)^2`` then ``|q~ - x~| > c1 N + R``, so ``D > R`` and ``D64^2 > root``:
x sorts after the k-th and can never enter the list, whatever its ``j``.  Every other row is
decided exactly as by the direct driver (float64, dimension order, ties by the smaller ``j``), so
the lists, and the result, are the same.  The 2e-9 and the doubled constants absorb the rounding
of the test itself.  Rows whose shifted norm passes :data:`MAX_NORM` (float32 squares would
overflow) are searched by the direct driver instead.

The products run through BLAS (numpy's float32 ``matmul``) in tiles of queries x data rows; the
filter and the exact decisions are one Numba loop per query.  Below :data:`GEMM_MIN_D` dimensions
a direct distance costs less than a d-long product row, and the direct driver runs.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .block_threads import block_pool
from .exact import NORM_FLOOR, error_constants
from .knn import _bounded_d2, _offer

#: the GEMM filter from this many dimensions up: ``bench_knn.py --workloads gemm-crossover``, 20k clustered
#: rows, k = 16: on the 2-core VM 0.73x the direct search at d = 3, 1.17x at 4, 3.3x at 64; on an H100
#: 2.1x at 4, 4.4x at 64 (benchmarks/results/knn-gemm-crossover-*.json)
GEMM_MIN_D = 4
#: shifted rows with a larger norm are not filtered in float32 (squares near float32's 3.4e38)
MAX_NORM = 1e18
#: growth of the k-th distance in the filter's test (module docstring)
ROOT_GROW = 1.0 + 2e-9
#: the float32 product tile on the CPU (queries x data rows): a thread's block of queries against a tile of rows,
#: 2 MiB, screened while it is in cache (as brute_gemm.py's ε-join)
Q_TILE, X_TILE = 512, 1024


class Shifted:
    """Rows shifted by ``centre`` and rounded to float32, with what the filter needs of them.

    ``x32`` (float32), ``n2`` (float32 squared norms, float32 sums), ``norm`` (float64 norms of the
    float32 rows plus :data:`NORM_FLOOR`), ``fits`` (every norm below :data:`MAX_NORM`).
    """

    def __init__(self, rows: np.ndarray, centre: np.ndarray, xp=np, step: int = 1 << 12):
        if xp is not np:  # on the device in one piece, as measured and tested there
            shifted = xp.asarray(rows, dtype=xp.float64) - xp.asarray(centre)
            with np.errstate(over="ignore"):
                self.x32 = xp.ascontiguousarray(shifted.astype(xp.float32))
                self.n2 = (self.x32 * self.x32).sum(axis=1, dtype=xp.float32)
            self.norm = xp.sqrt((self.x32.astype(xp.float64) ** 2).sum(axis=1)) + NORM_FLOOR
            self.fits = bool(len(rows) == 0 or float(self.norm.max()) < MAX_NORM)
            return
        n = len(rows)
        centre = xp.asarray(centre, dtype=xp.float64)
        self.x32 = xp.empty((n, rows.shape[1] if rows.ndim == 2 else 0), xp.float32)
        self.n2 = xp.empty(n, xp.float32)
        self.norm = xp.empty(n, xp.float64)
        for r0 in range(0, n, step):  # ``step`` rows at a time: the float64 temporaries stay a block, not a side
            r1 = min(n, r0 + step)
            with np.errstate(over="ignore"):  # rows beyond float32's range: ``fits`` is False, nothing is filtered
                # C order whatever the input's: row sums then add in the order the whole-array version did
                x32 = (xp.ascontiguousarray(rows[r0:r1], dtype=xp.float64) - centre).astype(xp.float32)
                self.x32[r0:r1] = x32
                self.n2[r0:r1] = (x32 * x32).sum(axis=1, dtype=xp.float32)
            self.norm[r0:r1] = xp.sqrt((x32.astype(xp.float64) ** 2).sum(axis=1)) + NORM_FLOOR
        self.fits = bool(n == 0 or float(self.norm.max()) < MAX_NORM)


def box_centre(rows: np.ndarray, xp=np) -> np.ndarray:
    """The centre of the rows' bounding box (float64; zeros for no rows)."""
    if not len(rows):
        return xp.zeros(rows.shape[1] if rows.ndim == 2 else 0)
    rows = xp.asarray(rows)
    return (rows.min(axis=0).astype(xp.float64) + rows.max(axis=0).astype(xp.float64)) / 2


#: rows of a product tile screened at once against one threshold (which tightens between runs)
SCREEN_ROWS = 128


@numba.njit(cache=True, nogil=True, inline="always")
def _threshold(root, qa, qb, xmax, c1, c2):
    """Rows with ``|x~|^2 - 2 q~.x~`` above this cannot enter a list whose k-th is ``root`` (the module
    docstring's test with N at its largest over the tile, |q~|^2 moved to this side; the float64
    rounding of that is below 2^-50 N^2, far inside the doubled c2's (d + 4) 2^-24 N^2)."""
    n = qa + xmax
    reach = c1 * n + math.sqrt(root * ROOT_GROW)
    return c2 * n * n + reach * reach - qb


@numba.njit(cache=True, nogil=True)
def _filter_tile(g, qn2, qnorm, xn2, xmax, c1, c2, queries, qids, exclude, x, x0, first_id, best_d2, best_j,
                 decided):
    """Offer to each query's list the rows ``x0 ..`` of ``x`` that the products ``g`` (queries x rows)
    cannot rule out, decided exactly (``decided``: per query, how many rows were).  ``xmax``: the
    largest norm of the tile's rows.  Serial and without the GIL: threads run it on blocks of queries of
    their own."""
    m, nt = g.shape
    d = queries.shape[1]
    q = np.empty(d, np.float64)
    keep = np.empty(SCREEN_ROWS, np.int64)
    for t in range(m):
        for v in range(d):
            q[v] = queries[t, v]
        hd, hj = best_d2[t], best_j[t]
        qa, qb = qnorm[t], np.float64(qn2[t])
        b0 = 0
        while b0 < nt:
            thr = _threshold(hd[0], qa, qb, xmax, c1, c2)
            # a list not yet full takes the next k rows as they come (the fewest that can fill it)
            b1 = min(nt, b0 + (SCREEN_ROWS if thr < np.inf else min(SCREEN_ROWS, hd.shape[0])))
            kept = 0
            for b in range(b0, b1):  # branch-free
                keep[kept] = b
                kept += np.float64(xn2[b]) - 2.0 * np.float64(g[t, b]) <= thr
            b0 = b1
            decided[t] += kept
            for u in range(kept):
                b = keep[u]
                e = _bounded_d2(q, x, x0 + b, hd[0])
                jid = first_id + x0 + b
                if e >= 0.0 and not (exclude and jid == qids[t]):
                    _offer(hd, hj, e, jid)


class GemmBrute:
    """The GEMM-form search of one data block on the CPU (see the module docstring)."""

    def __init__(self, data: np.ndarray, first_id: int):
        self.data = data
        self.first_id = int(first_id)
        self.centre = box_centre(data)
        self.rows = Shifted(data, self.centre)
        self.c1, self.c2 = error_constants(int(data.shape[1]))
        #: rows decided exactly so far (the rest were ruled out by the products)
        self.decided = 0

    def prepare(self, queries: np.ndarray):
        """The shifted queries, or None when they (or the data) are too far out for the float32 filter."""
        shifted = Shifted(queries, self.centre)
        return shifted if shifted.fits and self.rows.fits else None

    def search(self, queries, shifted: Shifted, query_ids, best_d2, best_j, exclude_self: bool) -> None:
        queries = np.ascontiguousarray(queries)
        ids = np.ascontiguousarray(query_ids, np.int64)
        x = self.rows
        decided = np.zeros(len(queries), np.int64)

        def block(q0: int) -> None:  # a thread's block of queries through every tile of rows, in order
            q1 = min(len(queries), q0 + Q_TILE)
            for x0 in range(0, len(self.data), X_TILE):
                x1 = min(len(self.data), x0 + X_TILE)
                g = shifted.x32[q0:q1] @ x.x32[x0:x1].T
                _filter_tile(g, shifted.n2[q0:q1], shifted.norm[q0:q1], x.n2[x0:x1], float(x.norm[x0:x1].max()),
                             self.c1, self.c2, queries[q0:q1], ids[q0:q1], bool(exclude_self), self.data, x0,
                             self.first_id, best_d2[q0:q1], best_j[q0:q1], decided[q0:q1])

        starts = range(0, len(queries), Q_TILE)
        with block_pool(len(starts)) as pool:  # a thread a block, BLAS on one (block_threads)
            if pool is None:
                for q0 in starts:
                    block(q0)
            else:
                list(pool.map(block, starts))
        self.decided += int(decided.sum())
