"""Set-join plans: size-range partitions and the partition pairs the length filter keeps.

Sets are stored by size, so a partition is a contiguous range of stored sets
and its sizes are one interval.  Partition pairs whose size intervals cannot
meet under the length filter are never joined; every other pair of sets falls
in exactly one block, so the union of the blocks' results is exact and
duplicate-free.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .set_threshold import Threshold

#: The set join's methods (both give the same pairs; ppjoin adds the positional filter)
ALGORITHMS = ("ppjoin", "allpairs")
#: Rough bytes one token costs a block (its rank, its postings, candidates, CPU scratch)
BYTES_PER_TOKEN = 48
BYTES_PER_SET = 64


@dataclass(frozen=True)
class SetBlock:
    """One task: probe sets ``r`` against ``s`` (``s=None``: a self-join of ``r``)."""

    index: int
    r: tuple
    s: tuple | None
    larger_partners: bool = False

    @property
    def is_self(self) -> bool:
        return self.s is None


@dataclass(frozen=True)
class SetPlan:
    """What a set join will run, and why."""

    threshold: Threshold
    algorithm: str
    backend: str
    selfjoin: bool
    n_a: int
    n_b: int
    parts_a: tuple
    parts_b: tuple
    blocks: tuple
    pruned: int
    unmatchable: int
    budget: int
    gpu_options: tuple = ()
    group_copies: bool = True
    #: bound on the postings the filter scans (:mod:`.set_work`) and the sets it was sampled from; None: not estimated
    work: float | None = None
    work_sample: int = 0

    @property
    def ntasks(self) -> int:
        return len(self.blocks)

    def explain(self) -> str:
        t = self.threshold
        value = f"{t.exact}" if t.measure == "overlap" else f"{t.exact} (= {t.value!r})"
        kind = "self-join" if self.selfjoin else f"R x S join ({self.n_a:,} x {self.n_b:,} sets)"
        lines = [
            f"set-similarity {kind}: {t.measure} >= {value}, decided exactly on integers",
            f"  algorithm {self.algorithm} (prefix + length{' + positional' if self.algorithm == 'ppjoin' else ''} "
            f"filters), backend {self.backend}",
            f"  {len(self.parts_a)} size-range partition(s) of {'the' if self.selfjoin else 'R,'} "
            f"{'' if self.selfjoin else f'{len(self.parts_b)} of S, '}sets; {self.ntasks} block(s) to join, "
            f"{self.pruned} partition pair(s) skipped by the length filter",
            f"  {self.unmatchable:,} set(s) too small to reach the threshold are skipped",
            f"  memory budget per task {self.budget / 2**20:,.0f} MiB",
        ]
        if self.work is not None:
            lines.append(f"  filtering work: at most ~{self.work:.2g} postings scanned (from {self.work_sample:,} sampled "
                         f"sets): {work_cut(self.work)}")
        return "\n".join(lines)


def matchable_from(sizes: np.ndarray, threshold: Threshold) -> int:
    """First stored set (sizes ascending) that can reach the threshold with some partner."""
    from ..kernels.sets.measures import probe_prefix  # Numba: imported by set planning, not `import daskjoin`

    code, p, q = threshold.args()
    lo, hi = 0, len(sizes)
    while lo < hi:
        mid = (lo + hi) // 2
        if probe_prefix(np.int64(sizes[mid]), code, p, q) > 0:
            hi = mid
        else:
            lo = mid + 1
    return lo


def split_ranges(sizes: np.ndarray, start: int, k: int) -> tuple:
    """Up to ``k`` contiguous ranges of sets ``start..n`` with about equal numbers of tokens."""
    n = len(sizes)
    if start >= n:
        return ()
    k = max(1, min(int(k), n - start))
    cum = np.concatenate([[0], np.cumsum(sizes[start:], dtype=np.int64)])
    targets = cum[-1] * np.arange(1, k) / k
    cuts = start + np.searchsorted(cum, targets, side="left")
    bounds = np.unique(np.concatenate([[start], np.clip(cuts, start + 1, n - 1) if n - start > 1 else [], [n]]))
    return tuple((int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]))


#: filtering work (postings bound, :mod:`.set_work`) below which one block is cut for the task threads: the
#: blocks' fixed costs outweigh their parallelism (KOSARAK-like 600k at 0.9, 3.5e8: one block 0.11 s to Parquet,
#: three 0.12 s, twenty-one 0.14 s on the 2-core VM)
SMALL_WORK = 1e9
#: and from which about nine blocks per task thread are cut (k partitions make up to k(k+1)/2 blocks): blocks of
#: unequal work (the small sets' self-join holds most of it) balance over the threads, and one block's sort and
#: writes overlap the others' filtering (KOSARAK-like at 0.5, 1.2e10, two task threads: to Parquet 3.49 s as
#: 2 partitions, 3.16 s as 4, 3.01 s as 6 (2.96 s against 3.29 s as 5 in another run); count 2.29 / 2.18 s)
LARGE_WORK = 1e10
#: blocks per task thread for large work
LARGE_BLOCKS_PER_THREAD = 9


def work_cut(work: float | None) -> str:
    """What the filtering work makes of the cut for the task threads (explain())."""
    if work is None:
        return "not estimated"
    if work < SMALL_WORK:
        return "small, so one partition unless memory asks for more"
    if work >= LARGE_WORK:
        return f"large, so about {LARGE_BLOCKS_PER_THREAD} blocks per task thread"
    return "partitions for the task threads"


def partition_count(tokens: int, n_sets: int, budget: int, n_threads: int, forced: int | None,
                    work: float | None = None) -> int:
    """Size-range partitions: ``forced``, else as many as the memory budget needs and at least what the task
    threads and the filtering ``work`` (:data:`SMALL_WORK`, :data:`LARGE_WORK`; None: not estimated) ask."""
    if forced is not None:
        return max(1, int(forced))
    by_memory = math.ceil((tokens * BYTES_PER_TOKEN + n_sets * BYTES_PER_SET * 2) / max(budget, 1))
    if n_threads <= 1 or (work is not None and work < SMALL_WORK):
        by_threads = 1
    elif work is not None and work >= LARGE_WORK:
        by_threads = math.ceil(math.sqrt(2 * LARGE_BLOCKS_PER_THREAD * n_threads))
    else:
        by_threads = math.ceil(math.sqrt(2 * n_threads))
    return max(1, by_memory, by_threads)


def _partner_range(sizes, part, threshold: Threshold) -> tuple:
    from ..kernels.sets.measures import max_partner, min_partner

    code, p, q = threshold.args()
    lo, hi = part
    return int(min_partner(np.int64(sizes[lo]), code, p, q)), int(max_partner(np.int64(sizes[hi - 1]), code, p, q))


def self_blocks(sizes: np.ndarray, parts: tuple, threshold: Threshold) -> tuple[tuple, int]:
    """Blocks of a self-join over ``parts``: each partition with itself and with the smaller ones it can meet."""
    blocks, pruned = [], 0
    for l, part_l in enumerate(parts):
        blocks.append(SetBlock(len(blocks), part_l, None))
        lowest_partner, _ = _partner_range(sizes, part_l, threshold)
        for k in range(l):
            part_k = parts[k]
            if sizes[part_k[1] - 1] >= lowest_partner:
                blocks.append(SetBlock(len(blocks), part_l, part_k, larger_partners=True))
            else:
                pruned += 1
    return tuple(blocks), pruned


def cross_blocks(sizes_a, parts_a, sizes_b, parts_b, threshold: Threshold) -> tuple[tuple, int]:
    """Blocks of an R x S join: every pair of partitions whose size intervals can meet."""
    blocks, pruned = [], 0
    for part_a in parts_a:
        lo, hi = _partner_range(sizes_a, part_a, threshold)
        for part_b in parts_b:
            if sizes_b[part_b[1] - 1] >= lo and sizes_b[part_b[0]] <= hi:
                blocks.append(SetBlock(len(blocks), part_a, part_b))
            else:
                pruned += 1
    return tuple(blocks), pruned


def make_set_plan(sizes_a: np.ndarray, tokens_a: int, sizes_b: np.ndarray | None, tokens_b: int,
                  threshold: Threshold, *, algorithm: str, backend: str, budget: int, threads: int,
                  partitions: int | None, gpu_options: dict, work=None) -> SetPlan:
    """The blocks of a set join (``sizes_b=None``: a self-join) from the sets' sizes, and for a self-join the
    filtering ``work`` where given: ``work(start)`` gives (postings bound, sets sampled) for the sets that
    can match from stored set ``start`` on (:func:`.set_work.postings_bound`)."""
    start_a = matchable_from(sizes_a, threshold)
    bound, sampled = None, 0
    if sizes_b is None:
        if work is not None and partitions is None and threads > 1:  # (one task thread: no cut for threads)
            bound, sampled = work(start_a)
        k = partition_count(tokens_a, len(sizes_a), budget, threads, partitions, bound)
        parts_a = split_ranges(sizes_a, start_a, k)
        parts_b = ()
        blocks, pruned = self_blocks(sizes_a, parts_a, threshold)
        unmatchable = start_a
    else:
        start_b = matchable_from(sizes_b, threshold)
        k = partition_count(tokens_a + tokens_b, len(sizes_a) + len(sizes_b), budget, threads, partitions)
        k_a = max(1, round(k * tokens_a / max(1, tokens_a + tokens_b))) if partitions is None else partitions
        k_b = max(1, k - k_a) if partitions is None else partitions
        parts_a, parts_b = split_ranges(sizes_a, start_a, k_a), split_ranges(sizes_b, start_b, k_b)
        blocks, pruned = cross_blocks(sizes_a, parts_a, sizes_b, parts_b, threshold)
        unmatchable = start_a + start_b
    return SetPlan(threshold=threshold, algorithm=algorithm, backend=backend, selfjoin=sizes_b is None,
                   n_a=len(sizes_a), n_b=0 if sizes_b is None else len(sizes_b), parts_a=parts_a, parts_b=parts_b,
                   blocks=blocks, pruned=pruned, unmatchable=unmatchable, budget=int(budget),
                   gpu_options=tuple(sorted(gpu_options.items())), work=bound, work_sample=sampled)
