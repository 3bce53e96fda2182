"""Threads over blocks of rows, each BLAS call on one thread: the parallelism of the CPU GEMM filters
(:mod:`.brute_gemm`, :mod:`.knn_gemm`).

Each thread forms a block's products with a single-threaded BLAS call and screens them at once, while they are
in cache; BLAS's own threads would compete with these.  BLAS's thread count is a process-wide setting, so it is
held at one by a count of users: the first to enter sets it, the last to leave restores it.  Nested, concurrent
(two tasks of a worker) or interleaved users (two generators paused between batches) then never leave it stuck
at one; while any user is inside, other BLAS calls of the process run on one thread too (only slower).
"""
from __future__ import annotations

import contextlib
import itertools
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numba

_lock = threading.Lock()
_users = 0
_limiter = None


@contextlib.contextmanager
def one_blas_thread():
    """BLAS on one thread while inside (counted: see the module docstring)."""
    global _users, _limiter
    from threadpoolctl import threadpool_limits

    with _lock:
        if _users == 0:
            _limiter = threadpool_limits(1, "blas")
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                _limiter.restore_original_limits()
                _limiter = None


@contextlib.contextmanager
def block_pool(blocks: int):
    """A pool of one thread a core (Numba's thread count) for ``blocks`` blocks of rows, BLAS on one thread while
    it lives; None where one block or one thread (no pool, BLAS as it is: what a pool and the limit cost, ~1 ms).
    Calls not yet started when the caller leaves (a consumer that stopped early) are cancelled."""
    threads = min(blocks, max(1, numba.get_num_threads()))
    if threads <= 1:
        yield None
        return
    with one_blas_thread():
        pool = ThreadPoolExecutor(threads)
        try:
            yield pool
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def in_order(pool, fn, items, ahead: int):
    """``fn`` of each of ``items`` on ``pool``, yielded in order, at most ``ahead`` calls submitted and not yet
    yielded (so at most that many results are held)."""
    items = iter(items)
    pending = deque(pool.submit(fn, x) for x in itertools.islice(items, ahead))
    while pending:
        result = pending.popleft().result()
        for x in itertools.islice(items, 1):
            pending.append(pool.submit(fn, x))
        yield result
