"""``brute`` on the CPU in GEMM form: float32 products (BLAS) rule out pairs under a proven bound, float64 decides.

The ε-join's version of :mod:`.knn_gemm`'s filter, with the k-th distance replaced by eps.  Both sides are
shifted by one centre (the box of both) and rounded to float32 (:class:`~.knn_gemm.Shifted`); for rows a, b
with products g = a~.b~, norms N = |a~| + |b~| (each with its floor) and ``R = sqrt(eps2 (1 + 2e-9))``
(eps2 the float64 eps^2 of the exact rule), a pair with

    |b~|^2 - 2 g > c2 N^2 + (c1 N + R)^2 - |a~|^2

(float64 arithmetic on the float32 values; c1, c2 of :func:`~.exact.error_constants`) has a distance over R,
so its float64 decision value is over eps2: it is not a pair (the proof, term by term, is :mod:`.knn_gemm`'s
module docstring, with its ``root`` = eps2).  Every other pair is decided by :func:`~.within.decide` from the
stored rows, as by the nested loop, and each row's pairs come in the same order (ascending columns), so the
output arrays are the nested loop's, byte for byte.  Pairs and bounded batches come from one pass over the
products (each block of rows gathers its own: :meth:`GemmBruteJoin._gathered`), a count from a pass of its own.  N is taken at its largest over a tile's columns, which
only loosens the test.

Below :data:`GEMM_FROM_D` dimensions, or where a shifted norm passes :data:`~.knn_gemm.MAX_NORM`, the nested
loop (:class:`~.brute.BruteJoin`) runs instead.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .block_threads import block_pool, in_order
from .brute import BruteJoin
from .exact import error_constants
from .knn_gemm import ROOT_GROW, Shifted
from .memory import pair_buffers
from .registry import bounded_ranges, split_batch
from .within import WHOLE_ROWS, decide

#: the GEMM filter from this many dimensions up (``filter="auto"``); below, a direct test of a pair costs
#: about its share of the products (``benchmarks/bench_cpu_gemm.py``, 20k rows, 2 cores, session 24: at 2-d the
#: products 1.03-1.65x the nested loop's speed, at 3-d 1.9-2.7x, at 4-d 3.4-4.3x)
GEMM_FROM_D = 3
#: product tiles: rows of A x rows of B (2 MiB of float32 products, screened while they are in cache)
A_TILE, B_TILE = 512, 1024
#: pairs a block of rows gathers in one pass (20 bytes each) before it counts them instead (:meth:`GemmBruteJoin._gathered`)
GATHER_PAIRS = 1 << 20
FILTERS = ("auto", "fp32", "none")


#: what a pass of :func:`_screen` does with each pair: count it (per row), write it at its row's cursor (rows
#: counted before), or append it at one cursor while there is room, counting it per row either way
COUNT, FILL, APPEND = 0, 1, 2


@numba.njit(cache=True, nogil=True)
def _screen(g, r0, c0, selfjoin, an2, anorm, bn2, bmax, c1, c2, reach0, a, b, eps2, mode, counts, base, row0,
            oi, oj, od, decided):
    """Rows ``r0 ..`` of A against columns ``c0 ..`` of B through their products ``g``: pairs the bound cannot
    rule out decided exactly (``decided[r]``: how many), then per ``mode`` (:data:`COUNT`, :data:`FILL` at each
    row's cursor ``base[r - row0]``, :data:`APPEND` at the cursor ``base[0]`` while it is below ``len(oi)``).
    Serial and without the GIL: threads run it on blocks of rows of their own."""
    rows, cols = g.shape
    room = oi.shape[0]
    whole = a.shape[1] <= WHOLE_ROWS
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
            d2 = decide(a, r, b, c0 + k, eps2, whole)
            if not d2 >= 0.0:  # as the nested loop keeps a pair: d2 >= 0 (NaN never passes either way)
                continue
            if mode == FILL:
                at = base[r - row0]
                base[r - row0] = at + 1
            else:
                counts[r] += 1
                if mode == COUNT:
                    continue
                at = base[0]
                base[0] = at + 1
                if at >= room:
                    continue
            oi[at] = r
            oj[at] = c0 + k
            od[at] = np.float32(np.sqrt(d2))


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
            self._decided_rows = self._sweep(0, self.a.shape[0], COUNT, counts, counts, *pair_buffers(0))
            self._counts = counts
        return self._counts

    def _fill(self, row0: int, row1: int, offsets: np.ndarray, with_distance: bool):
        if self.filter != "fp32":
            return super()._fill(row0, row1, offsets, with_distance)
        size = int(offsets[row1] - offsets[row0])
        oi, oj, od = pair_buffers(size)
        if size:
            base = offsets[row0:row1] - offsets[row0]
            self._sweep(row0, row1, FILL, base, base, oi, oj, od)
        return oi, oj, (od if with_distance else None)

    def pairs(self, with_distance: bool = True):
        if self.filter != "fp32":
            return super().pairs(with_distance)
        parts = list(self._gathered(None, with_distance))
        if len(parts) == 1:
            return parts[0]
        oi, oj, od = pair_buffers(0)
        if not parts:
            return oi, oj, (od if with_distance else None)
        return tuple(None if x[0] is None else np.concatenate(x) for x in zip(*parts))

    def batches(self, max_pairs: int, with_distance: bool = True):
        """Batches of at most ``max_pairs`` pairs, in the nested loop's order (row by row, columns ascending), from
        one pass over the products (:meth:`_gathered`); the nested loop's own where the filter is "none"."""
        if self.filter != "fp32":
            yield from super().batches(max_pairs, with_distance)
            return
        yield from self._gathered(max(1, int(max_pairs)), with_distance)

    def _block(self, r0: int, r1: int, mode: int, counts, base, row0: int, oi, oj, od, decided) -> None:
        """Rows [r0, r1) of A against B (later rows only, self-join), a tile of :data:`B_TILE` columns at a time: one
        BLAS product, screened at once while it is in cache (:func:`_screen` in ``mode``)."""
        A, B, m = self.A, self.B, self.b.shape[0]
        for c0 in range(r0 + 1 if self.selfjoin else 0, m, B_TILE):
            c1 = min(m, c0 + B_TILE)
            g = A.x32[r0:r1] @ B.x32[c0:c1].T
            _screen(g, r0, c0, self.selfjoin, A.n2, A.norm, B.n2, float(B.norm[c0:c1].max()), self.c1, self.c2,
                    self.reach0, self.a, self.b, self.eps2, mode, counts, base, row0, oi, oj, od, decided)

    def _sweep(self, row0: int, row1: int, mode: int, counts, base, oi, oj, od) -> np.ndarray:
        """Rows [row0, row1) of A against B in ``mode`` (:data:`COUNT` or :data:`FILL`); returns the pairs each row
        of A decided in float64.

        Each thread of the task's share takes a block of :data:`A_TILE` rows at a time (the self-join's first
        blocks, which have the most columns, first) and runs through B (:meth:`_block`).  This is 2-3x the speed of
        products of the whole width on every core followed by a parallel screen (20k rows, 8- to 128-d, 2 cores:
        ``benchmarks/bench_cpu_gemm.py``): the 16 MiB tiles were read back from memory, and BLAS's threads and
        Numba's took turns.  Blocks own their rows, so the counts and cursors need no locks."""
        decided = np.zeros(self.a.shape[0], np.int64)

        def block(r0: int) -> None:
            self._block(r0, min(row1, r0 + A_TILE), mode, counts, base, row0, oi, oj, od, decided)

        starts = range(row0, row1, A_TILE)
        with block_pool(len(starts)) as pool:
            if pool is None:
                for r0 in starts:
                    block(r0)
            else:
                list(pool.map(block, starts))
        self.decided = int(decided.sum())
        return decided

    def _gathered(self, max_pairs: int | None, with_distance: bool):
        """Every pair in the nested loop's order, in batches of exactly ``max_pairs`` but the last (None: as they
        come), from one pass: each block of rows appends its pairs to a buffer of its own (:data:`GATHER_PAIRS` at
        most, or ``max_pairs``) and puts them in row order (a stable sort; each row's columns come ascending).  A
        block whose pairs outgrow its buffer has counted them all: its rows are filled again, in bounded runs, at
        counted cursors.  Blocks run ahead on the threads by at most one a thread, so about ``threads + 1`` blocks'
        pairs and ``max_pairs`` more are alive at once (twice that while a batch is cut from them).  The count
        pass, then the fill pass, formed every product twice (50k x 32-d, 2 cores: the pairs in 2.99 s of task time
        against 1.47 s for the count)."""
        n, m = self.a.shape[0], self.b.shape[0]
        counts = np.zeros(n, np.int64)
        decided = np.zeros(n, np.int64)
        room = GATHER_PAIRS if max_pairs is None else min(GATHER_PAIRS, max_pairs)
        offsets = None  # the refilled blocks' row offsets (each block writes its own range)

        def gather(r0: int):
            r1 = min(n, r0 + A_TILE)
            most = (r1 - r0) * max(0, m - r0 - 1 if self.selfjoin else m)  # every pair the block can have
            oi, oj, od = pair_buffers(min(room, most))
            cursor = np.zeros(1, np.int64)
            self._block(r0, r1, APPEND, counts, cursor, r0, oi, oj, od, decided)
            found = int(cursor[0])
            if found > len(oi):
                return r0, r1, None
            order = np.argsort(oi[:found], kind="stable")
            return r0, r1, (oi[order], oj[order], od[order])

        held, size = [], 0

        def release(last: bool):
            """The held pairs as batches of ``max_pairs``; fewer kept for the next unless ``last``."""
            nonlocal held, size
            if not held:
                return
            whole = tuple(np.concatenate(x) for x in zip(*held)) if len(held) > 1 else held[0]
            cut = size if max_pairs is None or last else size - size % max_pairs
            held, size = ([tuple(x[cut:] for x in whole)], size - cut) if cut < size else ([], 0)
            if cut:
                yield from _cut(tuple(x[:cut] for x in whole), max_pairs, with_distance)

        starts = range(0, n, A_TILE)
        with block_pool(len(starts)) as pool:
            ahead = min(len(starts), numba.get_num_threads()) + 1  # a block a thread, one more queued
            results = map(gather, starts) if pool is None else in_order(pool, gather, starts, ahead)
            for r0, r1, got in results:
                if got is None:
                    yield from release(True)
                    if offsets is None:
                        offsets = np.zeros(n + 1, np.int64)
                    np.cumsum(counts[r0:r1], out=offsets[r0 + 1:r1 + 1])
                    offsets[r0] = 0
                    limit = max_pairs if max_pairs is not None else int(offsets[r1])
                    for s0, s1 in bounded_ranges(counts[r0:r1], limit):
                        yield from _cut(self._fill(r0 + s0, r0 + s1, offsets, True), max_pairs, with_distance)
                    continue
                if len(got[0]):
                    held.append(got)
                    size += len(got[0])
                if max_pairs is not None and size >= max_pairs:
                    yield from release(False)
        yield from release(True)
        self._counts, self._decided_rows = counts, decided
        self.decided = int(decided.sum())


def _cut(batch, max_pairs: int | None, with_distance: bool):
    """``batch`` in slices of at most ``max_pairs`` (whole where None), the distances dropped unless asked for;
    nothing for an empty batch (a run of rows with no pairs)."""
    oi, oj, od = batch
    if not len(oi):
        return
    whole = (oi, oj, od if with_distance else None)
    if max_pairs is None:
        yield whole
    else:
        yield from split_batch(whole, max_pairs)
