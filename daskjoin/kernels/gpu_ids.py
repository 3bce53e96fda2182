"""Pairs of rows read through a sorted copy, put in original row ids and (i, j) order on the device.

A slab task reads its rows from a sorted copy, so its kernels number rows by their place in the copy,
while the output wants original ids in (i, j) order: two random look-ups, a min/max pass and a full sort
of every pair.  On the host that took ~4 s a task for 100M pairs (an H200 host, 16 cores: slab tasks
wrote Parquet 7x slower than chunk-pair tasks, 2026-11-27); on the device it takes milliseconds, and the
task then streams one checked ``SortedRun`` as it does for chunk pairs.
"""
from __future__ import annotations

from .gpu_common import cupy, device_budget_bytes, sorted_on_device, sorted_to_host
from .grid_gpu import OUTPUT_BYTES_PER_PAIR, SORT_BYTES_PER_PAIR

#: the packed sort key (i << 32 | j) holds ids below this
ID_LIMIT = 1 << 32
#: device bytes per pair besides the output and its sort: the two looked-up id columns
LOOKUP_BYTES_PER_PAIR = 16


def room() -> int:
    """The pairs the device may hold for this: the outputs, their original ids and the sort."""
    per_pair = OUTPUT_BYTES_PER_PAIR + LOOKUP_BYTES_PER_PAIR + SORT_BYTES_PER_PAIR
    return max(0, device_budget_bytes(0.4) // per_pair)


def in_original_ids(i, j, d, ids_i, ids_j, selfjoin: bool):
    """Device pairs of local rows in original ids (``ids_i``, ``ids_j``: device int64 arrays, one per side);
    ``i < j`` restored in a self-join, whose sorted copy reorders the rows."""
    cp = cupy()
    gi, gj = ids_i[i], ids_j[j]
    if selfjoin:
        gi, gj = cp.minimum(gi, gj), cp.maximum(gi, gj)
    return gi, gj, d


def sorted_batches(pieces, max_pairs: int):
    """Device pairs in original ids (``pieces`` of ``(i, j, d)``, ``d`` may be None), sorted by (i, j) on the
    device and moved to the host as ``SortedRun`` batches of at most ``max_pairs`` pairs."""
    cp = cupy()
    pieces = [p for p in pieces if p[0].shape[0]]
    if not pieces:
        return
    i, j = (cp.concatenate([p[t] for p in pieces]) if len(pieces) > 1 else pieces[0][t] for t in (0, 1))
    d = None
    if pieces[0][2] is not None:
        d = cp.concatenate([p[2] for p in pieces]) if len(pieces) > 1 else pieces[0][2]
    del pieces
    yield from sorted_to_host(*sorted_on_device(i, j, d), max_pairs)
