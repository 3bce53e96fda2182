"""``nlj`` method, GPU driver: Böhm et al.'s non-indexed nested-loop join (``cuda/nlj.cu``): every pair decided
in float64 by one thread per query row, the other side staged through shared memory in tiles.

No index and no filter: the reference the indexed methods are measured against, and the method for inputs
too small to repay an index.  A count pass gives each query's pairs; fills are placed by them
(:mod:`.gpu_slots`)."""
from __future__ import annotations

import numpy as np

from .exact import eps_squared
from .gpu_common import cupy, kernel, output_args, output_by_counts
from .gpu_slots import all_pairs, device_runs, slot_batches
from .grid_gpu import to_device64

BLOCK = 256
#: shared memory a block stages (48 KiB, the default limit without opting in)
SHARED_BYTES = 48 << 10


class GpuNljJoin:
    """A prepared GPU nested-loop join: count, pairs or batches, pairs on the host in original row ids."""

    def __init__(self, a, b, eps: float, *, tile_rows: int | None = None):
        self.selfjoin = b is None
        self.a = to_device64(a)
        self.b = self.a if b is None else to_device64(b)
        self.eps2 = eps_squared(eps)
        self.n, self.m, self.d = int(self.a.shape[0]), int(self.b.shape[0]), int(self.a.shape[1])
        fit = SHARED_BYTES // (8 * max(self.d, 1))
        self.staged = fit >= 1  # rows wider than shared memory are read from global memory
        self.tile_rows = int(min(max(fit, 1), tile_rows or 256))
        self._counts = None

    def _launch(self, mode: int, q0: int, q1: int, offsets=None, out=(None, None, None)):
        cp = cupy()
        counts = cp.zeros(max(q1 - q0, 1), cp.int32)
        if q1 > q0 and self.m:  # (d = 0 works too: every pair is at distance 0)
            kernel("nlj.cu", "nlj_join")((-(-(q1 - q0) // BLOCK),), (BLOCK,), (
                self.a, np.int64(q0), np.int64(q1), self.b, np.int64(self.m), np.int32(self.d),
                np.int32(self.tile_rows), np.int32(self.staged), np.int32(self.selfjoin), np.float64(self.eps2),
                np.int32(mode), counts, *output_args(offsets, out)),
                shared_mem=8 * self.tile_rows * self.d if self.staged else 0)
        return counts[: q1 - q0]

    def work(self) -> np.ndarray:
        """Rows each query row is decided against (every later row, or all of B): the work report."""
        rows = np.arange(self.n, dtype=np.int64)
        return (self.m - 1 - rows) if self.selfjoin else np.full(self.n, self.m, np.int64)

    def counts(self):
        """Pairs of every query row (device array)."""
        if self._counts is None:
            self._counts = self._launch(0, 0, self.n)
        return self._counts

    def count(self) -> int:
        return int(self.counts().sum(dtype=cupy().int64))

    def _fill(self, q0: int, q1: int, with_distance: bool):
        offsets, out = output_by_counts(self.counts()[q0:q1])
        if out[0].shape[0]:
            self._launch(1, q0, q1, offsets, out)
        return out[0], out[1], (out[2] if with_distance else None)

    def pairs(self, with_distance: bool = True, device: bool = False):
        if device:
            runs = device_runs(lambda q0, q1: self._fill(q0, q1, with_distance), self.counts().astype(cupy().int64))
            return all_pairs(runs, with_distance, cupy())
        return all_pairs(self.batches(1 << 62, with_distance), with_distance)

    def batches(self, max_pairs: int, with_distance: bool = True):
        """Batches of at most ``max_pairs`` pairs; sorted by (i, j) on the device where they all fit it."""
        if not self.n:
            return
        room = self.counts().astype(cupy().int64)
        yield from slot_batches(lambda q0, q1: self._fill(q0, q1, with_distance), room, max_pairs)
