"""``szl`` method, GPU driver: LSS's Set of Z-Lists (:mod:`.szl` states the method and why it is exact),
keys and intervals in ``cuda/szl.cu``, the lists sorted by CuPy (a radix sort).

Output as the paper does it (its Algorithm 3, WALKINTERVALSCHUNKED): every query slot gets room for as
many pairs as its interval holds, an exclusive prefix sum places the slots, and runs of queries whose
room fits the device budget are walked once each, the pairs then compacted.  Where :meth:`counts`
already ran, fills are placed by the exact counts instead.  When every pair fits the device, they are
sorted by (i, j) there and leave as ``SortedRun`` batches.
"""
from __future__ import annotations

import numpy as np

from .exact import eps_squared
from .gpu_common import cupy, device_budget_bytes, kernel, output_args, output_by_counts
from .gpu_slots import all_pairs, device_runs, slot_batches
from .grid_gpu import device_bounds, to_device64
from .szl import SORTED_COPY_BYTES, box_radius, zspec

BLOCK = 256


def _blocks(count: int) -> tuple[int]:
    return (max(1, min(-(-int(count) // BLOCK), 1 << 20)),)


class GpuSzlJoin:
    """A prepared szl join on the GPU: count, pairs or batches, pairs on the host in original row ids."""

    def __init__(self, a, b, eps: float, *, shifts: str = "uniform", lists: int | None = None):
        cp = cupy()
        self.selfjoin = b is None
        a = to_device64(a)
        b = None if b is None else to_device64(b)
        self.swap = b is not None and a.shape[0] < b.shape[0]
        data = a if b is None or self.swap else b
        queries = a if not self.swap else b
        self.eps2 = eps_squared(eps)
        n, m, d = int(data.shape[0]), int(queries.shape[0]), int(a.shape[1])
        self.n, self.m, self.d = n, m, d
        spec = self.spec = zspec(*device_bounds(data), shifts=shifts, lists=lists)
        L, kd = spec.lists, int(spec.dims.shape[0])
        geometry = (cp.asarray(spec.dims), np.int32(kd), cp.asarray(spec.lo), cp.asarray(spec.scale),
                    np.int64(spec.top), cp.asarray(spec.shift), np.int32(L), np.int32(spec.bits))
        keys = cp.empty((L, n), cp.uint64)
        if n:
            kernel("szl.cu", "szl_keys")(_blocks(n), (BLOCK,), (data, np.int64(n), np.int32(d), *geometry, keys))
        self.perm = cp.empty((L, n), cp.int64)
        for l in range(L):
            self.perm[l] = cp.argsort(keys[l])
            keys[l] = keys[l][self.perm[l]]
        # query slots in the order of the first list: neighbouring threads search and walk nearby rows
        if self.selfjoin:
            self.qrows = self.perm[0]
        else:
            qkeys = cp.empty((L, m), cp.uint64)
            if m:
                kernel("szl.cu", "szl_keys")(_blocks(m), (BLOCK,), (queries, np.int64(m), np.int32(d), *geometry,
                                                                    qkeys))
            self.qrows = cp.argsort(qkeys[0]).astype(cp.int64)
            del qkeys
        self.q = cp.ascontiguousarray(queries[self.qrows])
        self.choice = cp.zeros(m, cp.int8)
        self.first = cp.zeros(m, cp.int64)
        self.last = cp.zeros(m, cp.int64)
        if n and m:
            kernel("szl.cu", "szl_intervals")(_blocks(m), (BLOCK,), (
                self.q, np.int64(m), np.int32(d), *geometry, np.float64(box_radius(self.eps2, d)), keys,
                np.int64(n), self.choice, self.first, self.last))
        del keys
        if self.selfjoin and n:
            rank = cp.empty((L, n), cp.int64)
            for l in range(L):
                rank[l, self.perm[l]] = cp.arange(n, dtype=cp.int64)
            self.own = cp.ascontiguousarray(rank[:, self.qrows])
            self.picked = cp.ascontiguousarray(self.choice[rank[0][self.perm]])
            del rank
        else:
            self.own = cp.zeros(1, cp.int64)
            self.picked = cp.zeros(1, cp.int8)
        self.copied = bool(n) and L * n * d * 8 <= min(SORTED_COPY_BYTES, device_budget_bytes(0.25))
        if self.copied:
            self.rows = cp.ascontiguousarray(data[self.perm])
        else:
            self.rows = data
        self._counts = None

    def _walk(self, mode: int, t0: int, t1: int, offsets=None, out=(None, None, None)):
        cp = cupy()
        counts = cp.empty(max(t1 - t0, 1), cp.int32)
        if t1 > t0 and self.n:
            kernel("szl.cu", "szl_walk")(_blocks(t1 - t0), (BLOCK,), (
                self.q, self.qrows, np.int64(t0), np.int64(t1), self.rows, np.int32(self.copied), np.int64(self.n),
                np.int32(self.d), self.perm, self.picked, self.choice, self.first, self.last, self.own,
                np.int64(self.m), np.int32(self.selfjoin), np.int32(self.swap), np.float64(self.eps2),
                np.int32(mode), counts, *output_args(offsets, out)))
        else:
            counts[:] = 0
        return counts[: t1 - t0]

    def work(self) -> np.ndarray:
        """Rows of each query's interval (what its walk reads), on the host: the work report."""
        return cupy().asnumpy(cupy().maximum(self.last - self.first, 0))

    def counts(self):
        """Pairs of every query slot (device array)."""
        if self._counts is None:
            self._counts = self._walk(0, 0, self.m)
        return self._counts

    def count(self) -> int:
        return int(self.counts().sum(dtype=cupy().int64))

    def _room(self):
        """Room per slot: its exact count where known, else its interval's length (the paper's bound)."""
        cp = cupy()
        if self._counts is not None:
            return self._counts.astype(cp.int64), True
        return cp.maximum(self.last - self.first, 0), False

    def _fill(self, t0: int, t1: int, room, exact: bool, with_distance: bool):
        """Pairs of slots [t0, t1) on the device, in slot order."""
        cp = cupy()
        offsets, out = output_by_counts(room[t0:t1])
        counts = self._walk(1, t0, t1, offsets, out)
        if not exact:  # compaction: each slot's pairs are the first counts[t] of its room
            counts = counts.astype(cp.int64)
            kept = int(counts.sum())
            start = cp.zeros(t1 - t0 + 1, cp.int64)
            cp.cumsum(counts, out=start[1:])
            slot = cp.repeat(cp.arange(t1 - t0, dtype=cp.int64), counts)
            source = cp.arange(kept, dtype=cp.int64) - start[slot] + offsets[slot]
            out = tuple(x[source] for x in out)
        oi, oj, od = out
        return oi, oj, (od if with_distance else None)

    def pairs(self, with_distance: bool = True, device: bool = False):
        if device:
            room, exact = self._room()
            runs = device_runs(lambda t0, t1: self._fill(t0, t1, room, exact, with_distance), room)
            return all_pairs(runs, with_distance, cupy())
        return all_pairs(self.batches(1 << 62, with_distance), with_distance)

    def batches(self, max_pairs: int, with_distance: bool = True):
        """Batches of at most ``max_pairs`` pairs; sorted by (i, j) on the device where they all fit it."""
        if not self.m or not self.n:
            return
        room, exact = self._room()
        yield from slot_batches(lambda t0, t1: self._fill(t0, t1, room, exact, with_distance), room, max_pairs)
