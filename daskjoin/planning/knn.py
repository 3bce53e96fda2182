"""Planning a kNN-join: query partitions, data blocks with their bounding boxes, the method.

A task takes a range of query rows (of A) and finds their k nearest rows of B (of A itself in a
self-join) block by block: the data are cut into blocks that fit the task's memory, each with
its bounding box from the statistics pass.  The task visits the blocks nearest its queries
first; the k-th distance each query then holds is an upper bound of its true one, so a later
block is searched only for the queries whose bound reaches the block's box (DESIGN §2: a first
pass gives every query a radius, a second pass resolves the queries whose radius crosses the
partition).  Where B fits one block (the usual case), a task is one search.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..io.zarr_in import MemorySource, Source, ZarrSource
from ..validation import InputError
from . import cache
from .bounds import block_stats, stats_cached
from .plan import PlanStep, fmt_bytes, row_bytes

#: bytes a task holds per (query, neighbour): the running lists (d2 float64, j int64), the output rows
#: (i, j int64, dist float32, rank int32), their sort and the frame or Parquet piece made of them
LIST_BYTES = 16
ROW_OUT_BYTES = 48
#: mirrors of the kernels' constants the index sizes follow (planning never imports kernels; a test ties
#: them: ``knn_szl.MAX_LISTS``, ``knn_gemm.GEMM_MIN_D``, ``knn_tc.TC_FROM_D``)
SZL_LISTS_MAX = 8
GEMM_FROM_D = 4
TC_FROM_D = 16
#: ``knn_range.MIN_D``: from here the CPU grid's range pass builds the ε-grid's indexes of the block and of the
#: queries, and lists pairs (20 bytes each) at most ``knn_range.BATCH_PAIRS`` at a time, about ``ROOM *
#: MAX_PER_QUERY`` times k a query at most
RANGE_FROM_D = 4
RANGE_BATCH_PAIRS = 1 << 22
RANGE_PAIRS_PER_K = 7.5


def index_row_bytes(method: str, d: int) -> int:
    """Bytes per data row a method's index adds beside the rows: szl's quantised coordinates and its lists
    (8 bytes a list, as much again while they are sorted), brute's float32 copy and norms from GEMM_FROM_D,
    and from TC_FROM_D the tensor-core filter's rows (the larger; counted on every backend, as the plan may
    run on either).  The filter's candidate lists (up to ``brute_gpu.CANDIDATES_MAX``) are not per row."""
    if method == "szl":
        return 4 * d + 16 * min(d + 1, SZL_LISTS_MAX)
    if method == "brute" and d >= TC_FROM_D:  # the GPU's tensor-core rows: a float64 copy in locality order,
        return 10 * d + 64 + 24            # grid rows (2 bytes a coordinate, padded), norms, residuals, order
    if method == "brute" and d >= GEMM_FROM_D:
        return 4 * d + 12
    if method == "grid" and d >= RANGE_FROM_D:  # the range pass's ε-grid: the rows sorted by cell, their order
        return 8 * d + 16
    return 0


def query_row_bytes(method: str, d: int, k: int) -> int:
    """Bytes per query row a method's search adds beside the query, its lists and its output rows: the
    GPU szl kernel's scratch (a candidate distance and id per neighbour, two d-vectors of Z-order words;
    ``kernels/knn_gpu.KnnSzlGpu._run``), counted on every backend since the plan may run on either; the CPU
    grid's range pass (a run's queries copied and indexed)."""
    if method == "grid" and d >= RANGE_FROM_D:  # the range pass: a run's copy of its queries, and their ε-grid
        return 16 * d + 32
    return 16 * (k + d) if method == "szl" else 0
