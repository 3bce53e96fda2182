"""How much memory a task's drivers may take, and a hook that makes allocations fail (for tests).

**Share.**  A task that ran out of memory (host ``MemoryError``, CuPy's ``OutOfMemoryError``) is run
again with a smaller share (:func:`share`): the task's batches, its in-memory sort and the GPU
drivers' device buffers (``gpu_common.device_budget_bytes``) all scale with it, so the retry
splits the same partition into smaller pieces.  The share belongs to the task's thread: the
in-process runner's other task thread is not slowed down.

**Budget.**  GPU drivers size their buffers from the device memory free, but never from more than
the task's memory budget (:func:`budget`, set by the task body from the plan's budget), so a join
planned for 256 MB tasks holds about that much device memory per task.

**Injected failures.**  :func:`fail_allocation` arms a counter of this process: the ``n``-th
allocation from then on fails, on the CPU the pair buffers the drivers fill (:func:`pair_buffers`),
on a GPU every CuPy allocation (an allocator wrapped around CuPy's pool, installed by
:func:`fail_allocation` where CuPy is loaded).  Arm it in a worker with ``client.run``.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

_LOCAL = threading.local()
_FAULT = {"left": None, "every": False, "lock": threading.Lock(), "failed": 0}


def share() -> float:
    """The fraction of its usual memory the current task's drivers may take (1.0 unless retrying)."""
    return getattr(_LOCAL, "share", 1.0)


def device_limit() -> int | None:
    """Bytes of device memory the current task may size its buffers from (its memory budget), or None."""
    return getattr(_LOCAL, "limit", None)


@contextlib.contextmanager
def budget(nbytes: int | None):
    """Run the block with the task's memory budget as its device memory limit (None: the free memory)."""
    previous = device_limit()
    _LOCAL.limit = int(nbytes) if nbytes else None
    try:
        yield
    finally:
        _LOCAL.limit = previous


@contextlib.contextmanager
def reduced(fraction: float):
    """Run the block with memory share ``fraction`` (of the enclosing share) in this thread."""
    previous = share()
    _LOCAL.share = previous * fraction
    try:
        yield
    finally:
        _LOCAL.share = previous


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says an allocation failed, on the host or on a GPU (CuPy, cuBLAS, a CUDA call)."""
    if isinstance(exc, MemoryError):  # CuPy's OutOfMemoryError is one
        return True
    text = f"{type(exc).__name__}: {exc}"
    return any(mark in text for mark in ("cudaErrorMemoryAllocation", "CUBLAS_STATUS_ALLOC_FAILED",
                                          "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"))


class InjectedAllocationFailure(MemoryError):
    """The allocation :func:`fail_allocation` was armed to fail."""


def fail_allocation(n: int | None, every: bool = False) -> None:
    """Make the ``n``-th allocation from now fail (``every``: that one and every later one); None disarms."""
    with _FAULT["lock"]:
        _FAULT.update(left=None if n is None else int(n), every=bool(every), failed=0)
    _install_cupy_hook(n is not None)


def failures() -> int:
    """Allocations failed on purpose since the hook was armed."""
    return _FAULT["failed"]


def _count_allocation(nbytes: int) -> None:
    with _FAULT["lock"]:
        left = _FAULT["left"]
        if left is None:
            return
        left -= 1
        if left > 0:
            _FAULT["left"] = left
            return
        _FAULT["left"] = 0 if _FAULT["every"] else None
        _FAULT["failed"] += 1
    raise InjectedAllocationFailure(f"injected failure of an allocation of {nbytes:,} bytes")


def pair_buffers(size: int):
    """Empty (i, j, dist) arrays of ``size`` pairs, the buffers CPU drivers fill (counted by the hook)."""
    if _FAULT["left"] is not None:
        _count_allocation(20 * int(size))
    from .array_pool import empty

    return empty(size, np.int64), empty(size, np.int64), empty(size, np.float32)


def _install_cupy_hook(armed: bool) -> None:
    """CuPy allocations through the counter while armed; the allocator from before again when disarmed."""
    try:
        import cupy as cp
    except ImportError:
        return  # a host without CuPy: only pair_buffers counts

    pool = cp.get_default_memory_pool()
    if not armed:
        previous = _FAULT.pop("allocator", None)
        if previous is not None:
            cp.cuda.set_allocator(previous)  # whatever was there before (RMM on some dask-cuda workers)
        return
    get_allocator = getattr(cp.cuda.memory, "get_allocator", None)
    _FAULT.setdefault("allocator", get_allocator() if get_allocator is not None else pool.malloc)
    current = _FAULT["allocator"]

    def failing_malloc(nbytes):
        try:
            _count_allocation(nbytes)
        except InjectedAllocationFailure:
            # what CuPy raises when the device is full: the drivers' error path is the real one
            raise cp.cuda.memory.OutOfMemoryError(int(nbytes), 0, 0) from None
        return current(nbytes)

    cp.cuda.set_allocator(failing_malloc)
