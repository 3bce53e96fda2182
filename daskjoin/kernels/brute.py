"""``brute`` method, CPU driver: tiled nested-loop join in Numba (Böhm's NLJ; the reference).

Every pair is tested with the shared exact decision (:mod:`.exact`).  Rows of A
are processed in tiles against tiles of B so both stay in cache; a count pass,
a prefix sum over rows and a fill pass give outputs of any size, and the fill
can run over a range of rows for bounded batches.
"""
from __future__ import annotations

import numba
import numpy as np

from .exact import eps_squared
from .within import WHOLE_ROWS, decide
from .memory import pair_buffers
from .parallel_guard import serialised
from .registry import bounded_ranges, split_batch

TILE = 256


@numba.njit(cache=True, nogil=True)
def _tile(a, b, selfjoin, eps2, r0, r1, fill, counts, base, oi, oj, od):
    """Rows [r0, r1) of a against all of b (only later rows when selfjoin)."""
    nb = b.shape[0]
    whole = a.shape[1] <= WHOLE_ROWS
    for t0 in range(r0 if selfjoin else 0, nb, TILE):
        t1 = min(t0 + TILE, nb)
        for r in range(r0, r1):
            lo = max(t0, r + 1) if selfjoin else t0
            for c in range(lo, t1):
                d2 = decide(a, r, b, c, eps2, whole)
                if d2 >= 0.0:
                    if fill:
                        at = base[r]
                        oi[at] = r
                        oj[at] = c
                        od[at] = np.float32(np.sqrt(d2))
                        base[r] = at + 1
                    else:
                        counts[r] += 1


@numba.njit(cache=True, nogil=True, parallel=True)
def _count_rows(a, b, selfjoin, eps2):
    n = a.shape[0]
    counts = np.zeros(n, np.int64)
    dummy_i = np.empty(0, np.int64)
    dummy_d = np.empty(0, np.float32)
    for tile in numba.prange((n + TILE - 1) // TILE):
        r0 = tile * TILE
        _tile(a, b, selfjoin, eps2, r0, min(r0 + TILE, n), False, counts, dummy_i, dummy_i, dummy_i, dummy_d)
    return counts


@numba.njit(cache=True, nogil=True, parallel=True)
def _fill_rows(a, b, selfjoin, eps2, row0, row1, offsets, oi, oj, od):
    cursor = offsets[row0:row1 + 1] - offsets[row0]
    base = np.zeros(a.shape[0], np.int64)
    base[row0:row1] = cursor[:-1]
    for tile in numba.prange((row1 - row0 + TILE - 1) // TILE):
        r0 = row0 + tile * TILE
        _tile(a, b, selfjoin, eps2, r0, min(r0 + TILE, row1), True, base, base, oi, oj, od)
    return 0


class BruteJoin:
    """A prepared nested-loop join; count, pairs or bounded batches on demand."""

    def __init__(self, a: np.ndarray, b: np.ndarray | None, eps: float):
        self.selfjoin = b is None
        self.a = np.ascontiguousarray(a)
        self.b = self.a if b is None else np.ascontiguousarray(b)
        self.eps2 = eps_squared(eps)
        self._counts = None

    def work(self) -> np.ndarray:
        """Rows each query row is decided against (every later row, or all of B): the work report."""
        n, m = self.a.shape[0], self.b.shape[0]
        return (n - 1 - np.arange(n, dtype=np.int64)) if self.selfjoin else np.full(n, m, np.int64)

    def counts(self) -> np.ndarray:
        if self._counts is None:
            with serialised():
                self._counts = _count_rows(self.a, self.b, self.selfjoin, self.eps2)
        return self._counts

    def count(self) -> int:
        return int(self.counts().sum())

    def _fill(self, row0: int, row1: int, offsets: np.ndarray, with_distance: bool):
        size = int(offsets[row1] - offsets[row0])
        oi, oj, od = pair_buffers(size)
        if size:
            with serialised():
                _fill_rows(self.a, self.b, self.selfjoin, self.eps2, row0, row1, offsets, oi, oj, od)
        return oi, oj, (od if with_distance else None)

    def _offsets(self) -> np.ndarray:
        offsets = np.zeros(self.a.shape[0] + 1, np.int64)
        np.cumsum(self.counts(), out=offsets[1:])
        return offsets

    def pairs(self, with_distance: bool = True):
        return self._fill(0, self.a.shape[0], self._offsets(), with_distance)

    def batches(self, max_pairs: int, with_distance: bool = True):
        """Yield (i, j, dist) batches of at most ``max_pairs`` pairs: runs of whole rows, and a row
        with more pairs than that filled alone and sliced (its pairs are at most ``len(b)``)."""
        offsets = self._offsets()
        for r0, r1 in bounded_ranges(self.counts(), max_pairs):
            yield from split_batch(self._fill(r0, r1, offsets, with_distance), max_pairs)
