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


def ball_key_share(u: np.ndarray, d: int) -> np.ndarray:
    """``F(u)``: the share of a uniform d-ball's points whose offset along one axis lies in ``(0, u]`` (``u`` in
    radii, clipped to [0, 1]; ``F(1) = 1/2``): density ``(1 - x^2)^((d - 1) / 2)``, integrated numerically."""
    x = np.linspace(0.0, 1.0, 4097)
    f = (1.0 - x * x) ** ((max(1, d) - 1) / 2.0)
    cum = np.concatenate([[0.0], np.cumsum((f[1:] + f[:-1]) / 2.0)])
    return 0.5 * np.interp(np.clip(u, 0.0, 1.0), x, cum / cum[-1])


def top_weights(keys: np.ndarray, top: float, eps: float, grow: float, d: int) -> np.ndarray:
    """Weights of sampled self-join pairs listed at ``grow * eps`` whose owners (smaller keys) are ``keys``:
    near the largest key ``top`` an owner's partners above are cut off within the grown radius, where the
    join's own pairs are cut off only within eps.  Under locally even density the pairs a row at ``t`` below
    the top owns are ``F(t / eps)`` of those it owns inside, the grown pairs ``F(t / (grow eps))``
    (:func:`ball_key_share`): the ratio restores the join's shape (``grow`` at the top, 1 from ``grow * eps``)."""
    t = np.maximum(0.0, top - np.asarray(keys, np.float64))
    if grow <= 1.0 or eps <= 0:
        return np.ones(t.shape[0])
    wide = ball_key_share(t / (grow * eps), d)
    near = ball_key_share(t / eps, d)
    out = np.ones(t.shape[0])
    inside = t < grow * eps
    small = wide[inside] > 0
    ratio = np.full(int(inside.sum()), float(grow))  # the limit at t = 0
    ratio[small] = near[inside][small] / wide[inside][small]
    out[inside] = ratio
    return out


class OwnedPairs:
    """The sampled pairs' owner rows, sorted, with their weights: the weight that rows ``[s, e)`` own."""

    def __init__(self, rows: np.ndarray, weights: np.ndarray | None = None):
        order = np.argsort(rows, kind="stable")
        self.rows = np.asarray(rows)[order]
        w = np.ones(order.shape[0]) if weights is None else np.asarray(weights, np.float64)[order]
        self.cum = np.concatenate([[0.0], np.cumsum(w)])
        self.total = float(self.cum[-1])

    def within(self, s: int, e: int) -> float:
        return float(self.cum[np.searchsorted(self.rows, e)] - self.cum[np.searchsorted(self.rows, s)])


def work_cuts(n_a: int, rows: int, owners: np.ndarray | None, pairs_upper: float, budget: float,
              bytes_per_row: float, held: bool = True, weights: np.ndarray | None = None) -> np.ndarray:
    """Slab boundaries (``0 .. n_a``) of about equal work: as many slabs as ``rows``-row slabs would make,
    each holding about the same rows (``ROW_WORK`` each) plus estimated pairs, where ``owners`` (the
    sorted rows owning the sampled pairs) spread ``pairs_upper``; no slab's rows (and pairs, where a task
    ``held`` them: not for a count) over ``budget``; ``weights``: each owner's (:func:`top_weights`; 1 by
    default).  Equal rows where no pairs were sampled."""
    rows = max(1, int(rows))
    if owners is None or not len(owners) or n_a <= rows:
        return np.append(np.arange(0, n_a, rows, dtype=np.int64), n_a)
    owned = OwnedPairs(owners, weights)
    per_pair = pairs_upper / owned.total
    slabs = -(-n_a // rows)
    target = (n_a * ROW_WORK + pairs_upper) / slabs

    def fits(s: int, e: int) -> bool:
        pairs = per_pair * owned.within(s, e)
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
               cuts: np.ndarray | None = None, owners: np.ndarray | None = None, weights: np.ndarray | None = None):
    """The slabs: ``rows`` rows each, or between the given ``cuts`` (:func:`work_cuts`); each slab's estimate
    from where the sampled pairs' ``owners`` lie (with their ``weights``), or its share of the rows."""
    n_a = sorted_a.n
    if cuts is None:
        cuts = np.append(np.arange(0, n_a, max(1, rows), dtype=np.int64), n_a)
    owned = None if owners is None or not len(owners) else OwnedPairs(owners, weights)
    parts = []
    for s, e in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        share = (e - s) / max(1, n_a)
        est = pairs_upper * share if owned is None else pairs_upper * (
            owned.within(s, e) + PRIOR_PAIRS * share) / (owned.total + PRIOR_PAIRS)
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