#: ``method="auto"`` (``bench_knn.py --workloads methods``, k = 16; benchmarks/results/knn-methods-*.json): the
#: grid up to GRID_MAX_D dimensions on both backends; beyond, on CPU workers the Z-lists up to SZL_MAX_D
#: and brute force after; on GPUs brute force (H100, 200k rows: 8-d 0.23 s against szl's 0.43 s).  On the CPU
#: (2-core VM, clustered rows; knn-szl-brute-cpu-vm-2026-11-27-session25.json), since brute's GEMM filter
#: (kernels/knn_gemm.py), szl against brute: 50k rows 7-d 2.23 / 2.33 s, 8-d 2.57 / 2.41, 9-d 3.55 / 2.40, 10-d
#: 3.61 / 2.45, 12-d 4.49 / 2.49 (16-d 6.97 / 2.55, 64-d 60.6 / 4.08: knn-methods-cpu-vm-2026-11-27-session25.json);
#: 150k rows 7-d 13.8 / 19.4, 8-d 17.2 / 19.1, 9-d 21.7 / 19.0, 10-d 27.7 / 20.4, 12-d 36.9 / 20.4.  Brute grows as
#: n^2, szl as about n^1.7-1.9: szl kept 7- and 8-d (where it won on the larger join), brute from 9-d.  (Before
#: the GEMM filter: 8-d szl 2.3 s, brute 6.8 s; 16-d 6.7 s against 6.9 s; SZL_MAX_D was 12.)  Since the CPU grid's
#: range pass (kernels/knn_range.py, session 28; 150k rows, k = 16, the driver's rows on the 2-core VM), grid /
#: szl / brute: uniform 7-d 4.05 / 101 / 21.3 s, uniform 8-d 14.5 / 94.5 / 20.3 s, clustered 8-d 3.23 / 15.2 /
#: 20.9 s: the CPU takes the grid to CPU_GRID_MAX_D and szl only by name.  At 9-d the data decides (uniform: grid
#: 29.4 s, brute 19.4 s; clustered 9-, 10-, 12-d: grid 4.1, 4.6, 6.2 s, brute 19.5-20.4 s): brute from 9-d.
GRID_MAX_D = 6
CPU_GRID_MAX_D = 8
SZL_MAX_D = 8  # (no longer chosen by auto)
#: From CPU_SHARE_FROM_D dimensions on CPUs, where the planning sample gives the ε-grid's share at the kNN radius
#: (``estimate.sample_knn_grid_share``: the range pass's candidates among brute force's pairs of rows), the grid's
#: time over brute force's is about d * (KNN_GRID_PER_D + KNN_GRID_PER_SHARE * share): brute force's follows its
#: pairs of rows (19.4-26.8 s for 150k rows from 7- to 32-d), the grid's its candidates times their length, plus a
#: cost per query that grows with d (its sample, the rings of the queries short of k).  Measured on the 2-core VM
#: (150k rows, k = 16; session 28's drivers and session 29's ``knn_join(...).compute()``, the same rows), share
#: from the planner's sample -> grid / brute measured (predicted): uniform 7-d 0.034-0.048 -> 0.19 (0.23), 8-d
#: 0.115 -> 0.71 (0.65), 9-d 0.24 -> 1.52 (1.40), 10-d 1.0 -> 3.16 (6.1); exponential 9-d 0.663 -> 2.33 (3.7);
#: clusters 8-d 0.0064 -> 0.155 (0.13), 9-d 0.0078 -> 0.21 (0.15), 10-d 0.0081 -> 0.23 (0.17), 12-d 0.0104 ->
#: 0.30 (0.22), 16-d 0.0162 -> 0.43 (0.35), 24-d 0.0451 -> 0.82 (0.94), 32-d 0.103 -> 1.08 (2.4).  Each of the 13
#: took the faster method (the old rule, grid to CPU_GRID_MAX_D and brute after, took brute force at 9- to 24-d
#: on clusters, 1.2-4.8x slower); the model errs high where the share is large, far from the crossover.  The old
#: rule where the share is unknown, and beyond KNN_SHARE_MAX_D (not measured further: brute force, which won at 32-d).
#: The model covers the tasks whose range pass declines (clusters: more than 5 k rows within the radius of a query;
#: there the rings alone ran those 0.155-0.82 ratios).
CPU_SHARE_FROM_D = 7
KNN_SHARE_MAX_D = 32
KNN_GRID_PER_D = 0.012
KNN_GRID_PER_SHARE = 0.6


def cpu_knn_grid_ratio(d: int, share: float) -> float:
    """The kNN grid's time over brute force's predicted on CPUs (:data:`CPU_SHARE_FROM_D`'s model)."""
    return d * (KNN_GRID_PER_D + KNN_GRID_PER_SHARE * share)


