"""A sampled estimate of the result size (Gallet & Gowanlock batch their output the same way).

The pairs among an evenly spread sample of m rows are counted exactly and scaled
by the ratio of pair counts: n(n-1)/(m(m-1)) for a self-join, nA*nB/(mA*mB) for
A×B.  With few sampled pairs the estimate is noisy, so planning sizes for an
upper confidence bound rather than the point estimate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..kernels import get_kernel


@dataclass(frozen=True)
class Estimate:
    pairs: float  # point estimate of the number of result pairs
    upper: float  # a ~97.5% upper bound, used to size partitions
    sampled_pairs: int
    sample_size: tuple
    #: input rows (i of A, j of B or of A) of the sample's pairs, where the sample rows were given and the
    #: pairs number at most PAIRS_LISTED: where in the input the pairs lie (per-partition estimates)
    pair_rows: tuple | None = field(default=None, repr=False, compare=False)
    #: the share of the sample's pairs of rows whose distance the CPU grid computes (its candidates), where asked
    #: (``grid_share``): the same share of the input's, in expectation (the grid's cells follow eps and the
    #: bounds, not the row count), for ``method="auto"``'s choice between the grid and brute force
    grid_share: float | None = None

    def describe(self) -> str:
        return f"~{self.pairs:,.0f} pairs (upper bound {self.upper:,.0f}; {self.sampled_pairs} pairs in a sample of {self.sample_size})"


#: Above this dimensionality the CPU grid prunes little: estimate from fewer rows.
HIGH_D = 16
HIGH_D_SAMPLE = 5000


#: sampled pairs listed with their rows (for per-partition estimates) up to this many
PAIRS_LISTED = 1 << 20
#: slabs are cut by where the sample's pairs lie; with fewer pairs than this at eps (20M x 3-d exponential
#: rows: ~320 of 320M in 20,000 sampled rows, too few to place the dense corner), their shape comes from the
#: pairs at a larger radius, grown until about this many would fall in it (density alike within the radius:
#: counts grow as radius^d), at most SHAPE_GROW times eps so that the shape stays local
SHAPE_PAIRS = 20_000
SHAPE_GROW = 8.0


def _thin(sample: np.ndarray | None, rows: np.ndarray | None = None):
    """The sample (and its rows) thinned to HIGH_D_SAMPLE rows above HIGH_D dimensions."""
    if sample is None or sample.shape[1] <= HIGH_D or sample.shape[0] <= HIGH_D_SAMPLE:
        return sample, rows
    step = -(-sample.shape[0] // HIGH_D_SAMPLE)
    return sample[::step], None if rows is None else rows[::step]


def _pair_rows(kernel, sample_a, sample_b, eps, rows_a, rows_b, hits: int):
    """The input rows of the sample's ``hits`` pairs (A rows, B rows; a self-join's as (smaller, larger))."""
    if rows_a is None or (sample_b is not None and rows_b is None) or not 0 < hits <= PAIRS_LISTED:
        return None
    if sample_b is None:
        i, j = kernel.self_join(sample_a, eps, with_distance=False)[:2]
        ri, rj = rows_a[np.asarray(i)], rows_a[np.asarray(j)]
        return np.minimum(ri, rj), np.maximum(ri, rj)
    i, j = kernel.cross_join(sample_a, sample_b, eps, with_distance=False)[:2]
    return rows_a[np.asarray(i)], rows_b[np.asarray(j)]


def estimate_pairs(sample_a: np.ndarray, n_a: int, eps: float, sample_b: np.ndarray | None = None, n_b: int | None = None,
                   *, backend: str = "cpu", rows_a: np.ndarray | None = None, rows_b: np.ndarray | None = None,
                   list_pairs: bool = True, grid_share: bool = False) -> Estimate:
    """``backend="gpu"`` where the join will run on a GPU: the sample is counted there (the same exact
    count), so a GPU run need not load the CPU kernels at all.  ``rows_a``/``rows_b``: the input rows of
    the sampled rows; given, the estimate also says where the sampled pairs lie (``pair_rows``), unless
    ``list_pairs`` is False (the planner lists them only for a plan of several partitions:
    :func:`sample_pair_rows`).  ``grid_share``: also the share of the sample's pairs of rows that are the CPU
    grid's candidates (:attr:`Estimate.grid_share`)."""
    sample_a, rows_a = _thin(sample_a, rows_a)
    sample_b, rows_b = _thin(sample_b, rows_b)
    kernel = get_kernel("grid", backend)
    m_a = sample_a.shape[0]
    if sample_b is None:
        hits = kernel.self_count(sample_a, eps) if m_a > 1 else 0
        scale = (n_a * (n_a - 1)) / (m_a * (m_a - 1)) if m_a > 1 else 0.0
        size = (m_a,)
    else:
        m_b = sample_b.shape[0]
        hits = kernel.cross_count(sample_a, sample_b, eps) if m_a and m_b else 0
        scale = (n_a * n_b) / (m_a * m_b) if m_a and m_b else 0.0
        size = (m_a, m_b)
    share = _grid_share(sample_a, eps, sample_b) if grid_share else None
    # Poisson upper bound on the sampled count (+2 sqrt + 4 keeps zero counts honest)
    upper_hits = hits + 2.0 * math.sqrt(hits) + 4.0
    total_pairs = n_a * (n_a - 1) / 2 if sample_b is None else n_a * (n_b or 0)
    return Estimate(
        pairs=hits * scale,
        upper=min(upper_hits * scale, float(total_pairs)),
        sampled_pairs=int(hits),
        sample_size=size,
        pair_rows=_pair_rows(kernel, sample_a, sample_b, eps, rows_a, rows_b, int(hits)) if list_pairs else None,
        grid_share=share,
    )


