"""The pivot chain makes the Python loop's choices, tie for tie: compiled for the CPU (kernels/pivot_chain.py, the
reference) and on the device (cuda/chain.cu, which brute_gpu.pivot_order runs; marked gpu); so does the device's
argmax of each row (the nearest pivot's pick), against numpy's."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskjoin.kernels.gpu_common import gpu_available
from daskjoin.kernels.pivot_chain import greedy_chain


def python_chain(dist):
    """The loop ``brute_gpu.pivot_order`` ran before (the reference)."""
    dist = dist.copy()
    m = dist.shape[0]
    chain = np.empty(m, np.int64)
    current = 0
    for t in range(m):
        chain[t] = current
        dist[:, current] = np.inf
        if t + 1 < m:
            current = int(np.argmin(dist[current]))
    return chain


def _matrix(m, kind, seed):
    rng = np.random.default_rng(seed)
    dist = rng.random((m, m)).astype(np.float32)
    if kind == "ties":
        dist = rng.integers(0, 3, (m, m)).astype(np.float32)
    elif kind == "inf":
        dist[rng.random((m, m)) < 0.5] = np.inf
    elif kind == "all-inf":  # every row inf past the first steps: the chain revisits pivot 0
        dist[:, m // 2:] = np.inf
        dist[m // 3:, :] = np.inf
    elif kind == "nan":
        dist[rng.random((m, m)) < 0.1] = np.nan
    elif kind == "signed":  # float32 products can leave small negative squared distances, and -0
        dist = rng.integers(-2, 3, (m, m)).astype(np.float32)
        dist[dist == 0] = -0.0
    elif kind == "subnormal":  # below float32's normal range, where a flush-to-zero comparison would tie them
        dist = (rng.integers(0, 4, (m, m)) * 1e-40 - rng.integers(0, 2, (m, m)) * 2e-45).astype(np.float32)
    return dist


@pytest.mark.parametrize("m", [1, 2, 3, 17, 300])
@pytest.mark.parametrize("kind", ["random", "ties", "inf", "all-inf", "nan", "signed", "subnormal"])
def test_chain_equals_the_python_loop(m, kind):
    dist = _matrix(m, kind, m)
    got = greedy_chain(dist)
    np.testing.assert_array_equal(got, python_chain(dist))
    if kind in ("random", "ties"):
        assert sorted(got.tolist()) == list(range(m))  # every pivot once


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2 ** 32 - 1))
def test_chain_on_small_integer_distances(m, seed):
    dist = np.random.default_rng(seed).integers(-2, 3, (m, m)).astype(np.float32)
    np.testing.assert_array_equal(greedy_chain(dist), python_chain(dist))


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy")
@pytest.mark.parametrize("m", [1, 2, 3, 31, 33, 1025, 4096])
@pytest.mark.parametrize("kind", ["random", "ties", "inf", "all-inf", "nan", "signed", "subnormal"])
def test_device_chain_equals_the_compiled_one(m, kind):
    import cupy as cp

    from daskjoin.kernels.brute_gpu import device_chain

    dist = _matrix(m, kind, m)
    want = greedy_chain(dist)
    rank = np.full(m, m, np.int64)
    rank[want] = np.arange(m)  # numpy: the last write wins where the chain revisits a pivot
    chain, got_rank = device_chain(cp.asarray(dist))
    np.testing.assert_array_equal(chain.get(), want)
    np.testing.assert_array_equal(got_rank.get(), rank)
    if kind == "subnormal" and m > 2:
        assert np.unique(dist[dist != 0]).size > 1  # distinct subnormals the chain must tell apart


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy")
def test_device_chain_refuses_what_it_cannot_read():
    import cupy as cp

    from daskjoin.kernels.brute_gpu import device_chain

    for bad in (cp.zeros((3, 4), cp.float32), cp.zeros((4, 4), cp.float64), cp.zeros((4, 8), cp.float32)[:, ::2]):
        with pytest.raises(ValueError, match="C-contiguous square float32"):
            device_chain(bad)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy")
@pytest.mark.parametrize("n, m", [(1, 1), (5, 2), (40, 31), (33, 33), (300, 1025), (70, 4096)])
@pytest.mark.parametrize("kind", ["random", "ties", "inf", "all-inf", "nan", "signed", "subnormal", "zeros"])
def test_device_row_argmax_equals_numpy(n, m, kind):
    """numpy's argmax of each row: the first NaN, else the first largest (ties, -0 against +0, +-inf, subnormals
    told apart), over rows of any length (not a multiple of the warp's 32, shorter than it), into an out slice."""
    import cupy as cp

    from daskjoin.kernels.brute_gpu import row_argmax

    if kind == "zeros":  # rows whose largest is zero, -0 and +0 mixed: the first of either sign (numpy: -0 == +0)
        a = np.random.default_rng(n + m).choice(np.array([-1.0, -0.0, 0.0], np.float32), (n, m))
    else:
        a = _matrix(max(n, m), kind, n + m)[:n, :m].copy()
    if kind in ("inf", "signed"):
        a = -a  # -inf and the largest of mixed signs too
    want = np.argmax(a, axis=1)
    if kind == "zeros" and m > 3:
        assert np.signbit(a[np.arange(n), want]).any() and not np.signbit(a[np.arange(n), want]).all()
    np.testing.assert_array_equal(row_argmax(cp.asarray(a)).get(), want)
    out = cp.full(n + 3, -1, cp.int64)
    row_argmax(cp.asarray(a), out[1:n + 1])
    np.testing.assert_array_equal(out.get(), np.r_[-1, want, -1, -1])
    if kind == "ties" and m > 3:
        assert (a == a.max(axis=1, keepdims=True)).sum(axis=1).max() > 1  # rows with tied largest values


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy")
def test_device_row_argmax_refuses_what_it_cannot_read():
    import cupy as cp

    from daskjoin.kernels.brute_gpu import row_argmax

    for bad in (cp.zeros((3, 0), cp.float32), cp.zeros((4, 4), cp.float64), cp.zeros((4, 8), cp.float32)[:, ::2],
                cp.zeros(4, cp.float32)):
        with pytest.raises(ValueError, match="C-contiguous float32 matrix"):
            row_argmax(bad)
    with pytest.raises(ValueError, match="one entry a row"):
        row_argmax(cp.zeros((4, 4), cp.float32), cp.zeros(3, cp.int64))
