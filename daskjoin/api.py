"""The public entry points: validate -> plan -> execute."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .caches import CACHE
from .execution import graph
from .execution.cluster import ClusterRunner
from .execution.resources import (auto_budget, choose_backend, cluster_id, gpu_memory, gpu_seen, gpu_signature,
                                  task_slots, worker_info)
from .io.parquet_out import OutputRun, check_replaceable
from .io.zarr_in import ZarrSource, open_points
from .kinds.epsilon import JoinJob
from .options import BACKENDS, GPU_OPTIONS as _GPU_OPTIONS, OUTPUTS, check_gpu_options, check_options, resolve
from .planning.cost import choose_method, wants_grid_share
from .planning.plan import Plan
from .planning.planner import make_plan
from .planning.cache import cache_locations
from .run_record import join_record
from .validation import InputError, check_output_apart, check_output_path, check_same_dims

#: GPU tuning options each method's driver accepts (the table: :data:`daskjoin.options.GPU_OPTIONS`)
GPU_OPTIONS = {method: tuple(keys) for method, keys in _GPU_OPTIONS["epsilon"].items()}


@dataclass(frozen=True)
class JoinResult:
    """What a join written to Parquet returns."""

    path: str
    pairs: int
    files: int
    plan_seconds: float
    run_seconds: float
    plan: Plan
    bytes: int = 0
    #: seconds summed over tasks: ``compute_s`` (kernels, transfers, sort), ``write_s`` (Parquet encoding
    #: and writing, on writer threads beside the kernels)
    tasks: dict = field(default_factory=dict)
    #: "new"; "resumed" (an interrupted run's finished partitions reused: ``tasks["resumed_partitions"]``);
    #: "finished" (``resume=True`` found this join already committed: nothing was run)
    status: str = "new"

    @classmethod
    def from_manifest(cls, path: str, manifest: dict, plan, plan_seconds: float, run_seconds: float,
                      status: str = "new"):
        return cls(path=path, pairs=manifest["rows"], files=len(manifest["files"]), plan_seconds=plan_seconds,
                   run_seconds=run_seconds, plan=plan, bytes=int(manifest.get("bytes", 0)),
                   tasks=dict(manifest.get("tasks", {})), status=status)

    @property
    def seconds(self) -> float:
        return self.plan_seconds + self.run_seconds

    def read(self):
        """The pairs as a Dask DataFrame read back from the Parquet files."""
        import dask.dataframe as dd

        return dd.read_parquet(os.path.join(self.path, "part-*.parquet"))

    def __str__(self) -> str:
        from dask.utils import format_bytes

        if self.status == "finished":
            return (f"nothing to do: {self.path} already holds this join ({self.pairs:,} pairs, {self.files} files, "
                    f"{format_bytes(self.bytes)}, + _SUCCESS)")
        rate = self.pairs / self.run_seconds if self.run_seconds else float("inf")
        inside = ""
        if self.tasks:
            inside = (f"; in tasks {self.tasks.get('compute_s', 0):.2f} s kernels and sort, "
                      f"{self.tasks.get('write_s', 0):.2f} s Parquet writing on writer threads")
        if self.status == "resumed":
            inside += f"; resumed: {self.tasks.get('resumed_partitions', 0)} partitions of the interrupted run reused"
        return (
            f"{self.pairs:,} pairs in {self.seconds:.2f} s (plan {self.plan_seconds:.2f} s, join and write "
            f"{self.run_seconds:.2f} s{inside}; {rate:,.0f} pairs/s) -> {self.path} "
            f"({self.files} files, {format_bytes(self.bytes)}, + _SUCCESS)"
        )


def check_join_inputs(a, b=None, *, eps, method: str = "auto", partitioning: str = "auto", backend: str = "auto",
                      memory_budget=None):
    """Every check that needs no cluster (raises :class:`InputError`); returns (eps, A, B, budget).

    Runs before any client is resolved or started, so bad input costs nothing.  The options
    are checked by :func:`daskjoin.options.check_options`.
    """
    opts = check_options("epsilon", eps=eps, method=method, partitioning=partitioning, backend=backend,
                         memory_budget=memory_budget)
    return _open_inputs(a, b, opts)


def _open_inputs(a, b, opts):
    """(eps, A, B, budget) of options already checked: the inputs opened and checked."""
    src_a = open_points(a, "A")
    src_b = None if b is None else open_points(b, "B")
    if src_b is not None:
        check_same_dims(src_a.d, src_b.d)
    return opts["eps"], src_a, src_b, opts["memory_budget"]


def protected_paths(*sources) -> dict:
    """What an output must stay apart from: each Zarr input's store and its cache locations."""
    protected = {}
    for name, source in zip("AB", sources):
        if isinstance(source, ZarrSource):
            protected[f"input {name}"] = source.store_path
            for k, path in enumerate(cache_locations(source.label)):
                protected[f"the cache of input {name}" + (f" ({k + 1})" if k else "")] = path
    return protected


