"""``set_similarity_join``: validate -> plan size-range blocks -> run them on the cluster."""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import numpy as np

from ..api import JoinResult
from ..execution.cluster import resolve_client
from ..io.parquet_out import OutputRun
from ..validation import InputError
from ..execution import graph
from ..kinds.sets import SetJob, SetSource
from .local import ALGORITHMS
from .measures import Threshold, parse_threshold
from .plan import SetPlan, cross_blocks, matchable_from, partition_count, self_blocks, split_ranges

OUTPUTS = ("pairs", "count")
GPU_OPTIONS = ("verify", "block", "chunk_candidates")


@dataclass(frozen=True)
class SetJoinResult(JoinResult):
    """What a set join written to Parquet returns (``plan`` is a :class:`SetPlan`)."""

    def read(self):
        """The pairs (i, j, sim) as a Dask DataFrame read back from the Parquet files."""
        if not self.files:
            return graph.to_dataframe(SetJob.from_plan(self.plan, None, None), ())
        return super().read()


@dataclass(frozen=True)
class _Input:
    """A collection to join: its sizes (always in memory) and where tasks read its sets."""

    sizes: np.ndarray
    tokens: int
    source: SetSource
    collection: object = None


def _open_input(x, name: str) -> _Input:
    from ..io.sets_in import SetCollection, is_set_store, prepare_sets

    if isinstance(x, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(x))
        if not is_set_store(path):
            raise InputError(f"{name}: {path!r} is not a daskjoin set store (create one with `daskjoin import-sets` "
                             "or daskjoin.io.sets_in.import_sets)")
        from ..io.sets_store import read_offsets
        from ..io.zarr_in import missing_chunks_mode

        mode = missing_chunks_mode()
        offsets = read_offsets(path, missing_chunks=mode)
        return _Input(np.diff(offsets), int(offsets[-1]), SetSource(path=path, missing_chunks=mode))
    if isinstance(x, SetCollection):
        coll = x
    elif isinstance(x, np.ndarray) or not hasattr(x, "__iter__") or isinstance(x, (bytes, dict)):
        raise InputError(f"{name} must be a set store path, a SetCollection or an iterable of token sets, "
                         f"got {type(x).__name__}")
    else:
        coll = prepare_sets(x)
    return _Input(coll.sizes, coll.n_tokens, SetSource(collection=coll), coll)


def _aligned(a: _Input, b: _Input) -> tuple[_Input, _Input]:
    """R x S needs one token order for both sides, worked out from the two vocabularies.

    A store side stays a store: its tasks re-rank each range they read (``SetSource.remap``),
    so neither side's sets are loaded here; an in-memory side is re-ranked here.
    """
    from ..io.sets_prepare import common_ranking, reranked, token_counts
    from ..io.sets_store import read_vocab

    def vocabulary(x: _Input, name: str):
        if x.collection is not None:
            return x.collection.vocab, token_counts(x.collection, name), x.collection.vocab_kind
        return read_vocab(x.source.path, missing_chunks=x.source.missing_chunks)

    (vocab_a, count_a, kind_a), (vocab_b, count_b, kind_b) = vocabulary(a, "a"), vocabulary(b, "b")
    rank_a, rank_b, vocab, freq = common_ranking(vocab_a, count_a, kind_a, vocab_b, count_b, kind_b)

    def side(x: _Input, new_rank) -> _Input:
        if x.collection is None:
            return _Input(x.sizes, x.tokens, SetSource(path=x.source.path, remap=new_rank.astype(np.int32),
                                                               missing_chunks=x.source.missing_chunks))
        c = reranked(x.collection, new_rank, vocab, freq)
        return _Input(c.sizes, c.n_tokens, SetSource(collection=c), c)

    return side(a, rank_a), side(b, rank_b)


def _check_options(method, output, partitions, gpu_options) -> dict:
    if method not in ALGORITHMS:
        raise InputError(f"method must be one of {ALGORITHMS}, got {method!r}")
    if output not in OUTPUTS:
        raise InputError(f"output must be one of {OUTPUTS}, got {output!r}")
    if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, (int, np.integer))
                                   or partitions < 1):
        raise InputError(f"partitions must be a positive integer, got {partitions!r}")
    options = dict(gpu_options or {})
    unknown = sorted(set(options) - set(GPU_OPTIONS))
    if unknown:
        raise InputError(f"gpu_options {unknown} are not set-join options; allowed: {list(GPU_OPTIONS)}")
    from .verify_gpu import KERNELS

    if "verify" in options and options["verify"] not in KERNELS:
        raise InputError(f"gpu_options verify must be one of {sorted(KERNELS)}, got {options['verify']!r}")
    return options


