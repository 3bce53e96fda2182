"""Join kernels: one module per method and backend, each a pure function of arrays (no Dask, no I/O).

``get_kernel(method, backend)`` returns an object with the same interface for
every method and backend::

    k = get_kernel("grid", "cpu")             # or "gpu" (CuPy; imported lazily)
    i, j, dist = k.self_join(x, eps)          # i < j, int64; dist float32 (numpy, on the host)
    i, j, dist = k.cross_join(a, b, eps)      # i indexes a, j indexes b
    n = k.self_count(x, eps); n = k.cross_count(a, b, eps)
    for i, j, dist in k.self_batches(x, eps, max_pairs=10**7): ...

Every kernel makes the same exact decision (:mod:`.exact`), so every method and
backend returns the same pair set.  The drivers behind a kernel come from the registry
(:mod:`.registry`, key ``("epsilon", method, backend)``), imported on first use.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import registry

#: The ε-join's methods and backends: those of the registry (:mod:`.registry`).
METHODS = registry.methods("epsilon")
BACKENDS = registry.backends("epsilon")


def _prepare(x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float64)
    return np.ascontiguousarray(x)


@dataclass(frozen=True)
class Kernel:
    """One method on one backend; ``options`` go to the driver (e.g. GPU grid tuning)."""

    method: str
    backend: str = "cpu"
    options: dict = field(default_factory=dict, hash=False, compare=False)

    def _join(self, a, b, eps, share=None):
        """The prepared driver of the registry's ("epsilon", method, backend) entry; ``share``: ``(k, parts)``,
        the k-th query share only (drivers of ``SHARE_METHODS``)."""
        if self.backend == "gpu":
            from .gpu_common import gpu_available

            if not gpu_available():
                raise RuntimeError("backend='gpu' was requested but CuPy sees no CUDA device on this worker")
        else:
            a = _prepare(a)
            b = None if b is None else _prepare(b)
        options = dict(self.options)
        if share is not None:
            if self.backend not in SHARE_METHODS.get(self.method, ()):
                raise ValueError(f"method {self.method!r} does not cut its queries into shares on {self.backend}")
            options["share"] = tuple(share)
        return registry.make("epsilon", self.method, self.backend, a, b, eps, **options)

    def driver(self, a, b, eps, share=None):
        """The prepared driver of one call (``b`` None: a self-join), for callers that take its pairs on the
        device (``pairs(with_distance, device=True)``, where :attr:`device_pairs`)."""
        return self._join(a, b, eps, share)

    @property
    def device_pairs(self) -> bool:
        """Whether this kernel's driver gives its pairs as device arrays (``pairs(..., device=True)``)."""
        return self.backend == "gpu" and self.method in DEVICE_PAIR_METHODS

    @property
    def counts_before_pairs(self) -> bool:
        """Whether this kernel's driver gives its pairs on the device and counts them all first anyway."""
        return self.device_pairs and self.method in COUNTING_METHODS

    def self_join(self, x, eps, with_distance=True, share=None):
        return self._join(x, None, eps, share).pairs(with_distance)

    def cross_join(self, a, b, eps, with_distance=True, share=None):
        return self._join(a, b, eps, share).pairs(with_distance)

    def self_count(self, x, eps, share=None) -> int:
        return self._join(x, None, eps, share).count()

    def cross_count(self, a, b, eps, share=None) -> int:
        return self._join(a, b, eps, share).count()

    def decisions(self, a, b, eps) -> int:
        """The exact decisions (candidate pairs whose distance is computed) the driver would make, counted without
        computing any, by the driver's work report (``work()``; ``b`` None: a self-join)."""
        driver = self._join(a, b, eps)
        return driver.decisions() if hasattr(driver, "decisions") else int(driver.work().sum())

    def self_batches(self, x, eps, max_pairs, with_distance=True, share=None):
        return self._join(x, None, eps, share).batches(max_pairs, with_distance)

    def cross_batches(self, a, b, eps, max_pairs, with_distance=True, share=None):
        return self._join(a, b, eps, share).batches(max_pairs, with_distance)


#: methods whose GPU drivers give their pairs on the device (``pairs(with_distance, device=True)``); GPU brute
#: force moves each range's pairs to the host as they come
DEVICE_PAIR_METHODS = ("grid", "szl", "nlj", "directory")

#: GPU methods whose drivers count every pair before they fill any (``count()`` then costs nothing more); szl
#: fills into rooms bounded by its intervals and counts only where asked
COUNTING_METHODS = ("grid", "nlj", "directory")

#: method -> backends whose drivers take ``share=(k, parts)``: the k-th of ``parts`` query shares (the grid's
#: queries; GPU brute force's tile pairs)
SHARE_METHODS = {"grid": ("cpu", "gpu"), "brute": ("gpu",)}


def resolve_backend(backend: str) -> str:
    """'auto' -> 'gpu' where CuPy sees a CUDA device, else 'cpu'."""
    if backend != "auto":
        return backend
    from .gpu_common import gpu_available

    return "gpu" if gpu_available() else "cpu"


def host_allocator(backend: str):
    """How a task allocates the rows it reads for a kernel on ``backend``: ``empty(shape, dtype)``, or None (numpy).

    A GPU kernel gets pinned host memory, which CuPy copies to the device directly instead
    of staging it through a pinned buffer first (one host copy fewer per task).
    """
    if backend != "gpu":
        return None
    from .gpu_common import pinned_empty

    return pinned_empty


def get_kernel(method: str, backend: str = "cpu", **options) -> Kernel:
    """The kernel of ``method`` (one of ``METHODS``: "grid", "brute", "szl", "nlj", "directory") on ``backend``
    ("cpu", "gpu" or "auto")."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    backend = resolve_backend(backend)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS + ('auto',)}, got {backend!r}")
    return Kernel(method, backend, dict(options))
