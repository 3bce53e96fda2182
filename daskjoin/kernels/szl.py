"""``szl`` method, CPU driver: the ε-join of LSS (Lieberman, Sankaranarayanan & Samet, ICDE 2008) over a
Set of Z-Lists.

**Index.**  The SZL is built on one side: the rows of a self-join, the smaller side of an A×B join (the
paper's "SZL-S", faster in its Figure 6); the other side's rows are the queries.  Up to
``MAX_KEY_DIMS`` dimensions of largest spread are quantised to ``bits - 1`` bits each by one monotone
rule (:func:`zspec`), shifted by the list's translation vector, and their bits interleaved into one
64-bit Morton key (dimension order within each level).  Each list is the index rows sorted by their key
in it (a radix sort).  For quantised points ``c <= c'`` in every dimension, ``key(c) <= key(c')``
(LSS Lemma 4.1), so every row inside a box has a key between the keys of the box's corners (Lemma 4.2).

**Box.**  A pair kept by the float64 rule (:mod:`.exact`) differs by at most
``r = sqrt(eps^2 + (d + 1) 2^-1074) (1 + 1e-9)`` in every dimension (the argument of
:mod:`.knn_szl`), so it lies in the box ``q +- (r (1 + 2^-50) + |q_t| 2^-50)`` around the query (the
corners widened for their own rounding).  The quantisation is the same function for rows and corners,
so the row's key lies in the box's interval of every list.

**Per query** (the paper's Algorithm 1): its interval in every list by two binary searches, the shortest
kept (MININTERVAL), walked with the exact decision.  Which list is walked, how many lists there are and
how they are shifted change only the work, never the result.

**Self-join, each pair once.**  The paper walks only the half box ``[p, p + eps]``, reporting ``q`` from
``p`` when ``p`` precedes ``q``.  That holds only where both points walk the same list: a pair with
``p`` before ``q`` in ``p``'s list but ``q`` before ``p`` in ``q``'s list is reported by neither.  Here a
query ``x`` walking list ``l(x)`` reports ``y`` iff ``l(x) < l(y)``, or ``l(x) = l(y)`` and ``y`` comes
after ``x`` in that list: exactly one of the two reports it, and the other lies in the reporter's
interval (its whole box is searched).  The rows before ``x`` cost a one-byte compare (their list, stored
in list order) unless their list is later than ``x``'s.

**Lists** (option ``shifts``): ``"uniform"``, the paper's d + 1 lists, list j translated by j/(d + 1) of the
key range in every dimension (Lemma 4.4: one of them holds each query's box in a cell not much larger);
``"uniform-logd"``, floor(log2 d) + 1 lists, uniform (the paper's faster variant at small eps);
``"random"``, d + 1 lists translated by vectors drawn with a fixed seed.  ``lists`` sets the count; at most
``MAX_LISTS``.

**Output.**  A count pass gives each query's pairs, a prefix sum sizes the output, and fills run over
ranges of queries of at most ``max_pairs`` pairs.  (The GPU driver writes into slots sized by the
intervals instead, as the paper does.)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from .exact import eps_squared
from .within import WHOLE_ROWS, decide
from .key_sort import sort_uint64, take
from .memory import pair_buffers
from .parallel_guard import serialised
from .registry import bounded_ranges, split_batch
from .summary import column_bounds

#: dimensions that make the keys (those of largest spread): more would leave each too few bits
MAX_KEY_DIMS = 8
#: lists at most (each holds an order of the index side: 8 bytes a row, and a byte)
MAX_LISTS = 8
SHIFTS = ("uniform", "uniform-logd", "random")
#: the index rows are copied in every list's order (a walk then reads them in sequence) up to this size
SORTED_COPY_BYTES = 512 << 20
#: corners of a search box widened by this much of their magnitude (their own float64 rounding)
CORNER_SLACK = 2.0 ** -50
#: the smallest float64; a squared distance can lose up to d of them to underflow
DENORM = 5e-324
#: the seed of ``shifts="random"`` (fixed: the same plan does the same work)
RANDOM_SEED = 20080407


@dataclass(frozen=True)
class ZSpec:
    """How rows become keys: key dimensions, bits per dimension, the quantiser, one translation per list."""

    dims: np.ndarray      # int64, the key dimensions
    bits: int             # bits per key dimension (quantised values use bits - 1, translations add up to 2^(bits-1))
    lo: np.ndarray        # float64 per key dimension
    scale: np.ndarray     # float64 per key dimension: (v - lo) * scale in [0, top]
    top: int              # 2^(bits-1) - 1
    shift: np.ndarray     # int64, (lists, key dims)

    @property
    def lists(self) -> int:
        return int(self.shift.shape[0])


def list_count(d: int, shifts: str, lists: int | None) -> int:
    if lists is not None:
        if int(lists) < 1:
            raise ValueError(f"lists must be a positive integer, got {lists!r}")
        return min(int(lists), MAX_LISTS)
    if shifts == "uniform-logd":
        return min(int(math.log2(max(d, 1))) + 1, MAX_LISTS)
    return min(d + 1, MAX_LISTS)


def zspec(lo: np.ndarray, hi: np.ndarray, *, shifts: str = "uniform", lists: int | None = None) -> ZSpec:
    """The keys of an index side whose per-dimension bounds are ``lo``, ``hi`` (float64)."""
    if shifts not in SHIFTS:
        raise ValueError(f"shifts must be one of {SHIFTS}, got {shifts!r}")
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    d = lo.shape[0]
    with np.errstate(over="ignore", invalid="ignore"):
        extent = hi - lo
    extent = np.where(np.isfinite(extent) & (extent > 0), extent, 0.0)
    kd = max(1, min(d, MAX_KEY_DIMS))
    dims = np.sort(np.argsort(-extent, kind="stable")[:kd]).astype(np.int64)
    bits = min(31, 64 // kd)
    top = (1 << (bits - 1)) - 1
    with np.errstate(divide="ignore", over="ignore"):
        scale = np.where(extent[dims] > 0, top / np.where(extent[dims] > 0, extent[dims], 1.0), 0.0)
    scale = np.where(np.isfinite(scale), scale, 0.0)
    count = list_count(d, shifts, lists)
    half = 1 << (bits - 1)
    if shifts == "random":
        shift = np.random.default_rng(RANDOM_SEED).integers(0, half, size=(count, kd), dtype=np.int64)
        shift[0] = 0
    else:
        # j / D of the range with D odd (the paper's d + 1 for even d): a dyadic translation (1/2, 1/4, ...)
        # is a multiple of every finer cell side, so it would move only the top levels' boundaries
        denominator = count | 1
        shift = np.repeat(((np.arange(count, dtype=np.int64) * half) // denominator)[:, None], kd, axis=1)
    return ZSpec(dims, bits, lo[dims].copy(), scale, top, np.ascontiguousarray(shift))


def box_radius(eps2: float, d: int) -> float:
    """Every pair the exact rule keeps differs by at most this much in each dimension."""
    return math.sqrt(eps2 + (d + 1) * DENORM) * (1.0 + 1e-9)


@numba.njit(cache=True, nogil=True, inline="always")
def _quant(v, lo, scale, top):
    """Monotone quantisation of a float64 coordinate into [0, top]."""
    w = (v - lo) * scale
    if not w > 0.0:  # also NaN
        return np.int64(0)
    if w >= top:
        return np.int64(top)
    return np.int64(math.floor(w))


def _spread_table() -> np.ndarray:
    """SPREAD[kd, v]: the 8 bits of byte v placed kd apart (bit b at position b kd)."""
    table = np.zeros((MAX_KEY_DIMS + 1, 256), np.uint64)
    for kd in range(1, MAX_KEY_DIMS + 1):
        for v in range(256):
            table[kd, v] = sum(((v >> b) & 1) << (b * kd) for b in range(8))
    return table


SPREAD = _spread_table()


@numba.njit(cache=True, nogil=True, inline="always")
def _bytes_of(top):
    """Bytes of a key coordinate: shifted coordinates stay below 2 (top + 1) = 2^bits."""
    bits = 0
    v = 2 * top + 1
    while v:
        bits += 1
        v >>= 1
    return (bits + 7) // 8


@numba.njit(cache=True, nogil=True, inline="always")
def _key(x, row, dims, lo, scale, top, shift, spread, side, margin):
    """Morton key of row ``row`` of ``x`` (side 0), or of its box's low (-1) or high (+1) corner: bit b of
    key dimension t goes to position ``b kd + (kd - 1 - t)`` (dimension order within each level)."""
    kd = dims.shape[0]
    nbytes = _bytes_of(top)
    key = np.uint64(0)
    for t in range(kd):
        v = np.float64(x[row, dims[t]])
        if side != 0:
            m = margin * (1.0 + CORNER_SLACK) + abs(v) * CORNER_SLACK
            v = v - m if side < 0 else v + m
        c = _quant(v, lo[t], scale[t], top) + shift[t]  # < 2^bits: the bytes below (bits + 7) // 8
        part = np.uint64(0)
        for k in range(nbytes):  # each shift below bits kd <= 64
            part |= spread[(c >> (8 * k)) & 255] << np.uint64(8 * k * kd)
        key |= part << np.uint64(kd - 1 - t)
    return key


@numba.njit(cache=True, nogil=True, parallel=True)
def _keys(x, dims, lo, scale, top, shift, spread):
    n = x.shape[0]
    out = np.empty((shift.shape[0], n), np.uint64)
    for p in numba.prange(n):
        for l in range(shift.shape[0]):
            out[l, p] = _key(x, p, dims, lo, scale, top, shift[l], spread, 0, 0.0)
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _gallop_down(keys, at, key):
    """First position p <= at with keys[p] >= key, given keys[at] >= key or at = len(keys): searched from
    ``at`` downwards in doubling steps (a query's box interval lies around its own position)."""
    step = 1
    hi = at
    while hi - step >= 0 and keys[hi - step] >= key:
        hi -= step
        step *= 2
    lo = max(0, hi - step)
    while lo < hi:  # keys[hi] >= key; the answer is in [lo, hi]
        mid = (lo + hi) >> 1
        if keys[mid] >= key:
            hi = mid
        else:
            lo = mid + 1
    return hi


@numba.njit(cache=True, nogil=True, inline="always")
def _gallop_up(keys, at, key):
    """First position p >= at with keys[p] > key, given keys[at - 1] <= key or at = 0."""
    n = keys.shape[0]
    step = 1
    lo = at
    while lo + step - 1 < n and keys[lo + step - 1] <= key:
        lo += step
        step *= 2
    hi = min(n, lo + step - 1)
    while lo < hi:  # keys[lo - 1] <= key; the answer is in [lo, hi]
        mid = (lo + hi) >> 1
        if keys[mid] > key:
            hi = mid
        else:
            lo = mid + 1
    return lo


@numba.njit(cache=True, nogil=True, parallel=True)
def _intervals(q, own, dims, lo, scale, top, shift, spread, margin, skeys, choice, first, last):
    """Per query (``q``: the queries in the first list's order): the list of its shortest box interval, and
    that interval [first, last).  ``own[l, t]``: where query t's own key falls in list l; both ends are
    galloped to from there (a box's interval lies around its centre), O(log interval) each."""
    m = q.shape[0]
    n = skeys.shape[1]
    for t in numba.prange(m):
        best, f_best, e_best = 0, 0, n + 1
        for l in range(shift.shape[0]):
            keys = skeys[l]
            klo = _key(q, t, dims, lo, scale, top, shift[l], spread, -1, margin)
            khi = _key(q, t, dims, lo, scale, top, shift[l], spread, 1, margin)
            f = _gallop_down(keys, min(own[l, t], n), klo)
            e = _gallop_up(keys, f, khi)
            if e - f < e_best - f_best:
                best, f_best, e_best = l, f, e
        choice[t] = best
        first[t] = f_best
        last[t] = e_best


@numba.njit(cache=True, nogil=True, parallel=True)
def _own_positions(qkeys, skeys):
    """Where each query key of each list falls in that list (queries of another side)."""
    nl, m = qkeys.shape
    own = np.empty((nl, m), np.int64)
    for l in range(nl):
        for t in numba.prange(m):
            own[l, t] = np.searchsorted(skeys[l], qkeys[l, t], side="left")
    return own


@numba.njit(cache=True, nogil=True, parallel=True)
def _self_positions(rank, perm0):
    """own[l, t] = rank[l, perm0[t]]: where the t-th row of the first list sits in every list."""
    nl, n = rank.shape
    own = np.empty((nl, n), np.int64)
    for l in range(nl):
        for t in numba.prange(n):
            own[l, t] = rank[l, perm0[t]]
    return own


@numba.njit(cache=True, nogil=True)
def _walk(q, t, qrow, rows, copied, perm, picked, l, first, last, pos, selfjoin, swap, eps2, fill, at, oi, oj, od):
    """The exact decisions of query slot ``t`` (row ``qrow``) over its interval; its pairs (written from
    ``at`` when filling).  ``rows``: the index rows in each list's order (``copied``), or (one entry) in
    their own order."""
    found = 0
    data = rows[l] if copied else rows[0]
    whole = q.shape[1] <= WHOLE_ROWS
    for e in range(first, last):
        if selfjoin:
            if e == pos:
                continue
            other = picked[l, e]  # the list the row at e walks
            if other < l or (e < pos and other == l):
                continue  # that row reports the pair
        y = perm[l, e]
        s = decide(q, t, data, e if copied else y, eps2, whole)
        if s >= 0.0:
            if fill:
                if selfjoin:
                    oi[at + found], oj[at + found] = min(qrow, y), max(qrow, y)
                elif swap:
                    oi[at + found], oj[at + found] = y, qrow
                else:
                    oi[at + found], oj[at + found] = qrow, y
                od[at + found] = np.float32(math.sqrt(s))
            found += 1
    return found


@numba.njit(cache=True, nogil=True, parallel=True)
def _count(q, qrows, own, rows, copied, perm, picked, choice, first, last, selfjoin, eps2):
    counts = np.zeros(q.shape[0], np.int64)
    no_i = np.empty(0, np.int64)
    no_d = np.empty(0, np.float32)
    for t in numba.prange(q.shape[0]):
        l = choice[t]
        pos = own[l, t] if selfjoin else -1
        counts[t] = _walk(q, t, qrows[t], rows, copied, perm, picked, l, first[t], last[t], pos, selfjoin, False,
                          eps2, False, 0, no_i, no_i, no_d)
    return counts


@numba.njit(cache=True, nogil=True, parallel=True)
def _fill(q, qrows, own, rows, copied, perm, picked, choice, first, last, selfjoin, swap, eps2, t0, t1, offsets,
          oi, oj, od):
    base = offsets[t0]
    for t in numba.prange(t0, t1):
        l = choice[t]
        pos = own[l, t] if selfjoin else -1
        _walk(q, t, qrows[t], rows, copied, perm, picked, l, first[t], last[t], pos, selfjoin, swap, eps2, True,
              offsets[t] - base, oi, oj, od)
    return 0


@numba.njit(cache=True, nogil=True, parallel=True)
def _ranks(perm):
    """rank[l, row]: the row's position in list l."""
    nl, n = perm.shape
    rank = np.empty((nl, n), np.int64)
    for l in range(nl):
        for e in numba.prange(n):
            rank[l, perm[l, e]] = e
    return rank


@numba.njit(cache=True, nogil=True, parallel=True)
def _picks(perm, slot, choice):
    """picked[l, e]: the list walked by the row at position e of list l (read before its distance);
    ``slot[row]``: the row's query slot."""
    nl, n = perm.shape
    picked = np.empty((nl, n), np.int8)
    for l in range(nl):
        for e in numba.prange(n):
            picked[l, e] = choice[slot[perm[l, e]]]
    return picked


class ZLists:
    """The Set of Z-Lists of one side: per list, its rows by key (``perm``) and the sorted keys."""

    def __init__(self, data: np.ndarray, spec: ZSpec):
        n = data.shape[0]
        self.spec = spec
        self.perm = np.empty((spec.lists, n), np.int64)
        self.keys = np.empty((spec.lists, n), np.uint64)
        if not n:
            return
        with serialised():
            keys = _keys(data, spec.dims, spec.lo, spec.scale, spec.top, spec.shift, SPREAD[spec.dims.shape[0]])
        for l in range(spec.lists):
            self.perm[l], self.keys[l] = sort_uint64(keys[l], overwrite=True)


def side_bounds(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if x.shape[0]:
        return column_bounds(x)
    return np.zeros(x.shape[1]), np.zeros(x.shape[1])


class SzlJoin:
    """A prepared szl join on the CPU: count, pairs or bounded batches."""

    def __init__(self, a: np.ndarray, b: np.ndarray | None, eps: float, *, shifts: str = "uniform",
                 lists: int | None = None):
        a = np.ascontiguousarray(a)
        b = None if b is None else np.ascontiguousarray(b)
        self.selfjoin = b is None
        # the index on the smaller side (ties: on B); the other side queries it
        self.swap = b is not None and a.shape[0] < b.shape[0]
        data = a if b is None or self.swap else b
        queries = a if not self.swap else b
        self.eps2 = eps_squared(eps)
        d = a.shape[1]
        n, m = data.shape[0], queries.shape[0]
        spec = self.spec = zspec(*side_bounds(data), shifts=shifts, lists=lists)
        spread = SPREAD[spec.dims.shape[0]]
        lists = ZLists(data, spec)
        self.perm = lists.perm
        self.picked = np.zeros((1, 1), np.int8)
        self.choice = np.zeros(m, np.int8)
        self.first = self.last = np.zeros(m, np.int64)
        # the query slots: the queries in the order of the first list, so that neighbouring slots search and
        # walk nearby rows
        with serialised():
            if self.selfjoin:
                self.qrows = lists.perm[0]
                rank = _ranks(lists.perm) if n else np.zeros((spec.lists, 0), np.int64)
                self.own = _self_positions(rank, self.qrows)
            else:
                qkeys = _keys(queries, spec.dims, spec.lo, spec.scale, spec.top, spec.shift, spread)
                self.qrows = sort_uint64(qkeys[0])[0]
                qkeys = np.ascontiguousarray(qkeys[:, self.qrows])
                self.own = _own_positions(qkeys, lists.keys)
                del qkeys
            self.q = take(queries, self.qrows)
            if n and m:
                self.choice, self.first, self.last = np.empty(m, np.int8), np.empty(m, np.int64), np.empty(m, np.int64)
                _intervals(self.q, self.own, spec.dims, spec.lo, spec.scale, spec.top, spec.shift, spread,
                           box_radius(self.eps2, d), lists.keys, self.choice, self.first, self.last)
            if self.selfjoin and n:
                self.picked = _picks(lists.perm, rank[0], self.choice)
                del rank
        del lists
        # the index rows again in every list's order, where they fit: a walk then reads consecutive rows
        self.copied = bool(n) and spec.lists * data.nbytes <= SORTED_COPY_BYTES
        if self.copied:
            self.rows = np.empty((spec.lists, n, d), data.dtype)
            for l in range(spec.lists):
                self.rows[l] = self.q if self.selfjoin and l == 0 else take(data, self.perm[l])
        else:
            self.rows = data[None]
        self._counts = None

    def _args(self):
        return (self.q, self.qrows, self.own, self.rows, self.copied, self.perm, self.picked, self.choice,
                self.first, self.last, self.selfjoin)

    def work(self) -> np.ndarray:
        """Rows of each query's interval (what its walk reads): the work report."""
        return np.maximum(self.last - self.first, 0)

    def counts(self) -> np.ndarray:
        """Pairs of each query slot."""
        if self._counts is None:
            if not self.rows.shape[1] or not self.q.shape[0]:
                self._counts = np.zeros(self.q.shape[0], np.int64)
            else:
                with serialised():
                    self._counts = _count(*self._args(), self.eps2)
        return self._counts

    def count(self) -> int:
        return int(self.counts().sum())

    def _offsets(self) -> np.ndarray:
        offsets = np.zeros(self.q.shape[0] + 1, np.int64)
        np.cumsum(self.counts(), out=offsets[1:])
        return offsets

    def _fill(self, t0: int, t1: int, offsets: np.ndarray, with_distance: bool):
        size = int(offsets[t1] - offsets[t0])
        oi, oj, od = pair_buffers(size)
        if size:
            with serialised():
                _fill(*self._args(), self.swap, self.eps2, t0, t1, offsets, oi, oj, od)
        return oi, oj, (od if with_distance else None)

    def pairs(self, with_distance: bool = True):
        return self._fill(0, self.q.shape[0], self._offsets(), with_distance)

    def batches(self, max_pairs: int, with_distance: bool = True):
        """Batches of at most ``max_pairs`` pairs: runs of whole queries (one with more pairs, at most the
        index side's rows, filled alone and sliced)."""
        offsets = self._offsets()
        for t0, t1 in bounded_ranges(self.counts(), max_pairs):
            yield from split_batch(self._fill(t0, t1, offsets, with_distance), max_pairs)