def _cluster_threads(client) -> int:
    return sum(w.get("nthreads", 1) for w in client.scheduler_info().get("workers", {}).values()) or 1


def _plan(a: _Input, b: _Input | None, threshold: Threshold, *, algorithm, backend, client, budget, partitions,
          gpu_options) -> SetPlan:
    from ..api import _auto_budget, _backend

    if budget == "auto":
        budget = _auto_budget(client)
    backend, _on_gpu = _backend(backend, client)
    threads = _cluster_threads(client)
    start_a = matchable_from(a.sizes, threshold)
    if b is None:
        k = partition_count(a.tokens, len(a.sizes), budget, threads, partitions)
        parts_a = split_ranges(a.sizes, start_a, k)
        parts_b = ()
        blocks, pruned = self_blocks(a.sizes, parts_a, threshold)
        unmatchable = start_a
    else:
        start_b = matchable_from(b.sizes, threshold)
        k = partition_count(a.tokens + b.tokens, len(a.sizes) + len(b.sizes), budget, threads, partitions)
        k_a = max(1, round(k * a.tokens / max(1, a.tokens + b.tokens))) if partitions is None else partitions
        k_b = max(1, k - k_a) if partitions is None else partitions
        parts_a, parts_b = split_ranges(a.sizes, start_a, k_a), split_ranges(b.sizes, start_b, k_b)
        blocks, pruned = cross_blocks(a.sizes, parts_a, b.sizes, parts_b, threshold)
        unmatchable = start_a + start_b
    return SetPlan(threshold=threshold, algorithm=algorithm, backend=backend, selfjoin=b is None, n_a=len(a.sizes),
                   n_b=0 if b is None else len(b.sizes), parts_a=parts_a, parts_b=parts_b, blocks=blocks,
                   pruned=pruned, unmatchable=unmatchable, budget=int(budget),
                   gpu_options=tuple(sorted(gpu_options.items())))


def _method(method: str | None, algorithm: str | None) -> str:
    """``algorithm=`` is the old name of ``method=`` (kept as a deprecated alias); default "ppjoin"."""
    if algorithm is None:
        return "ppjoin" if method is None else method
    import warnings

    warnings.warn("algorithm=... is deprecated; use method=... (the same values)", DeprecationWarning, stacklevel=3)
    if method is not None and method != algorithm:
        raise InputError(f"method={method!r} and algorithm={algorithm!r} disagree; pass method only")
    return algorithm


def _checked(a, b, *, threshold, measure, method, backend, output, memory_budget, partitions, gpu_options):
    """Every check that needs no cluster; returns (threshold, options, budget, input A, input B)."""
    from ..api import _budget

    thr = parse_threshold(measure, threshold)
    options = _check_options(method, output, partitions, gpu_options)
    if backend not in ("auto", "cpu", "gpu"):
        raise InputError(f"backend must be one of ('auto', 'cpu', 'gpu'), got {backend!r}")
    budget = _budget(memory_budget)
    in_a = _open_input(a, "A")
    in_b = None if b is None else _open_input(b, "B")
    return thr, options, budget, in_a, in_b


def _planned(checked, *, method, backend, client, partitions):
    """The plan and the inputs as its tasks read them (R x S: put in one token order)."""
    thr, options, budget, in_a, in_b = checked
    if in_b is not None:
        in_a, in_b = _aligned(in_a, in_b)
    plan = _plan(in_a, in_b, thr, algorithm=method, backend=backend, client=client, budget=budget,
                 partitions=partitions, gpu_options=options)
    return plan, in_a, in_b


def plan_set_join(a, b=None, *, threshold, measure: str = "jaccard", method: str | None = None, backend: str = "auto",
                  memory_budget=None, partitions: int | None = None, gpu_options: dict | None = None,
                  client=None, algorithm: str | None = None) -> SetPlan:
    """Plan a set-similarity join without running it.

    Reads only the sets' sizes (a store's ``offsets``) and, for R x S, the two vocabularies.

    Parameters
    ----------
    a, b, threshold, measure, method, backend, memory_budget, partitions, gpu_options, client
        As in :func:`set_similarity_join`.

    Returns
    -------
    SetPlan
        Frozen; ``print(plan.explain())`` tells what will run and why.

    Examples
    --------
    >>> import daskjoin as dj
    >>> plan = dj.plan_set_join([["a", "b"], ["a", "b", "c"], ["x"]], threshold=0.5, backend="cpu")
    >>> plan.ntasks >= 1, plan.explain().splitlines()[0]
    (True, 'set-similarity self-join: jaccard >= 1/2 (= 0.5), decided exactly on integers')
    """
    method = _method(method, algorithm)
    checked = _checked(a, b, threshold=threshold, measure=measure, method=method, backend=backend, output="pairs",
                       memory_budget=memory_budget, partitions=partitions, gpu_options=gpu_options)
    plan, _, _ = _planned(checked, method=method, backend=backend, client=resolve_client(client),
                          partitions=partitions)
    return plan


