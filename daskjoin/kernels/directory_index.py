"""The multi-level quantile directory of Böhm, Noll, Plant & Zherdin, built by fractionated sorting (numpy or
CuPy: the same code on both backends, ``xp``).

Level 1 sorts the rows by the first directory dimension and cuts them into ``fanout`` quantile parts;
level 2 sorts each part by the second dimension and cuts it again; and so on for ``levels`` levels.
The rows end in one array ordered by (part at level 1, ..., part at the last level, coordinate), each
node of the directory a contiguous range of it: near rows sit at near positions, so consecutive rows
make query groups with tight bounds.  Every node keeps the bounding box of its rows over all
dimensions (the paper tests one dimension per level; the full box prunes at least as much).

**Bounds coordinates.**  Without rotation the boxes are of the stored values as float64, and a test
``sum_t gap_t^2 <= eps^2`` (gaps between boxes, summed in dimension order in float64) never drops a pair
the exact rule keeps: a gap is at most the pair's coordinate difference, and float64 subtraction,
squaring and in-order addition are monotone, so the gaps' sum is at most the pair's own computed sum.
With ``pca=True`` the boxes are of ``(x - mu) V`` (V the principal axes of a sample, leading ones
first, so that the directory's dimensions are the selective ones); rotation preserves distances up
to rounding, bounded in :func:`rotated_limit`.  Either way the boxes only prune: the exact decision is
always on the stored values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LEVELS = 3
FANOUT = 16
#: rows of a query group (the paper's thread group)
GROUP = 64
#: rows sampled for the principal axes
PCA_SAMPLE = 100_000
U64 = 2.0 ** -53


@dataclass(frozen=True)
class Rotation:
    """``(x - mean) @ axes``: the principal axes of the index side, leading ones first."""

    mean: np.ndarray   # float64 (d,)
    axes: np.ndarray   # float64 (d, d), columns orthonormal

    def apply(self, x, xp=np):
        return (xp.asarray(x, dtype=xp.float64) - xp.asarray(self.mean)) @ xp.asarray(self.axes)


def principal_axes(x, xp=np) -> Rotation:
    """Principal axes of a sample of ``x`` (numpy or CuPy rows), computed in float64 on the host."""
    n, d = x.shape
    take = np.linspace(0, n - 1, min(n, PCA_SAMPLE)).astype(np.int64) if n else np.zeros(0, np.int64)
    sample = np.asarray(x[xp.asarray(take)].get() if xp is not np else x[take], np.float64)
    mean = sample.mean(axis=0) if n else np.zeros(d)
    if n > 1:
        _, vectors = np.linalg.eigh(np.cov(sample - mean, rowvar=False).reshape(d, d))
        axes = np.ascontiguousarray(vectors[:, ::-1])
    else:
        axes = np.eye(d)
    return Rotation(mean, axes)


def rotated_limit(eps2: float, d: int, radius: float) -> float:
    """A bound on the rotated squared distance of any pair the exact rule keeps.

    The kept pair has |x_p - x_q| <= sqrt(eps2) (1 + 1e-9) (the float64 sum loses at most d u).  The
    rotated rows are computed with error at most (d + 2) u |x - mean| per coordinate (an inner product of
    d terms against a unit column), so at most e = sqrt(d) (d + 2) u R per row, R = max |x - mean|; the
    computed axes are orthonormal to within 1e-12 d (LAPACK's eigh).  So the rotated distance is at most
    sqrt(eps2)(1 + 1e-9)(1 + 1e-12 d) + 2e, and its float64 sum of gaps at most (1 + 1e-9) of its square."""
    e = math.sqrt(d) * (d + 2) * U64 * radius
    r = math.sqrt(eps2) * (1.0 + 1e-9) * (1.0 + 1e-12 * d) + 2.0 * e
    return r * r * (1.0 + 1e-9) + (d + 1) * 5e-324


#: nodes of the last level at most (each holds a box of d float64 twice)
MAX_LEAVES = 1 << 24


def check_shape(levels: int, fanout: int) -> tuple[int, int]:
    """``levels`` >= 1 and ``fanout`` >= 2 as ints, refusing a directory of more than ``MAX_LEAVES`` leaves."""
    levels, fanout = int(levels), int(fanout)
    if levels < 1 or fanout < 2 or fanout ** levels > MAX_LEAVES:
        raise ValueError(f"a directory has levels >= 1, fanout >= 2 and at most {MAX_LEAVES} leaves, "
                         f"got levels={levels}, fanout={fanout}")
    return levels, fanout


def directory_dims(lo, hi, levels: int) -> np.ndarray:
    """The dimensions the levels cut, in level order: those of largest spread (rotated rows: the leading axes)."""
    extent = np.where(np.isfinite(hi - lo), hi - lo, 0.0)
    return np.argsort(-extent, kind="stable")[:levels].astype(np.int64)


def fractionated_order(coords, dims, fanout: int, xp=np):
    """Row order of the directory and the leaf of each ordered row (``len(dims)`` levels of ``fanout``)."""
    n = coords.shape[0]
    order = xp.arange(n, dtype=xp.int64)
    part = xp.zeros(n, dtype=xp.int64)
    nparts = 1
    for dim in dims:
        key = coords[order, int(dim)]
        if xp is np:
            o = np.lexsort((key, part))
        else:  # by key, then by part, both stable (as the GPU grid's index is built)
            by_key = xp.argsort(key, kind="stable")
            o = by_key[xp.argsort(part[by_key], kind="stable")]
        order, part = order[o], part[o]
        starts = xp.searchsorted(part, xp.arange(nparts + 1, dtype=xp.int64))
        size = (starts[1:] - starts[:-1])[part]
        pos = xp.arange(n, dtype=xp.int64) - starts[part]
        part = part * fanout + (pos * fanout) // xp.maximum(size, 1)
        nparts *= fanout
    return order, part, nparts


def node_boxes(sorted_coords, leaf, nleaves: int, fanout: int, levels: int, xp=np):
    """Per level (1 .. levels): each node's first row, and its box (lo, hi) over all dimensions; an empty
    node's box is (+inf, -inf), which prunes it."""
    n, d = sorted_coords.shape
    starts = xp.searchsorted(leaf, xp.arange(nleaves + 1, dtype=xp.int64))
    lo = xp.full((nleaves, d), np.inf)
    hi = xp.full((nleaves, d), -np.inf)
    if n:
        if xp is np:
            nonempty = np.flatnonzero(starts[1:] > starts[:-1])
            lo[nonempty] = np.minimum.reduceat(sorted_coords, starts[nonempty], axis=0)
            hi[nonempty] = np.maximum.reduceat(sorted_coords, starts[nonempty], axis=0)
        else:  # one thread per (leaf, dimension) over the leaf's rows (cuda/directory.cu)
            from .gpu_common import kernel

            kernel("directory.cu", "leaf_boxes")((-(-(nleaves * d) // 256),), (256,), (
                xp.ascontiguousarray(sorted_coords), starts, np.int64(nleaves), np.int32(d), lo, hi))
    levels_out = [(starts, lo, hi)]
    for _ in range(levels - 1):
        starts = starts[::fanout]
        lo = lo.reshape(-1, fanout, d).min(axis=1)
        hi = hi.reshape(-1, fanout, d).max(axis=1)
        levels_out.append((starts, lo, hi))
    return levels_out[::-1]  # level 1 first


def group_boxes(sorted_coords, group: int, xp=np):
    """The box of every run of ``group`` consecutive rows."""
    n, d = sorted_coords.shape
    groups = -(-n // group)
    pad = groups * group - n
    lo = xp.concatenate([sorted_coords, xp.full((pad, d), np.inf)]).reshape(groups, group, d).min(axis=1)
    hi = xp.concatenate([sorted_coords, xp.full((pad, d), -np.inf)]).reshape(groups, group, d).max(axis=1)
    return lo, hi
