"""One registry of kernel drivers, keyed by (kind, method, backend), imported lazily.

A driver is a class whose instances are prepared joins with one protocol::

    d = driver_class("epsilon", "grid", "cpu")(a, b_or_None, eps, **options)
    d = make("sets", "ppjoin", "gpu", r, s_or_None, threshold, larger_partners=..., options=...)
    d.count()                             # exact number of pairs, none materialised
    d.pairs(with_distance=True)           # (i, j, value) numpy arrays: every pair at once
    d.batches(max_pairs, with_distance)   # the same pairs in batches of at most max_pairs each

(``value`` is the float32 distance of the ε-join, the integer overlap of the set join; None
with ``with_distance=False``.)  Entries hold an import path, ``"module.path:ClassName"``, and
keyword arguments bound to the key; nothing is imported until a key is looked up (as dask's
``array/dispatch.py`` registers its CuPy backend), so a host without CuPy never imports a GPU
driver, and importing this module imports neither Numba nor CuPy.

A new method registers with one line, here or in its own package's ``__init__``::

    register("epsilon", "kdtree", "cpu", "daskjoin.kernels.kdtree:KdTreeJoin")

This module also holds two small helpers every driver uses to honour ``max_pairs``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import numpy as np

__all__ = ["register", "driver_class", "make", "registered", "methods", "backends", "bounded_ranges",
           "split_batch"]


@dataclass(frozen=True)
class _Entry:
    path: str
    bound: dict = field(default_factory=dict)


_ENTRIES: dict[tuple[str, str, str], _Entry] = {}
_CLASSES: dict[tuple[str, str, str], type] = {}


def register(kind: str, method: str, backend: str, path: str, /, **bound) -> None:
    """Register the driver at ``path`` ("package.module:Class") for (kind, method, backend).

    ``bound`` keyword arguments are passed to the class by :func:`make` (e.g. the set driver's
    ``algorithm`` and ``backend``, so that one class serves several keys).  Re-registering a
    key replaces it.
    """
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"a driver path is 'package.module:ClassName', got {path!r}")
    key = (kind, method, backend)
    _ENTRIES[key] = _Entry(path, dict(bound))
    _CLASSES.pop(key, None)


def registered(kind: str | None = None) -> tuple[tuple[str, str, str], ...]:
    """The registered (kind, method, backend) keys (of one kind when given), in registration order."""
    return tuple(k for k in _ENTRIES if kind is None or k[0] == kind)


def methods(kind: str) -> tuple[str, ...]:
    """The methods registered for ``kind``, in registration order."""
    return tuple(dict.fromkeys(k[1] for k in registered(kind)))


def backends(kind: str) -> tuple[str, ...]:
    """The backends registered for ``kind``, in registration order."""
    return tuple(dict.fromkeys(k[2] for k in registered(kind)))


def _entry(kind: str, method: str, backend: str) -> _Entry:
    key = (kind, method, backend)
    if key not in _ENTRIES:
        kinds = sorted({k[0] for k in _ENTRIES})
        if kind not in kinds:
            raise ValueError(f"no kernel drivers are registered for kind {kind!r}; registered kinds: {kinds}")
        pairs = ", ".join(f"({m!r}, {b!r})" for _, m, b in registered(kind))
        raise ValueError(f"no {kind} kernel driver for method={method!r}, backend={backend!r}; "
                         f"the registered (method, backend) pairs are: {pairs}")
    return _ENTRIES[key]


def driver_class(kind: str, method: str, backend: str) -> type:
    """The driver class of (kind, method, backend), its module imported on first use."""
    key = (kind, method, backend)
    cls = _CLASSES.get(key)
    if cls is None:
        module, _, name = _entry(kind, method, backend).path.partition(":")
        cls = _CLASSES[key] = getattr(importlib.import_module(module), name)
    return cls


def make(kind: str, method: str, backend: str, /, *args, **options):
    """A prepared driver: ``driver_class(...)(*args, **bound, **options)``."""
    bound = _entry(kind, method, backend).bound
    return driver_class(kind, method, backend)(*args, **bound, **options)


# ------------------------------------------------------------------ protocol helpers for drivers


class SortedRun(tuple):
    """A batch ``(i, j, value)`` that continues its driver call's run of pairs sorted by ``(i, j)``.

    A driver that sorted all of a call's pairs (on the device) yields them as ``SortedRun``
    batches: each is sorted (the driver checked it, on the device), and sorts after every
    earlier ``SortedRun`` batch of the same call.  The task then streams them to the sink as
    they come (checking only where one batch meets the next), so neither the partition nor its
    sort is held in host memory.  Plain tuples promise nothing.
    """

    __slots__ = ()


#: a kNN-join row's value beside i and j: distance and rank in one 8-byte record (kernels/knn.py writes it)
KNN_ROW_VALUE = np.dtype([("dist", "<f4"), ("rank", "<i4")])

#: bytes of one pair on the host: int64 i and j, float32 value
PAIR_ROW_BYTES = 20


def transfer_pairs() -> int:
    """Pairs of one ``SortedRun`` batch a GPU driver moves to the host: one Parquet row group, so the
    task writes each batch as it came (no copy) and pinned buffers of one size are reused."""
    from .. import config

    return max(1, config.parse_bytes(config.get("row-group-bytes")) // PAIR_ROW_BYTES)


def bounded_ranges(counts, max_pairs: int):
    """Consecutive ranges ``(lo, hi)`` of items covering ``counts`` whose pairs sum to at most ``max_pairs``.

    An item with more than ``max_pairs`` pairs alone makes a range ``(k, k + 1)``; the caller
    cuts it further (see each driver).  Ranges are maximal, so their number is at most about
    ``2 * sum(counts) / max_pairs + 1``; items of no pairs join a neighbouring range.
    """
    counts = np.asarray(counts, np.int64)
    max_pairs = max(1, int(max_pairs))
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    lo, n = 0, len(counts)
    while lo < n:
        if counts[lo] > max_pairs:
            hi = lo + 1
        else:  # the last item hi - 1 with offsets[hi] <= offsets[lo] + max_pairs (at least lo itself)
            hi = int(np.searchsorted(offsets, offsets[lo] + max_pairs, side="right")) - 1
            hi = min(max(hi, lo + 1), n)
        yield lo, hi
        lo = hi


def split_batch(batch, max_pairs: int):
    """``batch`` (i, j, value) as consecutive slices of at most ``max_pairs`` pairs (the batch itself when it fits)."""
    max_pairs = max(1, int(max_pairs))
    n = len(batch[0])
    if n <= max_pairs:
        yield batch
        return
    for k in range(0, n, max_pairs):
        yield tuple(None if x is None else x[k:k + max_pairs] for x in batch)


# ------------------------------------------------------------------ the drivers of daskjoin

# ε-join: Driver(a, b_or_None, eps, **options)
register("epsilon", "grid", "cpu", "daskjoin.kernels.grid:GridJoin")
register("epsilon", "brute", "cpu", "daskjoin.kernels.brute_gemm:GemmBruteJoin")
register("epsilon", "grid", "gpu", "daskjoin.kernels.grid_gpu:GpuGridJoin")
register("epsilon", "brute", "gpu", "daskjoin.kernels.brute_gpu:GpuBruteJoin")
register("epsilon", "szl", "cpu", "daskjoin.kernels.szl:SzlJoin")
register("epsilon", "szl", "gpu", "daskjoin.kernels.szl_gpu:GpuSzlJoin")
# Böhm's non-indexed nested loop: on the CPU the tiled loop that ``brute`` runs below GEMM_FROM_D dimensions
# (brute_gemm.GemmBruteJoin, filter="none")
register("epsilon", "nlj", "cpu", "daskjoin.kernels.brute:BruteJoin")
register("epsilon", "nlj", "gpu", "daskjoin.kernels.nlj_gpu:GpuNljJoin")
register("epsilon", "directory", "cpu", "daskjoin.kernels.directory:DirectoryJoin")
register("epsilon", "directory", "gpu", "daskjoin.kernels.directory_gpu:GpuDirectoryJoin")

# set join: SetBlockJoin(r, s_or_None, threshold, *, larger_partners, options, group_copies)
for _algorithm in ("ppjoin", "allpairs"):
    for _backend in ("cpu", "gpu"):
        register("sets", _algorithm, _backend, "daskjoin.kernels.sets.local:SetBlockJoin",
                 algorithm=_algorithm, backend=_backend)
del _algorithm, _backend

# kNN-join: Driver(data_block, k, first_id).search(queries, query_ids, best_d2, best_j, exclude_self)
# (its own protocol: a block updates running neighbour lists; see kernels/knn.py)
register("knn", "grid", "cpu", "daskjoin.kernels.knn:KnnGrid")
register("knn", "brute", "cpu", "daskjoin.kernels.knn:KnnBrute")
register("knn", "szl", "cpu", "daskjoin.kernels.knn_szl:KnnSzl")
register("knn", "grid", "gpu", "daskjoin.kernels.knn_gpu:KnnGridGpu")
register("knn", "brute", "gpu", "daskjoin.kernels.knn_gpu:KnnBruteGpu")
register("knn", "szl", "gpu", "daskjoin.kernels.knn_gpu:KnnSzlGpu")
