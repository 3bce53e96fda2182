"""The greedy chain of pivots behind the GPU brute force's locality order (``brute_gpu.pivot_order``), in Numba:
the reference that the device's chain (``cuda/chain.cu``, which ``pivot_order`` runs) is tested against.

The chain was a Python loop of ``np.argmin`` over a row and a strided column write per pivot: 0.41 s for
4,096 pivots on an H100 host, in every tensor-core driver built on 524k rows or more.  The same choices
compiled take milliseconds; on the device, without the distances' transfer, fewer (``cuda/chain.cu``).
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def greedy_chain(dist):
    """From pivot 0, each next pivot the nearest one not yet visited: ``np.argmin`` of the current row with
    the visited columns at +inf (the first NaN if the row has one, else the first smallest value, as numpy's
    argmin picks), so the chain is the one the Python loop gave, tie for tie."""
    m = dist.shape[0]
    chain = np.empty(m, np.int64)
    visited = np.zeros(m, np.bool_)
    current = 0
    for t in range(m):
        chain[t] = current
        visited[current] = True
        if t + 1 == m:
            break
        best = 0
        best_value = np.inf
        for j in range(m):
            v = np.inf if visited[j] else dist[current, j]
            if np.isnan(v):
                best = j
                break
            if j == 0 or v < best_value:
                best, best_value = j, v
        current = best
    return chain
