"""The pool of large host arrays (``daskjoin.kernels.array_pool``): blocks reused, never lent twice at once."""
from __future__ import annotations

import gc
import os
import threading
import time

import numpy as np
import pytest

import daskjoin
from daskjoin.kernels import array_pool
from daskjoin.kernels.array_pool import GRAIN, MIN_BYTES, ArrayPool

BIG = 2 * GRAIN // 8  # int64 elements filling two grains exactly (a block of its size)
assert BIG * 8 >= MIN_BYTES


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_empty_has_the_shape_and_dtype_asked():
    pool = ArrayPool(1 << 30)
    a = pool.empty((BIG // 2, 2), np.float64)
    assert a.shape == (BIG // 2, 2) and a.dtype == np.float64
    assert a.flags.c_contiguous and a.flags.writeable and a.flags.aligned
    a[:] = 1.5
    assert float(a.sum()) == 1.5 * a.size


def test_a_freed_block_is_lent_again():
    pool = ArrayPool(1 << 30)
    a = pool.empty(BIG, np.int64)
    where = _address(a)
    del a
    gc.collect()
    assert pool.free_bytes >= BIG * 8
    b = pool.empty(BIG, np.int64)
    assert _address(b) == where
    assert pool.free_bytes == 0


@pytest.mark.parametrize("nbytes", [MIN_BYTES, GRAIN * 3 // 4 + 8, GRAIN * 5 // 2])
def test_a_request_takes_back_the_block_it_would_get(nbytes):
    """Sizes that are not whole grains (a 200k-row index's 1.6 MB) reuse their rounded-up block."""
    pool = ArrayPool(1 << 30)
    a = pool.empty(nbytes // 8, np.int64)
    where = _address(a)
    del a
    gc.collect()
    assert _address(pool.empty(nbytes // 8, np.int64)) == where


def test_a_block_held_by_a_view_is_not_lent():
    pool = ArrayPool(1 << 30)
    a = pool.empty(BIG, np.int64)
    view = a[10:20].view(np.float64)  # the block stays lent while any view of it lives
    where = _address(a)
    del a
    gc.collect()
    b = pool.empty(BIG, np.int64)
    assert _address(b) != where
    view[:] = 2.0
    b[:] = -1  # writing one must not touch the other
    assert np.all(view == 2.0)
    del view
    gc.collect()
    assert pool.free_bytes >= BIG * 8


def test_small_requests_and_a_disabled_pool_come_from_numpy():
    pool = ArrayPool(1 << 30)
    small = pool.empty(16, np.int64)
    assert small.base is None  # numpy's own memory
    off = ArrayPool(0)
    big = off.empty(BIG, np.int64)
    assert big.base is None


def test_a_large_block_does_not_serve_a_much_smaller_request():
    pool = ArrayPool(1 << 30)
    a = pool.empty(8 * BIG, np.int64)
    where = _address(a)
    del a
    gc.collect()
    small = pool.empty(BIG, np.int64)  # under MIN_FILL of the free block: a block of its own
    assert _address(small) != where


def test_the_pool_keeps_at_most_its_bytes():
    pool = ArrayPool(BIG * 8 * 2)  # room for two blocks of BIG int64
    held = [pool.empty(BIG, np.int64) for _ in range(4)]
    del held
    gc.collect()
    assert pool.free_bytes == pool.keep
    pool.set_keep(BIG * 8)  # a lower bound applies at once
    assert pool.free_bytes == BIG * 8
    pool.release()
    assert pool.free_bytes == 0


def test_a_lease_ending_inside_the_pools_lock_is_filed_later():
    """A block whose last view dies while its thread holds the pool's lock (the garbage collector may run a
    finalizer anywhere) is queued, not filed re-entrantly; the next use of the pool files it."""
    pool = ArrayPool(1 << 30)
    a = pool.empty(BIG, np.int64)
    where = _address(a)
    with pool._lock:
        del a
        gc.collect()
    b = pool.empty(BIG, np.int64)
    assert _address(b) == where


def test_clear_cache_releases_the_processes_pool():
    a = array_pool.empty(BIG, np.int64)
    del a
    gc.collect()
    assert array_pool.POOL.free_bytes > 0
    daskjoin.clear_cache()
    assert array_pool.POOL.free_bytes == 0


def test_threads_never_share_a_block():
    """Many threads taking and dropping arrays at once: each array written with its thread's mark keeps it."""
    pool = ArrayPool(1 << 30)
    errors = []

    def work(mark: int):
        try:
            for step in range(40):
                arrays = [pool.empty(BIG + 4096 * ((mark + step + k) % 3), np.int64) for k in range(3)]
                for k, a in enumerate(arrays):
                    a[:] = mark * 10 + k
                for k, a in enumerate(arrays):
                    if not np.all(a == mark * 10 + k):
                        errors.append((mark, step, k))
                del arrays
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(m,)) for m in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_pooled_join_buffers_give_the_oracles_pairs_in_reused_blocks():
    """The grid join's buffers, index and sort come from the pool: the same join run again in blocks reused from
    the first run, their bytes overwritten with garbage in between, gives cKDTree's pairs both times."""
    from scipy.spatial import cKDTree

    from daskjoin.kernels.grid import GridJoin
    from daskjoin.kernels.pair_sort import sort_pairs

    x = np.random.default_rng(3).random((300_000, 2)).astype(np.float32)
    eps = 0.002
    expected = cKDTree(x.astype(np.float64)).query_pairs(eps, output_type="ndarray")
    expected = expected[np.lexsort((expected[:, 1], expected[:, 0]))]
    pool = array_pool.POOL
    for _ in range(2):
        i, j, d = sort_pairs(*GridJoin(x, None, eps).pairs())
        assert i.base is not None and j.base is not None  # views of pooled blocks
        assert np.array_equal(i, expected[:, 0]) and np.array_equal(j, expected[:, 1])
        del i, j, d
        gc.collect()
        with pool._lock:
            pool._file_returned()
            assert pool._blocks, "the join's blocks came back"
            for block in pool._blocks:
                block.fill(0xFF)


def test_the_setting_turns_the_pool_off_and_bounds_it():
    import dask.config

    with dask.config.set({"daskjoin.array-pool-bytes": 0}):
        assert array_pool.empty(BIG, np.int64).base is None
    with dask.config.set({"daskjoin.array-pool-bytes": "64MiB"}):
        assert array_pool.keep_bytes() == 64 << 20
        held = [array_pool.empty(BIG, np.int64) for _ in range(12)]  # 96 MiB lent
        assert all(a.base is not None for a in held)
        del held
        gc.collect()
        assert array_pool.POOL.free_bytes <= 64 << 20
        array_pool.empty(BIG, np.int64)
        assert array_pool.POOL.keep == 64 << 20
    with dask.config.set({"daskjoin.array-pool-bytes": 0}):
        array_pool.empty(BIG, np.int64)  # turned off: what it held goes at once
        assert array_pool.POOL.free_bytes == 0


def test_free_blocks_go_once_the_pool_is_idle(monkeypatch):
    """A process that lends nothing for IDLE_S frees its free blocks (a worker idle after a join)."""
    import time

    monkeypatch.setattr(array_pool, "IDLE_S", 0.3)
    pool = ArrayPool(1 << 30)
    lent = time.monotonic()
    a = pool.empty(BIG, np.int64)
    del a  # (the block returns at once: its lease's last reference is gone)
    free = pool.free_bytes
    if time.monotonic() - lent < array_pool.IDLE_S:  # (a loaded machine may have let the sweeper in already)
        assert free == BIG * 8
    deadline = time.monotonic() + 10
    while pool.free_bytes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.free_bytes == 0
    b = pool.empty(BIG, np.int64)  # and it lends again as before
    assert b.base is not None and b.shape == (BIG,)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_the_lock_is_held_gets_a_pool_of_its_own(monkeypatch):
    """A process forked while another thread holds the pool's lock lends large arrays in the child (the
    parent's lock, held by a thread the child does not have, would make its first large array wait forever)."""
    monkeypatch.setattr(array_pool, "keep_bytes", lambda: 64 << 20)
    array_pool.empty((4 << 20,), np.uint8)  # the parent's pool in use (its sweeper started)
    held, fork_done = threading.Event(), threading.Event()

    def hold():
        with array_pool.POOL._lock:
            held.set()
            fork_done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: a large array, written and read, then out at once
        code = 1
        try:
            a = array_pool.empty((4 << 20,), np.uint8)
            a[:] = 7
            code = 0 if int(a.sum()) == 7 * (4 << 20) and array_pool.POOL._lock.acquire(timeout=1) else 2
        finally:
            os._exit(code)
    fork_done.set()
    holder.join()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung on the pool")
    assert os.waitstatus_to_exitcode(status) == 0
