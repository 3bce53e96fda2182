"""A partition's pairs in one canonical order, in bounded memory: sorted by ``(i, j)``, cut into fixed-size pieces.

Why: a task's output must not depend on where it ran.  Kernels emit pairs in an order of
their own (cells, tiles, GPU blocks; CPU and GPU differ) and in batches whose sizes depend
on the driver, so the same partition written on another kind of worker, or retried, would
give a different file.  Sorted by ``(i, j)`` and cut into pieces of a fixed number of rows
(one Parquet row group each), the bytes of a part file depend only on the pair set.

Memory stays bounded whatever the partition's size turns out to be: pairs are collected
until ``sort_rows``; beyond that each collection is sorted and spilled to a temporary file
(a *run*), and the runs are merged (k-way, by ranges of ``i``) while the pieces are written.
"""
from __future__ import annotations

import itertools
import os
import shutil
import tempfile

import numpy as np

from ..kernels.registry import SortedRun



def is_sorted(i, j) -> bool:
    from ..kernels.pair_sort import is_sorted  # Numba, imported where pairs are checked: not by `import daskjoin`

    return is_sorted(i, j)


def sort_pairs(i, j, value=None, consume: bool = False):
    from ..kernels.pair_sort import sort_pairs

    return sort_pairs(i, j, value, consume)


def _sort(i, j, value):
    """A task's pairs sorted; they are its own (a kernel's fresh batches, or their concatenation), so the sort
    may take their arrays as its outputs."""
    if is_sorted(i, j):  # e.g. a set block's batch, or a kernel that emits in row order: a check, no sort
        return i, j, value
    return sort_pairs(i, j, value, consume=True)


def _concat(batches):
    if len(batches) == 1:
        return batches[0]
    i, j = (np.concatenate([b[k] for b in batches]) for k in (0, 1))
    value = None if batches[0][2] is None else np.concatenate([b[2] for b in batches])
    return i, j, value


def _spill_dir() -> str | None:
    """Dask's temporary directory where one is configured (workers' scratch space), else the system's."""
    try:
        import dask.config

        return dask.config.get("temporary-directory", None)
    except ImportError:
        return None


def _pieces(i, j, value, rows: int):
    for at in range(0, len(i), rows):
        yield i[at: at + rows], j[at: at + rows], (None if value is None else value[at: at + rows])


