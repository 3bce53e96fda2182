"""Large host arrays reused within a process, so that a task's pair buffers do not fault fresh pages each time.

Why: a CPU task's pair buffers (the grid's lanes, the sorted columns) are tens to hundreds of MB,
allocated and freed once a task.  Dask starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536``
and glibc maps allocations beyond 32 MiB on their own, so that memory goes back to the system
when freed and the next task faults it in again, page by page, each page zeroed by the kernel:
on the 2-core VM 75 MB of fresh memory cost 9 ms to touch against 2.7 ms reused (and 45 ms
without transparent huge pages), a fifth of the 200k x 2-d join's task.

An array from :func:`empty` is a view of a pooled block; the block returns to the pool when the
last view of it is garbage (whatever holds it: a frame that was persisted keeps its block), and a
later request of a size it fits takes it again.  The pool keeps at most :func:`keep_bytes` of free
blocks (``daskjoin.array-pool-bytes``; the largest go first when it must drop some); :func:`release`
frees them all (``daskjoin.clear_cache()`` calls it).  Requests below :data:`MIN_BYTES` come from numpy as usual.
"""
from __future__ import annotations

import bisect
import threading
import weakref

import numpy as np

#: smaller arrays come from numpy (malloc reuses them itself)
MIN_BYTES = 1 << 20
#: block sizes are rounded up to this (transparent huge pages are 2 MiB)
GRAIN = 2 << 20
#: a free block serves a request of at least this share of its size (no big block held by a small array)
MIN_FILL = 0.5


def keep_bytes() -> int:
    """Free bytes the pool may keep (``daskjoin.array-pool-bytes``; "auto": a thirty-second of the host's
    memory, at most 1 GiB; 0: no pool)."""
    from .. import config

    wanted = config.get("array-pool-bytes")
    if wanted in (None, "auto"):
        from .host_pool import _host_memory

        return int(min(1 << 30, _host_memory() // 32))
    return max(0, config.parse_bytes(wanted))


class _Lease:
    """One block lent out, as a numpy array interface; the block goes back to the pool when this is garbage."""

    __slots__ = ("__array_interface__", "block", "__weakref__")

    def __init__(self, block: np.ndarray):
        self.block = block
        self.__array_interface__ = {"shape": (block.nbytes,), "typestr": "|u1",
                                    "data": (block.ctypes.data, False), "version": 3}


class ArrayPool:
    """Free blocks by size; :meth:`empty` lends one (or makes one), the lease's end gives it back."""

    def __init__(self, keep: int):
        self.keep = int(keep)
        self._sizes: list[int] = []  # sizes of the free blocks, sorted
        self._blocks: list[np.ndarray] = []  # the free blocks, in the same order
        self._free_bytes = 0
        self._lock = threading.RLock()  # reentrant: a lease may end (garbage collected) while this thread holds it

    @property
    def free_bytes(self) -> int:
        return self._free_bytes

    def _take(self, nbytes: int) -> np.ndarray:
        with self._lock:
            at = bisect.bisect_left(self._sizes, nbytes)
            if at < len(self._sizes) and nbytes >= MIN_FILL * self._sizes[at]:
                size = self._sizes.pop(at)
                self._free_bytes -= size
                return self._blocks.pop(at)
        return np.empty(-(-nbytes // GRAIN) * GRAIN, np.uint8)

    def _give(self, block: np.ndarray) -> None:
        with self._lock:
            size = block.nbytes
            at = bisect.bisect_left(self._sizes, size)
            self._sizes.insert(at, size)
            self._blocks.insert(at, block)
            self._free_bytes += size
            while self._free_bytes > self.keep:  # the largest go first: they are the rarest requests
                self._free_bytes -= self._sizes.pop()
                self._blocks.pop()

    def empty(self, shape, dtype) -> np.ndarray:
        """An uninitialised C-contiguous array, its memory from the pool where it is large."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * dtype.itemsize
        if nbytes < MIN_BYTES or self.keep <= 0:
            return np.empty(shape, dtype)
        block = self._take(nbytes)
        lease = _Lease(block)
        weakref.finalize(lease, self._give, block)
        return np.asarray(lease)[:nbytes].view(dtype).reshape(shape)

    def release(self) -> None:
        """Drop every free block (lent ones still come back later)."""
        with self._lock:
            self._sizes, self._blocks, self._free_bytes = [], [], 0


POOL = ArrayPool(0)


def empty(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)`` from the process's pool (:data:`POOL`, within :func:`keep_bytes`)."""
    if int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize < MIN_BYTES:
        return np.empty(shape, dtype)
    POOL.keep = keep_bytes()  # (read each time: a setting changed later applies to the next block returned)
    return POOL.empty(shape, dtype)


def release() -> None:
    POOL.release()