def check_output(out, overwrite: bool, protected: dict, resume: bool = False) -> str:
    """Every check of a Parquet output path that needs no cluster: exists, apart from the inputs, replaceable."""
    check_output_apart(out, protected)  # first: the more telling refusal where both apply
    out = check_output_path(out, overwrite, resume)
    if overwrite and os.path.lexists(out):
        check_replaceable(out)
    return out




def _one_backend(backend: str, on_gpu: bool, client, workers) -> str | None:
    """The backend every task will run on ("gpu": every worker sees a GPU, or GPU tasks are placed on GPU
    workers, with ":" and the devices' one signature where they agree; "cpu": asked for, or no worker sees
    one), or None where a task's worker decides (a mixed cluster under 'auto')."""
    if backend == "gpu" or on_gpu:
        signature = gpu_signature(client, workers)  # brute force's shares need devices that agree bit for bit
        return f"gpu:{signature}" if signature else "gpu"
    if backend == "cpu" or not any(gpu_seen(client, workers).values()):
        return "cpu"
    return None


def _share_backend(recorded, backend: str, on_gpu: bool, client, workers, parallelism: int) -> str | None:
    """The backend whose driver may cut the plan into query shares: this cluster's one backend ("auto"), or
    the one a resumed run recorded, which this cluster's tasks must run on."""
    if recorded == "auto":
        return _one_backend(backend, on_gpu, client, workers) if parallelism > 1 else None
    if recorded is None:  # a run cut into blocks, or not cut
        return None
    here = _one_backend(backend, on_gpu, client, workers) or ""
    # a grid share names its backend, a brute-force share the GPU's signature too (its bits must match)
    if (here if ":" in recorded else here.split(":")[0]) != recorded:
        raise InputError(f"this output's run was cut into query shares of the {recorded} driver, and not every "
                         f"task of this cluster would run on {recorded}: resume it where every worker does "
                         f"(backend={recorded!r}), or write it again with overwrite=True")
    return recorded


