"""``set_similarity_join``: validate -> plan size-range blocks -> run them on the cluster."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from .api import JoinResult, check_output, write_join
from .caches import CACHE
from .execution import graph
from .execution.resources import auto_budget, choose_backend, cluster_threads, task_slots, worker_info
from .io.set_inputs import SetInput, aligned_inputs, open_set_input
from .kinds.sets import SetJob
from .options import GPU_OPTIONS as _GPU_OPTIONS, check_options, resolve
from .planning.set_threshold import Threshold
from .planning.sets import SetPlan, make_set_plan
from .run_record import join_record

#: the set join's GPU options (the table: :data:`daskjoin.options.GPU_OPTIONS`)
GPU_OPTIONS = tuple(_GPU_OPTIONS["sets"]["ppjoin"])


@dataclass(frozen=True)
class SetJoinResult(JoinResult):
    """What a set join written to Parquet returns (``plan`` is a :class:`SetPlan`)."""

    def read(self):
        """The pairs (i, j, sim) as a Dask DataFrame read back from the Parquet files."""
        if not self.files:
            return graph.to_dataframe(SetJob.from_plan(self.plan, None, None), ())
        return super().read()


def _plan(a: SetInput, b: SetInput | None, threshold: Threshold, *, algorithm, backend, client, budget,
          partitions, gpu_options) -> SetPlan:
    workers = worker_info(client)
    if budget == "auto":
        budget = auto_budget(client, workers)
    backend, on_gpu = choose_backend(backend, client, workers)
    # tasks on one GPU take turns (execution.task._GpuTurn): blocks beyond the GPUs only repeat the index work
    # of the sets they share (KOSARAK-like 600k at Jaccard 0.9 on an H200: 3 blocks 0.24 s, the kernel 0.11 s)
    threads = task_slots(client, True, workers) if on_gpu else cluster_threads(client, workers)
    # CPU self-joins: the cut for the task threads follows the filtering work (planning.sets.partition_count)
    work = None if b is not None or on_gpu else functools.partial(_work, a, threshold)
    return make_set_plan(a.sizes, a.tokens, None if b is None else b.sizes, 0 if b is None else b.tokens, threshold,
                         algorithm=algorithm, backend=backend, budget=budget,
                         threads=threads, partitions=partitions, gpu_options=gpu_options, work=work)


def _work(a: SetInput, threshold: Threshold, start: int) -> tuple[float | None, int]:
    """The filtering work of a self-join of ``a`` from stored set ``start`` on (:func:`planning.set_work.postings_bound`);
    a store's is kept per process while the store is unchanged.

    (None, 0), not an error, where it cannot be had: a store read with missing chunks as zeros, or one whose
    ``freq`` or sampled sets are damaged (the join's tasks never read ``freq``, and meet damaged sets themselves)."""
    from .planning.set_work import postings_bound
    from .validation import InputError

    def read(lo: int, hi: int):
        tokens, offsets, _ids = a.source.read((lo, hi))
        return tokens, offsets

    path = a.source.path
    if path is None:
        return postings_bound(a.sizes, a.collection.freq, read, threshold, start)
    if a.source.missing_chunks == "fill":
        return None, 0
    from .io.sets_store import read_freq, store_state

    def estimate():
        try:
            return postings_bound(a.sizes, read_freq(path, missing_chunks="error"), read, threshold, start)
        except (InputError, IndexError):  # DamagedStoreError is an InputError; ranks beyond freq: damaged tokens
            return None, 0

    state = store_state(path)
    if state is None:
        return estimate()
    return CACHE.get_or_build("set-work", (path, state, threshold.args(), start), estimate)


def _checked(a, b, opts: dict):
    """The inputs opened, for options checked by :func:`daskjoin.options.check_options`;
    returns (threshold, gpu options, budget, input A, input B)."""
    in_a = open_set_input(a, "A")
    in_b = None if b is None else open_set_input(b, "B")
    return opts["threshold"], opts["gpu_options"], opts["memory_budget"], in_a, in_b


def _planned(checked, *, method, backend, client, partitions):
    """The plan and the inputs as its tasks read them (R x S: put in one token order)."""
    thr, options, budget, in_a, in_b = checked
    if in_b is not None:
        in_a, in_b = aligned_inputs(in_a, in_b)
    plan = _plan(in_a, in_b, thr, algorithm=method, backend=backend, client=client, budget=budget,
                 partitions=partitions, gpu_options=options)
    return plan, in_a, in_b


def plan_set_join(a, b=None, *, threshold, measure: str = "jaccard", method: str | None = None, backend: str = "auto",
                  memory_budget=None, partitions: int | None = None, gpu_options: dict | None = None,
                  client=None, algorithm: str | None = None) -> SetPlan:
    """Plan a set-similarity join without running it.

    Reads the sets' sizes (a store's ``offsets``) and, for R x S, the two vocabularies; a self-join on CPUs
    also its token frequencies and 1,024 sampled sets, to cut the plan by the filtering work (``explain()``).

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
    opts = check_options("sets", threshold=threshold, measure=measure, method=method, algorithm=algorithm,
                         backend=backend, memory_budget=memory_budget, partitions=partitions, gpu_options=gpu_options,
                         client=client, stacklevel=2)
    checked = _checked(a, b, opts)
    plan, _, _ = _planned(checked, method=opts["method"], backend=opts["backend"], client=resolve(client),
                          partitions=opts["partitions"])
    return plan


def set_similarity_join(a, b=None, *, threshold, measure: str = "jaccard", method: str | None = None,
                        backend: str = "auto", output: str = "pairs", client=None, out=None, overwrite: bool = False,
                        progress: bool = False, memory_budget=None, partitions: int | None = None,
                        gpu_options: dict | None = None, algorithm: str | None = None, resume: bool = False):
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
    client, out, overwrite, progress, memory_budget, resume
        As in :func:`daskjoin.similarity_join`.
    partitions : int, optional
        Number of size-range partitions (default: from the memory budget and the cluster's task threads,
        or its GPUs where the sets are verified on GPUs).
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
    opts = check_options("sets", threshold=threshold, measure=measure, method=method, algorithm=algorithm,
                         backend=backend, output=output, out=out, overwrite=overwrite, progress=progress,
                         memory_budget=memory_budget, partitions=partitions, gpu_options=gpu_options, client=client,
                         resume=resume, stacklevel=2)
    method, backend, output, partitions = opts["method"], opts["backend"], opts["output"], opts["partitions"]
    overwrite, progress = opts["overwrite"], opts["progress"]
    checked = _checked(a, b, opts)
    if out is not None:
        protected = {f"input {name}": x.source.path for name, x in (("A", checked[3]), ("B", checked[4]))
                     if x is not None}
        out = check_output(out, overwrite, protected, opts["resume"])
    client = resolve(client)
    sources = {}

    def make_plan(budget, recorded=None):
        thr, options, _, in_a, in_b = checked
        plan, in_a, in_b = _planned((thr, options, budget, in_a, in_b), method=method, backend=backend,
                                    client=client, partitions=partitions)
        sources[id(plan)] = (in_a.source, None if in_b is None else in_b.source)
        return plan

    if out is None:
        plan = make_plan(checked[2])
        job = SetJob.from_plan(plan, *sources[id(plan)])
        if output == "count":
            return graph.count(job, plan.blocks, client, progress=progress)
        return graph.to_dataframe(job, plan.blocks, client=client)

    def extra(plan):
        t = plan.threshold
        return {"measure": t.measure, "threshold": str(t.exact), "method": plan.algorithm,
                "algorithm": plan.algorithm, "selfjoin": plan.selfjoin}  # "algorithm": the old key, kept

    def record(plan):  # what a resumed run must match (a block's rows decide its part files)
        t = plan.threshold
        return join_record("sets", sources[id(plan)], partitioning="blocks", parts=plan.blocks,
                           fields=("index", "r", "s", "larger_partners"), measure=t.measure, threshold=str(t.exact),
                           selfjoin=plan.selfjoin, memory_budget=int(plan.budget))

    return write_join(out, overwrite, opts["resume"], checked[2], make_plan, record,
                      lambda plan, limit: SetJob.from_plan(plan, *sources[id(plan)]), extra, client, progress,
                      SetJoinResult)
