"""Reused page-locked host blocks for pair batches leaving the device (``pooled_to_host``).

Why: a GPU task streams its pairs to the host one row group at a time, and each batch is
handed to a writer thread.  Into fresh pageable memory every batch pays the first touch of its
pages and a second copy through staging buffers (:mod:`.host_copy`); into CuPy's pinned pool it
pays for pinning new blocks.  Measured on an H100 host (105M sorted pairs, 2.1 GB, 16 writer
threads, ``.scratch`` benchmark of session 18): pageable 1.36 s in a new process and 0.48 s
after, CuPy's pinned pool 0.69 / 0.39 s, blocks of this pool 0.29 / 0.26 s, of which the copies
off the device took 0.04 s (about PCIe speed: the writers then bound the stream).  The CLI's 20M x 3-d
join to Parquet: 1.59-2.03 s without the pool, 1.34-1.76 s with it (README, two H100 machines).

A block is ordinary numpy memory (large, so numpy asks for transparent huge pages: few faults),
touched once, registered with CUDA (``cudaHostRegister``: page-locked, so copies from the device
land in it directly) and kept for the life of the process.  A batch's arrays are views of one
block; the block goes back to the pool when the last of them is garbage (after the writer that
held it is done), so the pool holds about as many blocks as pieces are in flight (the writer
threads' bound, :func:`daskjoin.io.parquet_out.write_partition`).  Where the pool is full,
registration fails, or a batch does not fit one block, callers fall back to their old path.
"""
from __future__ import annotations

import functools
import threading
import weakref

import numpy as np

#: bytes a pair may take in a block: int64 i and j and a value of up to 8 bytes
BLOCK_BYTES_PER_PAIR = 24
#: each array of a batch starts at a multiple of this in its block
ALIGN = 64
#: a batch takes a block only if it fills at least this share of it: a small join's frame may hold its batch
#: for long, and must not hold a whole block of page-locked memory for a few pairs
MIN_FILL = 0.25
#: seconds a batch waits for a block being made ahead before it takes the caller's fallback (one takes ~40 ms)
WAIT_S = 2.0


class _Lease:
    """One block lent out: its memory as a numpy array interface; the block returns when this is garbage."""

    __slots__ = ("__array_interface__", "block", "__weakref__")

    def __init__(self, block: np.ndarray):
        self.block = block  # the memory stays alive with any view, whatever the pool does meanwhile
        self.__array_interface__ = {"shape": (block.nbytes,), "typestr": "|u1",
                                    "data": (block.ctypes.data, False), "version": 3}