def _plan(checked, *, method, partitioning, backend, client, gpu_options=None, count_only=False,
          parallelism=None, share_backend="auto", device_memory=None) -> Plan:
    """The plan of checked inputs on ``client``'s cluster; ``parallelism`` (default: the cluster's task slots),
    ``share_backend`` (default: the backend every task of this cluster runs on, where one does) and
    ``device_memory`` (default: the smallest GPU's where tasks run on GPUs under the automatic budget, which
    counts host memory; 0 under a given budget, which bounds a task on the device too) are given where a
    resumed run must get the partitions it recorded."""
    eps, src_a, src_b, budget = checked
    workers = worker_info(client) if budget == "auto" or backend != "cpu" else None
    automatic = budget == "auto"
    if automatic:
        budget = auto_budget(client, workers)
    resolved_backend, on_gpu = choose_backend(backend, client, workers)
    if device_memory is None:
        device_memory = gpu_memory(client, workers) if on_gpu and automatic else 0
    if parallelism is None:
        parallelism = task_slots(client, on_gpu, workers)
    options = ()
    # the method follows from d, the sizes and the backend: its options checked before any data pass (on the CPU
    # from 7-d, where auto's choice rests on the planning sample, against every method's, then the chosen one's)
    if gpu_options:
        chosen, _ = choose_method(method, src_a.d, gpu=on_gpu,
                                  row_pairs=float(src_a.n) * float((src_a if src_b is None else src_b).n))
        if method == "auto" and wants_grid_share(src_a.d, on_gpu):
            chosen = "auto"  # auto's choice rests on the planning sample: any method's options now, its own once planned
        label = "gpu_options" if method == chosen else \
            f"gpu_options (--option; method 'auto' chose {chosen!r} for {src_a.d}-d rows)"
        options = tuple(sorted(check_gpu_options("epsilon", chosen, gpu_options, label).items()))
    plan = make_plan(src_a, src_b, eps, method=method, partitioning=partitioning, backend=resolved_backend,
                     memory_budget=budget, runner=ClusterRunner(client), gpu=on_gpu, cluster=cluster_id(client),
                     count_only=count_only, parallelism=parallelism,
                     share_backend=_share_backend(share_backend, resolved_backend, on_gpu, client, workers, parallelism),
                     device_memory=device_memory)
    if options and plan.method != chosen:  # on the CPU, auto's choice can rest on the sample's grid share
        label = f"gpu_options (--option; method 'auto' chose {plan.method!r} for {src_a.d}-d rows)"
        options = tuple(sorted(check_gpu_options("epsilon", plan.method, dict(options), label).items()))
    if options:
        key = (id(plan), options)
        hit = CACHE.get("plan-options", key)
        if hit is None or hit[0] is not plan:  # the same cached plan gets the same derived plan (and graph)
            hit = CACHE.put("plan-options", key, (plan, Plan(**{**plan.__dict__, "gpu_options": options})))
        plan = hit[1]
    return plan


def plan_join(a, b=None, *, eps, method: str = "auto", partitioning: str = "auto", backend: str = "auto",
              memory_budget=None, client=None, output: str = "pairs", gpu_options: dict | None = None) -> Plan:
    """Plan an ε-join without running it.

    Reads only metadata, one cached statistics pass and a sample (plus, for
    ``partitioning="slabs"``, a one-time sorted copy of each input).

    Parameters
    ----------
    a, b : Zarr path, zarr.Array, numpy, dask or cupy array
        Points as rows.  ``b=None`` plans a self-join.
    eps : float
        Join radius (pairs with Euclidean distance ``<= eps``).
    method : {"auto", "grid", "brute", "szl", "nlj", "directory"}
    partitioning : {"auto", "chunk_pairs", "slabs"}
    backend : {"auto", "cpu", "gpu"}
        ``auto``: each task runs on its worker's GPU when CuPy sees one, else on the CPU.
    memory_budget : str or int, optional
        Memory one task may use (default ``daskjoin.memory-budget``: "auto", a quarter of the
        smallest worker's memory per thread, between 256 MiB and 16 GiB).
    client : distributed.Client, optional
    output : {"pairs", "count"}
        What the join will return: a count's tasks hold no pairs, so its partitions are sized
        for the rows alone (often one task).
    gpu_options : dict, optional
        As for :func:`similarity_join`; the plan records them (``explain()`` shows, e.g., the GPU
        brute-force filter they choose).

    Returns
    -------
    Plan
        Frozen; ``print(plan.explain())`` tells what will run and why.

    Examples
    --------
    >>> import numpy as np, daskjoin as dj
    >>> x = np.random.default_rng(0).random((1000, 2))
    >>> plan = dj.plan_join(x, eps=0.05, memory_budget="64MB")
    >>> plan.ntasks
    1
    """
    opts = check_options("epsilon", eps=eps, method=method, partitioning=partitioning, backend=backend,
                         memory_budget=memory_budget, client=client, output=output, gpu_options=gpu_options,
                         stacklevel=2)
    checked = _open_inputs(a, b, opts)
    return _plan(checked, method=opts["method"], partitioning=opts["partitioning"], backend=opts["backend"],
                 client=resolve(client), count_only=opts["output"] == "count", gpu_options=opts["gpu_options"])


