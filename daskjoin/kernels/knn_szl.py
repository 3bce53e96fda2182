"""kNN ``szl``: the k-nearest-neighbour variant of LSS (Lieberman, Sankaranarayanan, Samet, ICDE 2008).

A block's rows are quantised to ``BITS``-bit integer coordinates and sorted along ``L`` Z-order
curves, each shifted by ``j 2^BITS / L`` in every dimension (the *Set of Z-Lists*).  Z-order is
compared without interleaved keys, by the most significant differing bit over the dimensions (so any
d works); for coordinates ``a <= b`` componentwise ``Z(a) <= Z(b)`` (LSS Lemma 4.1), so every row in
a box lies between the Z-positions of the box's low and high corners in every list (Lemma 4.2).

Per query (both backends, one thread per query on the GPU):

1. *Radius.*  In each list, the rows within ``k`` positions of the query's own Z-position are
   decided exactly; the k-th distance among one list's window (distinct rows) bounds the query's
   true k-th distance from above.  ``U`` is the smallest such bound, and the query's running k-th
   distance (from earlier blocks) where smaller.  The paper takes the k-th over the union of the
   windows of all lists; one list at a time needs no de-duplication scratch, which matters as k has
   no cap here.
2. *Range search.*  Every row that can enter the list has ``D64^2 <= U``, so each of its coordinates
   lies within ``r = sqrt(U + (d + 1) 2^-1074) (1 + 1e-9)`` of the query's (:mod:`.exact`:
   D64^2 >= (1 - 1e-9) D^2 less at most d 2^-1074 lost to underflow: coordinates 1e-200 apart are at D64 = 0),
   hence in the box ``query +- r`` (corners widened by 2^-50 of their magnitude for their own
   rounding, quantised by the rows' own monotone rule).  In each list the box spans one interval of
   positions; the shortest is scanned, each row decided exactly (float64, dimension order, ties by
   the smaller ``j``) into the running list.  ``U = inf`` (fewer than k rows in every window) scans
   the block.

Which list is scanned, the quantisation and the shifts change only the work, never the result.  The
lists are ``min(d + 1, MAX_LISTS)`` (the paper's d + 1, capped: each list holds a row order of the block).
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .knn import NO_ID, _bounded_d2, _offer, rows
from .parallel_guard import serialised
from .summary import column_bounds

#: bits per quantised coordinate (shifted coordinates stay below 2^31)
BITS = 30
TOP = (1 << BITS) - 1
#: Z-lists of a block, at most
MAX_LISTS = 8
#: corners of a search box widened by this much of their magnitude (their own float64 rounding)
_CORNER_SLACK = 2.0 ** -50
#: the smallest float64; a squared distance can lose up to d of them to underflow
_DENORM = 5e-324


def quantiser(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per dimension, the scale taking ``[lo, hi]`` onto ``[0, TOP]`` (0 where the extent is 0 or not finite)."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        extent = np.asarray(hi, np.float64) - np.asarray(lo, np.float64)
        scale = np.where((extent > 0) & np.isfinite(extent), TOP / extent, 0.0)
    return np.where(np.isfinite(scale), scale, 0.0)


def shifts(d: int) -> np.ndarray:
    lists = min(d + 1, MAX_LISTS)
    return (np.arange(lists, dtype=np.int64) << BITS) // lists


@numba.njit(cache=True, nogil=True, inline="always")
def _quant(v, lo, scale, nan_to):
    """Monotone quantisation of one float64 coordinate, clamped to [0, TOP] (NaN: ``nan_to``)."""
    w = (v - lo) * scale
    if w != w:
        return nan_to
    if w <= 0.0:
        return 0
    if w >= TOP:
        return TOP
    return np.int64(math.floor(w))


@numba.njit(cache=True, nogil=True, parallel=True)
def quantise(x, lo, scale):
    n, d = x.shape
    out = np.empty((n, d), np.uint32)
    for p in numba.prange(n):
        for t in range(d):
            out[p, t] = _quant(np.float64(x[p, t]), lo[t], scale[t], 0)
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _zcmp(a, b, row, shift):
    """Z-order of ``a`` (int64 coordinates, shifted already) against row ``row`` of ``b`` shifted by ``shift``:
    -1 before, 0 equal, 1 after.  The dimension whose coordinates differ in the highest bit decides (ties
    between dimensions to the lower one: its bit comes first in the interleaving)."""
    best_t = -1
    best_x = np.int64(0)
    for t in range(a.shape[0]):
        y = a[t] ^ (np.int64(b[row, t]) + shift)
        if best_x < y and best_x < (best_x ^ y):
            best_t = t
            best_x = y
    if best_t < 0:
        return 0
    return -1 if a[best_t] < np.int64(b[row, best_t]) + shift else 1


@numba.njit(cache=True, nogil=True, inline="always")
def _load(b, row, shift, a):
    for t in range(a.shape[0]):
        a[t] = np.int64(b[row, t]) + shift


@numba.njit(cache=True, nogil=True)
def _sort_list(coords, shift, perm, tmp):
    """Merge sort of ``perm`` by the shifted Z-order of ``coords`` (stable: equal keys keep row order)."""
    n = perm.shape[0]
    a = np.empty(coords.shape[1], np.int64)
    width = 1
    src, dst = perm, tmp
    while width < n:
        for s in range(0, n, 2 * width):
            mid, end = min(s + width, n), min(s + 2 * width, n)
            u, v, o = s, mid, s
            while u < mid and v < end:
                _load(coords, src[v], shift, a)
                if _zcmp(a, coords, src[u], shift) < 0:  # the right run's row strictly first
                    dst[o] = src[v]
                    v += 1
                else:
                    dst[o] = src[u]
                    u += 1
                o += 1
            while u < mid:
                dst[o] = src[u]
                u += 1
                o += 1
            while v < end:
                dst[o] = src[v]
                v += 1
                o += 1
        src, dst = dst, src
        width *= 2
    for t in range(n):
        perm[t] = src[t]


@numba.njit(cache=True, nogil=True, parallel=True)
def build_lists(coords, shift_of):
    """The Set of Z-Lists: for each shift, the block's rows in Z-order of their shifted coordinates."""
    n = coords.shape[0]
    lists = np.empty((shift_of.shape[0], n), np.int64)
    for l in numba.prange(shift_of.shape[0]):
        perm = np.arange(n)
        tmp = np.empty(n, np.int64)
        _sort_list(coords, shift_of[l], perm, tmp)
        lists[l] = perm
    return lists


