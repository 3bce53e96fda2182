"""A sampled estimate of the result size (Gallet & Gowanlock batch their output the same way).

The pairs among an evenly spread sample of m rows are counted exactly and scaled
by the ratio of pair counts: n(n-1)/(m(m-1)) for a self-join, nA*nB/(mA*mB) for
A×B.  With few sampled pairs the estimate is noisy, so planning sizes for an
upper confidence bound rather than the point estimate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..kernels import get_kernel


@dataclass(frozen=True)
class Estimate:
    pairs: float  # point estimate of the number of result pairs
    upper: float  # a ~97.5% upper bound, used to size partitions
    sampled_pairs: int
    sample_size: tuple

    def describe(self) -> str:
        return f"~{self.pairs:,.0f} pairs (upper bound {self.upper:,.0f}; {self.sampled_pairs} pairs in a sample of {self.sample_size})"


#: Above this dimensionality the CPU grid prunes little: estimate from fewer rows.
HIGH_D = 16
HIGH_D_SAMPLE = 5000


def _thin(sample: np.ndarray | None) -> np.ndarray | None:
    if sample is None or sample.shape[1] <= HIGH_D or sample.shape[0] <= HIGH_D_SAMPLE:
        return sample
    return sample[:: -(-sample.shape[0] // HIGH_D_SAMPLE)]


def estimate_pairs(sample_a: np.ndarray, n_a: int, eps: float, sample_b: np.ndarray | None = None, n_b: int | None = None,
                   *, backend: str = "cpu") -> Estimate:
    """``backend="gpu"`` where the join will run on a GPU: the sample is counted there (the same exact
    count), so a GPU run need not load the CPU kernels at all."""
    sample_a, sample_b = _thin(sample_a), _thin(sample_b)
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
    # Poisson upper bound on the sampled count (+2 sqrt + 4 keeps zero counts honest)
    upper_hits = hits + 2.0 * math.sqrt(hits) + 4.0
    total_pairs = n_a * (n_a - 1) / 2 if sample_b is None else n_a * (n_b or 0)
    return Estimate(
        pairs=hits * scale,
        upper=min(upper_hits * scale, float(total_pairs)),
        sampled_pairs=int(hits),
        sample_size=size,
    )
