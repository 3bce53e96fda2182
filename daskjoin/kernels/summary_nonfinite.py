"""The statistics pass over a block that holds NaN or inf: its first such row, and the extremes of the
other rows, in one compiled loop (Numba; apart from :mod:`.summary`, whose blocks of finite rows need
no Numba)."""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def summary(block, lo, hi):
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
