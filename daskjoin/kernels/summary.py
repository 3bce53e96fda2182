"""One pass over a block of points: its bounding box over finite rows and its first non-finite row.

The statistics pass reads every row of an input once, several blocks at once on threads.
Blocks of finite rows (the rule: bad rows are refused) take a numpy path: the extremes of
the rows seen as wide rows (below), at memory speed with the GIL released, and without Numba,
whose first call in a process costs 0.5-0.8 s (a GPU ``join --count`` uses no other Numba
function).  A block holding NaN or inf takes one compiled loop that finds its first bad row
and the extremes of the others.
"""
from __future__ import annotations

import numpy as np


#: columns of the wide rows the extremes are taken over: numpy's axis-0 reductions loop over the
#: columns inside the rows, so a few columns make them slow (a block of 524,288 x 3 float32 on the VM:
#: min and max 43 ms as (n, 3); the whole summary about 1.4 ms through wide rows, 3.8 ms in the Numba loop)
_WIDE_COLUMNS = 256


def _extremes(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column min and max (float64) of a C-contiguous 2-d block of finite rows: ``k`` rows at a
    time seen as one wide row (column ``c`` of the block is wide column ``c mod d``), reduced over
    the wide rows and then over their ``k`` groups; the rows left over are reduced apart."""
    n, d = block.shape
    k = max(1, _WIDE_COLUMNS // d)
    whole = n // k * k
    parts = []
    if whole:
        wide = block[:whole].reshape(whole // k, k * d)
        parts.append((wide.min(axis=0).reshape(k, d).min(axis=0), wide.max(axis=0).reshape(k, d).max(axis=0)))
    if whole < n:
        parts.append((block[whole:].min(axis=0), block[whole:].max(axis=0)))
    lo = np.minimum.reduce([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    hi = np.maximum.reduce([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
    return lo.astype(np.float64), hi.astype(np.float64)


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
    if block.shape[0] == 0 or d == 0:
        return lo, hi, -1
    if block.dtype.kind != "f":
        return block.min(axis=0).astype(np.float64), block.max(axis=0).astype(np.float64), -1
    block = np.ascontiguousarray(block)
    # one pass, no temporary: min and max propagate NaN and an infinity is an extreme, so finite extremes
    # mean finite rows (a zero extreme may come back as +0.0 where the loop below kept -0.0: equal values)
    lo_all, hi_all = _extremes(block)
    if np.isfinite(lo_all).all() and np.isfinite(hi_all).all():
        return lo_all, hi_all, -1
    from .summary_nonfinite import summary  # Numba, only for blocks holding NaN or inf

    if block.dtype not in (np.float32, np.float64):  # float16: exact in float64
        block = block.astype(np.float64)
    first_bad = summary(block, lo, hi)
    return lo, hi, int(first_bad)
