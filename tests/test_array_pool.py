"""The pool of large host arrays (``daskjoin.kernels.array_pool``): blocks reused, never lent twice at once."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import daskjoin
from daskjoin.kernels import array_pool
from daskjoin.kernels.array_pool import MIN_BYTES, ArrayPool

BIG = MIN_BYTES // 8 * 3  # int64 elements of 3x the smallest pooled request


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
    pool = ArrayPool(BIG * 8 * 2)  # room for about two blocks of BIG int64
    held = [pool.empty(BIG, np.int64) for _ in range(4)]
    del held
    gc.collect()
    assert 0 < pool.free_bytes <= pool.keep
    pool.release()
    assert pool.free_bytes == 0


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


@pytest.mark.parametrize("rows", [0, 1, 5000, 300_000])
def test_pooled_join_buffers_give_the_same_pairs_again(rows):
    """The grid join's buffers come from the pool: the same join run twice (its second run in reused blocks,
    garbage from the first) gives the same sorted pairs, and those of a brute-force float64 oracle."""
    from daskjoin.kernels.grid import GridJoin
    from daskjoin.kernels.pair_sort import sort_pairs

    rng = np.random.default_rng(rows)
    x = rng.random((rows, 2)).astype(np.float32)
    eps = 0.01 if rows <= 5000 else 0.002
    results = []
    for _ in range(2):
        i, j, d = GridJoin(x, None, eps).pairs()
        results.append(sort_pairs(i, j, d))
        del i, j, d
        gc.collect()
    for a, b in zip(results[0], results[1]):
        assert np.array_equal(a, b)
    if rows <= 5000:
        x64 = x.astype(np.float64)
        d2 = ((x64[:, None, :] - x64[None, :, :]) ** 2).sum(-1)
        oi, oj = np.nonzero(np.triu(d2 <= eps * eps, 1))
        assert np.array_equal(results[0][0], oi) and np.array_equal(results[0][1], oj)


def test_the_setting_turns_the_pool_off_and_bounds_it():
    import dask.config

    with dask.config.set({"daskjoin.array-pool-bytes": 0}):
        assert array_pool.empty(BIG, np.int64).base is None
    with dask.config.set({"daskjoin.array-pool-bytes": "64MiB"}):
        assert array_pool.keep_bytes() == 64 << 20
        assert array_pool.empty(BIG, np.int64).base is not None
