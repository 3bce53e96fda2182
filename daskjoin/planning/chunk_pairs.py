"""A×B block pairs pruned by bounding boxes (LSS), and self-join block pairs (a <= b).

Blocks are runs of whole input chunks when a task can hold that many rows, so
each block's box is the union of the cached chunk boxes; smaller blocks fall
back to the (covering) box of the chunks they touch.  A pair of blocks is kept
only when its boxes are within eps (see ``bounds.box_d2``: exact pruning).
"""
from __future__ import annotations

import numpy as np

from .bounds import BlockStats, block_starts, box_d2
from .plan import PAIR_BYTES, Partition, row_bytes


def block_rows_for(budget: int, n_a: int, n_b: int, d: int, pairs_upper: float, chunk_rows: int) -> int:
    """Rows per block so that two blocks and their expected pairs fit ``budget``."""
    per_row = row_bytes(d, 8)
    density = pairs_upper / max(1.0, float(n_a) * float(max(n_b, 1)))  # pairs per row pair
    # 2R rows + 2 * density * R^2 pairs <= budget  (solve the quadratic)
    a = 2.0 * density * PAIR_BYTES
    b = 2.0 * per_row
    if a > 0:
        rows = (-b + np.sqrt(b * b + 4 * a * budget)) / (2 * a)
    else:
        rows = budget / b
    rows = int(max(1, min(rows, max(n_a, n_b, 1))))
    if rows >= chunk_rows:
        rows -= rows % chunk_rows
    return max(1, rows)


def _block_boxes(stats: BlockStats, starts: np.ndarray):
    """Covering box of each block: the union of the boxes of the chunks it touches."""
    nblk = starts.shape[0] - 1
    d = stats.lo.shape[1]
    lo = np.full((nblk, d), np.inf)
    hi = np.full((nblk, d), -np.inf)
    first = np.searchsorted(stats.starts, starts[:-1], side="right") - 1
    last = np.searchsorted(stats.starts, starts[1:], side="left")
    for b in range(nblk):
        lo[b] = stats.lo[first[b]:last[b]].min(axis=0)
        hi[b] = stats.hi[first[b]:last[b]].max(axis=0)
    return lo, hi


def plan_block_pairs(stats_a: BlockStats, stats_b: BlockStats | None, eps: float, rows: int, pairs_upper: float):
    """Partitions for every block pair whose boxes are within eps; also the fraction of pairs kept."""
    n_a = int(stats_a.starts[-1])
    starts_a = block_starts(n_a, rows)
    lo_a, hi_a = _block_boxes(stats_a, starts_a)
    if stats_b is None:
        starts_b, lo_b, hi_b = starts_a, lo_a, hi_a
    else:
        starts_b = block_starts(int(stats_b.starts[-1]), rows)
        lo_b, hi_b = _block_boxes(stats_b, starts_b)
    near = box_d2(lo_a[:, None, :], hi_a[:, None, :], lo_b[None, :, :], hi_b[None, :, :]) <= eps * eps
    na, nb = starts_a.shape[0] - 1, starts_b.shape[0] - 1
    n_b = int(starts_b[-1])
    parts = []
    for x in range(na):
        for y in range(x if stats_b is None else 0, nb):
            if not near[x, y]:
                continue
            ra = (int(starts_a[x]), int(starts_a[x + 1]))
            rb = (int(starts_b[y]), int(starts_b[y + 1]))
            if stats_b is None:
                share = ((ra[1] - ra[0]) ** 2 / 2 if x == y else (ra[1] - ra[0]) * (rb[1] - rb[0])) / max(1.0, n_a * (n_a - 1) / 2)
            else:
                share = (ra[1] - ra[0]) * (rb[1] - rb[0]) / max(1.0, n_a * n_b)
            same = stats_b is None and x == y
            parts.append(Partition(len(parts), ra, None if same else rb, same, pairs_upper * share))
    total = na * (na + 1) / 2 if stats_b is None else na * nb
    return tuple(parts), (len(parts) / total if total else 0.0)