class HostPool:
    """Blocks of ``block_bytes`` bytes, made on demand up to ``max_blocks`` and reused.

    ``register(ptr, nbytes)`` page-locks a new block (CUDA's ``hostRegister``; a test may pass another) and
    ``unregister(ptr)`` unlocks it before its memory may be freed: a retired pool (:meth:`retire`) unlocks
    its free blocks at once and the lent ones as they come back.  A registration that fails, or memory
    that cannot be had, turns the pool off (its callers then use their fallback)."""

    def __init__(self, block_bytes: int, max_blocks: int, register=None, unregister=None):
        self.block_bytes, self.max_blocks = int(block_bytes), max(0, int(max_blocks))
        self._register, self._unregister = register, unregister
        self._free: list[np.ndarray] = []
        self._made = 0
        self._pending = 0  # blocks being made ahead on background threads (counted in _made too)
        # reentrant: a block may come back (a finalizer run by the garbage collector) in a thread that holds it
        self._lock = threading.RLock()
        self._ready = threading.Condition(self._lock)  # a block came back, was made ahead, or will not be
        self.enabled = True
        self.retired = False

    @property
    def made(self) -> int:
        """Blocks made so far (lent or free)."""
        return self._made

    @property
    def free(self) -> int:
        return len(self._free)

    def _new_block(self) -> np.ndarray | None:
        try:
            raw = np.empty(self.block_bytes + ALIGN, np.uint8)
        except MemoryError:
            return None
        start = -raw.ctypes.data % ALIGN
        block = raw[start:start + self.block_bytes]  # aligned (large blocks are page-aligned anyway)
        block[::4096] = 0  # every page touched once, here, and never again
        if self._register is not None:
            try:
                self._register(block.ctypes.data, block.nbytes)
            except Exception:  # noqa: BLE001 - no CUDA here, or page-locked memory capped: off, callers fall back
                self.enabled = False
                return None
        return block

    def _release(self, block: np.ndarray) -> None:
        """A block leaves the pool for good: unlocked, so its memory may be freed with its last reference."""
        if self._unregister is not None:
            try:
                self._unregister(block.ctypes.data)
            except Exception:  # noqa: BLE001 - the context is gone (process exit): nothing to unlock
                pass

    def _take(self) -> np.ndarray | None:
        with self._lock:
            while not self._free:
                if not self.enabled or self.retired:
                    return None
                if self._made < self.max_blocks:
                    self._made += 1  # counted before it is made, so threads at once stay within max_blocks
                    break
                if not self._pending:
                    return None
                # the pool is full of blocks lent or being made ahead: one is nearly ready (a maker that never
                # delivers, whatever the reason, costs one wait, then the caller's fallback)
                if not self._ready.wait(timeout=WAIT_S):
                    return None
            if self._free:
                return self._free.pop()
        block = self._new_block()
        if block is None:
            with self._lock:
                self._made -= 1
                self._ready.notify_all()
        return block

    def _give(self, block: np.ndarray) -> None:
        with self._lock:
            if not self.retired:
                self._free.append(block)
                self._ready.notify()
                return
            self._made -= 1
        self._release(block)

    def prefill(self, blocks: int, threads: int = 1) -> int:
        """Start making blocks ahead, on ``threads`` background threads, until the pool has ``blocks`` (within
        ``max_blocks``); returns how many are being made.  A batch that finds none free waits for one of them.

        Why: made as batches come, each block costs its batch its first touches and its registration (about
        40 ms for a 161 MB block, one row group of the 128 MiB of then, on an H200's host), one after another:
        the first task of a new process streamed its pairs at a quarter of the speed of the next.  One thread
        by default: with four, the CLI's 20M x 3-d join to Parquet was slower in each of five alternated pairs
        of runs on H200s (join and write 1.76-2.02 s against 1.59-1.76 s): the page touches and registrations
        competed with the task's own reads and device calls."""
        with self._lock:
            want = min(int(blocks), self.max_blocks) - self._made
            if want <= 0 or not self.enabled or self.retired:
                return 0
            self._made += want
            self._pending += want

        def make(count: int) -> None:
            for _ in range(count):
                block = None
                try:
                    block = self._new_block() if self.enabled and not self.retired else None
                finally:
                    self._delivered(block)

        threads = max(1, min(int(threads), want))
        started = 0
        for t in range(threads):
            share = want // threads + (t < want % threads)
            try:
                threading.Thread(target=make, args=(share,), name="daskjoin-host-pool", daemon=True).start()
            except RuntimeError:  # no thread to be had (a process at its limit, or shutting down)
                with self._lock:
                    unmade = want - started
                    self._made -= unmade
                    self._pending -= unmade
                    self._ready.notify_all()
                return started
            started += share
        return want

    def _delivered(self, block: np.ndarray | None) -> None:
        """A block made ahead (None: not made) leaves the pending count and joins the free ones, in one step, so a
        batch never sees it neither pending nor free; every waiter is told (one may find the pool off)."""
        release = False
        with self._lock:
            self._pending -= 1
            if block is None or self.retired:
                self._made -= 1
                release = block is not None
            else:
                self._free.append(block)
            self._ready.notify_all()
        if release:
            self._release(block)

    def retire(self) -> None:
        """No more lending: free blocks unlocked now, lent ones when they come back."""
        with self._lock:
            self.retired = True
            free, self._free = self._free, []
            self._made -= len(free)
            self._ready.notify_all()  # batches waiting for a block made ahead: none will be lent now
        for block in free:
            self._release(block)

    def arrays(self, specs) -> tuple | None:
        """Empty numpy arrays for ``specs`` (``(shape, dtype)`` each) in one block, or None (no block free, or
        they do not fit one)."""
        offsets, at = [], 0
        for shape, dtype in specs:
            offsets.append(at)
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            at += -(-nbytes // ALIGN) * ALIGN
        if at > self.block_bytes:
            return None
        block = self._take()
        if block is None:
            return None
        lease = _Lease(block)
        weakref.finalize(lease, self._give, block).atexit = False  # at exit the process gives everything back
        whole = np.asarray(lease)  # its base is the lease: every view below keeps the lease, and so the block
        out = []
        for (shape, dtype), start in zip(specs, offsets):
            dtype = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            out.append(whole[start:start + count * dtype.itemsize].view(dtype).reshape(shape))
        return tuple(out)


_POOL: dict = {}
_POOL_LOCK = threading.Lock()


def _cuda_register(ptr: int, nbytes: int) -> None:
    from .gpu_common import cupy

    cupy().cuda.runtime.hostRegister(ptr, nbytes, 1)  # cudaHostRegisterPortable: every device may copy into it


def _cuda_unregister(ptr: int) -> None:
    from .gpu_common import cupy

    cupy().cuda.runtime.hostUnregister(ptr)


@functools.lru_cache(maxsize=None)
def _host_memory() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # noqa: BLE001 - no psutil: a modest default
        return 16 << 30


def pool_bytes() -> int:
    """Bytes the process's pool may hold (``daskjoin.host-pool-bytes``; "auto": a sixteenth of the host's
    memory, at most 4 GiB; 0: no pool)."""
    from .. import config

    wanted = config.get("host-pool-bytes")
    if wanted in (None, "auto"):
        return int(min(4 << 30, _host_memory() // 16))
    return max(0, config.parse_bytes(wanted))


#: blocks beyond the writer threads' pieces in flight: the batch being copied, the piece a GPU task makes ahead of
#: the one it hands on (execution.task._timed), a task's held remainder, the next task
SPARE_BLOCKS = 4


def batch_pool() -> HostPool | None:
    """This process's pool of blocks of one transfer batch each (:func:`~.registry.transfer_pairs`): as many
    as pieces can be in flight (the writer threads' and :data:`SPARE_BLOCKS`) within :func:`pool_bytes`, or
    None where that leaves room for fewer than two."""
    from ..cores import writer_threads
    from .registry import transfer_pairs

    block = BLOCK_BYTES_PER_PAIR * transfer_pairs() + 3 * ALIGN
    blocks = min(pool_bytes() // block, writer_threads() + SPARE_BLOCKS)
    if blocks < 2:
        return None
    with _POOL_LOCK:
        pool = _POOL.get((block, blocks))
        if pool is None:
            for old in _POOL.values():  # other settings: the old blocks are unlocked as their last arrays go
                old.retire()
            _POOL.clear()
            pool = _POOL[(block, blocks)] = HostPool(block, blocks, register=_cuda_register,
                                                     unregister=_cuda_unregister)
        return pool


def prefill_for(pairs: float) -> int:
    """Blocks made ahead (:meth:`HostPool.prefill`) for a GPU task about to stream about ``pairs`` pairs to the
    host: one a transfer batch, within the pool's bound; none where its batches would not use the pool."""
    from .registry import transfer_pairs

    step = transfer_pairs()
    if not pairs or pairs < MIN_FILL * step:
        return 0
    pool = batch_pool()
    if pool is None or not pool.enabled:
        return 0
    return pool.prefill(-(-int(pairs) // step))


def pooled_to_host(*arrays) -> tuple | None:
    """C-contiguous device arrays (None passes through) copied into one pooled block, or None where the pool
    has no block for them or they would fill less than :data:`MIN_FILL` of one (the caller's fallback copies
    them)."""
    from .gpu_common import cupy

    live = [a for a in arrays if a is not None]
    if not any(a.size for a in live) or any(not a.flags.c_contiguous for a in live):
        return None
    pool = batch_pool()
    if pool is None or not pool.enabled or sum(a.nbytes for a in live) < MIN_FILL * pool.block_bytes:
        return None
    host = pool.arrays([(a.shape, a.dtype) for a in live])
    if host is None:
        return None
    stream = cupy().cuda.get_current_stream()
    try:
        for a, out in zip(live, host):
            if a.size:
                a.get(out=out, blocking=False)
    finally:  # on an error too: no copy may still be writing the block when it goes back to the pool
        stream.synchronize()
    moved = iter(host)
    return tuple(None if a is None else next(moved) for a in arrays)
