"""Join kernels: one module per method, each a pure function of arrays (no Dask, no I/O).

``get_kernel(method, backend)`` returns an object with the same interface for
every method and backend::

    k = get_kernel("grid", "cpu")
    i, j, dist = k.self_join(x, eps)          # i < j, int64; dist float32
    i, j, dist = k.cross_join(a, b, eps)      # i indexes a, j indexes b
    n = k.self_count(x, eps); n = k.cross_count(a, b, eps)
    for i, j, dist in k.self_batches(x, eps, max_pairs=10**7): ...
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

METHODS = ("grid", "brute")
BACKENDS = ("cpu",)


def _prepare(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float64)
    return np.ascontiguousarray(x)


@dataclass(frozen=True)
class CpuKernel:
    """The Numba driver of one method."""

    method: str

    def _join(self, a, b, eps):
        a = _prepare(a)
        b = None if b is None else _prepare(b)
        if self.method == "grid":
            from .grid import GridJoin

            return GridJoin(a, b, eps)
        from .brute import BruteJoin

        return BruteJoin(a, b, eps)

    def self_join(self, x, eps, with_distance=True):
        return self._join(x, None, eps).pairs(with_distance)

    def cross_join(self, a, b, eps, with_distance=True):
        return self._join(a, b, eps).pairs(with_distance)

    def self_count(self, x, eps) -> int:
        return self._join(x, None, eps).count()

    def cross_count(self, a, b, eps) -> int:
        return self._join(a, b, eps).count()

    def self_batches(self, x, eps, max_pairs, with_distance=True):
        return self._join(x, None, eps).batches(max_pairs, with_distance)

    def cross_batches(self, a, b, eps, max_pairs, with_distance=True):
        return self._join(a, b, eps).batches(max_pairs, with_distance)


def get_kernel(method: str, backend: str = "cpu") -> CpuKernel:
    """The kernel of ``method`` ("grid" or "brute") on ``backend`` ("cpu")."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if backend not in BACKENDS:
        raise ValueError(
            f"backend must be one of {BACKENDS} in this build, got {backend!r}; the GPU backend is not implemented yet"
        )
    return CpuKernel(method)
