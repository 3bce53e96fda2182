"""Query shares: a join's query points cut into ``parts`` runs of about equal work, so that ``parts`` tasks
that each index every point (the grid) and each search one run split a join one task could hold.

Why not blocks: a grid join's cost is mostly per query point (its cell's neighbourhood scanned), so a
self-join cut into two row blocks costs three block pairs, 1.86x the uncut work on an H200
(``benchmarks/profile_split.py``); cut by queries it costs the uncut work plus one index a task.

A share is the run of query cells (CPU) or sorted query points (GPU) whose cumulative weight
falls in ``[total k / parts, total (k + 1) / parts)``; a cell of ``m`` points weighs ``m^2`` (its
points times the points they meet, about ``m`` in a neighbourhood of like density).  The weights
come from the driver's own index, so the shares of one driver (CPU or GPU: their grids differ)
partition its pairs exactly; a plan cut into shares therefore names the backend that may run
them (``Partition.share``).
"""
from __future__ import annotations

import math

import numpy as np


def _prefix(cell_start, xp):
    sizes = xp.diff(cell_start).astype(xp.int64)
    prefix = xp.zeros(sizes.shape[0] + 1, xp.int64)
    xp.cumsum(sizes * sizes, out=prefix[1:])
    return sizes, prefix


def _targets(total: int, k: int, parts: int) -> tuple[int, int]:
    return total * k // parts, total * (k + 1) // parts


def check_share(share) -> tuple[int, int]:
    """(k, parts) of a share ``(k, parts[, kind])``, checked."""
    k, parts = int(share[0]), int(share[1])
    if parts < 1 or not 0 <= k < parts:
        raise ValueError(f"a query share is (k, parts) with 0 <= k < parts, got {tuple(share)!r}")
    return k, parts


def cell_range(cell_start, share, xp=np) -> tuple[int, int]:
    """The query cells ``[lo, hi)`` of ``share`` (``cell_start``: each cell's first sorted point, then n)."""
    k, parts = check_share(share)
    _, prefix = _prefix(cell_start, xp)
    ncell = int(prefix.shape[0]) - 1
    if ncell == 0:
        return 0, 0
    total = int(prefix[-1])
    t0, t1 = _targets(total, k, parts)
    found = xp.searchsorted(prefix, xp.asarray([t0, t1], dtype=xp.int64), side="left")
    lo, hi = (int(v) for v in (found.get() if hasattr(found, "get") else found))
    return min(lo, ncell), min(hi, ncell) if k + 1 < parts else ncell


def _points_reaching(t: int, m: int, selfjoin: bool) -> int:
    """The fewest first points of a cell of ``m`` points whose weight reaches ``t`` (0 < t <= m^2).

    Across a join's cell each point weighs m; in a self-join the p-th point weighs 2(m - p) - 1 instead
    (it scans the m - p - 1 points after it in its own cell, so earlier points do more), which keeps
    the cell's m^2: q points weigh 2mq - q^2."""
    if not selfjoin:
        return -(-t // m)
    q = max(0, m - math.isqrt(m * m - t))
    while 2 * m * q - q * q < t:
        q += 1
    while q > 0 and 2 * m * (q - 1) - (q - 1) * (q - 1) >= t:
        q -= 1
    return q


def point_range(cell_start, share, xp=np, selfjoin: bool = False) -> tuple[int, int]:
    """The sorted query points ``[lo, hi)`` of ``share``: the point where the cumulative weight first reaches
    each target (cells weigh m^2 as in :func:`cell_range`; within a cell see :func:`_points_reaching`)."""
    k, parts = check_share(share)
    sizes, prefix = _prefix(cell_start, xp)
    ncell = int(sizes.shape[0])
    n = int(cell_start[-1]) if ncell else 0
    if ncell == 0:
        return 0, 0
    total = int(prefix[-1])
    targets = _targets(total, k, parts)
    cells = xp.searchsorted(prefix, xp.asarray(targets, dtype=xp.int64), side="right") - 1
    cells = [int(c) for c in (cells.get() if hasattr(cells, "get") else cells)]
    out = []
    for target, c in zip(targets, cells):
        if target >= total or c >= ncell:
            out.append(n)
            continue
        size, before, first = int(sizes[c]), int(prefix[c]), int(cell_start[c])
        out.append(first + (_points_reaching(target - before, size, selfjoin) if target > before else 0))
    lo, hi = out
    return lo, (hi if k + 1 < parts else n)
