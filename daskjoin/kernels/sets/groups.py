"""Identical sets joined once: runs of equal sets, their representatives, and expansion of results.

Stored sets are sorted by size and then by their ranks, so identical sets are
adjacent.  Real collections (click streams, baskets, bibliographic records)
repeat many sets, and every pair of copies matches (similarity 1): joining one
representative per run and expanding afterwards turns a quadratic number of
candidates into a product of run lengths.  This goes beyond the paper, which
filters and verifies every copy; the result is identical.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def duplicate_runs(tokens, offsets):
    """Start of every run of identical consecutive sets, plus ``n`` at the end."""
    n = len(offsets) - 1
    starts = np.empty(n + 1, np.int64)
    m = 0
    for k in range(n):
        same = k > 0
        if same:
            a0, a1, b0, b1 = offsets[k - 1], offsets[k], offsets[k], offsets[k + 1]
            if a1 - a0 != b1 - b0:
                same = False
            else:
                for t in range(b1 - b0):
                    if tokens[a0 + t] != tokens[b0 + t]:
                        same = False
                        break
        if not same:
            starts[m] = k
            m += 1
    starts[m] = n
    return starts[: m + 1]


def representatives(tokens: np.ndarray, offsets: np.ndarray, starts: np.ndarray):
    """(tokens, offsets) of the first set of every run."""
    first = starts[:-1]
    lo, hi = offsets[first], offsets[first + 1]
    rep_offsets = np.zeros(len(first) + 1, np.int64)
    np.cumsum(hi - lo, out=rep_offsets[1:])
    rep_tokens = np.empty(int(rep_offsets[-1]), tokens.dtype)
    _copy_runs(tokens, lo, rep_offsets, rep_tokens)
    return rep_tokens, rep_offsets


@njit(cache=True, nogil=True)
def _copy_runs(tokens, lo, rep_offsets, out):
    """Each representative's tokens copied in one pass (numpy's repeat, arange and gather made three arrays
    of the tokens' length first: ~19% of a small KOSARAK-like task's time on the 2-core VM)."""
    for k in range(lo.shape[0]):
        src = lo[k]
        for t in range(rep_offsets[k], rep_offsets[k + 1]):
            out[t] = tokens[src + t - rep_offsets[k]]


@njit(cache=True)
def _fill_products(a_lo, a_n, b_lo, b_n, ov, row0, row1, out_a, out_b, out_ov):
    """Member pairs of run pairs; the first run pair only from member row0, the last up to row1."""
    at = 0
    last = len(a_lo) - 1
    for k in range(len(a_lo)):
        first_row = row0 if k == 0 else 0
        end_row = row1 if k == last else a_n[k]
        for x in range(first_row, end_row):
            for y in range(b_n[k]):
                out_a[at] = a_lo[k] + x
                out_b[at] = b_lo[k] + y
                out_ov[at] = ov[k]
                at += 1
    return at


def _slices(costs: np.ndarray, cap: int):
    """Consecutive item ranges whose costs sum to at most ``cap`` (an item above ``cap`` alone)."""
    cum = np.cumsum(costs)
    k = 0
    while k < len(costs):
        base = cum[k - 1] if k else 0
        j = max(k + 1, int(np.searchsorted(cum, base + cap, side="right")))
        yield k, j
        k = j


def expand(ga, gb, ov, a_starts, b_starts, max_pairs: int):
    """Yield member pairs of the run pairs (ga, gb) in batches of about ``max_pairs``."""
    a_lo, b_lo = a_starts[ga], b_starts[gb]
    a_n, b_n = a_starts[ga + 1] - a_lo, b_starts[gb + 1] - b_lo
    costs = a_n * b_n
    for k0, k1 in _slices(costs, max_pairs):
        sl = slice(k0, k1)
        if k1 - k0 == 1 and costs[k0] > max_pairs:
            rows = max(1, max_pairs // int(b_n[k0]))
            bounds = [(r0, min(int(a_n[k0]), r0 + rows)) for r0 in range(0, int(a_n[k0]), rows)]
        else:
            bounds = [(0, int(a_n[k1 - 1]))]
        for r0, r1 in bounds:
            total = int(costs[sl].sum()) if len(bounds) == 1 else (r1 - r0) * int(b_n[k0])
            out = np.empty(total, np.int64), np.empty(total, np.int64), np.empty(total, np.int32)
            got = _fill_products(a_lo[sl], a_n[sl], b_lo[sl], b_n[sl], ov[sl], r0, r1, *out)
            yield out[0][:got], out[1][:got], out[2][:got]


@njit(cache=True)
def _fill_within(lo, n, first_row, last_row, out_a, out_b):
    """Pairs (later, earlier) inside runs; rows are the later member's offset in its run."""
    at = 0
    for k in range(len(lo)):
        r0 = first_row if k == 0 else 1
        r1 = last_row if k == len(lo) - 1 else n[k]
        for x in range(max(r0, 1), r1):
            for y in range(x):
                out_a[at] = lo[k] + x
                out_b[at] = lo[k] + y
                at += 1
    return at


def within(starts, run_sizes, qualifies, max_pairs: int):
    """Yield (later, earlier, overlap) pairs of copies inside every qualifying run, in batches."""
    runs = np.flatnonzero(qualifies & (np.diff(starts) > 1))
    lo, n = starts[runs], np.diff(starts)[runs]
    costs = n * (n - 1) // 2
    for k0, k1 in _slices(costs, max_pairs):
        sl = slice(k0, k1)
        if k1 - k0 == 1 and costs[k0] > max_pairs:
            m = int(n[k0])
            rows = max(1, max_pairs // m)
            bounds = [(r0, min(m, r0 + rows)) for r0 in range(1, m, rows)]
        else:
            bounds = [(1, int(n[k1 - 1]))]
        for r0, r1 in bounds:
            total = int(costs[sl].sum()) if len(bounds) == 1 else (r1 * (r1 - 1) - r0 * (r0 - 1)) // 2
            out = np.empty(total, np.int64), np.empty(total, np.int64)
            got = _fill_within(lo[sl], n[sl], r0, r1, *out)
            # copies share every token: the overlap is the run's set size
            sizes = run_sizes[runs[sl]]
            overlap = np.repeat(sizes, costs[sl]) if len(bounds) == 1 else np.full(got, sizes[0])
            yield out[0][:got], out[1][:got], overlap.astype(np.int32)


def within_count(starts, qualifies) -> int:
    n = np.diff(starts)[qualifies]
    return int((n * (n - 1) // 2).sum())
