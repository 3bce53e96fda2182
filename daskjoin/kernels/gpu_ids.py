"""Pairs of rows read through a sorted copy, put in original row ids and (i, j) order on the device.

A slab task reads its rows from a sorted copy, so its kernels number rows by their place in the copy,
while the output wants original ids in (i, j) order: two random look-ups, a min/max pass and a full sort
of every pair.  On the host that took ~4 s a task for 100M pairs (an H200 host, 16 cores: slab tasks
wrote Parquet 7x slower than chunk-pair tasks, 2026-11-27); on the device it takes milliseconds, and the
task then streams one checked ``SortedRun`` as it does for chunk pairs.

Device memory: a call's pairs (20 bytes each) become one packed key in original ids and the distance (12
bytes) in one pass, and the keys are sorted with the distances: no more than the drivers' own device sort
(``OUTPUT_BYTES_PER_PAIR + SORT_BYTES_PER_PAIR``), so a slab planned for a budget sorts on the device too.
A slab whose pairs outgrow that room after all (its estimate was low) is sorted in passes over ranges of
the first id (:func:`key_ranges`): each pass runs its calls again and keeps the pairs of one range, so the
ranges' sorted runs follow one another.  The kernels are fast beside a host sort, and a GPU worker need not
load Numba (a task that fell back took ~10 s on a fresh machine, 2026-11-27: its first import and compile
are the likely cost).
"""
from __future__ import annotations

import functools

from .gpu_common import cupy, host_batches, sorted_to_host

#: the packed key (i << 32 | j) holds ids below this: inputs of at most this many rows
ID_LIMIT = 1 << 32


@functools.lru_cache(maxsize=None)
def _pack_kernel():
    # one pass: both look-ups, i < j restored where the copy reordered a self-join's rows, one key
    return cupy().ElementwiseKernel(
        "int64 li, int64 lj, raw int64 ids_i, raw int64 ids_j, bool ordered", "uint64 key",
        """
        const unsigned long long a = (unsigned long long)ids_i[li], b = (unsigned long long)ids_j[lj];
        const bool swap = ordered && b < a;
        key = ((swap ? b : a) << 32) | (swap ? a : b);
        """, "daskjoin_pack_original_ids")


def original_keys(pairs: list, ids_i, ids_j, selfjoin: bool):
    """A call's device pairs ``[i, j, d]`` of local rows (the list is emptied, so they are freed here) as
    ``(key, d)``: ``key = i << 32 | j`` in original ids (``ids_i``, ``ids_j``: device int64 arrays, one per
    side), ``i < j`` in a self-join."""
    cp = cupy()
    i, j, d = pairs
    pairs.clear()
    key = cp.empty(i.shape[0], cp.uint64)
    if i.shape[0]:
        _pack_kernel()(i, j, ids_i, ids_j, bool(selfjoin), key)
    return key, d


#: bins of the first id's histogram from which ranges are cut (:func:`key_ranges`)
RANGE_BINS = 4096


def id_bins(lo: int, hi: int, bins: int = RANGE_BINS) -> tuple[int, int]:
    """``(first id, ids per bin)`` of histogram bins covering ids ``lo .. hi - 1`` in at most ``bins`` bins."""
    return int(lo), max(1, -(-(int(hi) - int(lo)) // bins))


def key_histogram(key, first: int, width: int, bins: int = RANGE_BINS):
    """Keys counted by their first id's bin (``(i - first) // width``): a device array of ``bins`` counts."""
    cp = cupy()
    if not key.shape[0]:  # (CuPy's bincount takes the max of its input: an empty one raises)
        return cp.zeros(bins, cp.int64)
    i = (key >> cp.uint64(32)).astype(cp.int64)
    i -= first
    i //= width
    return cp.bincount(i, minlength=bins)


def key_ranges(counts, room: int, first: int, width: int) -> list[tuple[int, int]] | None:
    """Ranges ``[lo, hi)`` of the first id, in order, covering every bin of ``counts`` (host ints), each
    holding at most ``room`` pairs; None where one bin alone holds more (its pairs cannot be split so)."""
    ranges, start, held = [], 0, 0
    for b, c in enumerate(int(c) for c in counts):
        if c > room:
            return None
        if held + c > room:
            ranges.append((start, b))
            start, held = b, 0
        held += c
    ranges.append((start, len(counts)))
    return [(first + s * width, first + e * width) for s, e in ranges if e > s]


def in_range(piece, lo: int, hi: int):
    """The ``(key, d)`` of ``piece`` whose first id lies in ``[lo, hi)``."""
    cp = cupy()
    key, d = piece
    i = key >> cp.uint64(32)
    keep = (i >= cp.uint64(lo)) & (i < cp.uint64(hi))
    return key[keep], None if d is None else d[keep]


def _unpacked(key):
    cp = cupy()
    return (key >> cp.uint64(32)).astype(cp.int64), (key & cp.uint64(0xFFFFFFFF)).astype(cp.int64)


def unsorted_batches(pieces: list, max_pairs: int):
    """``(key, d)`` pieces (emptied) to the host as they are, plain ``(i, j, d)`` batches (the task sorts them):
    what a partition held when its next call would overflow the device."""
    while pieces:
        key, d = pieces.pop(0)
        i, j = _unpacked(key)
        del key
        yield from host_batches(i, j, d, max_pairs)


def sorted_batches(pieces: list, max_pairs: int):
    """``(key, d)`` pieces (emptied) sorted by key on the device, to the host as ``SortedRun`` batches of
    ``(i, j, d)`` of at most ``max_pairs`` pairs (``d`` None without distances)."""
    cp = cupy()
    kept = [p for p in pieces if p[0].shape[0]]
    pieces.clear()
    if not kept:
        return
    key = cp.concatenate([p[0] for p in kept]) if len(kept) > 1 else kept[0][0]
    d = None
    if kept[0][1] is not None:
        d = cp.concatenate([p[1] for p in kept]) if len(kept) > 1 else kept[0][1]
    del kept
    if d is None:
        key = cp.sort(key)
    else:
        order = cp.argsort(key)
        key, d = key[order], d[order]
        del order
    i, j = _unpacked(key)
    del key
    yield from sorted_to_host(i, j, d, max_pairs)
