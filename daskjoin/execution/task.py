"""The one task body of every join kind: pull a partition's pairs from its job, hand them to a sink.

A *job* is what every task of one join shares (shipped once with the graph): the ε-join's
:class:`~daskjoin.kinds.epsilon.JoinJob`, the set join's :class:`~daskjoin.kinds.sets.SetJob`.
It supplies

- ``batches(part, max_pairs)``: the partition's ``(i, j, value)`` arrays in original ids,
- ``count(part)``: the exact number of pairs, none materialised,
- ``value``: the value column ``(name, numpy dtype)`` or None, ``label`` (Dask key prefix)
  and ``in_memory_bytes()``.

The bodies here are the same for every kind: batches pulled bounded (one row group each),
the partition's rows sorted by ``(i, j)`` and cut into fixed row groups (:mod:`.pair_order`:
a part file's bytes depend only on its pair set, not on the worker, backend or batching),
the frame, count and Parquet sinks, the Numba thread share, and the error path (GPU
memory given back, the failed partition named).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import sys
import threading
import time

import numpy as np

from .. import config
from ..cores import usable_cores
from .pair_order import sorted_pieces, sorted_whole

PAIR_ROW_BYTES = 20
logger = logging.getLogger(__name__)


def meta_frame(value: tuple | None = ("dist", "float32")):
    """The empty frame of a join's output: ``i``, ``j`` (int64) and the value's columns (none, one, or a record's)."""
    import pandas as pd  # here: a count or a Parquet run never loads pandas
    from ..io.parquet_out import value_fields

    cols = {"i": np.zeros(0, np.int64), "j": np.zeros(0, np.int64)}
    cols.update({name: np.zeros(0, dtype) for name, dtype in value_fields(value)})
    return pd.DataFrame(cols)


def to_frame(i, j, v, value: tuple | None = ("dist", "float32")):
    import pandas as pd
    from ..io.parquet_out import value_columns, value_fields

    cols = {"i": i, "j": j}
    if v is not None:
        cols.update(zip((name for name, _ in value_fields(value)), value_columns(value, v)))
    return pd.DataFrame(cols, copy=False)


def max_batch_pairs() -> int:
    """Pairs in one piece: one Parquet row group of ``daskjoin.row-group-bytes`` (the size in which GPU
    drivers move sorted runs to the host, so each of their batches is one piece as it came)."""
    from ..kernels.registry import transfer_pairs

    return transfer_pairs()


#: bytes per pair a task's sort holds: the pairs, their sorted copy and the counting arrays (see pair_sort)
SORT_BYTES_PER_PAIR = 3 * PAIR_ROW_BYTES


#: pairs sorted in memory where neither ``daskjoin.sort-bytes`` nor a memory budget says (1 GiB of pairs)
DEFAULT_SORT_BYTES = 1 << 30


def sort_rows(job=None) -> int:
    """Pairs a task sorts in memory (at least one row group); a larger partition is sorted in spilled runs.

    ``daskjoin.sort-bytes`` "auto": what the plan's memory budget allows (the planner sized the
    partitions for it: ``PAIR_BYTES`` per expected pair), else 1 GiB; bytes: that, and no more than
    the budget allows.
    """
    setting = config.get("sort-bytes")
    budget = int(getattr(job, "memory_budget", 0) or 0)
    by_budget = max(max_batch_pairs(), budget // SORT_BYTES_PER_PAIR) if budget > 0 else None
    if setting in (None, "auto"):
        rows = by_budget if by_budget is not None else DEFAULT_SORT_BYTES // PAIR_ROW_BYTES
    else:
        rows = config.parse_bytes(setting) // PAIR_ROW_BYTES
        if by_budget is not None:
            rows = min(rows, by_budget)
    from ..kernels.memory import share

    return max(1, int(rows * share()))  # a smaller share in a task retried after running out of memory


def _sorted_pieces(job, part):
    """The partition's pairs sorted by (i, j), in pieces of one row group: the same bytes wherever the task runs.

    Batches are asked as large as the in-memory sort holds (the planner sized the partition for
    it): a partition that meets its estimate comes in one batch, which spares the kernel a
    counting pass; one that exceeds it still comes bounded, and is sorted in spilled runs.
    """
    rows = sort_rows(job)
    return sorted_pieces(job.batches(part, rows), max_batch_pairs(), rows)


def _set_threads(tasks: int | None = None) -> None:
    """Give Numba the cores of this worker divided among the tasks it runs at once (no oversubscription).

    At once: its task threads, but no more than the join has tasks (``tasks``), nor fewer than it
    executes now.  A join of one partition on ``LocalCluster(n_workers=1, threads_per_worker=2)``
    (the README's first example) would otherwise run its kernel and sort on one of the two cores
    while the other thread idles.  (The tasks executing alone cannot tell: the first of two tasks
    handed out together often starts before the worker counts the second.)
    """
    from ..kernels.parallel_guard import set_threads

    wanted = config.get("numba-threads")
    if wanted is None:
        if "distributed" not in sys.modules:
            return  # not a Dask worker (a join in this process): every core
        try:
            from distributed import get_worker

            state = get_worker().state
            threads = max(1, int(state.nthreads))
            running = min(threads, max(1, int(tasks))) if tasks else threads
            running = max(running, min(threads, int(state.executing_count)))
        except (ImportError, ValueError, AttributeError):
            return
        wanted = max(1, usable_cores() // running)
    set_threads(int(wanted))


def _on_gpu(job) -> bool:
    """Whether ``job``'s tasks run on this worker's GPU (its kernels then need no Numba threads)."""
    backend = getattr(job, "backend", "cpu")
    if backend == "cpu":
        return False
    from ..kernels import resolve_backend

    return resolve_backend(backend) == "gpu"


def describe_part(part) -> str:
    """Which partition a task ran, in the words of its plan: ``partition 3 (rows [0, 1000) x [1000, 2000))``."""
    first, second = (getattr(part, "a", None), getattr(part, "b", None)) if hasattr(part, "a") else \
        (getattr(part, "r", None), getattr(part, "s", None))
    share = getattr(part, "share", None)
    rows = "" if first is None else f" (rows [{first[0]}, {first[1]})" + (
        f" x [{second[0]}, {second[1]})" if second is not None else "") + (
        f", query share {share[0] + 1} of {share[1]}" if share else "") + ")"
    return f"partition {getattr(part, 'index', '?')}{rows}"


_GPU_TASK = threading.Lock()


class _GpuTurn:
    """One task of a process at a time on its GPU, from the task's start until its pairs are all produced.

    GPU drivers size their device buffers from the memory free when they start; a second task
    starting at once (the in-process runner's second thread, or a worker with several threads)
    would count the same free memory again and run out.  A Parquet task gives the turn back as
    soon as its last piece is produced, so its writing overlaps the next task's kernel.
    """

    def __init__(self, job):
        backend = getattr(job, "backend", "cpu")
        self.held = False
        if backend != "cpu":
            from ..kernels import resolve_backend

            if resolve_backend(backend) == "gpu":
                _GPU_TASK.acquire()
                self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            _GPU_TASK.release()


#: times a task that ran out of memory is run again, each time with half the memory share before
MEMORY_RETRIES = 3


def _free_device_memory() -> None:
    if "cupy" in sys.modules:
        from ..kernels.gpu_common import free_device_memory

        free_device_memory()


def _task_body(func):
    """Every task: the worker's Numba share first; on failure its cached GPU memory given back and
    the partition named (a note on the exception, kept when it travels back to the client), so
    one line can say what failed without a worker traceback.

    A task that runs out of memory (host or GPU) is run again with half the memory share
    (:mod:`daskjoin.kernels.memory`: smaller batches, sort and device buffers), at most
    :data:`MEMORY_RETRIES` times.  What a failed attempt produced is dropped whole (a Parquet
    partition's pieces are removed by ``write_partition``), so a retry never duplicates output.
    """
    from ..kernels.memory import budget, out_of_memory, reduced

    @functools.wraps(func)
    def run(part, job, *args, tasks: int | None = None, **kwargs):
        if not (_on_gpu(job) and "numba" not in sys.modules):  # a GPU task that loaded no Numba sets nothing
            _set_threads(tasks)
        for attempt in range(MEMORY_RETRIES + 1):
            turn = _GpuTurn(job)
            try:
                with budget(getattr(job, "device_limit", 0)), reduced(0.5 ** attempt):
                    result = func(part, job, *args, turn=turn, **kwargs)
                return _note_retries(result, attempt)
            except Exception as exc:
                _free_device_memory()
                if out_of_memory(exc) and attempt < MEMORY_RETRIES:
                    logger.warning("%s ran out of memory (%s: %s); again with smaller batches (%d of %d)",
                                   describe_part(part), type(exc).__name__, exc, attempt + 1, MEMORY_RETRIES)
                    continue
                if hasattr(exc, "add_note"):
                    more = f" (after {attempt} retries with less memory)" if attempt else ""
                    exc.add_note(f"in {describe_part(part)}{more}")
                raise
            finally:
                turn.release()

    return run


def _note_retries(result, attempts: int):
    """A Parquet task's entries say how often it was run again (the manifest sums them)."""
    if attempts and isinstance(result, list) and result and isinstance(result[0], dict):
        result[0]["memory_retries"] = attempts
    return result


def _blocks_ahead(part, turn) -> None:
    """A GPU task's page-locked host blocks for its batches made on background threads while its kernel runs
    (:func:`~daskjoin.kernels.host_pool.prefill_for`), sized by the partition's estimated pairs."""
    pairs = getattr(part, "est_pairs", None)
    if turn is not None and turn.held and pairs:
        from ..kernels.host_pool import prefill_for

        prefill_for(pairs)


@_task_body
def partition_frame(part, job, turn=None):
    """The pairs of one partition as a DataFrame (the body of each ``dd.from_map`` task)."""
    _blocks_ahead(part, turn)
    # a frame holds its partition whole anyway: the batches joined once and sorted once (no pieces)
    whole = sorted_whole(job.batches(part, sort_rows(job)))
    if whole is None:
        return meta_frame(job.value)
    return to_frame(*whole, value=job.value)


@_task_body
def partition_count(part, job, turn=None) -> int:
    """The exact pair count of one partition, without materialising pairs."""
    return int(job.count(part))


@_task_body
def partition_to_parquet(part, job, out_dir: str, turn=None) -> list[dict]:
    """Write one partition's pairs to ``out_dir/part-PPPPP-KKKKK.parquet`` (a file per piece, each atomic);
    return their manifest entries."""
    from ..io.parquet_out import write_partition

    _blocks_ahead(part, turn)
    clock = [0.0]
    # closed on failure too: a spilled sort's runs are removed at once, not when the traceback is collected
    with contextlib.closing(_sorted_pieces(job, part)) as pieces:
        entries = write_partition(out_dir, part.index, _timed(pieces, clock, turn), value=job.value)
    for entry in entries:  # the partition's kernel and sort time, shared out so that sums over files add up
        entry["compute_s"] = clock[0] / len(entries)
    return entries


def _timed(items, clock: list, turn=None):
    """``items`` passed on, the time spent producing them added to ``clock[0]``; the GPU ``turn`` given
    back as soon as the last is produced (the writing that remains needs no device).

    With a turn, one item is produced ahead of the one passed on, so the end is seen before the last
    item waits for a writer: a task holding the turn while its last pieces waited for writer threads left
    the GPU idle between tasks (0.3 s of the 20M x 3-d join to Parquet on an H200, the writers short of
    work after).  Without one (CPU tasks) nothing is held ahead.
    """
    def produce():
        start = time.perf_counter()
        try:
            return next(items)
        except StopIteration:
            return _END
        finally:
            clock[0] += time.perf_counter() - start

    ahead = turn is not None and turn.held
    try:
        item = produce()
        while item is not _END:
            following = produce() if ahead else None
            if following is _END:
                turn.release()
            yield item
            item = following if ahead else produce()
    finally:
        if turn is not None:
            turn.release()


_END = object()
