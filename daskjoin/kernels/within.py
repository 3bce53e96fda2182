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
