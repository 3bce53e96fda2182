"""Overlapping slabs along the split dimension (Böhm et al.).

The input is sorted along the dimension of largest spread.  A self-join slab
owns rows [s, e) of the sorted copy and also reads the rows within eps beyond
its upper boundary; it reports the pairs inside [s, e) and those between
[s, e) and the extension.  Every pair is therefore reported by exactly one
slab - the slab of its earlier row - also when slabs are thinner than eps
(the extension then spans several later slabs).  An A×B slab owns rows of
sorted A and reads the rows of sorted B whose keys lie within eps of its range.
Extensions come from the coarse key index, so they are never too short.
"""
from __future__ import annotations

import numpy as np

from .plan import PAIR_BYTES, Partition, row_bytes
from .sorted_copy import SortedCopy


def split_dimension(lo: np.ndarray, hi: np.ndarray) -> int:
    """The dimension of largest spread (the first of equals)."""
    return int(np.argmax(np.asarray(hi, np.float64) - np.asarray(lo, np.float64))) if len(lo) else 0


def reach(eps: float, key: float) -> float:
    """A key distance safely beyond eps: rows farther apart than this along the key cannot pair."""
    return eps * (1.0 + 1e-9) + 1e-12 * abs(key)


def slab_rows_for(budget: int, n_a: int, n_b: int, d: int, pairs_upper: float, method: str = "grid") -> int:
    """Rows per slab so that its rows, an equal allowance for B or its extension, and its pairs fit."""
    per_row = 2 * row_bytes(d, 8, method)
    per_row += PAIR_BYTES * pairs_upper / max(1, n_a)
    return int(max(1, min(n_a, budget // max(1.0, per_row))))


def plan_slabs(sorted_a: SortedCopy, sorted_b: SortedCopy | None, eps: float, rows: int, pairs_upper: float):
    n_a = sorted_a.n
    parts = []
    for s in range(0, n_a, max(1, rows)):
        e = min(n_a, s + rows)
        share = (e - s) / max(1, n_a)
        if sorted_b is None:
            top = sorted_a.upper_key(e)
            x = max(e, sorted_a.first_above(top + reach(eps, top)))
            parts.append(Partition(len(parts), (s, e), (e, x) if x > e else None, True, pairs_upper * share))
        else:
            low, top = sorted_a.lower_key(s), sorted_a.upper_key(e)
            p = sorted_b.last_below(low - reach(eps, low))
            q = sorted_b.first_above(top + reach(eps, top))
            if q > p:
                parts.append(Partition(len(parts), (s, e), (p, q), False, pairs_upper * share))
    return tuple(parts)
