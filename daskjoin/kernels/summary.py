"""One pass over a block of points: its bounding box over finite rows and its first non-finite row (Numba).

The statistics pass reads every row of an input once; numpy would pass over each block
five times (isfinite, all, a masked copy, min, max).  One compiled loop that releases the
GIL does it at memory speed, several blocks at once on threads.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _summary(block, lo, hi):
    first_bad = -1
    for r in range(block.shape[0]):
        finite = True
        for c in range(block.shape[1]):
            v = block[r, c]
            if not np.isfinite(v):
                finite = False
                break
        if not finite:
            if first_bad < 0:
                first_bad = r
            continue
        for c in range(block.shape[1]):
            v = np.float64(block[r, c])
            if v < lo[c]:
                lo[c] = v
            if v > hi[c]:
                hi[c] = v
    return first_bad


def column_bounds(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column min and max (float64) of a 2-d array of finite rows, in one pass: numpy's axis-0
    reductions stride across the rows (0.05 s against 0.003 s at 1M x 2, where a grid join's kernel
    takes 0.2 s)."""
    lo, hi, _ = block_summary(x)
    return lo, hi


def block_summary(block: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(lo, hi, first_bad) of a 2-d block: per-column min and max (float64) over its rows without NaN or
    inf (+inf and -inf where there are none), and the first row holding NaN or inf (-1: none)."""
    d = block.shape[1]
    lo, hi = np.full(d, np.inf), np.full(d, -np.inf)
    if block.shape[0] == 0:
        return lo, hi, -1
    if block.dtype.kind != "f":
        return block.min(axis=0).astype(np.float64), block.max(axis=0).astype(np.float64), -1
    first_bad = _summary(np.ascontiguousarray(block), lo, hi)
    return lo, hi, int(first_bad)
