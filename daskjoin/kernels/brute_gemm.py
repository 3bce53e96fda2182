"""``brute`` on the CPU in GEMM form: float32 products (BLAS) rule out pairs under a proven bound, float64 decides.

The ε-join's version of :mod:`.knn_gemm`'s filter, with the k-th distance replaced by eps.  Both sides are
shifted by one centre (the box of both) and rounded to float32 (:class:`~.knn_gemm.Shifted`); for rows a, b
with products g = a~.b~, norms N = |a~| + |b~| (each with its floor) and ``R = sqrt(eps2 (1 + 2e-9))``
(eps2 the float64 eps^2 of the exact rule), a pair with

    |b~|^2 - 2 g > c2 N^2 + (c1 N + R)^2 - |a~|^2

(float64 arithmetic on the float32 values; c1, c2 of :func:`~.exact.error_constants`) has a distance over R,
so its float64 decision value is over eps2: it is not a pair (the proof, term by term, is :mod:`.knn_gemm`'s
module docstring, with its ``root`` = eps2).  Every other pair is decided by :func:`~.within.within` from the
stored rows, as by the nested loop, and each row's pairs come in the same order (ascending columns), so the
output arrays are the nested loop's, byte for byte.  N is taken at its largest over a tile's columns, which
only loosens the test.

Below :data:`GEMM_FROM_D` dimensions, or where a shifted norm passes :data:`~.knn_gemm.MAX_NORM`, the nested
loop (:class:`~.brute.BruteJoin`) runs instead.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .brute import BruteJoin
from .exact import error_constants
from .knn_gemm import ROOT_GROW, Shifted
from .memory import pair_buffers
from .within import within

#: the GEMM filter from this many dimensions up (``filter="auto"``); below, a direct test of a pair costs
#: about its share of the products (``benchmarks/bench_cpu_gemm.py``, 20k rows, 2 cores, session 24: at 2-d the
#: products 1.03-1.65x the nested loop's speed, at 3-d 1.9-2.7x, at 4-d 3.4-4.3x)
GEMM_FROM_D = 3
#: product tiles: rows of A x rows of B (2 MiB of float32 products, screened while they are in cache)
A_TILE, B_TILE = 512, 1024
FILTERS = ("auto", "fp32", "none")


@numba.njit(cache=True, nogil=True)
def _screen(g, r0, c0, selfjoin, an2, anorm, bn2, bmax, c1, c2, reach0, a, b, eps2, fill, counts, base, row0,
            oi, oj, od, decided):
    """Rows ``r0 ..`` of A against columns ``c0 ..`` of B through their products ``g``: pairs the bound cannot
    rule out decided exactly (``decided[r]``: how many), counted per row (``counts``) or written at each row's
    cursor (``base[r - row0]``).  Serial and without the GIL: threads run it on blocks of rows of their own."""
    rows, cols = g.shape
    for t in range(rows):
        r = r0 + t
        lo = max(0, r + 1 - c0) if selfjoin else 0
        n = anorm[r] + bmax
        reach = c1 * n + reach0
        thr = c2 * n * n + reach * reach - np.float64(an2[r])
        for k in range(lo, cols):
            if np.float64(bn2[c0 + k]) - 2.0 * np.float64(g[t, k]) > thr:
                continue
            decided[r] += 1
            d2 = within(a, r, b, c0 + k, eps2)
            if not d2 >= 0.0:  # as the nested loop keeps a pair: d2 >= 0 (NaN never passes either way)
                continue
            if fill:
                at = base[r - row0]
                oi[at] = r
                oj[at] = c0 + k
                od[at] = np.float32(np.sqrt(d2))
                base[r - row0] = at + 1
            else:
                counts[r] += 1


class GemmBruteJoin(BruteJoin):
    """:class:`~.brute.BruteJoin` with its pairs screened by float32 products (module docstring).

    ``filter``: "fp32" (the products), "none" (the nested loop), "auto" (products from :data:`GEMM_FROM_D`
    dimensions).  :attr:`filter` says which runs; :attr:`decided` counts the pairs decided in float64 by the
    last pass (the rest the products ruled out).
    """

    def __init__(self, a: np.ndarray, b: np.ndarray | None, eps: float, *, filter: str = "auto"):
        if filter not in FILTERS:
            raise ValueError(f"CPU brute filter must be one of {FILTERS}, got {filter!r}")
        super().__init__(a, b, eps)
        self.decided = 0
        d = int(self.a.shape[1])
        self.filter = ("fp32" if d >= GEMM_FROM_D else "none") if filter == "auto" else filter
        if self.filter == "fp32" and len(self.a) and len(self.b):
            sides = (self.a,) if self.selfjoin else (self.a, self.b)
            lo = np.min([s.min(axis=0) for s in sides], axis=0).astype(np.float64)
            hi = np.max([s.max(axis=0) for s in sides], axis=0).astype(np.float64)
            centre = (lo + hi) / 2
            self.A = Shifted(self.a, centre)
            self.B = self.A if self.selfjoin else Shifted(self.b, centre)
            if not (self.A.fits and self.B.fits):
                self.filter = "none"  # squares past float32's range: the nested loop decides every pair
            self.c1, self.c2 = error_constants(d)
            self.reach0 = math.sqrt(self.eps2 * ROOT_GROW)
        elif self.filter == "fp32":
            self.filter = "none"  # an empty side: nothing to screen

    def work(self) -> np.ndarray:
        """Pairs each query row decided in float64 (the work report): those the products did not rule out."""
        if self.filter != "fp32":
            return super().work()
        self.counts()
        return self._decided_rows

    def counts(self) -> np.ndarray:
        if self.filter != "fp32":
            return super().counts()
        if self._counts is None:
            counts = np.zeros(self.a.shape[0], np.int64)
            self._decided_rows = self._sweep(0, self.a.shape[0], False, counts, counts, *pair_buffers(0))
            self._counts = counts
        return self._counts

    def _fill(self, row0: int, row1: int, offsets: np.ndarray, with_distance: bool):
        if self.filter != "fp32":
            return super()._fill(row0, row1, offsets, with_distance)
        size = int(offsets[row1] - offsets[row0])
        oi, oj, od = pair_buffers(size)
        if size:
            base = offsets[row0:row1] - offsets[row0]
            self._sweep(row0, row1, True, base, base, oi, oj, od)
        return oi, oj, (od if with_distance else None)

    def _sweep(self, row0: int, row1: int, fill: bool, counts, base, oi, oj, od) -> np.ndarray:
        """Rows [row0, row1) of A against B (later rows only, self-join); returns the pairs each row of A decided in
        float64.

        Each thread of the task's share takes a block of :data:`A_TILE` rows at a time (the self-join's first
        blocks, which have the most columns, first) and runs through B a tile of :data:`B_TILE` columns at a time:
        one single-threaded BLAS product, screened at once while it is in cache.  This is 2-3x the speed of
        products of the whole width on every core followed by a parallel screen (20k rows, 8- to 128-d, 2 cores:
        ``benchmarks/bench_cpu_gemm.py``): the 16 MiB tiles were read back from memory, and BLAS's threads and
        Numba's took turns.  Blocks own their rows, so the counts and cursors need no locks."""
        from concurrent.futures import ThreadPoolExecutor

        from threadpoolctl import threadpool_limits

        A, B, m = self.A, self.B, self.b.shape[0]
        decided = np.zeros(self.a.shape[0], np.int64)

        def block(r0: int) -> None:
            r1 = min(row1, r0 + A_TILE)
            for c0 in range(r0 + 1 if self.selfjoin else 0, m, B_TILE):
                c1 = min(m, c0 + B_TILE)
                g = A.x32[r0:r1] @ B.x32[c0:c1].T
                _screen(g, r0, c0, self.selfjoin, A.n2, A.norm, B.n2, float(B.norm[c0:c1].max()), self.c1, self.c2,
                        self.reach0, self.a, self.b, self.eps2, fill, counts, base, row0, oi, oj, od, decided)

        starts = range(row0, row1, A_TILE)
        threads = min(len(starts), max(1, numba.get_num_threads()))
        if threads <= 1:  # one block (or one thread): no pool, BLAS as it is (what a pool and limits cost, ~1 ms)
            for r0 in starts:
                block(r0)
        else:
            # one BLAS thread a call: the threads here are the parallelism (a process-wide setting, restored after;
            # a concurrent task may see it, which changes only its speed)
            with threadpool_limits(1, "blas"), ThreadPoolExecutor(threads) as pool:
                list(pool.map(block, starts))
        self.decided = int(decided.sum())
        return decided
