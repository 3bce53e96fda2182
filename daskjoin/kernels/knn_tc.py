"""kNN ``brute`` on the tensor cores: the ε-join's integer-grid filter with a reach per query.

The data block and the queries are each put in locality order and cut into tiles of 128 rows
(:class:`~.brute_gpu._Side`), and quantised on one integer grid (:mod:`.tc_quant`: centre and
scale from the data, the queries' residuals ``u`` measured per row, clipped or not).  Then two passes
over tile pairs (query tile, data tile), each through ``cuda/brute_tc.cu``'s filter, whose candidates
are decided exactly in float64 (``knn_tc_distances``, a thread a candidate: the direct driver's
``bounded_d2``, stopped past the query's root), and those within their root sorted by query and offered
(``knn_tc_offer``: the direct driver's ``offer``, ties by the smaller ``j``):

1. each query tile against the ``C`` data tiles whose boxes are nearest it, ``C * 128 >= k + 2``
   rows, every pair a candidate: every list fills where the block has k rows besides the query, and its
   root (its k-th float64 value) bounds the query's k nearest (a list not full has an infinite root);
2. through the filter with ``r_a >= reach0(root_a) + u_a`` and ``r_b >= u_b``, the roots read afresh
   before each range (they only shrink): first the next ``RING * C`` nearest data tiles of each query
   tile (the roots tighten), then every other tile pair whose box distance (``tile_box_d2``) is at most
   the largest root of its query tile.

Why nothing is lost.  A row x can enter query a's list only if its float64 value ``s <= root_a``
(ties by ``j``).  Box pruning: ``tile_box_d2`` sums rounded gaps that are at most the rounded
differences of any two rows inside the boxes, in the same order and rounding as ``s``, so it is at most
``s``; a tile pair above every root of its query tile holds no row that can enter.  The filter: ``s`` is
finite (at most a finite root; an infinite root gives an infinite reach, and every pair passes), so
nothing in it overflowed and tc_quant's argument from the float64 sum to the exact distance holds with
``root_a`` in place of ``fl(eps^2)``: ``D <= sqrt(root_a) (1 + 1e-9)`` plus the underflow term, which
``tc_quant.reach_rows`` of ``e = sqrt(root_a) (1 + 1e-12)`` (the 1e-12 covers the rounding of the
square root) divides by ``S`` and rounds up.  With the rows' measured residuals (clipped or not),
``|q_a - q_x| <= reach + u_a + u_x``, and the kernel's separable test (``tc_quant.thresholds``, with constants
from the reaches) keeps every such pair: the filter keeps x.  Pass 1 decides its pairs exactly and pass 2 skips
them, and pass 2's second part skips its first part's tiles, so no row is offered twice.  A self-join's
queries are the data's own rows (found equal on the device): they reuse its order and grid rows.
"""
from __future__ import annotations

import numpy as np

from . import tc_quant
from .brute_gpu import (BLOCK, TC_TILE, _Side, _spread, _tc_rows, fp16_products_exact, listed_candidates,
                        tc_filter_launch)
from .gpu_common import cupy, kernel

#: ``filter="auto"``: the tensor cores from this many dimensions (None: never), the float32 GEMM below
#: (bench_knn_filters.py on an H100; the figures and why: docs/knn.md)
TC_FROM_D = 16
#: pass 2 first takes the next RING * C nearest data tiles of each query tile (C: pass 1's), which tightens
#: the roots before the rest: at 1M x 64 clustered, pass 1's roots let ~1,000 candidates a query through
RING = 3
#: bytes of tile-pair box distances formed at once
BOX_BYTES = 256 << 20


def choose_filter(fmt: str, d: int) -> str:
    """The format ("fp16" or "int8") for ``fmt`` ("fp16", "int8" or "auto": fp16 up to
    ``tc_quant.FP16_TO_D`` dimensions, int8 beyond), int8 where this device's fp16 products are not exact."""
    if fmt == "auto":
        fmt = "fp16" if d <= tc_quant.FP16_TO_D else "int8"
    return "int8" if fmt == "fp16" and not fp16_products_exact() else fmt