@numba.njit(cache=True, nogil=True, inline="always")
def _position(lst, coords, a, shift, upper):
    """First position of ``lst`` whose row is not before ``a`` in Z-order (after it, if ``upper``)."""
    lo, hi = 0, lst.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        c = _zcmp(a, coords, lst[mid], shift)  # a against the row: 1 = the row is before a
        if c > 0 or (upper and c == 0):
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True, inline="always")
def _scan(q, qid, exclude, x, lst, first, last, first_id, hd, hj):
    """Offer the rows at positions [first, last) of one list to the max-heap (hd, hj), decided exactly."""
    for e in range(first, last):
        row = lst[e]
        jid = first_id + row
        if exclude and jid == qid:
            continue
        s = _bounded_d2(q, x, row, hd[0])
        if s >= 0.0:
            _offer(hd, hj, s, jid)


@numba.njit(cache=True, nogil=True)
def _szl_query(q, qid, exclude, x, coords, lists, shift_of, lo, scale, first_id, hd, hj, sd, sj, a, b, k):
    """One query's search of the block (module docstring): radius from the windows, then the shortest interval."""
    n, d = coords.shape
    nl = lists.shape[0]
    for t in range(d):  # the query's own quantised coordinates
        b[t] = _quant(q[t], lo[t], scale[t], 0)
    bound = hd[0]
    for l in range(nl):
        for t in range(d):
            a[t] = b[t] + shift_of[l]
        at = _position(lists[l], coords, a, shift_of[l], False)
        for u in range(k):
            sd[u] = np.inf
            sj[u] = NO_ID
        _scan(q, qid, exclude, x, lists[l], max(0, at - k), min(n, at + k + 1), first_id, sd, sj)
        if sd[0] < bound:
            bound = sd[0]
    if bound == np.inf:  # fewer than k rows near the query in every list: the whole block
        best_l, first, last = 0, 0, n
    else:
        r = math.sqrt(bound + (d + 1) * _DENORM) * (1.0 + 1e-9)
        best_l, first, last = 0, 0, n
        for l in range(nl):
            for t in range(d):
                m = r * (1.0 + _CORNER_SLACK) + abs(q[t]) * _CORNER_SLACK
                a[t] = _quant(q[t] - m, lo[t], scale[t], 0) + shift_of[l]
            f = _position(lists[l], coords, a, shift_of[l], False)
            for t in range(d):
                m = r * (1.0 + _CORNER_SLACK) + abs(q[t]) * _CORNER_SLACK
                a[t] = _quant(q[t] + m, lo[t], scale[t], TOP) + shift_of[l]
            e = _position(lists[l], coords, a, shift_of[l], True)
            if e - f < last - first:
                best_l, first, last = l, f, e
    _scan(q, qid, exclude, x, lists[best_l], first, last, first_id, hd, hj)


@numba.njit(cache=True, nogil=True, parallel=True)
def _szl(queries, qids, exclude, x, coords, lists, shift_of, lo, scale, first_id, best_d2, best_j):
    m, d = queries.shape
    k = best_d2.shape[1]
    chunks = min(m, 1024)
    for c in numba.prange(chunks):
        q = np.empty(d, np.float64)  # scratch per chunk of queries
        sd = np.empty(k, np.float64)
        sj = np.empty(k, np.int64)
        a = np.empty(d, np.int64)
        b = np.empty(d, np.int64)
        for t in range(c * m // chunks, (c + 1) * m // chunks):
            for v in range(d):
                q[v] = queries[t, v]
            _szl_query(q, qids[t], exclude, x, coords, lists, shift_of, lo, scale, first_id, best_d2[t],
                       best_j[t], sd, sj, a, b, k)


class SzlIndex:
    """A block's Set of Z-Lists: quantiser, quantised coordinates, shifts, the sorted lists."""

    def __init__(self, data: np.ndarray):
        n, d = data.shape
        if n:
            self.lo, hi = column_bounds(data)
        else:
            self.lo = hi = np.zeros(d)
        self.scale = quantiser(self.lo, hi)
        self.shift_of = shifts(d)
        with serialised():
            self.coords = quantise(data, self.lo, self.scale)
            self.lists = build_lists(self.coords, self.shift_of)


class KnnSzl:
    """``szl`` on the CPU: LSS's Set of Z-Lists of the block, searched per query."""

    backend = "cpu"
    rows = rows

    def __init__(self, data: np.ndarray, k: int, first_id: int = 0):
        self.data = np.ascontiguousarray(data)
        self.k, self.first_id = int(k), int(first_id)
        self.index = SzlIndex(self.data)

    def search(self, queries, query_ids, best_d2, best_j, exclude_self: bool) -> None:
        if not len(queries) or not len(self.data):
            return
        ix = self.index
        with serialised():
            _szl(np.ascontiguousarray(queries), np.ascontiguousarray(query_ids, np.int64), bool(exclude_self),
                 self.data, ix.coords, ix.lists, ix.shift_of, ix.lo, ix.scale, self.first_id, best_d2, best_j)