#: the grid's share is measured on at most this many of the sample's rows (each side): an unbiased share either
#: way, and its count of candidates costs ~30 ms on 20,000 8-d rows, ~2 ms on 5,000
SHARE_SAMPLE = 5000


def _grid_share(sample_a: np.ndarray, eps: float, sample_b: np.ndarray | None) -> float:
    sample_a, sample_b = (None if x is None else x[::-(-x.shape[0] // SHARE_SAMPLE) or 1] for x in (sample_a, sample_b))
    m_a = sample_a.shape[0]
    rows = m_a * (m_a - 1) / 2 if sample_b is None else m_a * sample_b.shape[0]
    return get_kernel("grid", "cpu").decisions(sample_a, sample_b, eps) / rows if rows else 0.0


def sample_grid_share(sample_a: np.ndarray, eps: float, sample_b: np.ndarray | None = None) -> float:
    """:attr:`Estimate.grid_share` of an estimate made without it (the same sample and eps)."""
    return _grid_share(_thin(sample_a)[0], eps, _thin(sample_b)[0])


#: queries of the planning sample whose k-th distance is estimated (:func:`sample_knn_grid_share`), and the quantile
#: of those distances taken: the radius of the kNN grid's range pass (``kernels/knn_range.py``'s 256 and 0.98)
KNN_SHARE_QUERIES = 256
KNN_SHARE_QUANTILE = 0.98


@dataclass(frozen=True)
class KnnShare:
    """The planning sample's view of a CPU kNN grid join (:func:`sample_knn_grid_share`)."""

    share: float  # the ε-grid's candidates at ``radius`` among the sample's pairs of rows (NaN: unknown)
    radius: float  # the k-th neighbour distance the range pass would take, estimated


def sample_knn_radius(sample_a: np.ndarray, sample_b: np.ndarray | None, n_b: int, k: int) -> float:
    """The k-th neighbour distance the kNN grid's range pass would take, estimated on the planning sample (the
    ``radius`` of :class:`KnnShare`; NaN where the sample cannot say).

    A query's j-th neighbour among the sample's m rows of B stands for its (j n_b / m)-th among all, so its k-th
    is the sample's j-th (j = ceil(k m / n_b)) scaled by (k m / (j n_b))^(1/d) (as many rows within a radius as its
    volume); the radius is the range pass's high quantile of those over sampled queries.  ``sample_b`` None: a
    self-join (a row is not its own neighbour).  Distances from norms and products, the rows centred first (an
    estimate, but not one that offsets far from the origin may cancel away)."""
    rows = sample_a if sample_b is None else sample_b
    m, d = rows.shape
    wanted = k * m / max(int(n_b), 1)
    j = max(1, math.ceil(wanted))
    if d == 0 or not sample_a.shape[0] or m <= j + (sample_b is None):
        return math.nan
    picked = np.unique(np.linspace(0, sample_a.shape[0] - 1, KNN_SHARE_QUERIES).astype(np.int64))
    centre = np.asarray(rows, np.float64).mean(axis=0)
    data = np.asarray(rows, np.float64) - centre
    queries = np.asarray(sample_a[picked], np.float64) - centre
    d2 = (queries * queries).sum(1)[:, None] + (data * data).sum(1)[None, :] - 2.0 * (queries @ data.T)
    if sample_b is None:
        d2[np.arange(len(picked)), picked] = np.inf
    jth = np.sqrt(np.maximum(np.partition(d2, j - 1, axis=1)[:, j - 1], 0.0))
    return float(np.quantile(jth * (wanted / j) ** (1.0 / d), KNN_SHARE_QUANTILE))


def sample_knn_grid_share(sample_a: np.ndarray, sample_b: np.ndarray | None, n_b: int, k: int) -> KnnShare:
    """The ε-grid's candidates among the planning sample's pairs of rows at the estimated kNN radius (the CPU kNN
    grid's range pass is that ε-grid's join), on the sample thinned as for :func:`sample_grid_share`; with the
    radius.  ``n_b``: the rows of B a task searches at once (one data block)."""
    sample_a, sample_b = (None if x is None else _thin(x)[0] for x in (sample_a, sample_b))
    sample_a, sample_b = (None if x is None else x[::-(-x.shape[0] // SHARE_SAMPLE) or 1] for x in (sample_a, sample_b))
    radius = sample_knn_radius(sample_a, sample_b, n_b, k)
    if not (0.0 < radius < math.inf):
        return KnnShare(math.nan, radius)
    return KnnShare(_grid_share(sample_a, radius, sample_b), radius)


def sample_pair_rows(est: Estimate, sample_a: np.ndarray, eps: float, sample_b: np.ndarray | None = None, *,
                     backend: str = "cpu", rows_a: np.ndarray | None = None, rows_b: np.ndarray | None = None):
    """The ``pair_rows`` of an estimate made with ``list_pairs=False`` (the same sample, eps and rows)."""
    sample_a, rows_a = _thin(sample_a, rows_a)
    sample_b, rows_b = _thin(sample_b, rows_b)
    return _pair_rows(get_kernel("grid", backend), sample_a, sample_b, eps, rows_a, rows_b, est.sampled_pairs)


def shape_pairs(est: Estimate, sample_a: np.ndarray, eps: float, sample_b: np.ndarray | None = None, *,
                backend: str = "cpu", rows_a: np.ndarray | None = None, rows_b: np.ndarray | None = None):
    """``(rows, grow)``: where ``est``'s sample holds fewer than SHAPE_PAIRS pairs, the input rows of its pairs
    at ``grow * eps`` (as ``pair_rows``), the shape of the work along the input for slabs cut by work; else
    ``(est.pair_rows, 1.0)`` (also where the rows are unknown or the grown radius lists too many)."""
    hits = est.sampled_pairs
    sample_a, rows_a = _thin(sample_a, rows_a)
    sample_b, rows_b = _thin(sample_b, rows_b)
    d = sample_a.shape[1] if sample_a.ndim == 2 else 0
    if hits >= SHAPE_PAIRS or rows_a is None or d == 0 or not math.isfinite(eps * SHAPE_GROW) or eps <= 0:
        return est.pair_rows, 1.0
    grow = min(SHAPE_GROW, (SHAPE_PAIRS / max(hits, 1)) ** (1.0 / d))
    kernel = get_kernel("grid", backend)
    wide = eps * grow
    if sample_b is None:
        count = kernel.self_count(sample_a, wide) if sample_a.shape[0] > 1 else 0
    else:
        count = kernel.cross_count(sample_a, sample_b, wide) if sample_a.shape[0] and sample_b.shape[0] else 0
    rows = _pair_rows(kernel, sample_a, sample_b, wide, rows_a, rows_b, int(count))
    return (rows, grow) if rows is not None else (est.pair_rows, 1.0)
