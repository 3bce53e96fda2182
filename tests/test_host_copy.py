"""Copies through reused pinned staging buffers (kernels/host_copy.py): down, the same bytes as ``get``, up, the
same as ``cupy.asarray``, in every chunking; the kNN rows and the ε-join's pageable batches unchanged."""
from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest

import daskjoin as dj
from daskjoin.kernels import host_copy
from daskjoin.kernels.gpu_common import gpu_available

needs_gpu = pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy")


@pytest.mark.parametrize("n,k", [(0, 3), (1, 1), (7, 5), (1000, 16), (3, 0)])
def test_repeat_each_is_numpys_repeat(n, k):
    values = np.random.default_rng(n).integers(-(1 << 40), 1 << 40, n)
    got = host_copy.repeat_each(values, k)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.repeat(values, k))


@pytest.fixture
def small_stages(monkeypatch):
    """Stages of 1,000 bytes, used from the first byte: every copy crosses many chunk and array boundaries."""
    monkeypatch.setattr(host_copy, "STAGE_BYTES", 1000)
    monkeypatch.setattr(host_copy, "STAGED_MIN_BYTES", 0)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("sizes", [[0], [1], [125], [126, 0, 3001], [5000, 17]])
@pytest.mark.parametrize("staged", [True, False])
def test_to_pageable_gives_the_device_bytes(sizes, staged, request):
    if staged:
        request.getfixturevalue("small_stages")
    import cupy as cp

    rng = np.random.default_rng(sum(sizes))
    host = [rng.integers(0, 1 << 60, n).astype(np.int64) for n in sizes[:-1]] + [rng.random(sizes[-1]).astype(np.float32)]
    dev = [cp.asarray(h) for h in host]
    dev = [d * 1 for d in dev]  # work queued on the stream before the copy: the copy must follow it
    got = host_copy.to_pageable(*dev)
    assert len(got) == len(host)
    for g, h in zip(got, host):
        assert g.dtype == h.dtype and g.shape == h.shape
        np.testing.assert_array_equal(g, h)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("shape,dtype", [((0,), np.int64), ((1,), np.float32), ((125,), np.int64),
                                         ((3001, 3), np.float32), ((77, 129), np.float64)])
@pytest.mark.parametrize("staged", [True, False])
def test_to_device_gives_the_host_bytes(shape, dtype, staged, request):
    """Up through the stages (every chunking), or directly (small, pinned): the same array; strided host
    arrays arrive in C order; work queued after the copy sees the whole array."""
    if staged:
        request.getfixturevalue("small_stages")
    from daskjoin.kernels.gpu_common import pinned_empty
    from daskjoin.kernels.grid_gpu import to_device64

    rng = np.random.default_rng(int(np.prod(shape)))
    host = (rng.random(shape) * 1e6).astype(dtype)
    for source in (host, host.T if host.ndim == 2 else host[::-1]):
        got = host_copy.to_device(source)
        assert got.dtype == source.dtype and got.shape == source.shape and got.flags.c_contiguous
        np.testing.assert_array_equal((got * 1).get(), source)
    pinned = pinned_empty(host.shape, host.dtype)
    pinned[...] = host
    np.testing.assert_array_equal(host_copy.to_device(pinned).get(), host)
    if host.size:  # pinned memory is told from pageable memory (the direct path is taken for it)
        assert host_copy._pinned(pinned) and not host_copy._pinned(host)
    np.testing.assert_array_equal(to_device64(host).get(), host.astype(np.float64))


@pytest.mark.gpu
@needs_gpu
def test_to_pageable_keeps_shapes_and_refuses_strided_arrays(small_stages):
    import cupy as cp

    a = cp.arange(3 * 700, dtype=cp.float64).reshape(3, 700)
    (got,) = host_copy.to_pageable(a)
    np.testing.assert_array_equal(got, cp.asnumpy(a))
    with pytest.raises(ValueError, match="C-contiguous"):
        host_copy.to_pageable(a[:, ::2])


@pytest.mark.gpu
@needs_gpu
def test_to_pageable_from_several_threads_at_once(small_stages):
    """Each thread stages through its own buffers: concurrent copies do not mix."""
    import cupy as cp

    results, errors = {}, []

    def work(t):
        try:
            with cp.cuda.Stream(non_blocking=True):
                a = cp.arange(t * 10_000, (t + 1) * 10_000 + t, dtype=cp.int64)
                for _ in range(5):
                    results[t] = host_copy.to_pageable(a)[0]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    for t in range(4):
        np.testing.assert_array_equal(results[t], np.arange(t * 10_000, (t + 1) * 10_000 + t))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("method", ["grid", "brute"])
def test_knn_rows_through_small_stages_equal_the_cpu(method, small_stages):
    x = np.random.default_rng(3).random((1500, 3 if method == "grid" else 8))
    gpu_rows = dj.knn_join(x, k=7, method=method, backend="gpu").compute().reset_index(drop=True)
    cpu_rows = dj.knn_join(x, k=7, method=method, backend="cpu").compute().reset_index(drop=True)
    pd.testing.assert_frame_equal(gpu_rows, cpu_rows)


@pytest.mark.gpu
@needs_gpu
def test_pageable_pair_batches_through_small_stages_equal_pinned_ones(small_stages, monkeypatch):
    import dask

    calls = []
    original = host_copy.to_pageable
    monkeypatch.setattr(host_copy, "to_pageable", lambda *a: calls.append(len(a)) or original(*a))
    x = np.random.default_rng(4).random((4000, 2))
    frames = []
    for pinned in (True, False):  # no pool of host blocks (host_pool): pinned-output decides
        with dask.config.set({"daskjoin.pinned-output": pinned, "daskjoin.host-pool-bytes": 0}):
            frames.append(dj.similarity_join(x, eps=0.03, backend="gpu", with_distance=True).compute()
                          .reset_index(drop=True))
    assert len(frames[0]) > 10_000
    assert calls  # the pageable run went through the stages
    pd.testing.assert_frame_equal(frames[0], frames[1])


@pytest.mark.gpu
@needs_gpu
def test_whole_outputs_past_the_pinned_limit_go_through_the_stages(small_stages, monkeypatch):
    """A driver's ``pairs()`` larger than ``PINNED_OUTPUT_LIMIT`` is moved through the staging buffers: the same
    arrays as through pinned memory."""
    from daskjoin.kernels import get_kernel, gpu_common

    x = np.random.default_rng(6).random((6000, 2))
    kernel = get_kernel("grid", "gpu")
    want = kernel.self_join(x, 0.05)
    assert gpu_common.pinned_output(len(want[0]))
    monkeypatch.setattr(gpu_common, "PINNED_OUTPUT_LIMIT", 0)
    assert not gpu_common.pinned_output(len(want[0]))
    calls = []
    original = host_copy.to_pageable
    monkeypatch.setattr(host_copy, "to_pageable", lambda *a: calls.append(len(a)) or original(*a))
    got = kernel.self_join(x, 0.05)
    assert calls == [3]  # i, j and the distances, through the stages
    assert len(got[0]) > 50_000
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
