"""The CPU GEMM filters' threads (kernels/block_threads.py): BLAS held at one thread while any block pool lives,
restored by the last user to leave, whatever the order; calls in order, a bounded number ahead."""
from __future__ import annotations

import threading

import numba
import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from daskjoin.kernels import block_threads
from daskjoin.kernels.brute import BruteJoin
from daskjoin.kernels.brute_gemm import GemmBruteJoin


def blas_threads():
    return sorted({d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"})


@pytest.fixture
def two_blas_threads():
    if not blas_threads():
        pytest.skip("no BLAS library seen by threadpoolctl")
    with threadpool_limits(2, "blas"):
        yield [2]


def test_interleaved_and_abandoned_generators_leave_blas_as_it_was(two_blas_threads, monkeypatch):
    """Two joins' batches paused between yields (a task's consumer), finished and closed out of order: BLAS is on
    one thread while either lives and on two again after (a plain limit, restored by each, left it at one)."""
    monkeypatch.setattr(numba, "get_num_threads", lambda: 2)
    rng = np.random.default_rng(0)
    x = rng.random((3000, 16))
    g1, g2 = (GemmBruteJoin(x, None, 0.6, filter="fp32").batches(7) for _ in range(2))
    first = next(g1)
    next(g2)
    assert blas_threads() == [1]
    rest = list(g1)
    assert blas_threads() == [1]  # g2 still lives
    g2.close()
    assert blas_threads() == two_blas_threads
    got = tuple(np.concatenate(c) for c in zip(first, *rest))
    want = BruteJoin(x, None, 0.6).pairs()
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


def test_threads_leaving_out_of_order_restore_blas(two_blas_threads):
    entered, leave_first = threading.Barrier(2), threading.Event()

    def user(first: bool):
        with block_threads.one_blas_thread():
            entered.wait()
            if first:
                leave_first.set()  # leaves before the other
            else:
                leave_first.wait()

    threads = [threading.Thread(target=user, args=(f,)) for f in (False, True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert blas_threads() == two_blas_threads


def test_in_order_keeps_order_and_a_bounded_number_ahead():
    from concurrent.futures import ThreadPoolExecutor

    started, lock = [], threading.Lock()

    def fn(x):
        with lock:
            started.append(x)
        return x * x

    with ThreadPoolExecutor(3) as pool:
        it = block_threads.in_order(pool, fn, range(20), 2)
        assert next(it) == 0
        assert len(started) <= 3  # two submitted, one more once the first was taken
        assert list(it) == [x * x for x in range(1, 20)]
