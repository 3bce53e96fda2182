"""Turn inputs and options into a :class:`~.plan.Plan` (statistics, estimate, method, partitions)."""
from __future__ import annotations

import os

import numpy as np

from ..io.zarr_in import MemorySource, Source
from ..validation import InputError, raise_nonfinite
from . import cache, cost
from .bounds import block_stats
from .chunk_pairs import block_rows_for, plan_block_pairs
from .estimate import estimate_pairs
from .plan import PAIR_BYTES, Partition, Plan, fmt_bytes, row_bytes
from .slabs import plan_slabs, slab_rows_for, split_dimension
from .sorted_copy import SortedCopy, open_sorted, sort_in_memory

PARTITIONINGS = ("auto", "chunk_pairs", "slabs")


def _sorted(source: Source, dim: int, stats, runner, budget: int) -> tuple[SortedCopy, str]:
    if isinstance(source, MemorySource):
        return sort_in_memory(source, dim), "sorted in memory"
    path = os.path.join(cache.cache_dir(source), f"sorted-dim{dim}-{cache.fingerprint(source)}.zarr")
    if os.path.exists(os.path.join(path, "key_index", "zarr.json")):
        return open_sorted(path, dim), f"sorted copy reused from {path}"
    return runner.sort(source, dim, stats, path, bucket_bytes=max(1, budget // 4)), f"sorted copy built at {path}"


def make_plan(a: Source, b: Source | None, eps: float, *, method: str, partitioning: str, backend: str,
              memory_budget: int, runner, gpu: bool = False, gpu_options: tuple = ()) -> Plan:
    """Plan a join: one statistics pass per input (cached for Zarr), a sampled estimate, partitions."""
    if partitioning not in PARTITIONINGS:
        raise InputError(f"partitioning must be one of {PARTITIONINGS}, got {partitioning!r}")
    stats_a = block_stats(a, runner.map)
    if stats_a.first_bad >= 0:
        raise_nonfinite(f"A ({a.label})", stats_a.first_bad)
    stats_b = None
    if b is not None:
        stats_b = block_stats(b, runner.map)
        if stats_b.first_bad >= 0:
            raise_nonfinite(f"B ({b.label})", stats_b.first_bad)
    n_a, n_b = a.n, (a.n if b is None else b.n)
    est = estimate_pairs(stats_a.sample, n_a, eps, None if b is None else stats_b.sample, None if b is None else n_b)
    chosen_method, method_reason = cost.choose_method(method, a.d, gpu=gpu)
    total_rows = n_a + (0 if b is None else n_b)
    fits = total_rows * row_bytes(a.d, 8) + est.upper * PAIR_BYTES <= memory_budget
    rows = max(n_a, n_b, 1) if fits else block_rows_for(memory_budget, n_a, n_b, a.d, est.upper, a.chunk_rows)
    parts, kept = plan_block_pairs(stats_a, stats_b, eps, rows, est.upper)
    nblocks = -(-max(n_a, 1) // rows)
    chosen, reason = cost.choose_partitioning(partitioning, fits_one_task=fits, kept_fraction=kept, nblocks=nblocks)
    reader_a, reader_b, notes = a, b, []
    if chosen == "slabs":
        lo = stats_a.lo_all if b is None else np.minimum(stats_a.lo_all, stats_b.lo_all)
        hi = stats_a.hi_all if b is None else np.maximum(stats_a.hi_all, stats_b.hi_all)
        dim = split_dimension(lo, hi)
        reader_a, note = _sorted(a, dim, stats_a, runner, memory_budget)
        notes.append(f"A {note}")
        if b is not None:
            reader_b, note = _sorted(b, dim, stats_b, runner, memory_budget)
            notes.append(f"B {note}")
        slab_rows = slab_rows_for(memory_budget, n_a, n_b, a.d, est.upper)
        parts = plan_slabs(reader_a, reader_b, eps, slab_rows, est.upper)
        reason += f"; split on dimension {dim}"
    if not parts:
        parts = (Partition(0, (0, 0), None, True, 0.0),)
    plan = Plan(
        eps=eps, selfjoin=b is None, method=chosen_method, method_reason=method_reason,
        partitioning=chosen, partitioning_reason=reason, backend=backend, a=a, b=b,
        reader_a=reader_a, reader_b=reader_b, partitions=parts, estimate=est,
        memory_budget=memory_budget, notes=tuple(notes), gpu_options=gpu_options,
    )
    worst = max(plan.task_memory(p) for p in parts)
    if worst > memory_budget:
        notes.append(
            f"the largest task may need ~{fmt_bytes(worst)}, over the budget: dense regions or a large eps; "
            "raise memory_budget or expect spilling"
        )
        plan = Plan(**{**plan.__dict__, "notes": tuple(notes)})
    return plan