def _tile_pairs(tiles):
    """(P, T) of a (query tiles x w) array of data tiles: each query tile with each of its row's tiles."""
    cp = cupy()
    return cp.repeat(cp.arange(tiles.shape[0], dtype=cp.int64), tiles.shape[1]), cp.ascontiguousarray(tiles).reshape(-1)


class TcSearch:
    """A data block on the integer grid, ready to search queries (the module docstring)."""

    def __init__(self, data64, fmt: str):
        cp = cupy()
        self.n, self.d = int(data64.shape[0]), int(data64.shape[1])
        self.source = data64
        self.fmt = choose_filter(fmt, self.d)
        self.centre = cp.asarray((data64.min(axis=0) + data64.max(axis=0)) / 2)
        self.L = tc_quant.levels(self.fmt, self.d)
        self.S = tc_quant.scale(_spread(data64, self.centre), self.L)
        #: False where the grid cannot hold the data (the caller then uses another filter)
        self.usable = self.S is not None and self.n < (1 << 31)
        if not self.usable:
            return
        self.X = _Side(data64, self.centre, TC_TILE, fp32=False)
        self.X.tc = _tc_rows(self.X, self.centre, self.S, self.L, self.fmt, TC_TILE)
        self.reach_x = tc_quant.row_reach(self.X.tc[3], 0.0, cp)

    def search(self, q64, ids, hd, hj, first_id: int, exclude_self: bool, k: int) -> None:
        """Every query's list (``hd``, ``hj``: m x k heaps in the queries' order) offered this block's rows
        that can enter it, decided exactly."""
        cp = cupy()
        if q64.shape == self.source.shape and bool(cp.array_equal(q64, self.source)):
            Q = self.X  # a self-join's queries are the data: the same order and grid rows
        else:
            Q = _Side(q64, self.centre, TC_TILE, fp32=False)
            Q.tc = _tc_rows(Q, self.centre, self.S, self.L, self.fmt, TC_TILE)
        lists = (ids, hd, hj, np.int64(first_id), np.int32(bool(exclude_self)), np.int32(k))
        nearest, C = self._nearest_tiles(Q, k)
        everything = self._thresholds(Q, cp.full(Q.n, cp.inf, cp.float32))  # an infinite reach: every pair

        def reach():
            return self._reach(Q, hd)

        self._offer_pairs(Q, lambda: everything, *_tile_pairs(nearest[:, :C]), *lists)
        if nearest.shape[1] > C:
            self._offer_pairs(Q, reach, *_tile_pairs(nearest[:, C:]), *lists)
        self._offer_pairs(Q, reach, *self._tile_pairs_within(Q, hd, nearest), *lists)

    def _reach(self, Q, hd):
        """The kernel's thresholds for every query's ``r_a`` (in Q's order), from its list's current root (the
        module docstring)."""
        cp = cupy()
        bound = tc_quant.reach_rows(cp.sqrt(hd[Q.perm, 0]) * (1.0 + 1e-12), self.S, self.d, cp)
        return self._thresholds(Q, tc_quant.row_reach(Q.tc[3], bound, cp))

    def _thresholds(self, Q, r_a):
        """The kernel's (X, Y) for these reaches (Y too: the bound's constants follow the reaches)."""
        return tc_quant.thresholds(Q.tc[2], r_a, self.X.tc[2], self.reach_x, self.fmt, Q.ntiles * TC_TILE,
                                   self.X.ntiles * TC_TILE, cupy())

    def _box_d2(self, Q, p0: int, rows: int):
        cp = cupy()
        out = cp.empty((rows, self.X.ntiles), cp.float64)
        kernel("brute.cu", "tile_box_d2")((-(-out.size // BLOCK),), (BLOCK,), (
            cp.ascontiguousarray(Q.lo, cp.float64), cp.ascontiguousarray(Q.hi, cp.float64),
            cp.ascontiguousarray(self.X.lo, cp.float64), cp.ascontiguousarray(self.X.hi, cp.float64),
            np.int64(p0), np.int64(rows), np.int64(self.X.ntiles), np.int32(self.d), out))
        return out

    def _row_steps(self, Q):
        step = max(1, BOX_BYTES // (8 * max(1, self.X.ntiles)))
        return [(p0, min(Q.ntiles, p0 + step) - p0) for p0 in range(0, Q.ntiles, step)]

    def _nearest_tiles(self, Q, k: int):
        """Each query tile's data tiles of nearest boxes, nearest first (query tiles x (C + ring)), and C:
        pass 1 takes the first ``C``, pass 2 the ``ring`` after them first."""
        cp = cupy()
        C = min(self.X.ntiles, -(-(k + 2) // TC_TILE) + 1)
        width = min(self.X.ntiles, C * (1 + RING))
        nearest = cp.empty((Q.ntiles, width), cp.int64)
        for p0, rows in self._row_steps(Q):
            nearest[p0:p0 + rows] = cp.argsort(self._box_d2(Q, p0, rows), axis=1)[:, :width]
        return nearest, C

    def _tile_pairs_within(self, Q, hd, nearest):
        """Pass 2's other tile pairs: box distance at most the largest root of the query tile, ``nearest``'s
        left out."""
        cp = cupy()
        roots = cp.full(Q.ntiles * TC_TILE, -cp.inf)
        roots[:Q.n] = hd[Q.perm, 0]
        tile_root = roots.reshape(Q.ntiles, TC_TILE).max(axis=1)
        keep_p, keep_t = [], []
        for p0, rows in self._row_steps(Q):
            near = self._box_d2(Q, p0, rows) <= tile_root[p0:p0 + rows, None]
            near[cp.arange(rows)[:, None], nearest[p0:p0 + rows]] = False
            p, t = cp.nonzero(near)
            keep_p.append(p + p0)
            keep_t.append(t)
        return cp.concatenate(keep_p).astype(cp.int64), cp.concatenate(keep_t).astype(cp.int64)

    def _offer_pairs(self, Q, reach, P, T, ids, hd, hj, first_id, exclude, k) -> None:
        """Tile pairs (P[i], T[i]) through the filter (``reach()``: the queries' thresholds from their r_a at
        launch time), their candidates sorted by query and offered."""
        cp = cupy()
        distances, offer = kernel("knn.cu", "knn_tc_distances"), kernel("knn.cu", "knn_tc_offer")
        launch = tc_filter_launch(self.fmt, Q.tc, self.X.tc, P, T, reach, False)
        m = Q.n
        for cand, _, count, _ in listed_candidates(launch, int(P.shape[0]), 1 << 22):
            try:
                if not count:
                    continue
                value = cp.empty(count, cp.float64)
                distances((-(-count // BLOCK),), (BLOCK,), (cand, np.int64(count), Q.perm, Q.points, self.X.points,
                                                            np.int32(self.d), hd, k, value))
                within = cp.nonzero(value >= 0.0)[0]  # the rest are past their root: they can never enter
                if not within.size:
                    continue
                keys = cand[:, 0][within]
                order = cp.argsort(keys)
                within = within[order]
                cand, value, keys = cp.ascontiguousarray(cand[within]), value[within], keys[order]
                seg = cp.searchsorted(keys, cp.arange(m + 1, dtype=cp.int32)).astype(cp.int64)
                offer((-(-m // BLOCK),), (BLOCK,), (cand, value, seg, np.int64(m), Q.perm, ids, self.X.perm, first_id,
                                                    exclude, hd, hj, k))
            finally:
                del cand  # freed before the next lists are made (the lister drops its own reference)