def similarity_join(a, b=None, *, eps, method: str = "auto", partitioning: str = "auto", backend: str = "auto",
                    output: str = "pairs", with_distance: bool = True, memory_budget=None, client=None,
                    out=None, overwrite: bool = False, progress: bool = False, gpu_options: dict | None = None,
                    resume: bool = False):
    """Exact ε-join: every pair of points within Euclidean distance ``eps``.

    A pair is reported iff its float64 squared distance (summed in dimension
    order) is ``<= eps * eps`` (rounded in float64): the ``<=`` rule of
    ``cKDTree.query_pairs``, with daskjoin's own summation order (see
    docs/exactness.md for where scipy and scikit-learn can differ at the last
    ulp), identical on every method, partitioning and cluster size.  Self-join
    (``b=None``): pairs ``i < j``, each once.  A×B: ``i`` indexes A, ``j`` indexes B.

    Parameters
    ----------
    a, b : Zarr path, zarr.Array, numpy, dask or cupy array
        Points as rows (float32/float64; other real dtypes are converted).
    eps : float
        Join radius, positive and finite.
    method : {"auto", "grid", "brute", "szl", "nlj", "directory"}
        ``auto`` picks by dimensionality (see ``plan.explain()``).
    partitioning : {"auto", "chunk_pairs", "slabs"}
    backend : {"auto", "cpu", "gpu"}
        ``auto``: each task runs on its worker's GPU when CuPy sees one, else on the CPU;
        ``gpu`` refuses to start unless some worker sees a CUDA device.
    output : {"pairs", "count"}
        ``count`` returns the exact number of pairs as an int, materialising none.
    with_distance : bool
        Include the ``dist`` column (float32).
    memory_budget : str or int, optional
        Memory one task may use; partitions are sized to fit it (default "auto": a quarter
        of the smallest worker's memory per thread, between 256 MiB and 16 GiB).
    client : distributed.Client, optional
        Default: the current client, else a local cluster started on first use.
    out : path, optional
        Write Parquet here (one file per partition, then ``_SUCCESS``) and return a :class:`JoinResult`.
    overwrite : bool
        Replace an existing ``out``.
    resume : bool
        Continue an interrupted run to ``out`` (Ctrl-C, a killed process): only the partitions it
        did not finish are computed.  Refused, naming what differs, where the inputs or parameters
        are not those of the interrupted run; a join already committed at ``out`` is not run again
        (its result is returned).  With the default memory budget the interrupted run's is used.
    progress : bool
        Show a progress bar while tasks run (count and Parquet output).
    gpu_options : dict, optional
        Tuning of the GPU driver, used where a task runs on a GPU: for ``grid``
        ``threads_per_point`` (1), ``work_queue`` (True), ``sort_by_workload`` (False),
        ``max_dims`` (6); for ``brute`` ``filter`` ("auto", "fp32", "int8", "fp16": the products that
        filter candidates, see docs/algorithms.md), ``tile`` (256, fp32 filter only), ``batch_bytes``.

    Returns
    -------
    dask.dataframe.DataFrame, int or JoinResult
        Lazy pairs (columns ``i``, ``j``, ``dist``); the count; or the Parquet result.

    Examples
    --------
    >>> import numpy as np, daskjoin as dj
    >>> x = np.array([[0.0, 0.0], [0.5, 0.0], [3.0, 0.0]])
    >>> dj.similarity_join(x, eps=0.5).compute().values.tolist()
    [[0.0, 1.0, 0.5]]
    >>> dj.similarity_join(x, eps=3.0, output="count")
    3
    """
    opts = check_options("epsilon", eps=eps, method=method, partitioning=partitioning, backend=backend,
                         output=output, with_distance=with_distance, out=out, overwrite=overwrite, progress=progress,
                         memory_budget=memory_budget, gpu_options=gpu_options, client=client, resume=resume,
                         stacklevel=2)
    output, with_distance, overwrite, progress = opts["output"], opts["with_distance"], opts["overwrite"], opts["progress"]
    checked = _open_inputs(a, b, opts)
    if out is not None:
        out = check_output(out, overwrite, protected_paths(checked[1], checked[2]), opts["resume"])
    client = resolve(client)
    plan_options = dict(method=opts["method"], partitioning=opts["partitioning"], backend=opts["backend"],
                        client=client, gpu_options=opts["gpu_options"])
    if out is None:
        plan = _plan(checked, **plan_options, count_only=output == "count")
        limit = device_limit(checked[-1], plan)
        if output == "count":
            return graph.count(JoinJob.from_plan(plan, False, limit), plan.partitions, client, progress=progress)
        return graph.to_dataframe(JoinJob.from_plan(plan, with_distance, limit), plan.partitions, client=client,
                                  cache_key=(id(plan), with_distance), owner=plan)
    def extra(plan):
        return {"eps": plan.eps, "method": plan.method, "partitioning": plan.partitioning, "selfjoin": plan.selfjoin}

    def record(plan):  # what a resumed run must match (a partition's rows decide its part files)
        shared = ("share",) if any(p.share for p in plan.partitions) else ()  # (older records: no such field)
        return join_record("epsilon", (plan.a, plan.b), partitioning=plan.partitioning, parts=plan.partitions,
                           fields=("index", "a", "b", "self_part") + shared, eps=float(plan.eps), selfjoin=plan.selfjoin,
                           with_distance=bool(with_distance), memory_budget=int(plan.memory_budget),
                           **({"parallelism": int(plan.parallelism)} if plan.parallelism > 1 else {}),
                           **({"shares": plan.partitions[0].share[2]} if shared else {}),
                           **({"device_memory": int(plan.device_memory)} if plan.device_memory else {}))

    def plan_for(budget, recorded):  # a resumed run is cut for the workers it was first planned for (no key: 1),
        # into the query shares of the backend it recorded (no key: blocks, as before shares existed)
        if not recorded:
            return _plan((*checked[:-1], budget), **plan_options)
        return _plan((*checked[:-1], budget), **plan_options, parallelism=recorded.get("parallelism", 1),
                     share_backend=recorded.get("shares"), device_memory=recorded.get("device_memory", 0))

    return write_join(out, overwrite, opts["resume"], checked[-1], plan_for, record,
                      lambda plan, limit: JoinJob.from_plan(plan, with_distance, limit), extra, client, progress)


