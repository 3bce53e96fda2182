"""Large host arrays reused within a process, so that a task's pair buffers do not fault fresh pages each time.

Why: a CPU task's pair buffers (the grid's lanes, the sorted columns) are tens to hundreds of MB,
allocated and freed once a task.  Dask starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which
also turns off glibc's sliding mmap threshold: every allocation from 128 KiB is mapped on its own and
unmapped when freed, so the next task faults it in again, page by page, each page zeroed by the kernel.
On the 2-core VM 75 MB of fresh memory cost 9 ms to touch against 2.7 ms reused (45 ms without
transparent huge pages): in the 200k x 2-d join's task about 3,800 faults and 9 of its 65 ms.

An array from :func:`empty` is a view of a pooled block; the block returns to the pool when the
last view of it is garbage (whatever holds it: a frame that was persisted keeps its block), and a
later request of a size it fits (:data:`MIN_FILL`) takes it again.  The pool keeps at most
:func:`keep_bytes` of free blocks (``daskjoin.array-pool-bytes``: a sixteenth of a worker's memory limit;
the largest go first when it must drop some), and frees them all once none was lent for :data:`IDLE_S`
(a worker idle after a join) or on :func:`release` (``daskjoin.clear_cache()`` calls it; on a cluster
``client.run(daskjoin.clear_cache)``).  Requests below :data:`MIN_BYTES` come from numpy as usual.
"""
from __future__ import annotations

import bisect
import collections
import os
import threading
import time
import weakref

import numpy as np

#: smaller arrays come from numpy
MIN_BYTES = 1 << 20
#: block sizes are rounded up to this (transparent huge pages are 2 MiB)
GRAIN = 2 << 20
#: free blocks are freed once no array has been lent for this long (a worker idle after a join gives them back)
IDLE_S = 30.0
#: a free block serves a request whose own block (its size rounded up to GRAIN) would be at least this share of it:
#: an array that outlives its task (a persisted frame's column, a cached index) holds little more than it uses
MIN_FILL = 0.8


def keep_bytes() -> int:
    """Free bytes the pool may keep (``daskjoin.array-pool-bytes``; "auto": in a Dask worker a sixteenth of its
    memory limit, elsewhere a thirty-second of the host's memory, at most 1 GiB either way; 0: no pool)."""
    from .. import config

    wanted = config.get("array-pool-bytes")
    if wanted not in (None, "auto"):
        return max(0, config.parse_bytes(wanted))
    from .host_pool import _host_memory

    share = _host_memory() // 32
    limit = _worker_memory_limit()
    if limit:
        share = limit // 16
    return int(min(1 << 30, share))


def _worker_memory_limit() -> int | None:
    """The memory limit of the Dask worker this runs in, or None (not in a worker, or no limit)."""
    import sys

    if "distributed" not in sys.modules:
        return None
    try:
        from distributed import get_worker

        limit = get_worker().memory_manager.memory_limit
    except (ImportError, ValueError, AttributeError):
        return None
    return int(limit) if limit else None


class _Lease:
    """One block lent out, as a numpy array interface; the block goes back to the pool when this is garbage."""

    __slots__ = ("__array_interface__", "block", "__weakref__")

    def __init__(self, block: np.ndarray):
        self.block = block
        self.__array_interface__ = {"shape": (block.nbytes,), "typestr": "|u1",
                                    "data": (block.ctypes.data, False), "version": 3}


