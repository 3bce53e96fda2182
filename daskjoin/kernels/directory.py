"""``directory`` method, CPU driver: Böhm, Noll, Plant & Zherdin's index-supported nested-loop join.

The index side (B, or the rows of a self-join) is put in directory order (:mod:`.directory_index`:
``levels`` levels of ``fanout`` quantile parts by fractionated sorting, each node a range with its
box).  The queries are put in their own directory order and taken in groups of ``GROUP`` consecutive
rows, each with its box: a group walks the directory from the root, entering a node only where its
box is within reach of the group's (the paper's per-thread-group bounds), and each query of the group
then skips a reached leaf whose box is out of its own reach before deciding the leaf's rows exactly.
A self-join pairs a query only with rows after it in the directory order, so each pair is decided
once.  A count pass, a prefix sum and fills over runs of queries give bounded batches.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .directory_index import (FANOUT, GROUP, LEVELS, check_shape, directory_dims, fractionated_order, group_boxes, node_boxes,
                              principal_axes, rotated_limit)
from .exact import eps_squared
from .within import WHOLE_ROWS, decide
from .memory import pair_buffers
from .parallel_guard import serialised
from .registry import bounded_ranges, split_batch
from .key_sort import take


@numba.njit(cache=True, nogil=True, inline="always")
def _gap2(alo, ahi, a, blo, bhi, b, limit):
    """Squared gap between box a (rows of ``alo``, ``ahi``) and box b, summed in dimension order; stops once above
    ``limit``."""
    s = 0.0
    for t in range(alo.shape[1]):
        g = blo[b, t] - ahi[a, t]
        h = alo[a, t] - bhi[b, t]
        if h > g:
            g = h
        if g > 0.0:
            s += g * g
            if s > limit:
                return s
    return s


@numba.njit(cache=True, nogil=True)
def _group_leaves(glo, ghi, g, los, his, fanout, limit, out):
    """The leaves reachable from group g (depth-first from the root, a node entered only where its box is
    within ``limit`` of the group's); their number, written to ``out``."""
    levels = len(los)
    stack = np.empty(levels * fanout + 1, np.int64)
    depth = np.empty(levels * fanout + 1, np.int64)
    top = 0
    for c in range(fanout - 1, -1, -1):
        stack[top] = c
        depth[top] = 0
        top += 1
    found = 0
    while top:
        top -= 1
        node, level = stack[top], depth[top]
        if _gap2(glo, ghi, g, los[level], his[level], node, limit) > limit:
            continue
        if level == levels - 1:
            out[found] = node
            found += 1
            continue
        for c in range(fanout - 1, -1, -1):
            stack[top] = node * fanout + c
            depth[top] = level + 1
            top += 1
    return found


@numba.njit(cache=True, nogil=True)
def _group(g, group, q, qb, qids, x, xids, leaf_start, los, his, fanout, selfjoin, eps2, limit, leaves,
           fill, offsets, base, oi, oj, od, counts):
    """Queries of group g against their reachable leaves: counts (fill False), pairs from ``offsets[u] - base``
    (True), or the rows each query would decide (2: the work report)."""
    m = q.shape[0]
    u0 = g * group
    u1 = min(m, u0 + group)
    nleaf = _group_leaves(qb[0], qb[1], g, los, his, fanout, limit, leaves)
    lo_leaf, hi_leaf = los[len(los) - 1], his[len(his) - 1]
    whole = q.shape[1] <= WHOLE_ROWS
    for u in range(u0, u1):
        at = offsets[u] - base if fill == 1 else 0
        found = 0
        for k in range(nleaf):
            f = leaves[k]
            s, e = leaf_start[f], leaf_start[f + 1]
            if selfjoin:
                if e <= u + 1:
                    continue
                s = max(s, u + 1)
            if _gap2(qb[2], qb[2], u, lo_leaf, hi_leaf, f, limit) > limit:  # the query as a box of one point
                continue
            if fill == 2:
                found += e - s
                continue
            for v in range(s, e):
                d2 = decide(q, u, x, v, eps2, whole)
                if d2 >= 0.0:
                    if fill == 1:
                        a, b = qids[u], xids[v]
                        if selfjoin and b < a:
                            a, b = b, a
                        oi[at] = a
                        oj[at] = b
                        od[at] = np.float32(math.sqrt(d2))
                        at += 1
                    found += 1
        if fill != 1:
            counts[u] = found


@numba.njit(cache=True, nogil=True, parallel=True)
def _run(g0, g1, group, q, qb, qids, x, xids, leaf_start, los, his, fanout, selfjoin, eps2, limit, fill,
         offsets, base, oi, oj, od, counts):
    nleaves = los[len(los) - 1].shape[0]
    for g in numba.prange(g0, g1):
        leaves = np.empty(nleaves, np.int64)
        _group(g, group, q, qb, qids, x, xids, leaf_start, los, his, fanout, selfjoin, eps2, limit, leaves,
               fill, offsets, base, oi, oj, od, counts)


class _Side:
    """One side in directory order: rows (stored dtype), their ids, and their bounds coordinates."""

    def __init__(self, rows: np.ndarray, bounds: np.ndarray, dims, fanout: int):
        order, leaf, nleaves = fractionated_order(bounds, dims, fanout)
        self.ids = order
        self.leaf = leaf
        self.nleaves = nleaves
        self.rows = take(rows, order)
        self.bounds = take(bounds, order) if bounds is not rows else self.rows.astype(np.float64, copy=False)


class DirectoryJoin:
    """A prepared directory join on the CPU: count, pairs or bounded batches."""

    def __init__(self, a: np.ndarray, b: np.ndarray | None, eps: float, *, levels: int = LEVELS,
                 fanout: int = FANOUT, pca: bool = False):
        a = np.ascontiguousarray(a)
        b = None if b is None else np.ascontiguousarray(b)
        self.selfjoin = b is None
        data = a if b is None else b
        self.eps2 = eps_squared(eps)
        d = a.shape[1]
        levels, fanout = check_shape(levels, fanout)
        self.levels, self.fanout = levels, fanout
        if pca:
            rot = principal_axes(data)
            bx = rot.apply(data)
            ba = bx if b is None else rot.apply(a)
            radius = max(float(np.sqrt((bx * bx).sum(axis=1)).max(initial=0.0)),
                         float(np.sqrt((ba * ba).sum(axis=1)).max(initial=0.0)))
            self.limit = rotated_limit(self.eps2, d, radius)
            dims = np.arange(min(levels, d), dtype=np.int64)
        else:
            bx, ba = data.astype(np.float64, copy=False), a.astype(np.float64, copy=False)
            self.limit = self.eps2  # gaps of the stored values: exact by monotonicity (directory_index)
            lo = bx.min(axis=0) if len(bx) else np.zeros(d)
            hi = bx.max(axis=0) if len(bx) else np.zeros(d)
            dims = directory_dims(lo, hi, min(levels, d))
        dims = dims if len(dims) else np.zeros(1, np.int64)
        with serialised():
            self.x = _Side(data, bx if pca else data.astype(np.float64, copy=False), dims, fanout)
            self.q = self.x if b is None else _Side(a, ba, dims, fanout)
        boxes = node_boxes(self.x.bounds, self.x.leaf, self.x.nleaves, fanout, len(dims))
        self.leaf_start = boxes[-1][0]
        self.los = numba.typed.List([np.ascontiguousarray(lo) for _, lo, _ in boxes])
        self.his = numba.typed.List([np.ascontiguousarray(hi) for _, _, hi in boxes])
        glo, ghi = group_boxes(self.q.bounds, GROUP)
        self.qb = (np.ascontiguousarray(glo), np.ascontiguousarray(ghi), self.q.bounds)
        self.ngroups = glo.shape[0]
        self._counts = None

    def _run(self, g0, g1, fill, offsets, out, counts, base=0):
        if g1 <= g0 or not self.x.rows.shape[0]:
            return
        with serialised():
            _run(g0, g1, GROUP, self.q.rows, self.qb, self.q.ids, self.x.rows, self.x.ids,
                 self.leaf_start, self.los, self.his, self.fanout, self.selfjoin, self.eps2, self.limit, fill,
                 offsets, np.int64(base), *out, counts)

    def work(self) -> np.ndarray:
        """Rows each query decides (those of its reached leaves within its reach): the work report."""
        work = np.zeros(self.q.rows.shape[0], np.int64)
        empty_i, empty_f = np.empty(0, np.int64), np.empty(0, np.float32)
        self._run(0, self.ngroups, 2, np.zeros(1, np.int64), (empty_i, empty_i, empty_f), work)
        return work

    def counts(self) -> np.ndarray:
        """Pairs of each query, in the queries' directory order."""
        if self._counts is None:
            counts = np.zeros(self.q.rows.shape[0], np.int64)
            empty_i, empty_f = np.empty(0, np.int64), np.empty(0, np.float32)
            self._run(0, self.ngroups, False, np.zeros(1, np.int64), (empty_i, empty_i, empty_f), counts)
            self._counts = counts
        return self._counts

    def count(self) -> int:
        return int(self.counts().sum())

    def _offsets(self) -> np.ndarray:
        if getattr(self, "_offsets_cache", None) is None:
            self._offsets_cache = np.zeros(self.q.rows.shape[0] + 1, np.int64)
            np.cumsum(self.counts(), out=self._offsets_cache[1:])
        return self._offsets_cache

    def _fill(self, u0: int, u1: int, with_distance: bool):
        """Pairs of the queries [u0, u1): whole groups (a group's queries all run), or up to the end."""
        assert u0 % GROUP == 0 and (u1 % GROUP == 0 or u1 == self.q.rows.shape[0]), (u0, u1)
        offsets = self._offsets()
        size = int(offsets[u1] - offsets[u0])
        oi, oj, od = pair_buffers(size)
        if size:
            self._run(u0 // GROUP, -(-u1 // GROUP), True, offsets, (oi, oj, od), self.counts(), base=int(offsets[u0]))
        return oi, oj, (od if with_distance else None)

    def pairs(self, with_distance: bool = True):
        return self._fill(0, self.q.rows.shape[0], with_distance)

    def batches(self, max_pairs: int, with_distance: bool = True):
        """Batches of at most ``max_pairs`` pairs: runs of whole query groups (a larger group alone, sliced)."""
        m = self.q.rows.shape[0]
        per_group = np.add.reduceat(self.counts(), np.arange(0, m, GROUP)) if m else np.zeros(0, np.int64)
        for g0, g1 in bounded_ranges(per_group, max_pairs):
            yield from split_batch(self._fill(g0 * GROUP, min(m, g1 * GROUP), with_distance), max_pairs)