def write_join(out, overwrite: bool, resume: bool, budget, make_plan, record, make_job, extra, client,
               progress: bool, result_cls=None):
    """A join to Parquet, for every kind: the output owned from before planning (a second writer fails at
    once), the plan (``make_plan(budget, recorded)``: ``recorded`` is the record of an earlier run of this
    output, or {}), the run's record (``record(plan)``: what a resumed run must match), the tasks of the
    partitions not already finished (``make_job(plan, device_limit)``), the commit; returns ``result_cls``
    (default :class:`JoinResult`) of the manifest."""
    result_cls = result_cls or JoinResult
    with OutputRun(out, overwrite, resume=resume) as run:
        start = time.perf_counter()
        recorded = previous_record(run)
        plan = make_plan(resumed_budget(budget, recorded), recorded)
        planned = time.perf_counter()
        status = run.start(record(plan))
        if status == "finished":
            return result_cls.from_manifest(out, run.close_finished(), plan, planned - start, 0.0, status)
        manifest = graph.write_parquet(make_job(plan, device_limit(budget, plan)), _partitions(plan), client, run,
                                       progress=progress, extra=extra(plan))
    return result_cls.from_manifest(out, manifest, plan, planned - start, time.perf_counter() - planned, status)


def _partitions(plan):
    """A plan's tasks: its ``partitions`` (ε, kNN) or ``blocks`` (sets)."""
    return plan.partitions if hasattr(plan, "partitions") else plan.blocks


def device_limit(budget, plan) -> int:
    """Device memory a GPU task may size its buffers from: the memory budget where one was given (a task
    planned for 256 MB stays near 256 MB on the device too); 0 with the automatic budget, which is
    reckoned from host memory (GPU tasks then size their buffers from the device memory free)."""
    return 0 if budget == "auto" else int(getattr(plan, "memory_budget", None) or plan.budget)


def previous_record(run: OutputRun) -> dict:
    """The record of the interrupted (or finished) run of this output, {} where there is none."""
    found = run.previous if run.previous is not None else (run.finished or {}).get("record")
    return dict(found or {})


def resumed_budget(budget, recorded: dict):
    """The memory budget an interrupted (or finished) run recorded, where this one asks for the default: the
    same budget gives the same partitions, whose finished files are then reused."""
    if budget != "auto" or recorded.get("memory_budget") is None:
        return budget
    return int(recorded["memory_budget"])