class ArrayPool:
    """Free blocks by size; :meth:`empty` lends one (or makes one), the lease's end gives it back.

    A lease's end only appends its block to ``_returned`` (a deque: atomic, no lock), whatever thread the
    garbage collector runs it in, even one inside this pool's lock; the lending thread files returned blocks
    under the lock (:meth:`_file_returned`), so the sorted free lists are only ever changed by one thread at a
    time, never re-entered."""

    def __init__(self, keep: int):
        self.keep = int(keep)
        self._sizes: list[int] = []  # sizes of the free blocks, sorted
        self._blocks: list[np.ndarray] = []  # the free blocks, in the same order
        self._free_bytes = 0
        self._returned: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._last_lent = 0.0
        self._sweeper: threading.Thread | None = None

    @property
    def free_bytes(self) -> int:
        """Bytes of free blocks (those returned and not yet filed included)."""
        with self._lock:
            self._file_returned()
            return self._free_bytes

    def _file_returned(self) -> None:
        """(Under the lock.)  Returned blocks into the sorted free lists; the largest dropped beyond ``keep``."""
        while self._returned:
            block = self._returned.popleft()
            at = bisect.bisect_left(self._sizes, block.nbytes)
            self._sizes.insert(at, block.nbytes)
            self._blocks.insert(at, block)
            self._free_bytes += block.nbytes
        while self._free_bytes > self.keep and self._sizes:  # the largest go first: they are the rarest requests
            self._free_bytes -= self._sizes.pop()
            self._blocks.pop()

    def _take(self, nbytes: int) -> np.ndarray:
        with self._lock:
            self._last_lent = time.monotonic()
            if self._sweeper is None:
                self._start_sweeper()
            self._file_returned()
            size = -(-nbytes // GRAIN) * GRAIN  # the block it would get new
            at = bisect.bisect_left(self._sizes, nbytes)
            if at < len(self._sizes) and size >= MIN_FILL * self._sizes[at]:
                self._free_bytes -= self._sizes.pop(at)
                return self._blocks.pop(at)
        try:
            return np.empty(size, np.uint8)
        except MemoryError:  # the free blocks first, then once more
            self.release()
            return np.empty(size, np.uint8)

    def empty(self, shape, dtype) -> np.ndarray:
        """An uninitialised C-contiguous array, its memory from the pool where it is large."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes < MIN_BYTES or self.keep <= 0:
            return np.empty(shape, dtype)
        block = self._take(nbytes)
        lease = _Lease(block)
        # not at exit: a block must not go back while a daemon thread's arrays may still use it
        weakref.finalize(lease, self._returned.append, block).atexit = False
        return np.asarray(lease)[:nbytes].view(dtype).reshape(shape)

    def _start_sweeper(self) -> None:
        """(Under the lock.)  A daemon thread that frees the free blocks once none was lent for :data:`IDLE_S`."""
        pool = weakref.ref(self)

        def sweep() -> None:
            while True:
                time.sleep(IDLE_S / 3)
                live = pool()
                if live is None:
                    return
                with live._lock:
                    live._file_returned()
                    if live._sizes and time.monotonic() - live._last_lent > IDLE_S:
                        live._sizes, live._blocks, live._free_bytes = [], [], 0
                del live

        try:
            self._sweeper = threading.Thread(target=sweep, name="daskjoin-array-pool", daemon=True)
            self._sweeper.start()
        except RuntimeError:  # no thread to be had (a process shutting down): blocks wait for release()
            pass

    def set_keep(self, keep: int) -> None:
        """A new bound on the free bytes; free blocks beyond it are dropped at once."""
        with self._lock:
            self.keep = int(keep)
            self._file_returned()

    def release(self) -> None:
        """Drop every free block (lent ones still come back later)."""
        with self._lock:
            self._file_returned()
            self._sizes, self._blocks, self._free_bytes = [], [], 0


POOL = ArrayPool(0)


def _after_fork_in_child() -> None:
    """A forked child starts with an empty pool of its own: the parent's lock may have been held by a thread the
    child does not have (its first large array would wait forever), its free lists may have been mid-change, and
    its sweeper thread is not in the child (a new one starts with the first lease)."""
    global POOL
    POOL = ArrayPool(POOL.keep)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def empty(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)`` from the process's pool (:data:`POOL`, within :func:`keep_bytes`)."""
    if int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize < MIN_BYTES:
        return np.empty(shape, dtype)
    keep = keep_bytes()  # (read each time: a setting changed, or a worker's limit, applies at once)
    if keep != POOL.keep:
        POOL.set_keep(keep)
    return POOL.empty(shape, dtype)


def release() -> None:
    POOL.release()
