"""Copies between the device and pageable host memory at pinned speed: two small reused pinned buffers, parallel
packing and unpacking (``to_pageable`` down, ``to_device`` up).

Why: a copy from the device into fresh pageable memory (``cupy.ndarray.get``) runs at ~3.5 GB/s on an
H100 host (768 MB of kNN rows in 0.22 s): the driver stages it through its own pinned buffer and one
CPU thread copies it out, touching every fresh page of the destination for the first time.  Pinned
output arrays are fast but cost ~0.5 s per GiB to pin, and a caller that keeps its rows makes the pool
pin fresh ones every time.  Here each thread keeps two pinned buffers of ``STAGE_BYTES`` for the life of
the process: the device copies chunk c + 1 into one while copy threads copy chunk c out of the other
into the caller's pageable array, so the first touches of its pages run on all cores at once.
The copy threads are plain threads (numpy releases the GIL): a Numba kernel measured the same but cost
~2 s of compilation in a new process with a cold cache.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .gpu_common import cupy

#: bytes of each of a thread's two pinned staging buffers (pinned once per thread, ~16 ms each, and kept for the
#: life of the process: 64 MiB a thread that copies)
STAGE_BYTES = 32 << 20
#: copies smaller than this go through ``get`` (no staging buffers pinned for them)
STAGED_MIN_BYTES = 4 << 20
#: a host copy is cut into pieces of at least this many bytes, one a pool thread
_PIECE_BYTES = 1 << 20

_local = threading.local()
_pool_lock = threading.Lock()
_pool = None
_POOL_THREADS = max(1, min(16, os.cpu_count() or 1))


def _threads() -> ThreadPoolExecutor:
    """The process's copy threads (numpy releases the GIL while it copies, so they run at once).  Plain
    threads, not Numba: nothing to compile, which a new process would otherwise pay on its first copy."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_POOL_THREADS, thread_name_prefix="daskjoin-copy")
        return _pool


def _in_pieces(n: int, itemsize: int, fn) -> None:
    """``fn(lo, hi)`` over ``[0, n)`` cut into pieces of at least ``_PIECE_BYTES``, run by the copy threads."""
    pool = _threads()
    pieces = max(1, min(_POOL_THREADS, n * itemsize // _PIECE_BYTES))
    cuts = [n * p // pieces for p in range(pieces + 1)]
    for f in [pool.submit(fn, lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:]) if hi > lo]:
        f.result()


def repeat_each(values, k: int) -> np.ndarray:
    """``np.repeat(values, k)`` for int64 values, written by the copy threads (fresh pages touched at once)."""
    values = np.ascontiguousarray(values, np.int64)
    k = int(k)
    out = np.empty(values.shape[0] * k, np.int64)
    if out.size:
        rows = out.reshape(values.shape[0], k)

        def fill(lo, hi):
            rows[lo:hi] = values[lo:hi, None]

        _in_pieces(values.shape[0], 8 * k, fill)
    return out


def _stages():
    """This thread's two pinned buffers of ``STAGE_BYTES`` (made on first use; CuPy's pinned pool keeps them
    while referenced)."""
    stages = getattr(_local, "stages", None)
    if stages is None or stages[0][1].shape[0] != STAGE_BYTES:
        cp = cupy()
        mems = [cp.cuda.alloc_pinned_memory(STAGE_BYTES) for _ in range(2)]
        stages = _local.stages = [(mem, np.frombuffer(mem, np.uint8, STAGE_BYTES)) for mem in mems]
    return stages


def to_pageable(*arrays) -> tuple:
    """C-contiguous device arrays to new numpy arrays (pageable) of the same shape and dtype; returns when done.

    The copies are ordered after the work already queued on the current stream, so a caller needs
    no synchronisation of its own.
    """
    cp = cupy()
    outs = tuple(np.empty(a.shape, a.dtype) for a in arrays)
    if sum(a.nbytes for a in arrays) < STAGED_MIN_BYTES:
        for a, out in zip(arrays, outs):
            a.get(out=out)
        return outs
    chunks = []  # (device pointer, destination bytes)
    for a, out in zip(arrays, outs):
        if not a.flags.c_contiguous:
            raise ValueError("to_pageable copies C-contiguous device arrays only")
        dst = out.reshape(-1).view(np.uint8)
        chunks += [(a.data.ptr + at, dst[at:at + STAGE_BYTES]) for at in range(0, a.nbytes, STAGE_BYTES)]
    if not chunks:
        return outs
    stream = cp.cuda.get_current_stream()
    stages, done = _stages(), [None, None]

    def start(c):
        ptr, dst = chunks[c]
        mem, _ = stages[c % 2]
        cp.cuda.runtime.memcpyAsync(mem.ptr, ptr, dst.shape[0], cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
        done[c % 2] = stream.record()

    start(0)
    try:
        for c in range(len(chunks)):
            if c + 1 < len(chunks):
                start(c + 1)  # its buffer's last chunk (c - 1) was copied out in the previous round
            done[c % 2].synchronize()
            dst, src = chunks[c][1], stages[c % 2][1]

            def copy(lo, hi):
                dst[lo:hi] = src[lo:hi]

            _in_pieces(dst.shape[0], 1, copy)
    finally:  # on an error too: no copy may still be writing a staging buffer when the next call takes it
        stream.synchronize()
    return outs


def _pinned(host: np.ndarray) -> bool:
    """Whether ``host`` lies in page-locked memory (CuPy's pinned pool, ``pinned_empty``)."""
    cp = cupy()
    try:
        return cp.cuda.runtime.pointerGetAttributes(host.ctypes.data).type == cp.cuda.runtime.memoryTypeHost
    except Exception:  # noqa: BLE001 - memory CUDA never saw: pageable
        return False


def to_device(host) -> "cupy.ndarray":
    """A host array on the device (same shape and dtype, C order); returns when the copy is done.

    Pageable memory goes up through this thread's two pinned staging buffers: copy threads fill one while
    the device takes the other.  Through ``cupy.asarray`` the driver stages it with one thread: 5 GB of rows
    read from Zarr took 4.6 s in a new process on an H100 host (0.5 s once warm).  Pinned or small arrays
    are copied directly.
    """
    cp = cupy()
    host = np.ascontiguousarray(host)
    if host.nbytes < STAGED_MIN_BYTES or _pinned(host):
        out = cp.asarray(host)  # from pinned memory asynchronous: done before the caller may write it again
        cp.cuda.get_current_stream().synchronize()
        return out
    out = cp.empty(host.shape, host.dtype)
    src = host.reshape(-1).view(np.uint8)
    stream = cp.cuda.get_current_stream()
    stages, done = _stages(), [None, None]
    try:
        for c, at in enumerate(range(0, host.nbytes, STAGE_BYTES)):
            piece = src[at:at + STAGE_BYTES]
            mem, buf = stages[c % 2]
            if done[c % 2] is not None:
                done[c % 2].synchronize()  # the buffer's previous chunk is on the device

            def copy(lo, hi):
                buf[lo:hi] = piece[lo:hi]

            _in_pieces(piece.shape[0], 1, copy)
            cp.cuda.runtime.memcpyAsync(out.data.ptr + at, mem.ptr, piece.shape[0],
                                        cp.cuda.runtime.memcpyHostToDevice, stream.ptr)
            done[c % 2] = stream.record()
    finally:  # on an error too: no upload may still be reading a staging buffer when the next call fills it
        stream.synchronize()
    return out
