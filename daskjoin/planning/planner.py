"""Turn inputs and options into a :class:`~.plan.Plan` (statistics, estimate, method, partitions).

Plans of Zarr inputs are kept in this process: a repeated join of unchanged inputs
(same :func:`~.cache.state_token`) with the same options, budget and cluster gets the
same plan back without touching statistics, sample or sorted copies.  Estimates are
kept the same way per (inputs, eps), so plans that differ only in budget or
partitioning share one.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import replace

import numpy as np

from .. import config
from ..caches import CACHE
from ..io import commit
from ..io.zarr_in import MemorySource, Source, ZarrSource
from ..validation import InputError, raise_nonfinite
from . import cache, cost
from .bounds import block_stats, stats_cached
from .chunk_pairs import block_rows_for, plan_block_pairs
from ..kernels import SHARE_METHODS, resolve_backend
from .estimate import estimate_pairs, sample_grid_share, sample_pair_rows, shape_pairs
from .plan import DEVICE_SHARE, PAIR_BYTES, Partition, Plan, PlanStep, fmt_bytes, host_row_bytes, row_bytes
from .slabs import owner_rows, plan_slabs, slab_rows_for, split_dimension, top_weights, work_cuts
from .sorted_copy import SortedCopy, open_sorted, sort_in_memory, sorted_copy_exists

PARTITIONINGS = ("auto", "chunk_pairs", "slabs")
# kept in daskjoin.caches.CACHE: "plans" (plan key -> Plan) and
# "estimates" ((fingerprints, sizes, eps, sample rows) -> Estimate)


def clear_caches() -> None:
    """Forget the plans and estimates kept in this process (on-disk caches stay); see :func:`daskjoin.clear_cache`."""
    CACHE.clear("plans")
    CACHE.clear("estimates")


def _input_token(source: Source | None):
    """A cheap token of a Zarr input's current contents; None for in-memory inputs (never cached)."""
    if source is None:
        return ()
    if isinstance(source, ZarrSource):
        return cache.state_token(source)
    return None


def _plan_key(a: Source, b: Source | None, eps: float, options: tuple):
    token_a, token_b = _input_token(a), _input_token(b)
    if token_a is None or token_b is None:
        return None
    return (token_a, token_b, eps, options, config.get("sample-rows"), config.get("cache-dir"))


def _still_there(plan: Plan) -> bool:
    """The sorted copies a cached plan reads from still exist (someone may have cleared the cache directory)."""
    for reader in (plan.reader_a, plan.reader_b):
        if isinstance(reader, SortedCopy) and reader.group_path is not None:
            if not sorted_copy_exists(reader.group_path):
                return False
    return True


def _reused(plan: Plan) -> Plan:
    """A cached plan as a repeat sees it: sorted copies it built are now reused."""
    notes = tuple(note.replace("sorted copy built at", "sorted copy reused from") for note in plan.notes)
    return plan if notes == plan.notes else Plan(**{**plan.__dict__, "notes": notes})


def _estimate_key(n_a: int, n_b: int, eps: float, fingerprints: tuple | None):
    return None if fingerprints is None else (fingerprints, n_a, n_b, eps, config.get("sample-rows"))


def _estimate(stats_a, n_a: int, eps: float, stats_b, n_b: int, fingerprints: tuple | None, gpu: bool = False,
              grid_share: bool = False):
    """The sampled estimate (cached); ``grid_share``: with the CPU grid's share of the sample's pairs of rows
    (for ``method="auto"``: ``cost.wants_grid_share``), measured where a cached estimate lacks it."""
    key = _estimate_key(n_a, n_b, eps, fingerprints)
    hit = None if key is None else CACHE.get("estimates", key)
    if hit is not None:
        if grid_share and hit.grid_share is None:
            share = sample_grid_share(stats_a.sample, eps, None if stats_b is None else stats_b.sample)
            hit = CACHE.put("estimates", key, replace(hit, grid_share=share))
        return hit
    # an exact count of the sample: the same on either backend, so the cache key does not name one; on
    # this process's GPU where the tasks will run on GPUs and it has one (a client may have none)
    backend = _sample_backend(gpu)
    est = estimate_pairs(stats_a.sample, n_a, eps, None if stats_b is None else stats_b.sample,
                         None if stats_b is None else n_b, backend=backend, rows_a=stats_a.sample_rows,
                         rows_b=None if stats_b is None else stats_b.sample_rows, list_pairs=False,
                         grid_share=grid_share)
    return est if key is None else CACHE.put("estimates", key, est)


