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

from .chunk_pairs import PRIOR_PAIRS  # a slab's estimate blends its sampled pairs and row share alike
from .plan import PAIR_BYTES, Partition, row_bytes
from .sorted_copy import KEY_STRIDE, SortedCopy


def split_dimension(lo: np.ndarray, hi: np.ndarray) -> int:
    """The dimension of largest spread (the first of equals)."""
    return int(np.argmax(np.asarray(hi, np.float64) - np.asarray(lo, np.float64))) if len(lo) else 0


def reach(eps: float, key: float) -> float:
    """A key distance safely beyond eps: rows farther apart than this along the key cannot pair."""
    return eps * (1.0 + 1e-9) + 1e-12 * abs(key)


def slab_rows_for(budget: int, n_a: int, n_b: int, d: int, pairs_upper: float, method: str = "grid",
                  row_cost: float | None = None) -> int:
    """Rows per slab so that its rows, an equal allowance for B or its extension, and its pairs fit
    (``row_cost``: the bytes a slab row costs with its allowance; twice ``row_bytes`` by default)."""
    per_row = 2 * row_bytes(d, 8, method) if row_cost is None else row_cost
    per_row += PAIR_BYTES * pairs_upper / max(1, n_a)
    return int(max(1, min(n_a, budget // max(1.0, per_row))))


#: the work of a row (its reading and indexing) in pairs, beside the pairs it owns, when slabs are cut by work
ROW_WORK = 1.0


def owner_rows(sorted_a: SortedCopy, keys_a: np.ndarray, keys_b: np.ndarray | None) -> np.ndarray:
    """Approximate sorted rows of the sampled pairs' owners: a self-join pair belongs to the slab of its
    smaller key (``keys_b``: the other row's key), an A x B pair to A's row (``keys_b`` None)."""
    keys = keys_a if keys_b is None else np.minimum(keys_a, keys_b)
    t = np.sort(np.searchsorted(sorted_a.key_index, keys, side="left"))  # key_index[t - 1] < key <= key_index[t]
    # the coarse index places a key within a stride of rows: the owners of one stride are spread evenly
    # over it (piled on one row, they would force one-row slabs there)
    first = np.searchsorted(t, t, side="left")
    count = np.searchsorted(t, t, side="right") - first
    rank = np.arange(len(t)) - first
    rows = (t - 1) * KEY_STRIDE + ((rank + 0.5) * KEY_STRIDE / count).astype(np.int64)
    return np.clip(rows, 0, max(0, sorted_a.n - 1)).astype(np.int64)


def work_cuts(n_a: int, rows: int, owners: np.ndarray | None, pairs_upper: float, budget: float,
              bytes_per_row: float, held: bool = True) -> np.ndarray:
    """Slab boundaries (``0 .. n_a``) of about equal work: as many slabs as ``rows``-row slabs would make,
    each holding about the same rows (``ROW_WORK`` each) plus estimated pairs, where ``owners`` (the
    sorted rows owning the sampled pairs) spread ``pairs_upper``; no slab's rows (and pairs, where a task
    ``held`` them: not for a count) over ``budget``.  Equal rows where no pairs were sampled."""
    rows = max(1, int(rows))
    if owners is None or not len(owners) or n_a <= rows:
        return np.append(np.arange(0, n_a, rows, dtype=np.int64), n_a)
    owners = np.sort(owners)
    per_pair = pairs_upper / len(owners)
    slabs = -(-n_a // rows)
    target = (n_a * ROW_WORK + pairs_upper) / slabs

    def fits(s: int, e: int) -> bool:
        pairs = per_pair * (np.searchsorted(owners, e) - np.searchsorted(owners, s))
        rows_here = e - s
        return (rows_here * ROW_WORK + pairs <= target
                and rows_here * bytes_per_row + (pairs * PAIR_BYTES if held else 0.0) <= budget)

    cuts, s = [0], 0
    while s < n_a:
        lo, hi = s + 1, n_a  # the largest e that fits (at least one row)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(s, mid):
                lo = mid
            else:
                hi = mid - 1
        cuts.append(lo)
        s = lo
    return np.asarray(cuts, np.int64)


def plan_slabs(sorted_a: SortedCopy, sorted_b: SortedCopy | None, eps: float, rows: int, pairs_upper: float,
               cuts: np.ndarray | None = None, owners: np.ndarray | None = None):
    """The slabs: ``rows`` rows each, or between the given ``cuts`` (:func:`work_cuts`); each slab's estimate
    from where the sampled pairs' ``owners`` lie, or its share of the rows."""
    n_a = sorted_a.n
    if cuts is None:
        cuts = np.append(np.arange(0, n_a, max(1, rows), dtype=np.int64), n_a)
    sampled = 0 if owners is None else len(owners)
    owners = None if not sampled else np.sort(owners)
    parts = []
    for s, e in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        share = (e - s) / max(1, n_a)
        est = pairs_upper * share if not sampled else pairs_upper * (
            np.searchsorted(owners, e) - np.searchsorted(owners, s) + PRIOR_PAIRS * share) / (sampled + PRIOR_PAIRS)
        if sorted_b is None:
            top = sorted_a.upper_key(e)
            x = max(e, sorted_a.first_above(top + reach(eps, top)))
            parts.append(Partition(len(parts), (s, e), (e, x) if x > e else None, True, est))
        else:
            low, top = sorted_a.lower_key(s), sorted_a.upper_key(e)
            p = sorted_b.last_below(low - reach(eps, low))
            q = sorted_b.first_above(top + reach(eps, top))
            if q > p:
                parts.append(Partition(len(parts), (s, e), (p, q), False, est))
    return tuple(parts)
