"""The work report: how many candidates (exact decisions) each query point of a join costs a method.

``profile_work`` runs one method's driver in this process on (a sample of) the rows and summarises the
drivers' ``work()``: min, median, p99, max and mean candidates per query point, against the pairs per
point.  A skewed distribution (a p99 or max far above the median) is what Gallet & Gowanlock's options
of the GPU grid answer (``threads_per_point``, ``sort_by_workload``, ``work_queue``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .kernels import get_kernel
from .validation import InputError


@dataclass(frozen=True)
class WorkProfile:
    method: str
    backend: str
    queries: int
    rows: int
    pairs: int
    minimum: int
    median: float
    p99: float
    maximum: int
    mean: float

    def describe(self) -> str:
        per_point = self.pairs / max(self.queries, 1)
        return (f"work per query point ({self.method} on {self.backend}, {self.queries:,} queries against "
                f"{self.rows:,} rows): candidates min {self.minimum:,}, median {self.median:,.0f}, "
                f"p99 {self.p99:,.0f}, max {self.maximum:,}, mean {self.mean:,.1f}; "
                f"pairs {self.pairs:,} ({per_point:,.1f} a point, {self.pairs / max(self.mean * self.queries, 1):.1%} "
                f"of the candidates)")


def profile_work(a, b=None, *, eps: float, method: str = "grid", backend: str = "cpu", rows: int | None = None,
                 **options) -> WorkProfile:
    """Candidates per query point of ``method`` on ``backend`` for the join of ``a`` (and ``b``): numpy rows, in
    this process.  ``rows``: at most this many evenly spaced rows of each side (None: all; a sample has
    fewer neighbours a point, about in proportion).  ``options`` go to the driver (as ``gpu_options``)."""
    a = _sample(np.asarray(a), rows)
    b = None if b is None else _sample(np.asarray(b), rows)
    try:
        driver = get_kernel(method, backend, **options)._join(a, b, eps)
    except (TypeError, ValueError) as exc:  # an option the driver does not take, or a value it refuses
        raise InputError(f"profile_work: {method} on {backend} with options {options}: {exc}") from None
    if not hasattr(driver, "work"):
        raise InputError(f"method {method!r} on {backend} has no work report; try backend='cpu'")
    work = np.asarray(driver.work(), np.int64)
    pairs = int(driver.count())
    if not work.size:
        return WorkProfile(method, backend, 0, len(a if b is None else b), pairs, 0, 0.0, 0.0, 0, 0.0)
    return WorkProfile(method, backend, int(work.size), int(len(a if b is None else b)), pairs, int(work.min()),
                       float(np.median(work)), float(np.percentile(work, 99)), int(work.max()), float(work.mean()))


def _sample(x: np.ndarray, rows: int | None) -> np.ndarray:
    if rows is None or len(x) <= rows:
        return x
    return x[np.linspace(0, len(x) - 1, rows).astype(np.int64)]