class _Rechunk:
    """Sorted arrays of any sizes in, pieces of exactly ``rows`` rows out (the last may be shorter)."""

    def __init__(self, rows: int):
        self.rows, self.held, self.count = rows, [], 0

    def push(self, i, j, value):
        if len(i) == 0:
            return
        self.held.append((i, j, value))
        self.count += len(i)
        if self.count >= self.rows:
            i, j, value = _concat(self.held)
            full = (len(i) // self.rows) * self.rows
            yield from _pieces(i[:full], j[:full], None if value is None else value[:full], self.rows)
            rest = (i[full:], j[full:], None if value is None else value[full:])
            self.held, self.count = ([rest], len(rest[0])) if len(rest[0]) else ([], 0)

    def finish(self):
        if self.count:
            yield _concat(self.held)
        self.held, self.count = [], 0


class _Run:
    """One sorted run spilled to disk, read back by memory map."""

    def __init__(self, folder: str, k: int, i, j, value):
        self.paths = [os.path.join(folder, f"run{k}-{name}.npy") for name in ("i", "j", "v")]
        np.save(self.paths[0], i)
        np.save(self.paths[1], j)
        if value is not None:
            np.save(self.paths[2], value)
        self.at, self.n = 0, len(i)

    def open(self):
        self.i, self.j = (np.load(p, mmap_mode="r") for p in self.paths[:2])
        self.v = np.load(self.paths[2], mmap_mode="r") if os.path.exists(self.paths[2]) else None

    def take_through(self, last_i: int):
        """The run's next rows with ``i <= last_i``."""
        stop = self.at + int(np.searchsorted(self.i[self.at:], last_i, side="right"))
        got = (np.array(self.i[self.at:stop]), np.array(self.j[self.at:stop]),
               None if self.v is None else np.array(self.v[self.at:stop]))
        self.at = stop
        return got


def _merge(runs: list[_Run], block: int):
    """k-way merge of sorted runs: each round takes every row with ``i`` up to the smallest ``i`` that ends
    some run's next block, so no later row can sort before what is emitted."""
    for run in runs:
        run.open()
    while True:
        live = [r for r in runs if r.at < r.n]
        if not live:
            return
        last_i = min(int(r.i[min(r.at + block, r.n) - 1]) for r in live)
        got = [r.take_through(last_i) for r in live]
        yield _sort(*_concat([g for g in got if len(g[0])]))


def _trusted_run(batch) -> bool:
    """Whether ``batch`` is a ``SortedRun`` whose ends are in order: its driver sorted it (the GPU drivers
    checked the order on the device; the kNN rows are sorted as they are made), so a pass here, ~3 ns a
    pair and Numba's import and first call (~1 s in a new process), is not repeated."""
    return isinstance(batch, SortedRun) and (int(batch[0][0]), int(batch[1][0])) <= (
        int(batch[0][-1]), int(batch[1][-1]))


def _sorted_batch(batch) -> bool:
    """Whether one batch is sorted by ``(i, j)``: a ``SortedRun`` by its ends (:func:`_trusted_run`), any
    other batch in full."""
    return _trusted_run(batch) if isinstance(batch, SortedRun) else is_sorted(batch[0], batch[1])


def sorted_whole(batches):
    """All pairs of ``batches`` as one sorted ``(i, j, value)``, or None when there are none (for sinks that
    hold the partition whole anyway: one concatenation, one sort, no spilling, no pieces)."""
    held = [b for b in batches if len(b[0])]
    if not held:
        return None
    in_order = all(_sorted_batch(b) for b in held) and all(
        (int(a[0][-1]), int(a[1][-1])) < (int(b[0][0]), int(b[1][0])) for a, b in zip(held, held[1:]))
    whole = _concat(held)
    return whole if in_order else sort_pairs(*whole, consume=True)


def _streamed(first, batches, rows: int):
    """Pieces of a partition whose batches are one ``SortedRun``: passed on as they come, each checked to
    follow the last (a driver that broke its promise fails the task, never a file).  Within a batch the
    driver checked the order (on the device: a full pass here would cost the task ~3 ns a pair)."""
    chunker, last = _Rechunk(rows), None
    for batch in itertools.chain([first], batches):
        if len(batch[0]) == 0:
            continue
        if not _trusted_run(batch) or (last is not None and (int(batch[0][0]), int(batch[1][0])) <= last):
            raise RuntimeError("a kernel driver's sorted run of pairs is out of order (a bug in daskjoin: "
                               "please report it); nothing of this partition was committed")
        last = (int(batch[0][-1]), int(batch[1][-1]))
        yield from chunker.push(*batch)
    yield from chunker.finish()


def sorted_pieces(batches, rows: int, sort_rows: int, spill_dir: str | None = None):
    """The pairs of ``batches`` sorted by ``(i, j)``, as pieces of exactly ``rows`` rows (the last shorter).

    Pairs are held in memory up to ``sort_rows``; larger partitions are sorted in runs spilled
    under ``spill_dir`` (default: the system's temporary directory) and merged.
    """
    rows = max(1, int(rows))
    sort_rows = max(rows, int(sort_rows))
    batches = iter(batches)
    first = next((b for b in batches if len(b[0])), None)
    if first is None:
        return
    if isinstance(first, SortedRun):  # a driver that sorted the whole partition: streamed, checked, not held
        yield from _streamed(first, batches, rows)
        return
    batches = itertools.chain([first], batches)
    held, count, runs, folder = [], 0, [], None
    # batches that arrive sorted and in sequence (a kernel that sorted on the device) need no sort; a
    # later batch may still break the sequence, so nothing is passed on before the last batch came
    in_order, last = True, None
    try:
        for batch in batches:
            if len(batch[0]) == 0:
                continue
            if in_order:
                in_order = (last is None or (int(batch[0][0]), int(batch[1][0])) > last) and is_sorted(batch[0], batch[1])
                last = (int(batch[0][-1]), int(batch[1][-1]))
            if held and count + len(batch[0]) > sort_rows:  # spilled before it would hold more than sort_rows
                if folder is None:
                    folder = tempfile.mkdtemp(prefix="daskjoin-sort-", dir=spill_dir or _spill_dir())
                runs.append(_Run(folder, len(runs), *_sort(*_concat(held))))
                held, count = [], 0
            held.append(batch)
            count += len(batch[0])
        if not runs:
            if held:
                yield from _pieces(*(_concat(held) if in_order else _sort(*_concat(held))), rows)
            return
        if held:
            runs.append(_Run(folder, len(runs), *_sort(*_concat(held))))
            held = []
        chunker = _Rechunk(rows)
        for merged in _merge(runs, max(1, sort_rows // (2 * len(runs)))):
            yield from chunker.push(*merged)
        yield from chunker.finish()
    finally:
        for run in runs:  # memory maps closed before their files are removed (Windows refuses otherwise)
            run.i = run.j = run.v = None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
