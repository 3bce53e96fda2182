"""Jobs to Dask work, for every join kind: a lazy DataFrame (``dd.from_map``), an exact count, or Parquet files.

The only module that builds Dask graphs.  A job (see :mod:`.task`) and its partitions go in;
one scatter policy, one empty-plan path and one progress bar serve every kind.
"""
from __future__ import annotations

import time

from ..caches import CACHE
from ..io import parquet_out
from .progress import raise_if_interrupted, wait_all
from .resources import concurrent_tasks, gather_directly, gpu_placement, gpu_seen
from .task import meta_frame, partition_count, partition_frame, partition_to_parquet

#: A job carrying more array data than this is scattered to the workers once instead of riding with each task.
SCATTER_BYTES = 1 << 20


def to_dataframe(job, parts, *, client=None, cache_key=None, owner=None):
    """A lazy Dask DataFrame of the pairs, one partition per plan partition.

    With a Dask cluster's ``client``, a job carrying in-memory data is scattered to the workers
    once and its future goes into the graph (the data is not embedded in the graph: no
    "large graph" warning, no copy per compute).  ``cache_key``/``owner``: a repeated join of
    the same (cached) plan gets a shallow copy of the frame built the first time: same graph
    and keys, no new tokenizing.
    """
    gather_directly(client)  # the pairs come to the client from the workers, not through the scheduler
    if _needs_scatter(client, job):
        cache_key = None  # a frame holding a scattered future is not kept: the data would stay on the workers
    if cache_key is not None:
        hit = CACHE.get("frames", cache_key)  # cache key -> (owner, frame)
        if hit is not None and hit[0] is owner:
            return hit[1].copy()  # a new collection object: callers may rename its columns
    import dask.dataframe as dd  # here, not at import: a count or a Parquet run never loads it (~0.7 s)

    if not parts:
        frame = dd.from_pandas(meta_frame(job.value), npartitions=1)
    else:
        _warn_unplaced(client, job)
        frame = dd.from_map(partition_frame, list(parts), args=[_shipped(client, job, broadcast=True)],
                            meta=meta_frame(job.value), label=job.label, enforce_metadata=False,
                            tasks=len(parts))
    if cache_key is not None:
        CACHE.put("frames", cache_key, (owner, frame))
    return frame.copy()


class FramePlacementWarning(UserWarning):
    """A lazy frame of GPU tasks on a cluster where some workers have no GPU: its tasks cannot be kept off them."""


def _warn_unplaced(client, job) -> None:
    """GPU tasks of a lazy frame on a cluster that places them by the ``GPU`` resource: the frame cannot carry
    it (dask's expression collections drop annotations made when a collection is built, dask/dask#10937),
    so the user is told how to submit it (counts and Parquet runs are placed by daskjoin itself)."""
    if gpu_placement(client, job) and not all(gpu_seen(client).values()):
        import warnings

        warnings.warn(
            "backend='gpu' on a cluster of GPU and CPU workers: a lazy frame's tasks may land on a CPU worker "
            "(and fail there); compute it with `with dask.annotate(resources={'GPU': 1}): client.compute(frame)`, "
            "or use backend='auto', out=... (Parquet) or output='count', which daskjoin places itself",
            FramePlacementWarning, stacklevel=4)


def _needs_scatter(client, job) -> bool:
    """Whether a job goes to a Dask cluster's workers ahead of its tasks: it carries in-memory data (a
    round trip, worth it only then) and there is a scheduler (the in-process runner has none)."""
    return client is not None and getattr(client, "scheduler", None) is not None and \
        job.in_memory_bytes() > SCATTER_BYTES


def _shipped(client, job, *, broadcast: bool = False):
    """The job as tasks get it: its future where it is scattered (:func:`_needs_scatter`), else itself.

    ``broadcast``: a copy on every worker (a lazy frame's graph holds the future, and no one is there
    to send it again when a worker dies: a copy elsewhere survives)."""
    if not _needs_scatter(client, job):
        return job
    [future] = client.scatter([job], hash=False, broadcast=broadcast)
    return future


#: times a join's in-memory job is sent again after the workers holding it died
MAX_RESENDS = 8