def set_similarity_join(a, b=None, *, threshold, measure: str = "jaccard", method: str | None = None,
                        backend: str = "auto", output: str = "pairs", client=None, out=None, overwrite: bool = False,
                        progress: bool = False, memory_budget=None, partitions: int | None = None,
                        gpu_options: dict | None = None, algorithm: str | None = None):
    """Exact set-similarity join: every pair of token sets whose similarity reaches ``threshold``.

    Filtering (AllPairs / PPJoin prefix, length and positional filters) runs on
    the CPU with Numba; candidates are verified on the worker's GPU where there is
    one (``backend="auto"``), else on its CPU cores.  Sets are split into size
    ranges and only range pairs the length filter allows are joined.

    Parameters
    ----------
    a, b : set store path, SetCollection or iterable of token sets
        Token sets (ints or strings; duplicates inside a set are ignored).
        ``b=None``: self-join, pairs ``i < j`` each once.  A×B: ``i`` indexes ``a``, ``j`` indexes ``b``.
    threshold : float or int
        ``jaccard``/``cosine``/``dice``: in (0, 1], read as the decimal it prints as (0.8 means 4/5,
        so a pair exactly at 4/5 is included); ``overlap``: a positive number of shared tokens.
    measure : {"jaccard", "cosine", "dice", "overlap"}
    method : {"ppjoin", "allpairs"}, default "ppjoin"
        Both give the same pairs; ``ppjoin`` adds the positional filter (fewer candidates).
    backend : {"auto", "cpu", "gpu"}
        Where candidates are verified.
    output : {"pairs", "count"}
    client, out, overwrite, progress, memory_budget
        As in :func:`daskjoin.similarity_join`.
    partitions : int, optional
        Number of size-range partitions (default: from the memory budget and the cluster's threads).
    gpu_options : dict, optional
        ``verify``: "block" (default), "thread" or "intersect_path" (the paper's alternatives B, A, C);
        ``block``: threads per block (32); ``chunk_candidates``: candidates per verified chunk.
    algorithm : {"ppjoin", "allpairs"}, optional
        Deprecated name of ``method``.

    Returns
    -------
    dask.dataframe.DataFrame, int or SetJoinResult
        Lazy pairs (``i``, ``j``, ``sim`` float64; for ``overlap`` the shared-token count), the count,
        or the Parquet result.  Empty sets match nothing.

    Examples
    --------
    >>> import daskjoin as dj
    >>> docs = [["a", "b", "c"], ["a", "b", "c", "d"], ["x", "y"]]
    >>> dj.set_similarity_join(docs, threshold=0.75).compute().values.tolist()
    [[0.0, 1.0, 0.75]]
    """
    method = _method(method, algorithm)
    if out is not None and output == "count":
        raise InputError("output='count' returns a number; it cannot be combined with out=PATH")
    checked = _checked(a, b, threshold=threshold, measure=measure, method=method, backend=backend, output=output,
                       memory_budget=memory_budget, partitions=partitions, gpu_options=gpu_options)
    if out is not None:
        from ..api import check_output

        protected = {f"input {name}": x.source.path for name, x in (("A", checked[3]), ("B", checked[4]))
                     if x is not None}
        out = check_output(out, overwrite, protected)
    client = resolve_client(client)
    with OutputRun(out, overwrite) if out is not None else contextlib.nullcontext() as run:
        start = time.perf_counter()
        plan, in_a, in_b = _planned(checked, method=method, backend=backend, client=client, partitions=partitions)
        job = SetJob.from_plan(plan, in_a.source, None if in_b is None else in_b.source)
        planned = time.perf_counter()
        if output == "count":
            return graph.count(job, plan.blocks, client, progress=progress)
        if out is None:
            return graph.to_dataframe(job, plan.blocks)
        t = plan.threshold
        extra = {"measure": t.measure, "threshold": str(t.exact), "method": plan.algorithm,
                 "algorithm": plan.algorithm, "selfjoin": plan.selfjoin}  # "algorithm": the old key, kept
        manifest = graph.write_parquet(job, plan.blocks, client, run, progress=progress, extra=extra)
    return SetJoinResult(path=out, pairs=manifest["rows"], files=len(manifest["files"]),
                         plan_seconds=planned - start, run_seconds=time.perf_counter() - planned, plan=plan)
