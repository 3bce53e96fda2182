"""The compiled pivot chain (kernels/pivot_chain.py) makes the Python loop's choices, tie for tie."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


@pytest.mark.parametrize("m", [1, 2, 3, 17, 300])
@pytest.mark.parametrize("kind", ["random", "ties", "inf", "nan"])
def test_chain_equals_the_python_loop(m, kind):
    rng = np.random.default_rng(m)
    dist = rng.random((m, m)).astype(np.float32)
    if kind == "ties":
        dist = rng.integers(0, 3, (m, m)).astype(np.float32)
    elif kind == "inf":
        dist[rng.random((m, m)) < 0.5] = np.inf
    elif kind == "nan":
        dist[rng.random((m, m)) < 0.1] = np.nan
    got = greedy_chain(dist)
    np.testing.assert_array_equal(got, python_chain(dist))
    if kind in ("random", "ties"):
        assert sorted(got.tolist()) == list(range(m))  # every pivot once


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2 ** 32 - 1))
def test_chain_on_small_integer_distances(m, seed):
    dist = np.random.default_rng(seed).integers(-2, 3, (m, m)).astype(np.float32)
    np.testing.assert_array_equal(greedy_chain(dist), python_chain(dist))