class _Shipment:
    """The job sent to the workers once, and again whenever the worker holding it died.

    A scattered job has no recipe the scheduler could rerun: when its only holder dies, the tasks
    that need it are cancelled (``wait_all`` submits them again, and they ask here for a live copy).
    """

    def __init__(self, client, job):
        self.client, self.job = client, job
        self.future = None
        self.sends = 0

    def get(self):
        if not _needs_scatter(self.client, self.job):
            return self.job
        if self.future is None or self.future.status != "finished":
            if self.sends > MAX_RESENDS:
                raise RuntimeError(f"the join's input was lost with its workers {self.sends} times; giving up")
            self.future = _shipped(self.client, self.job)
            self.sends += 1
        return self.future


#: up to this many tasks a worker, a join's tasks are handed out one a worker at a time (see _run)
FEW_TASKS_PER_SLOT = 4


def _run(client, func, job, parts, *, progress: bool, desc: str, tally, on_result=None, **kwargs) -> list:
    """Every partition's task, results in the order of ``parts`` (see :func:`.progress.wait_all`)."""
    raise_if_interrupted()  # one that landed where it could not raise (see .progress)
    shipment = _Shipment(client, job)
    placement = gpu_placement(client, job)
    # the largest partitions first (tasks start in the order they are submitted): the last tasks to
    # finish are then small ones, not one large task that the others wait for
    order = sorted(range(len(parts)), key=lambda k: -float(getattr(parts[k], "est_pairs", 0.0) or 0.0))

    # few tasks for the workers: one each at a time, the next as one finishes (largest first, so the
    # workers end together); Dask would hand one worker two at once (worker-saturation) and leave another idle
    # (2 GPUs, 3 block pairs: busy 0.55 s | 1.5 s); many tasks: all at once, the scheduler queues them
    slots = concurrent_tasks(client, job)
    window = slots if slots and len(parts) <= FEW_TASKS_PER_SLOT * slots else None

    def submit(items):
        return client.map(func, items, job=shipment.get(), pure=False, tasks=len(parts), **placement, **kwargs)

    results = wait_all(client, submit, [parts[k] for k in order], progress=progress, desc=desc, tally=tally,
                       on_result=None if on_result is None else lambda k, result: on_result(order[k], result),
                       window=window)
    out = [None] * len(parts)
    for k, result in zip(order, results):
        out[k] = result
    return out


def count(job, parts, client, *, progress: bool = False) -> int:
    """The exact number of pairs; no pairs are materialised."""
    if not parts:
        return 0
    return int(sum(_run(client, partition_count, job, list(parts), progress=progress, desc="counting",
                        tally=lambda n: (n, 0))))


def _tally_files(entries) -> tuple[int, int]:
    return sum(e["rows"] for e in entries), sum(e.get("bytes") or 0 for e in entries)


def write_parquet(job, parts, client, run: parquet_out.OutputRun, *, progress: bool = False,
                  extra: dict | None = None) -> dict:
    """Each partition to its own Parquet files in ``run``'s staging directory, then the commit; returns the manifest.

    Partitions ``run`` already holds as finished (a resumed run: ``run.done``) are not computed again;
    each partition is recorded in the run as it finishes.
    """
    start = time.perf_counter()
    todo = [p for p in parts if p.index not in run.done]  # a resumed run's finished partitions are skipped
    resumed = len(parts) - len(todo)
    if todo:
        _run(client, partition_to_parquet, job, todo, out_dir=run.staging, progress=progress, desc="joining",
             tally=_tally_files, on_result=lambda k, entries: run.record_done(todo[k].index, entries))
    entries = [e for p in parts for e in run.done[p.index]]
    tasks = {"compute_s": round(sum(e.get("compute_s", 0.0) for e in entries), 3),
             "write_s": round(sum(e.get("write_s", 0.0) for e in entries), 3)}
    if resumed:
        tasks["resumed_partitions"] = resumed
    retries = sum(e.get("memory_retries", 0) for e in entries)
    if retries:
        tasks["memory_retries"] = retries
    return run.commit(entries, {**(extra or {}), "seconds": round(time.perf_counter() - start, 3), "tasks": tasks})