def _listed(est, stats_a, stats_b, eps: float, gpu: bool, key):
    """``est`` with its sample's pairs listed (``pair_rows``), kept with the cached estimate: the same rows on
    either backend, so a later plan of the same input (a GPU run after a CPU one) lists nothing again."""
    if est.pair_rows is not None:
        return est
    est = replace(est, pair_rows=sample_pair_rows(est, stats_a.sample, eps, **_sample(stats_a, stats_b, gpu)))
    return est if key is None else CACHE.put("estimates", key, est)


def _sample(stats_a, stats_b, gpu: bool) -> dict:
    """The planning sample's arguments of ``estimate``'s functions: B's sample, the backend, the input rows."""
    return {"sample_b": None if stats_b is None else stats_b.sample, "backend": _sample_backend(gpu),
            "rows_a": stats_a.sample_rows, "rows_b": None if stats_b is None else stats_b.sample_rows}


def _sample_backend(gpu: bool) -> str:
    """Where the planning sample is joined: this process's GPU where the tasks will run on GPUs and it has one."""
    return "gpu" if gpu and resolve_backend("auto") == "gpu" else "cpu"


def _sorted(source: Source, dim: int, stats, runner, budget: int, fingerprint: str | None) -> tuple[SortedCopy, str]:
    if isinstance(source, MemorySource):
        return sort_in_memory(source, dim), "sorted in memory"
    path = os.path.join(cache.cache_dir(source), f"sorted-dim{dim}-{fingerprint or cache.fingerprint(source)}.zarr")

    def build(final: str) -> None:
        runner.sort(source, dim, stats, final, bucket_bytes=max(1, budget // 4))

    # concurrent joins of one input build its copy once (the others wait, then read it)
    built = commit.build_once(path, sorted_copy_exists, build)
    return open_sorted(path, dim), f"sorted copy {'built at' if built else 'reused from'} {path}"


#: query shares are of about equal work, not equal pairs: a share is priced at this many times its even part of
#: the pairs when shares are weighed against the budget (where the whole join would not fit one task)
SHARE_SLACK = 1.5
#: share tags whose shares are cut by query point (the GPU grid), so that no indivisible unit holds more than
#: a point's pairs: only these are weighed share by share.  The CPU grid cuts whole cells (one cell of many
#: duplicates lands in one share whole) and GPU brute force equal runs of tile pairs (clustered data put the
#: pairs in a few tiles), so a share of theirs may hold several times its even part.
POINT_SHARES = ("gpu",)
#: a block pair is halved for balance once its estimate exceeds a worker's share by this factor: the cross
#: pair of two blocks holds half of a uniform self-join, and sampling noise alone must not cut it
BALANCE_SLACK = 1.25


def _task_rows(a: Source, b: Source | None, method: str, device_memory: int) -> tuple[int, float]:
    """``(bytes a row costs a task in host memory, rows a task may hold)``: a CPU task holds everything on the
    host (``row_bytes``); a GPU task (``device_memory``) its rows as read, their float64 copies and index being
    on the device, of which its rows may take ``DEVICE_SHARE``."""
    if not device_memory:
        return row_bytes(a.d, 8, method), float("inf")
    return host_row_bytes(a.d, _itemsize(a, b)), DEVICE_SHARE * device_memory // row_bytes(a.d, 8, method)


def _too_heavy(budget: int, per_row: int, row_cap: float, pairs_upper: float, count_only: bool, parallelism: int):
    """The test whether a block pair of ``rows`` rows and ``est`` estimated pairs is to be halved: more rows than
    a task may hold (``_task_rows``), its pairs would not fit the budget beside its rows, or (several workers)
    it alone holds more than a worker's share.  ``est`` is the block pair's lower estimate
    (:meth:`.chunk_pairs._Estimator.floor`): sampling noise alone never cuts one."""
    def heavy(rows: int, est: float) -> bool:
        if rows > row_cap or (not count_only and rows * per_row + est * PAIR_BYTES > budget):
            return True
        return parallelism > 1 and est > BALANCE_SLACK * pairs_upper / parallelism
    return heavy


def _split_rows(n: int, blocks: int, chunk_rows: int) -> int:
    """Rows per block that cut ``n`` rows into ``blocks`` blocks of nearly equal size, made of whole input
    chunks where that changes a block by at most an eighth (a block then reads whole chunks)."""
    rows = -(-n // blocks)
    aligned = -(-rows // chunk_rows) * chunk_rows
    return aligned if aligned - rows <= rows // 8 and -(-n // aligned) == blocks else rows


def _share_tag(method: str, share_backend: str | None) -> str | None:
    """How a share of ``method`` names what cut it: "cpu" or "gpu" for the grid (its index is exact), the
    GPU's signature too for brute force (its locality order comes from cuBLAS products); None: no shares."""
    if not share_backend:
        return None
    kind = share_backend.split(":")[0]
    if kind not in SHARE_METHODS.get(method, ()):
        return None
    if method == "grid":
        return kind
    return share_backend if ":" in share_backend else None


def _query_shares(n_a: int, n_b: int | None, parts: int, pairs_upper: float, backend: str) -> tuple:
    """A join one task holds, cut into ``parts`` query shares (:mod:`daskjoin.kernels.shares`): every task
    reads every row and searches the queries of its share, as ``backend``'s driver cuts them."""
    b = None if n_b is None else (0, n_b)
    return tuple(Partition(k, (0, n_a), b, n_b is None, pairs_upper / parts, share=(k, parts, backend))
                 for k in range(parts))


def _data_bytes(source: Source) -> int:
    return int(source.n) * int(source.d) * np.dtype(source.dtype).itemsize


def _statistics(name: str, source: Source, runner, fingerprint: str | None, steps: list):
    """The statistics pass over one input, as a named plan step; bad rows refused here, naming the first."""
    cached = stats_cached(source, fingerprint) if isinstance(source, ZarrSource) else False
    start = time.perf_counter()
    stats = block_stats(source, runner.map, fingerprint)
    where = "in memory" if isinstance(source, MemorySource) else "kept beside the input for later plans"
    steps.append(PlanStep(f"statistics of {name}", f"bounds per block, NaN/inf check, sample, {where}",
                          _data_bytes(source), cached, 0.0 if cached else time.perf_counter() - start))
    if stats.first_bad >= 0:
        raise_nonfinite(f"{name} ({source.label})", stats.first_bad)
    return stats


def _slab_owners(sorted_a, stats_a, stats_b, pair_rows, dim: int, eps: float = 0.0, grow: float = 1.0):
    """``(rows, weights)``: the sorted rows owning the sample's pairs (:func:`.slabs.owner_rows`), listed at
    ``grow * eps``, and their weights (:func:`.slabs.top_weights`; None: all 1); ``(None, None)`` where no
    pairs were listed."""
    if pair_rows is None or not len(pair_rows[0]) or not hasattr(sorted_a, "key_index"):
        return None, None

    def keys(stats, *rows):
        order = np.argsort(stats.sample_rows, kind="stable")
        at = [np.searchsorted(stats.sample_rows, r, sorter=order) for r in rows]
        return [stats.sample[order[np.minimum(t, len(order) - 1)], dim] for t in at]

    if stats_b is None:
        ka, kb = keys(stats_a, pair_rows[0], pair_rows[1])
        rows = owner_rows(sorted_a, ka, kb)
        top = float(stats_a.hi_all[dim])
        below = stats_a.sample[:, dim][stats_a.sample[:, dim] < top]
        if grow <= 1.0 or not below.shape[0] or top - float(below.max()) >= eps:
            # (keys on levels farther apart than eps pair only within a level: no partners above to miss)
            return rows, None
        # pairs listed at a grown radius lose their owners near the top of the keys over that radius, where
        # the join's own pairs lose them over eps: weighted back (20M x 3-d uniform at 256 MB: the largest
        # actual / estimated pairs of a slab 2.56x before, 1.39x after; benchmarks/slab_estimates.py)
        owner_keys = np.minimum(ka, kb)
        w = top_weights(owner_keys, top, eps, grow, stats_a.sample.shape[1])
        return rows, w[np.argsort(owner_keys, kind="stable")]  # owner_rows gives the rows in key order
    return owner_rows(sorted_a, keys(stats_a, pair_rows[0])[0], None), None


def _sorted_step(name: str, source: Source, dim: int, stats, runner, budget: int, fingerprint: str | None,
                 steps: list):
    start = time.perf_counter()
    reader, note = _sorted(source, dim, stats, runner, budget, fingerprint)
    cached = "reused" in note
    steps.append(PlanStep(f"sorted copy of {name}", f"rows ordered along dimension {dim} for slabs",
                          _data_bytes(source), cached, 0.0 if cached else time.perf_counter() - start))
    return reader, note


def _inputs_token(fp_a: str | None, fp_b: str | None) -> str:
    """Part of the tasks' keys: a changed input gives new keys (in-memory inputs are hashed by Dask itself)."""
    if fp_a is None:
        return ""
    return hashlib.sha1(f"{fp_a}:{fp_b}".encode()).hexdigest()[:16]


def make_plan(a: Source, b: Source | None, eps: float, *, method: str, partitioning: str, backend: str,
              memory_budget: int, runner, gpu: bool = False, gpu_options: tuple = (), cluster=None,
              count_only: bool = False, parallelism: int = 1, share_backend: str | None = None,
              device_memory: int = 0) -> Plan:
    """Plan a join: one statistics pass per input (cached for Zarr), a sampled estimate, partitions.

    ``cluster`` identifies the cluster the plan is for (part of the in-process cache key).
    ``count_only``: a plan for an exact count, whose tasks hold no pairs (partitions sized by rows).
    ``parallelism``: the tasks the cluster runs at once (its GPU workers, for GPU tasks); a large join is cut
    into at least that many blocks (:func:`.cost.parallel_split`) even where one task would hold it.
    ``share_backend``: the backend every task of the plan will run on, where known ("cpu", "gpu", or
    "gpu:<device signature>" where every GPU agrees): a join one task could hold is then cut into query shares
    of that backend's driver instead of blocks (:func:`_share_tag`: the grid; GPU brute force given a signature).
    ``device_memory``: bytes of the smallest GPU the tasks run on (``gpu`` plans): a join fits one task where its
    rows as read fit the budget and their device copies a share of the GPU (:data:`.plan.DEVICE_SHARE`).
    """
    if partitioning not in PARTITIONINGS:
        raise InputError(f"partitioning must be one of {PARTITIONINGS}, got {partitioning!r}")
    options = (method, partitioning, backend, int(memory_budget), bool(gpu), tuple(gpu_options), cluster,
               bool(count_only), int(parallelism), share_backend, int(device_memory))
    key = _plan_key(a, b, eps, options)
    hit = None if key is None else CACHE.get("plans", key)
    if hit is not None and _still_there(hit):
        return CACHE.put("plans", key, _reused(hit))
    plan = _make_plan(a, b, eps, method=method, partitioning=partitioning, backend=backend,
                      memory_budget=memory_budget, runner=runner, gpu=gpu, gpu_options=gpu_options,
                      count_only=count_only, parallelism=parallelism, share_backend=share_backend,
                      device_memory=device_memory if gpu else 0)
    return plan if key is None else CACHE.put("plans", key, plan)


def _itemsize(a: Source, b: Source | None) -> int:
    """Bytes of one stored coordinate (the larger of two inputs)."""
    return max(np.dtype(s.dtype).itemsize for s in (a, b) if s is not None)


def _split_dim(stats_a, stats_b) -> int:
    """The dimension slabs are cut along: the largest spread over both inputs."""
    lo = stats_a.lo_all if stats_b is None else np.minimum(stats_a.lo_all, stats_b.lo_all)
    hi = stats_a.hi_all if stats_b is None else np.maximum(stats_a.hi_all, stats_b.hi_all)
    return split_dimension(lo, hi)


def _slab_row_cost(per_row: int, row_cap: float, memory_budget: int) -> float:
    """Bytes a slab row costs against the budget, with an equal allowance for the rows it reaches: twice a
    task's row (``_task_rows``), or more where the GPU's share caps a task's rows first."""
    return max(2.0 * per_row, memory_budget / max(1.0, row_cap / 2))


def _slab_reads(stats_a, stats_b, eps: float, n_a: int, n_b: int, held: float, memory_budget: int,
                row_cost: float) -> float:
    """The rows the heaviest slab would read, as a multiple of its own, from A's sample: slabs of equal rows
    along the split dimension, as many as the budget needs, each reading its rows and those within eps above
    it (A x B: on either side).  Slabs are sized for at most as many again; past that the slab's task outgrows
    the budget, and where eps spans most of the data (high dimensions) the first slab reads every row."""
    keys = np.sort(stats_a.sample[:, _split_dim(stats_a, stats_b)]) if stats_a.sample.shape[1] else np.zeros(0)
    if not len(keys):
        return 1.0
    slabs = min(len(keys), -(-max(n_a, 1) // slab_rows_for(memory_budget, n_a, n_b, 0, held, row_cost=row_cost)))
    edges = np.arange(slabs + 1) * len(keys) // slabs
    first, last = keys[edges[:-1]], keys[edges[1:] - 1]
    below = first if stats_b is None else first - eps
    reads = np.searchsorted(keys, last + eps, side="right") - np.searchsorted(keys, below, side="left")
    return float(np.max(reads / np.diff(edges)))


def _make_plan(a: Source, b: Source | None, eps: float, *, method: str, partitioning: str, backend: str,
               memory_budget: int, runner, gpu: bool, gpu_options: tuple, count_only: bool = False,
               parallelism: int = 1, share_backend: str | None = None, device_memory: int = 0) -> Plan:
    zarr_inputs = isinstance(a, ZarrSource) and (b is None or isinstance(b, ZarrSource))
    fp_a = cache.fingerprint(a) if zarr_inputs else None
    fp_b = cache.fingerprint(b) if zarr_inputs and b is not None else None
    steps = []
    stats_a = _statistics("A", a, runner, fp_a, steps)
    stats_b = None if b is None else _statistics("B", b, runner, fp_b, steps)
    n_a, n_b = a.n, (a.n if b is None else b.n)
    est = _estimate(stats_a, n_a, eps, stats_b, n_b, (fp_a, fp_b) if zarr_inputs else None, gpu=gpu,
                    grid_share=method == "auto" and cost.wants_grid_share(a.d, gpu))
    chosen_method, method_reason = cost.choose_method(method, a.d, gpu=gpu, row_pairs=float(n_a) * float(n_b),
                                                      grid_share=est.grid_share)
    total_rows = n_a + (0 if b is None else n_b)
    held = 0.0 if count_only else est.upper  # the pairs a task holds: none when it only counts them
    per_row, row_cap = _task_rows(a, b, chosen_method, device_memory)
    slab_cost = _slab_row_cost(per_row, row_cap, memory_budget)
    fits = total_rows * per_row + held * PAIR_BYTES <= memory_budget and total_rows <= row_cap
    rows = max(n_a, n_b, 1) if fits else block_rows_for(memory_budget, n_a, n_b, a.d, held, a.chunk_rows,
                                                        chosen_method, per_row=per_row, max_rows=row_cap // 2)
    products = float(n_a) * float(n_b) * a.d if chosen_method in ("brute", "nlj") else 0.0
    split = cost.parallel_split(parallelism, rows=total_rows, pairs=est.upper, products=products)
    # chunk pairs or slabs is the budget's choice: a cut for the workers must not turn chunk pairs into slabs
    # (4 GPUs, 20M rows: 4 blocks kept 100% > 2/4 chose slabs, and a sorted copy, where the budget's 2 did not)
    budget_rows = rows
    cut = split > 1 and _split_rows(max(n_a, n_b, 1), split, a.chunk_rows) < rows  # the budget alone cuts fewer
    tag = _share_tag(chosen_method, share_backend)
    # a query share reads every row but holds only its share of the pairs: shares may fit where the whole does not
    # (then the rows computed next and the block pairs planned from them are not used: the shares replace them)
    shares_fit = split > 1 and tag in POINT_SHARES and total_rows <= row_cap and (
        total_rows * per_row + SHARE_SLACK * held / split * PAIR_BYTES <= memory_budget)
    cut = cut or (shares_fit and not fits)
    if cut:
        rows = _split_rows(max(n_a, n_b, 1), split, a.chunk_rows)
    if cut or not fits:  # several partitions: where the sample's pairs lie places their estimates (one needs none)
        est = _listed(est, stats_a, stats_b, eps, gpu, _estimate_key(n_a, n_b, eps, (fp_a, fp_b) if zarr_inputs else None))
    parts, kept = plan_block_pairs(stats_a, stats_b, eps, rows, est.upper, est.pair_rows,
                                   _too_heavy(memory_budget, per_row, row_cap, est.upper, count_only,
                                              parallelism if split > 1 else 1))
    nblocks = -(-max(n_a, n_b, 1) // rows)
    if cut and not fits:  # the pruning the budget's blocks would have: the kept share of the uncut plan
        _, kept = plan_block_pairs(stats_a, stats_b, eps, budget_rows, est.upper)
    chosen, reason = cost.choose_partitioning(partitioning, fits_one_task=fits or (cut and shares_fit),
                                              kept_fraction=kept,
                                              nblocks=-(-max(n_a, 1) // budget_rows),
                                              slab_reads=_slab_reads(stats_a, stats_b, eps, n_a, n_b, held,
                                                                     memory_budget, slab_cost))
    if cut and (fits or shares_fit) and chosen == "chunk_pairs" and tag:
        parts = _query_shares(n_a, None if b is None else n_b, split, est.upper, tag)
        if not fits and partitioning == "auto":
            reason = "a query share of the join fits one task's memory budget (the whole join does not)"
        reason += (f"; its queries cut into {split} shares so that {parallelism} workers share it "
                   f"(each task indexes every row and searches one share"
                   + ("" if fits else ", and holds the pairs of its share only") + ")")
    elif cut and chosen == "chunk_pairs":
        reason += f"; cut into {nblocks} blocks ({len(parts)} block pairs) so that {parallelism} workers share it"
    reader_a, reader_b, notes = a, b, []
    if chosen == "slabs":
        dim = _split_dim(stats_a, stats_b)
        reader_a, note = _sorted_step("A", a, dim, stats_a, runner, memory_budget, fp_a, steps)
        notes.append(f"A {note}")
        if b is not None:
            reader_b, note = _sorted_step("B", b, dim, stats_b, runner, memory_budget, fp_b, steps)
            notes.append(f"B {note}")
        slab_rows = slab_rows_for(memory_budget, n_a, n_b, a.d, held, chosen_method, row_cost=slab_cost)
        fewer = -(-max(n_a, 1) // (2 * split))
        if split > 1 and fewer < slab_rows:  # twice the workers: slabs differ in work where data are skewed along the key
            slab_rows = fewer
            reason += f"; at least {2 * split} slabs so that {parallelism} workers share them"
        shape, grow = shape_pairs(est, stats_a.sample, eps, **_sample(stats_a, stats_b, gpu))
        owners, weights = _slab_owners(reader_a, stats_a, stats_b, shape, dim, eps, grow)
        cuts = work_cuts(n_a, slab_rows, owners, est.upper, memory_budget, slab_cost, held=not count_only,
                         weights=weights)
        parts = plan_slabs(reader_a, reader_b, eps, slab_rows, est.upper, cuts, owners, weights)
        reason += f"; split on dimension {dim}" + (
            "" if owners is None else "; slabs cut by estimated work (rows and sampled pairs"
            + (f", placed by the sample's pairs at {grow:.1f}x eps" if grow > 1.0 else "") + ")")
    if not parts:
        parts = (Partition(0, (0, 0), None, True, 0.0),)
    plan = Plan(
        eps=eps, selfjoin=b is None, method=chosen_method, method_reason=method_reason,
        partitioning=chosen, partitioning_reason=reason, backend=backend, a=a, b=b,
        reader_a=reader_a, reader_b=reader_b, partitions=parts, estimate=est,
        memory_budget=memory_budget, notes=tuple(notes), gpu_options=gpu_options,
        inputs_token=_inputs_token(fp_a, fp_b), steps=tuple(steps), count_only=bool(count_only),
        parallelism=int(parallelism), device_memory=int(device_memory),
    )
    worst = max(plan.task_memory(p) for p in parts)
    if worst > memory_budget:
        notes.append(
            f"the largest task may need ~{fmt_bytes(worst)}, over the budget: dense regions or a large eps; "
            "raise memory_budget or expect spilling"
        )
        plan = Plan(**{**plan.__dict__, "notes": tuple(notes)})
    return plan
