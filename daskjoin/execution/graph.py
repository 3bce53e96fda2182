"""Plans to Dask work: a lazy DataFrame (``dd.from_map``), an exact count, or Parquet files."""
from __future__ import annotations

import time

import dask.dataframe as dd

from ..io import parquet_out
from ..planning.plan import Plan
from .progress import wait_all
from .task import JoinJob, meta_frame, partition_count, partition_frame, partition_to_parquet


_FRAMES: dict = {}  # (id(plan), with_distance) -> (plan, frame)
FRAME_CACHE_SIZE = 16


def to_dataframe(plan: Plan, with_distance: bool = True):
    """A lazy Dask DataFrame of the pairs, one partition per plan partition.

    Plans are cached (see ``planning.planner``), so a repeated join gets a shallow copy of
    the frame built for its plan the first time: same graph and keys, no new tokenizing.
    """
    key = (id(plan), with_distance)
    hit = _FRAMES.get(key)
    if hit is not None and hit[0] is plan:
        return hit[1].copy()  # a new collection object: callers may rename its columns
    job = JoinJob.from_plan(plan, with_distance)
    frame = dd.from_map(
        partition_frame,
        list(plan.partitions),
        args=[job],
        meta=meta_frame(with_distance),
        label="daskjoin-pairs",
        enforce_metadata=False,
    )
    if len(_FRAMES) >= FRAME_CACHE_SIZE:
        _FRAMES.clear()
    _FRAMES[key] = (plan, frame)
    return frame.copy()


#: A job carrying more array data than this is scattered to the workers once instead of riding with each task.
SCATTER_BYTES = 1 << 20


def _submit(client, func, plan: Plan, **kwargs):
    job = kwargs.pop("job")
    if job.in_memory_bytes() > SCATTER_BYTES:
        [job] = client.scatter([job], hash=False)  # a round trip, worth it only for in-memory data
    return client.map(func, list(plan.partitions), job=job, pure=False, **kwargs)


def count(plan: Plan, client, *, progress: bool = False) -> int:
    """The exact number of pairs; no pairs are materialised."""
    futures = _submit(client, partition_count, plan, job=JoinJob.from_plan(plan, False))
    return int(sum(wait_all(client, futures, progress=progress, desc="counting")))


def write_parquet(plan: Plan, client, run: parquet_out.OutputRun, *, with_distance: bool = True,
                  progress: bool = False) -> dict:
    """Each partition to its own Parquet file in ``run``'s staging directory, then the commit; returns the manifest."""
    start = time.perf_counter()
    futures = _submit(client, partition_to_parquet, plan, job=JoinJob.from_plan(plan, with_distance),
                      out_dir=run.staging)
    entries = wait_all(client, futures, progress=progress, desc="joining")
    extra = {
        "eps": plan.eps,
        "method": plan.method,
        "partitioning": plan.partitioning,
        "selfjoin": plan.selfjoin,
        "seconds": round(time.perf_counter() - start, 3),
    }
    return run.commit(entries, extra)
