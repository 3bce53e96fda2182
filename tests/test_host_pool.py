"""The pool of reused page-locked host blocks for pair batches leaving the device (kernels/host_pool.py).

On any machine: a batch's arrays share one block, which returns to the pool only when the last view of them
is garbage; the pool never makes more than its bound, refuses what does not fit a block, and turns itself
off when registration fails.  On a GPU: the batches hold the device's bytes, blocks are reused across
batches, and a join's Parquet files and frames are the same with the pool and without it."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pandas as pd
import pytest

import daskjoin as dj
from daskjoin.kernels import host_pool
from daskjoin.kernels.gpu_common import gpu_available
from daskjoin.kernels.host_pool import HostPool

needs_gpu = pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy")

SPECS = [((100,), np.int64), ((100,), np.int64), ((100,), np.float32)]


def test_a_batch_shares_one_block_and_returns_it_when_its_last_view_goes():
    pool = HostPool(4096, max_blocks=2)
    i, j, d = pool.arrays(SPECS)
    assert (i.dtype, j.dtype, d.dtype) == (np.int64, np.int64, np.float32)
    assert i.shape == j.shape == d.shape == (100,)
    assert all(a.flags.writeable and a.flags.c_contiguous for a in (i, j, d))
    assert all(a.ctypes.data % host_pool.ALIGN == 0 for a in (i, j, d))
    i[:], j[:], d[:] = np.arange(100), -np.arange(100), 0.5  # no array overlaps another
    np.testing.assert_array_equal(i, np.arange(100))
    np.testing.assert_array_equal(j, -np.arange(100))
    assert pool.made == 1 and pool.free == 0
    tail = i[50:]  # a view (a piece of a row group) keeps the block
    del i, j, d
    gc.collect()
    assert pool.free == 0
    np.testing.assert_array_equal(tail, np.arange(50, 100))
    del tail
    gc.collect()
    assert pool.free == 1
    again = pool.arrays(SPECS)
    assert pool.made == 1 and pool.free == 0  # the same block, lent again
    del again


def test_the_pool_stops_at_its_bound_and_refuses_what_does_not_fit():
    pool = HostPool(4096, max_blocks=2)
    held = [pool.arrays(SPECS), pool.arrays(SPECS)]
    assert pool.made == 2
    assert pool.arrays(SPECS) is None  # full: the caller falls back
    assert pool.arrays([((1000,), np.int64)]) is None  # 8,000 bytes: more than a block
    held.pop()
    gc.collect()
    assert pool.arrays(SPECS) is not None


def test_empty_and_zero_length_arrays():
    pool = HostPool(256, max_blocks=1)
    got = pool.arrays([((0,), np.int64), ((0,), np.float32)])
    assert [a.shape for a in got] == [(0,), (0,)]


def test_a_failed_registration_turns_the_pool_off():
    def refuse(ptr, nbytes):
        raise RuntimeError("page-locked memory capped")

    pool = HostPool(4096, max_blocks=4, register=refuse)
    assert pool.arrays(SPECS) is None
    assert not pool.enabled and pool.made == 0


def test_registration_sees_every_new_block_once():
    seen = []
    pool = HostPool(4096, max_blocks=3, register=lambda ptr, nbytes: seen.append((ptr, nbytes)))
    for _ in range(5):  # taken and given back: one block
        got = pool.arrays(SPECS)
        del got
        gc.collect()
    assert len(seen) == 1 and seen[0][1] == 4096


def test_threads_at_once_stay_within_the_bound_and_get_distinct_blocks():
    pool = HostPool(4096, max_blocks=3)
    barrier = threading.Barrier(8)
    got, lock = [], threading.Lock()

    def take():
        barrier.wait()
        arrays = pool.arrays(SPECS)
        with lock:
            got.append(arrays)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lent = [a for a in got if a is not None]
    assert len(lent) == 3 and pool.made == 3
    assert len({a[0].ctypes.data for a in lent}) == 3


def test_a_retired_pool_unlocks_its_blocks_before_they_may_be_freed():
    seen = {"locked": set(), "unlocked": []}
    pool = HostPool(4096, max_blocks=3, register=lambda ptr, nbytes: seen["locked"].add(ptr),
                    unregister=seen["unlocked"].append)
    lent = pool.arrays(SPECS)
    spare = pool.arrays(SPECS)
    del spare
    gc.collect()
    assert pool.free == 1 and pool.made == 2
    pool.retire()
    assert len(seen["unlocked"]) == 1 and pool.made == 1  # the free block at once
    assert pool.arrays(SPECS) is None  # retired: lends nothing
    lent[0][:] = 7  # the lent block is still good memory
    ptr = lent[0].ctypes.data
    del lent
    gc.collect()
    assert seen["unlocked"][-1] == ptr and pool.made == 0 and pool.free == 0
    assert set(seen["unlocked"]) == seen["locked"]


def _gated_register(gate: threading.Event, seen: list):
    def register(ptr, nbytes):
        assert gate.wait(10), "the test never opened the gate"
        seen.append(ptr)
    return register


def _taken_in_a_thread(pool):
    got = {}
    t = threading.Thread(target=lambda: got.update(arrays=pool.arrays(SPECS)), daemon=True)
    t.start()
    return t, got


def test_blocks_made_ahead_are_waited_for_and_lent_each_once():
    gate, seen = threading.Event(), []
    pool = HostPool(4096, max_blocks=3, register=_gated_register(gate, seen))
    assert pool.prefill(5) == 3  # within the bound
    assert pool.made == 3 and pool.prefill(3) == 0  # none more: they are all being made
    t, got = _taken_in_a_thread(pool)
    t.join(0.3)
    assert t.is_alive()  # waits for a block made ahead, rather than falling back (the pool is "full")
    gate.set()
    t.join(10)
    assert not t.is_alive() and got["arrays"] is not None
    held = [got["arrays"], pool.arrays(SPECS), pool.arrays(SPECS)]
    assert all(h is not None for h in held) and len({h[0].ctypes.data for h in held}) == 3
    assert pool.arrays(SPECS) is None  # all three lent, none pending: the caller falls back
    assert len(seen) == 3 and pool.made == 3


def test_a_registration_failing_ahead_turns_the_pool_off_and_wakes_the_waiting():
    gate = threading.Event()

    def refuse(ptr, nbytes):
        gate.wait(10)
        raise RuntimeError("page-locked memory capped")

    pool = HostPool(4096, max_blocks=2, register=refuse)
    assert pool.prefill(2, threads=1) == 2
    t, got = _taken_in_a_thread(pool)
    t.join(0.3)
    assert t.is_alive()
    gate.set()
    t.join(10)
    assert not t.is_alive() and got["arrays"] is None
    assert _soon(lambda: pool.made == 0) and not pool.enabled


def _soon(check, seconds: float = 5.0) -> bool:
    """Whether ``check()`` holds within ``seconds`` (background makers finish on their own time)."""
    for _ in range(int(seconds / 0.05)):
        if check():
            return True
        threading.Event().wait(0.05)
    return check()


def test_blocks_that_cannot_be_made_ahead_leave_nothing_to_wait_for(monkeypatch):
    """No thread to be had: the prefill takes its count back, and batches make their own blocks."""
    pool = HostPool(4096, max_blocks=2)

    def no_thread(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    assert pool.prefill(2) == 0
    assert pool.made == 0
    got = pool.arrays(SPECS)
    assert got is not None and pool.made == 1


def test_a_block_made_ahead_is_never_between_pending_and_free(monkeypatch):
    """A batch asking while a made-ahead block is being handed over gets it, never falls back."""
    gate, seen = threading.Event(), []
    pool = HostPool(4096, max_blocks=1, register=_gated_register(gate, seen))
    give = pool._give

    def slow_give(block):  # a hand-over in two steps would leave a gap here
        threading.Event().wait(0.3)
        give(block)

    monkeypatch.setattr(pool, "_give", slow_give)
    pool.prefill(1)
    gate.set()
    assert _soon(lambda: len(seen) == 1)
    threading.Event().wait(0.1)  # a batch asking now, while a two-step hand-over would be in its gap
    assert pool.arrays(SPECS) is not None


def test_blocks_made_ahead_of_a_retired_pool_are_unlocked_not_lent():
    gate, seen, unlocked = threading.Event(), [], []
    pool = HostPool(4096, max_blocks=2, register=_gated_register(gate, seen), unregister=unlocked.append)
    pool.prefill(2, threads=2)  # both being made when the pool retires (one thread would not start the second)
    t, got = _taken_in_a_thread(pool)
    t.join(0.3)
    pool.retire()
    t.join(10)
    assert not t.is_alive() and got["arrays"] is None  # woken by the retirement, lent nothing
    gate.set()
    assert _soon(lambda: pool.made == 0 and len(unlocked) == len(seen) == 2)
    assert pool.free == 0 and sorted(unlocked) == sorted(seen)


def test_prefill_for_a_task_makes_a_block_a_transfer_batch(fake_cupy):
    from daskjoin.kernels.registry import transfer_pairs

    step = transfer_pairs()
    assert host_pool.prefill_for(0) == 0 and host_pool.prefill_for(step * host_pool.MIN_FILL / 2) == 0
    assert host_pool.prefill_for(2.5 * step) == 3
    pool = host_pool.batch_pool()
    assert _soon(lambda: pool.free == 3) and pool.made == 3
    assert host_pool.prefill_for(10**9 * step) == pool.max_blocks - 3  # the pool's bound


def test_a_block_coming_back_in_a_thread_that_holds_the_lock_does_not_deadlock():
    """The garbage collector may run a lease's finalizer inside the pool's own locked region."""
    pool = HostPool(4096, max_blocks=1)
    arrays = pool.arrays(SPECS)
    done = threading.Event()

    def drop():
        nonlocal arrays
        with pool._lock:
            arrays = None  # the finalizer runs here, in this thread, under the lock
            gc.collect()
        done.set()

    t = threading.Thread(target=drop, daemon=True)
    t.start()
    assert done.wait(10), "deadlocked"
    assert pool.free == 1


def test_a_zero_copy_arrow_array_keeps_its_block():
    pa = pytest.importorskip("pyarrow")
    pool = HostPool(4096, max_blocks=1)
    i, j, d = pool.arrays(SPECS)
    i[:] = np.arange(100)
    column = pa.array(i[10:20])
    del i, j, d
    gc.collect()
    assert pool.free == 0
    assert column.to_pylist() == list(range(10, 20))
    del column
    gc.collect()
    assert pool.free == 1


class _FakeDeviceArray:
    """What ``pooled_to_host`` asks of a CuPy array, over a numpy array; ``fail``: its copy raises."""

    def __init__(self, data, contiguous=True, fail=False):
        self.data, self.fail = data, fail
        self.size, self.shape, self.dtype, self.nbytes = data.size, data.shape, data.dtype, data.nbytes
        self.flags = type("Flags", (), {"c_contiguous": contiguous})()

    def get(self, out, blocking=True):
        if self.fail:
            raise RuntimeError("copy failed")
        out[...] = self.data


@pytest.fixture
def fake_cupy(monkeypatch):
    """A CuPy stand-in that counts stream synchronisations, and a small process pool."""
    import dask

    from daskjoin.kernels import gpu_common

    synced = []
    stream = type("Stream", (), {"synchronize": lambda self: synced.append(1)})()
    runtime = type("Runtime", (), {})()
    fake = type("CuPy", (), {})()
    fake.cuda = type("Cuda", (), {"get_current_stream": staticmethod(lambda: stream), "runtime": runtime})()
    monkeypatch.setattr(gpu_common, "cupy", lambda: fake)
    monkeypatch.setattr(host_pool, "_cuda_register", lambda ptr, nbytes: None)
    monkeypatch.setattr(host_pool, "_cuda_unregister", lambda ptr: None)
    monkeypatch.setattr(host_pool, "_POOL", {})
    with dask.config.set({"daskjoin.host-pool-bytes": "64MiB", "daskjoin.row-group-bytes": 20 * 1000}):
        yield synced


def test_pooled_to_host_copies_into_a_block_and_passes_none_through(fake_cupy):
    i, d = np.arange(900, dtype=np.int64), np.linspace(0, 1, 900).astype(np.float32)
    got = host_pool.pooled_to_host(_FakeDeviceArray(i), None, _FakeDeviceArray(d))
    assert got[1] is None
    np.testing.assert_array_equal(got[0], i)
    np.testing.assert_array_equal(got[2], d)
    assert fake_cupy == [1]
    assert host_pool.batch_pool().made == 1


def test_pooled_to_host_leaves_to_the_fallback_what_it_cannot_take(fake_cupy):
    empty = _FakeDeviceArray(np.zeros(0, np.int64))
    assert host_pool.pooled_to_host(empty, empty) is None  # nothing to copy: no block taken
    strided = _FakeDeviceArray(np.arange(10), contiguous=False)
    assert host_pool.pooled_to_host(strided) is None
    too_big = _FakeDeviceArray(np.zeros(10**6, np.int64))  # more than one block of 1,000 pairs
    assert host_pool.pooled_to_host(too_big) is None
    few = _FakeDeviceArray(np.arange(100))  # 800 bytes of a 24 KB block: not worth holding a block for
    assert host_pool.pooled_to_host(few, few) is None
    assert host_pool.batch_pool().made == 0


def test_a_failed_copy_still_waits_for_the_stream_before_the_block_goes_back(fake_cupy):
    ok, bad = _FakeDeviceArray(np.arange(1000)), _FakeDeviceArray(np.arange(1000), fail=True)
    with pytest.raises(RuntimeError, match="copy failed"):
        host_pool.pooled_to_host(ok, bad)
    assert fake_cupy == [1]
    gc.collect()
    pool = host_pool.batch_pool()
    assert pool.made == 1 and pool.free == 1


def test_the_process_pool_follows_the_settings():
    import dask

    with dask.config.set({"daskjoin.host-pool-bytes": 0}):
        assert host_pool.batch_pool() is None
    with dask.config.set({"daskjoin.host-pool-bytes": "1GiB", "daskjoin.row-group-bytes": "1MiB",
                          "daskjoin.writer-threads": 3}):
        pool = host_pool.batch_pool()
        assert pool is not None
        assert pool.max_blocks == 3 + host_pool.SPARE_BLOCKS  # the pieces in flight, not the bytes, bind here
        assert pool.block_bytes >= host_pool.BLOCK_BYTES_PER_PAIR * ((1 << 20) // 20)
        assert host_pool.batch_pool() is pool


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("n", [0, 1, 1000, 33_333])
def test_pooled_batches_hold_the_device_bytes(n):
    import cupy as cp
    import dask

    from daskjoin.kernels.gpu_common import host_batches

    rng = np.random.default_rng(n)
    i, j = np.sort(rng.integers(0, 1 << 40, n)), rng.integers(0, 1 << 40, n)
    d = rng.random(n).astype(np.float32)
    dev = [cp.asarray(a) * 1 for a in (i, j, d)]  # work queued before the copies: they must follow it
    with dask.config.set({"daskjoin.row-group-bytes": 20 * 1000, "daskjoin.host-pool-bytes": "64MiB"}):
        pool = host_pool.batch_pool()
        made = pool.made
        assert pool.enabled
        batches = []
        for batch in host_batches(*dev, max_pairs=10**9):
            batches.append(tuple(np.array(a) for a in batch))  # copied out, so the block goes back
            del batch
        assert pool.made - made <= 2  # reused, not one block a batch
        # the batches did go through the pool (one of a few pairs is left to the fallback)
        assert pool.enabled and (n * 20 < host_pool.MIN_FILL * pool.block_bytes or pool.made >= 1)
    for k, want in enumerate((i, j, d)):
        got = np.concatenate([b[k] for b in batches]) if batches else np.zeros(0, want.dtype)
        np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
@needs_gpu
def test_a_join_writes_the_same_files_with_the_pool_and_without(tmp_path):
    import dask

    x = np.random.default_rng(8).random((20_000, 3))
    outs = []
    for pool_bytes in ("auto", 0):
        out = tmp_path / f"pairs-{pool_bytes}.parquet"
        with dask.config.set({"daskjoin.host-pool-bytes": pool_bytes, "daskjoin.row-group-bytes": 20 * 20_000}):
            dj.similarity_join(x, eps=0.05, backend="gpu", out=str(out))  # in this process: its pool
            pool = host_pool.batch_pool()
            assert (pool is None) == (pool_bytes == 0)
            assert pool is None or pool.made >= 1  # the batches went through the pool
        outs.append(out)
    names = sorted(p.name for p in outs[0].iterdir() if p.name.startswith("part-"))
    assert len(names) > 2 and names == sorted(p.name for p in outs[1].iterdir() if p.name.startswith("part-"))
    for name in names:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes()
    with dask.config.set({"daskjoin.host-pool-bytes": "auto", "daskjoin.row-group-bytes": 20 * 20_000}):
        frame = dj.similarity_join(x, eps=0.05, backend="gpu").compute().reset_index(drop=True)
    pd.testing.assert_frame_equal(frame, pd.read_parquet(outs[1]).reset_index(drop=True), check_dtype=True)
