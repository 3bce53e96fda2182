"""Output of GPU drivers that fill pairs by query slot (``szl``, ``nlj``): each slot (a query row) has room
for its pairs, runs of slots are filled within the device budget, and where every pair fits the device
they are sorted by (i, j) there and leave as ``SortedRun`` batches (the task then only checks the order)."""
from __future__ import annotations

import numpy as np

from .gpu_common import cupy, device_budget_bytes, sort_room, sorted_on_device, sorted_to_host, to_host
from .grid_gpu import OUTPUT_BYTES_PER_PAIR
from .registry import split_batch, transfer_pairs


def slot_runs(room, pairs: int):
    """Runs [t0, t1) of slots whose room (device int64) sums to at most ``pairs`` (a larger slot alone)."""
    cum = cupy().cumsum(room).get()
    t0, done, m = 0, 0, int(cum.shape[0])
    while t0 < m:
        t1 = int(np.searchsorted(cum, done + pairs, side="right"))
        t1 = min(max(t1, t0 + 1), m)
        yield t0, t1
        done = int(cum[t1 - 1])
        t0 = t1


def device_runs(fill, room):
    """Every slot's pairs as device arrays, run by run within the device budget (``fill(t0, t1)``)."""
    fits = max(1, device_budget_bytes(0.4) // OUTPUT_BYTES_PER_PAIR)
    for t0, t1 in slot_runs(room, fits):
        yield fill(t0, t1)


def slot_batches(fill, room, max_pairs: int):
    """Host batches of at most ``max_pairs`` pairs: one sorted run where all fit the device, else runs of slots."""
    if not room.shape[0]:
        return
    if int(room.sum()) <= sort_room():
        pairs = list(fill(0, int(room.shape[0])))
        if pairs[0].shape[0]:
            yield from sorted_to_host(*sorted_on_device(pairs), max_pairs)
        return
    step = max(1, min(int(max_pairs), device_budget_bytes(0.4) // OUTPUT_BYTES_PER_PAIR, transfer_pairs()))
    for t0, t1 in slot_runs(room, step):
        yield from split_batch(to_host(*fill(t0, t1)), max_pairs)


def all_pairs(batches, with_distance: bool, xp=np):
    """One (i, j, dist) triple from ``batches`` (numpy, or device arrays with ``xp`` = CuPy)."""
    parts = list(batches)
    if not parts:
        return xp.empty(0, np.int64), xp.empty(0, np.int64), (xp.empty(0, np.float32) if with_distance else None)
    if len(parts) == 1:  # no copy: one run of slots is the whole
        return tuple(parts[0])
    return tuple(None if parts[0][t] is None else xp.concatenate([p[t] for p in parts]) for t in range(3))
