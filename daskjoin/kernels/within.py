"""The exact rule of :mod:`.exact`, compiled for the CPU kernels (Numba)."""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def within(x, a, y, b, eps2):
    """Squared distance of rows ``x[a]`` and ``y[b]`` if it is <= eps2, else -1.

    Stops early once the partial sum exceeds eps2: adding non-negative terms
    never lowers a float sum, so the decision is unchanged.
    """
    s = 0.0
    for k in range(x.shape[1]):
        t = np.float64(x[a, k]) - np.float64(y[b, k])
        s += t * t
        if s > eps2:
            return -1.0
    return s


@numba.njit(cache=True, nogil=True, inline="always")
def dist2(x, a, y, b):
    """Squared distance of rows ``x[a]`` and ``y[b]``, summed in dimension order: :func:`within`'s value where it
    returns one, and above eps2 where it returns -1 (its partial sums never decrease).  No early exit: for short rows
    a caller can then decide a pair without a branch on the data (``d2 <= eps2``)."""
    s = 0.0
    for k in range(x.shape[1]):
        t = np.float64(x[a, k]) - np.float64(y[b, k])
        s += t * t
    return s


#: rows of at most this many dimensions are decided from their whole sum (:func:`decide`), not one that stops past
#: eps2: the per-dimension exit mispredicts and keeps the sum scalar (the grid, 2-core VM: 8-d 10.3 -> 3.1 s, 32-d
#: 11.6 -> 6.5 s; longer rows, most of whose pairs are far apart, keep the early exit)
WHOLE_ROWS = 64


@numba.njit(cache=True, nogil=True, inline="always")
def decide(x, a, y, b, eps2, whole):
    """:func:`within`'s result (the squared distance if <= eps2, else -1), from the whole sum where ``whole``
    (the same float64 sum in dimension order, so the same decisions; see :data:`WHOLE_ROWS`)."""
    if whole:
        s = dist2(x, a, y, b)
        return s if s <= eps2 else -1.0
    return within(x, a, y, b, eps2)
