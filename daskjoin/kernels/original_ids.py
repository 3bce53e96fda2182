"""Pairs of rows read through a sorted copy, put in original row ids on the host (Numba, one parallel pass).

A slab task's kernels number rows by their place in the sorted copy; each pair's ``i`` and ``j`` are looked
up in the copy's id columns and, in a self-join (whose copy reorders the rows), ordered so that ``i < j``.
numpy did this in four passes, two of them random gathers, each on one core: 0.8-1.8 s for 30M pairs on the
2-core VM where this takes 0.4 s (a 2M x 3-d slab to Parquet, one worker: 5.9-6.8 s before, 3.7-4.6 s after,
``benchmarks/results/slabs-cpu-vm-2026-11-27-original-ids.json``).  The GPU drivers do the same on the
device (:mod:`.gpu_ids`).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel_guard import serialised


@njit(cache=True, parallel=True)
def _lookup(li, lj, ids_i, ids_j, ordered, oi, oj):
    for k in prange(li.shape[0]):
        a = ids_i[li[k]]
        b = ids_j[lj[k]]
        if ordered and b < a:
            a, b = b, a
        oi[k] = a
        oj[k] = b


def to_original(li: np.ndarray, lj: np.ndarray, ids_i: np.ndarray, ids_j: np.ndarray, ordered: bool):
    """``(ids_i[li], ids_j[lj])`` as new int64 arrays, swapped where ``ordered`` so that ``i <= j``."""
    oi, oj = np.empty(li.shape[0], np.int64), np.empty(lj.shape[0], np.int64)
    if li.shape[0]:
        with serialised():
            _lookup(li, lj, ids_i, ids_j, bool(ordered), oi, oj)
    return oi, oj
