"""Serialise calls of ``parallel=True`` Numba functions where the threading layer is not thread-safe.

A Dask worker runs several task threads (``dask worker``: one per core), so
several tasks may launch parallel Numba kernels at once in one process.  The
OpenMP and TBB layers allow that; ``workqueue`` (Numba's fallback where
neither loads) aborts the whole process ("Terminating: Concurrent access has
been detected").  Every Python-level call of a ``parallel=True`` function
therefore runs inside ``with serialised():``, which takes a per-process lock on
``workqueue`` only (and on any layer not known to be thread-safe); on ``omp``
and ``tbb`` it is a shared no-op context, so those pay nothing.

Which layer: Numba picks it once per process, at the first parallel launch,
from ``NUMBA_THREADING_LAYER`` / ``NUMBA_THREADING_LAYER_PRIORITY`` and what
loads.  Rather than re-implement that choice, the first ``serialised()`` call
makes Numba do it (``numba.np.ufunc.parallel._launch_threads``, the function
Numba itself runs before the first launch; it only loads the layer and starts
its threads, no kernel runs) and reads the result with
``numba.threading_layer()``.  Should that private function ever go away, the
layer counts as unknown and calls are serialised: safe, merely slower.

Hold the lock only around the call itself, never across a generator ``yield``
(a paused generator would block every other task of the worker).
"""
from __future__ import annotations

import threading
from contextlib import nullcontext

#: Layers on which concurrent launches from several threads are allowed (Numba docs: "threadsafe").
THREAD_SAFE_LAYERS = frozenset({"omp", "tbb"})

_LOCK = threading.Lock()
_NO_LOCK = nullcontext()
_guard = None  # _LOCK or _NO_LOCK, decided on first use in each process


def threading_layer() -> str:
    """The Numba threading layer of this process (initialising it if no parallel kernel ran yet)."""
    import numba

    try:
        from numba.np.ufunc.parallel import _launch_threads

        _launch_threads()
        return numba.threading_layer()
    except (ImportError, ValueError):  # private API moved, or no layer loads (the kernel call will say why)
        return "unknown"


def serialised():
    """Context manager around one call of a ``parallel=True`` function: a lock unless the layer is thread-safe."""
    global _guard
    if _guard is None:
        _guard = _NO_LOCK if threading_layer() in THREAD_SAFE_LAYERS else _LOCK
    return _guard


def set_threads(wanted: int) -> None:
    """Numba threads for the kernels this thread launches next (clamped to what Numba started)."""
    import numba

    numba.set_num_threads(max(1, min(int(wanted), numba.config.NUMBA_NUM_THREADS)))