def wants_knn_share(method: str, d: int, gpus: bool) -> bool:
    """Whether :func:`choose_knn_method` would use the sampled share (so the planner should measure it)."""
    return method == "auto" and not gpus and CPU_SHARE_FROM_D <= d <= KNN_SHARE_MAX_D


@dataclass(frozen=True)
class KnnPartition:
    """One task: the k nearest neighbours of query rows ``a`` (of the plan's A)."""

    index: int
    a: tuple[int, int]
    est_pairs: float

    @property
    def rows(self) -> int:
        return self.a[1] - self.a[0]


@dataclass(frozen=True, eq=False)
class KnnPlan:
    """Everything needed to run a kNN-join; ``explain()`` says what will run and why."""

    k: int
    selfjoin: bool
    method: str
    method_reason: str
    backend: str
    a: Source
    b: Source | None
    partitions: tuple[KnnPartition, ...] = field(repr=False)
    #: data blocks: row ranges of B (of A in a self-join) and their bounding boxes (float64, (nb, d))
    blocks: tuple[tuple[int, int], ...] = field(repr=False)
    block_lo: np.ndarray = field(repr=False)
    block_hi: np.ndarray = field(repr=False)
    memory_budget: int
    notes: tuple[str, ...] = ()
    steps: tuple[PlanStep, ...] = ()
    inputs_token: str = field(default="", repr=False)
    gpu_options: tuple = ()  # (name, value) pairs for the method's GPU driver

    @property
    def ntasks(self) -> int:
        return len(self.partitions)

    @property
    def d(self) -> int:
        return self.a.d

    @property
    def data(self) -> Source:
        return self.a if self.b is None else self.b

    def task_memory(self, part: KnnPartition) -> int:
        block = max((hi - lo for lo, hi in self.blocks), default=0)
        data_row = row_bytes(self.d, 8) + index_row_bytes(self.method, self.d)
        per_query = row_bytes(self.d, 8) + self.k * (LIST_BYTES + ROW_OUT_BYTES) + query_row_bytes(self.method, self.d, self.k)
        pairs = min(RANGE_BATCH_PAIRS, part.rows * RANGE_PAIRS_PER_K * self.k) \
            if self.method == "grid" and self.d >= RANGE_FROM_D else 0  # the range pass's one batch of pairs
        return part.rows * per_query + block * data_row + int(20 * pairs)

    def explain(self) -> str:
        kind = "self-join" if self.selfjoin else "A×B join"
        shape_b = "" if self.selfjoin else f" × B {self.b.label} ({self.b.n:,} × {self.b.d})"
        worst = max((self.task_memory(p) for p in self.partitions), default=0)
        backend = ("auto (each task on its worker's GPU if CuPy sees one, else the CPU)"
                   if self.backend == "auto" else self.backend)
        lines = [
            f"daskjoin plan: kNN-{kind}, k={self.k}",
            f"  input:         A {self.a.label} ({self.a.n:,} × {self.a.d}){shape_b}",
            f"  method:        {self.method} on {backend} - {self.method_reason}",
            f"  partitioning:  {self.ntasks} task(s) of query rows; the data in {len(self.blocks)} block(s), "
            "nearest first, later ones only for queries whose k-th distance reaches them",
            f"  output:        {self.a.n * self.k:,} rows (i, j, dist, rank)",
            f"  memory/task:   up to ~{fmt_bytes(worst)} (budget {fmt_bytes(self.memory_budget)})",
        ]
        if self.gpu_options:
            lines.append("  gpu options:   " + ", ".join(f"{k}={v!r}" for k, v in self.gpu_options)
                         + " (where a task runs on a GPU)")
        lines += [f"  data pass:     {step.describe()}" for step in self.steps]
        lines += [f"  note:          {note}" for note in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.explain()


def choose_knn_method(method: str, d: int, gpus: bool = False, sampled=None) -> tuple[str, str]:
    """``method`` resolved, and why (measured crossovers, see ``SZL_MAX_D``); ``gpus``: the tasks run on GPUs;
    ``sampled``: the planning sample's ``estimate.KnnShare`` (:data:`CPU_SHARE_FROM_D`'s model; None: unknown)."""
    if method != "auto":
        return method, "chosen by the caller"
    if d <= GRID_MAX_D:
        return "grid", f"d={d} <= {GRID_MAX_D}: a grid of cells about the k-th distance wide prunes well"
    if gpus:
        return "brute", (f"d={d} > {GRID_MAX_D} on GPUs: every pair through a filter of products (the tensor "
                         "cores on an integer grid from 16 dimensions, float32 below), faster there than grid "
                         "cells or Z-lists")
    share = math.nan if sampled is None else sampled.share
    if math.isfinite(share) and wants_knn_share(method, d, gpus):
        ratio = cpu_knn_grid_ratio(d, share)
        said = (f"the ε-grid at the sampled k-th distance ({sampled.radius:.3g}) computes {share:.3g} of brute "
                f"force's distances; the "
                f"grid's time over brute force's predicted at d x ({KNN_GRID_PER_D:g} + {KNN_GRID_PER_SHARE:g} x "
                f"that) = {ratio:.2g} (CPU, measured model)")
        if ratio < 1.0:
            return "grid", f"d={d}: {said}: the grid, its range pass first"
        return "brute", f"d={d}: {said}: every pair is scanned (filtered)"
    if d <= CPU_GRID_MAX_D:
        return "grid", (f"{GRID_MAX_D} < d={d} <= {CPU_GRID_MAX_D} on CPUs: the grid, its range pass first (the "
                        "ε-grid's pairs within a sampled radius), measured faster than Z-lists and brute force")
    return "brute", f"d={d} > {CPU_GRID_MAX_D} on CPUs: grid cells prune little on uniform rows, every pair is scanned (filtered)"


#: the exactness margins (relative 1e-9: the filters' ROOT_GROW, szl's radius, kernels/exact.py's D64 bound,
#: each needing (d + 2) 2^-53 below 1e-9) hold up to this many dimensions
MAX_D = 1_000_000


def check_d(d: int) -> None:
    """Refused before any work: more dimensions than the exactness margins cover."""
    if d > MAX_D:
        raise InputError(f"the inputs have d={d:,} dimensions; the kNN-join's exact decision covers at most "
                         f"{MAX_D:,}: reduce the dimensionality first")


def check_k(k: int, n_data: int, selfjoin: bool) -> None:
    """``k`` no larger than the candidates each row has: refused before any work."""
    candidates = n_data - (1 if selfjoin else 0)
    if k > candidates:
        what = (f"a self-join of {n_data:,} rows gives each row {candidates:,} other rows" if selfjoin
                else f"B has {n_data:,} rows")
        raise InputError(f"k={k:,} is larger than the candidates of each row: {what}; use k <= {max(candidates, 0):,}")


def _statistics(name: str, source: Source, runner, steps: list):
    from ..validation import raise_nonfinite

    fingerprint = cache.fingerprint(source) if isinstance(source, ZarrSource) else None
    cached = stats_cached(source, fingerprint) if fingerprint else False
    start = time.perf_counter()
    stats = block_stats(source, runner.map if runner is not None else None, fingerprint)
    where = "in memory" if isinstance(source, MemorySource) else "kept beside the input for later plans"
    nbytes = int(source.n) * int(source.d) * np.dtype(source.dtype).itemsize
    steps.append(PlanStep(f"statistics of {name}", f"bounds per block, NaN/inf check, {where}", nbytes, cached,
                          0.0 if cached else time.perf_counter() - start))
    if stats.first_bad >= 0:
        raise_nonfinite(f"{name} ({source.label})", stats.first_bad)
    return stats, fingerprint


def _data_blocks(stats, max_rows: int):
    """The statistics' row blocks merged into blocks of at most ``max_rows`` rows, with their boxes (a block
    larger than that is cut into equal pieces, each bounded by its block's box)."""
    blocks, los, his = [], [], []
    for b in range(stats.nblocks):
        lo, hi = int(stats.starts[b]), int(stats.starts[b + 1])
        pieces = max(1, -(-(hi - lo) // max_rows))
        cuts = lo + (np.arange(pieces + 1) * (hi - lo)) // pieces
        for s, e in zip(cuts[:-1], cuts[1:]):
            if blocks and blocks[-1][1] == s and e - blocks[-1][0] <= max_rows:  # merge into the last block
                blocks[-1] = (blocks[-1][0], int(e))
                los[-1], his[-1] = np.minimum(los[-1], stats.lo[b]), np.maximum(his[-1], stats.hi[b])
            else:
                blocks.append((int(s), int(e)))
                los.append(stats.lo[b].copy())
                his.append(stats.hi[b].copy())
    d = stats.lo.shape[1]
    return tuple(blocks), np.array(los).reshape(-1, d), np.array(his).reshape(-1, d)


def make_knn_plan(a: Source, b: Source | None, k: int, *, method: str, backend: str, memory_budget: int,
                  runner=None, parallelism: int = 1, block_rows: int | None = None, gpus: bool = False) -> KnnPlan:
    """Plan a kNN-join: statistics (cached for Zarr; bad rows refused), data blocks, query partitions.

    ``parallelism``: task threads of the cluster (at least that many tasks where rows allow).
    ``block_rows``: data rows per block (default: what half the budget holds).
    ``gpus``: the tasks will run on GPUs (``method="auto"`` chooses by backend).
    """
    check_d(a.d)
    steps: list = []
    stats_a, fp_a = _statistics("A", a, runner, steps)
    stats_b, fp_b = (stats_a, fp_a) if b is None else _statistics("B", b, runner, steps)
    data = a if b is None else b
    check_k(k, data.n, b is None)
    on_gpus = gpus or backend == "gpu"
    sampled = None
    if wants_knn_share(method, a.d, on_gpus) and stats_a.sample.shape[0]:
        from .estimate import sample_knn_grid_share

        # the rows one task searches at once: the range pass's radius is a data block's k-th distance
        grid_block = max(1, int(memory_budget // 2 // (row_bytes(a.d, 8) + index_row_bytes("grid", a.d))))
        sampled = sample_knn_grid_share(stats_a.sample, None if b is None else stats_b.sample,
                                        min(data.n, grid_block if block_rows is None else int(block_rows)), k)
    chosen, reason = choose_knn_method(method, a.d, on_gpus, sampled)
    per_row = row_bytes(a.d, 8)
    data_row = per_row + index_row_bytes(chosen, a.d)
    notes = []
    # the data block a task holds beside its queries: at most half the budget
    block_rows = max(1, int(memory_budget // 2 // data_row)) if block_rows is None else int(block_rows)
    if data.n <= block_rows:
        blocks, block_lo, block_hi = ((0, data.n),), stats_b.lo_all[None, :], stats_b.hi_all[None, :]
    else:
        blocks, block_lo, block_hi = _data_blocks(stats_b, block_rows)
        if isinstance(data, MemorySource):  # rows at hand: each block's own box (prunes better than its chunk's)
            boxes = [(data.data[s:e].min(axis=0), data.data[s:e].max(axis=0)) for s, e in blocks]
            block_lo = np.array([lo for lo, _ in boxes], np.float64).reshape(-1, data.d)
            block_hi = np.array([hi for _, hi in boxes], np.float64).reshape(-1, data.d)
        notes.append(f"B does not fit one task's budget: {len(blocks)} blocks of up to {block_rows:,} rows")
    # query rows: their lists and output in the other half
    per_query = per_row + k * (LIST_BYTES + ROW_OUT_BYTES) + query_row_bytes(chosen, a.d, k)
    query_rows = max(1, int(memory_budget // 2 // per_query))
    ntasks = max(-(-a.n // query_rows), min(int(parallelism), -(-a.n // 1024)), 1)
    bounds = np.linspace(0, a.n, ntasks + 1).astype(np.int64)
    parts = tuple(KnnPartition(t, (int(bounds[t]), int(bounds[t + 1])), float((bounds[t + 1] - bounds[t]) * k))
                  for t in range(ntasks))
    from .planner import _inputs_token

    plan = KnnPlan(k=k, selfjoin=b is None, method=chosen, method_reason=reason, backend=backend, a=a, b=b,
                   partitions=parts, blocks=blocks, block_lo=block_lo, block_hi=block_hi,
                   memory_budget=int(memory_budget), notes=tuple(notes), steps=tuple(steps),
                   inputs_token=_inputs_token(fp_a, fp_b if b is not None else None))
    worst = max(plan.task_memory(p) for p in parts)
    if worst > memory_budget:
        plan = KnnPlan(**{**plan.__dict__, "notes": plan.notes + (
            f"the largest task may need ~{fmt_bytes(worst)}, over the budget: raise memory_budget",)})
    return plan
