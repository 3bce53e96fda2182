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


def block_rows_for(budget: int, n_a: int, n_b: int, d: int, pairs_upper: float, chunk_rows: int,
                   method: str = "grid", per_row: int | None = None, max_rows: float = float("inf")) -> int:
    """Rows per block so that two blocks and their expected pairs fit ``budget`` (``per_row``: the bytes a row
    costs, ``row_bytes`` by default), and at most ``max_rows``."""
    per_row = row_bytes(d, 8, method) if per_row is None else per_row
    density = pairs_upper / max(1.0, float(n_a) * float(max(n_b, 1)))  # pairs per row pair
    # 2R rows + 2 * density * R^2 pairs <= budget  (solve the quadratic)
    a = 2.0 * density * PAIR_BYTES
    b = 2.0 * per_row
    if a > 0:
        rows = (-b + np.sqrt(b * b + 4 * a * budget)) / (2 * a)
    else:
        rows = budget / b
    rows = int(max(1, min(rows, max(n_a, n_b, 1), max_rows)))
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


#: a partition's estimate blends where the sampled pairs lie with its share of the row pairs, the
#: share weighing as much as this many sampled pairs (few sampled pairs: mostly the share)
PRIOR_PAIRS = 4.0
#: a heavy partition is halved at most this many times, and not below this many rows a side
MAX_HALVINGS = 6
MIN_SPLIT_ROWS = 4096


def _row_pair_share(ra, rb, same: bool, n_a: int, n_b: int, selfjoin: bool) -> float:
    """The partition's share of all row pairs (a self-join's i < j pairs)."""
    if selfjoin:
        size = (ra[1] - ra[0]) ** 2 / 2 if same else (ra[1] - ra[0]) * (rb[1] - rb[0])
        return size / max(1.0, n_a * (n_a - 1) / 2)
    return (ra[1] - ra[0]) * (rb[1] - rb[0]) / max(1.0, n_a * n_b)


class _Estimator:
    """Pairs of a rectangle of row pairs: ``pairs_upper`` spread by where the sampled pairs lie (blended
    with the row-pair share, :data:`PRIOR_PAIRS`); by the share alone where no pairs were listed."""

    def __init__(self, pairs_upper: float, pair_rows, n_a: int, n_b: int, selfjoin: bool):
        self.upper, self.n_a, self.n_b, self.selfjoin = pairs_upper, n_a, n_b, selfjoin
        self.sampled = 0 if pair_rows is None else len(pair_rows[0])
        if self.sampled:  # sorted by i once: a rectangle's pairs are then a slice, searched for j
            i, j = np.asarray(pair_rows[0], np.int64), np.asarray(pair_rows[1], np.int64)
            order = np.argsort(i, kind="stable")
            self.i, self.j = i[order], j[order]

    def _hits(self, ra, rb, same: bool) -> int:
        lo, hi = np.searchsorted(self.i, ra, side="left")
        j = self.j[lo:hi]
        b = ra if same else rb
        return int(np.count_nonzero((j >= b[0]) & (j < b[1])))

    def _share(self, ra, rb, same: bool) -> float:
        return _row_pair_share(ra, rb, same, self.n_a, self.n_b, self.selfjoin)

    def __call__(self, ra, rb, same: bool) -> float:
        share = self._share(ra, rb, same)
        if not self.sampled:
            return self.upper * share
        return self.upper * (self._hits(ra, rb, same) + PRIOR_PAIRS * share) / (self.sampled + PRIOR_PAIRS)

    def floor(self, ra, rb, same: bool) -> float:
        """What the block pair holds at least, by the sample (its hits less two standard deviations), and
        never below its row-pair share: where the sample says nothing beyond noise, the share, as before
        pairs were sampled per partition (uniform data is then cut exactly as by the budget alone)."""
        share = self._share(ra, rb, same)
        if not self.sampled:
            return self.upper * share
        hits = self._hits(ra, rb, same)
        return self.upper * max(share, (hits - 2.0 * np.sqrt(hits)) / (self.sampled + PRIOR_PAIRS))


def _halves(ra, rb, same: bool):
    """Two or three rectangles covering a partition's row pairs once: a self block as two blocks and their
    cross pair (the earlier rows first, so i < j stays true), a cross pair halved along its longer side."""
    if same:
        m = (ra[0] + ra[1]) // 2
        return [((ra[0], m), None, True), ((ra[0], m), (m, ra[1]), False), ((m, ra[1]), None, True)]
    if ra[1] - ra[0] >= rb[1] - rb[0]:
        m = (ra[0] + ra[1]) // 2
        return [((ra[0], m), rb, False), ((m, ra[1]), rb, False)]
    m = (rb[0] + rb[1]) // 2
    return [(ra, (rb[0], m), False), (ra, (m, rb[1]), False)]


def _split_heavy(cells, estimate, too_heavy, depth: int = 0):
    """Each (rows a, rows b, same) halved while ``too_heavy(rows, its floor estimate)`` and large enough;
    with their estimates."""
    out = []
    for ra, rb, same in cells:
        rows = (ra[1] - ra[0]) + (0 if same else rb[1] - rb[0])
        longest = max(ra[1] - ra[0], 0 if same else rb[1] - rb[0])
        if depth < MAX_HALVINGS and longest >= 2 * MIN_SPLIT_ROWS and too_heavy(rows, estimate.floor(ra, rb, same)):
            out += _split_heavy(_halves(ra, rb, same), estimate, too_heavy, depth + 1)
        else:
            out.append((ra, rb, same, estimate(ra, rb, same)))
    return out


def plan_block_pairs(stats_a: BlockStats, stats_b: BlockStats | None, eps: float, rows: int, pairs_upper: float,
                     pair_rows=None, too_heavy=None):
    """Partitions for every block pair whose boxes are within eps; also the fraction of pairs kept.

    Each partition's ``est_pairs`` says where the sampled pairs lie (``pair_rows``, see :class:`_Estimator`);
    a block pair ``too_heavy(rows, est_pairs)`` is halved (:func:`_halves`) until it is not.
    """
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
    cells = []
    for x in range(na):
        for y in range(x if stats_b is None else 0, nb):
            if near[x, y]:
                same = stats_b is None and x == y
                ra = (int(starts_a[x]), int(starts_a[x + 1]))
                cells.append((ra, None if same else (int(starts_b[y]), int(starts_b[y + 1])), same))
    estimate = _Estimator(pairs_upper, pair_rows, n_a, n_b, stats_b is None)
    cut = _split_heavy(cells, estimate, too_heavy or (lambda rows, est: False))
    parts = tuple(Partition(k, ra, rb, same, est) for k, (ra, rb, same, est) in enumerate(cut))
    total = na * (na + 1) / 2 if stats_b is None else na * nb
    return parts, (len(cells) / total if total else 0.0)
