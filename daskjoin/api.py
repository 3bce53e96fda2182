"""The public entry points: validate -> plan -> execute."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from . import config
from .execution import graph
from .execution.cluster import ClusterRunner, resolve_client
from .io.parquet_out import OutputRun, check_replaceable
from .io.zarr_in import ZarrSource, open_points
from .kinds.epsilon import JoinJob
from .kernels import METHODS
from .planning.plan import Plan
from .planning.planner import PARTITIONINGS, make_plan
from .planning.cache import cache_locations
from .validation import InputError, check_eps, check_output_apart, check_output_path, check_same_dims

OUTPUTS = ("pairs", "count")
#: GPU tuning options each method's driver accepts (defaults come from benchmarks/bench_gpu.py)
GPU_OPTIONS = {
    "grid": ("threads_per_point", "sort_by_workload", "work_queue", "max_dims"),
    "brute": ("tile", "batch_bytes"),
}
BACKENDS = ("auto", "cpu", "gpu")


@dataclass(frozen=True)
class JoinResult:
    """What a join written to Parquet returns."""

    path: str
    pairs: int
    files: int
    plan_seconds: float
    run_seconds: float
    plan: Plan

    @property
    def seconds(self) -> float:
        return self.plan_seconds + self.run_seconds

    def read(self):
        """The pairs as a Dask DataFrame read back from the Parquet files."""
        import dask.dataframe as dd

        return dd.read_parquet(os.path.join(self.path, "part-*.parquet"))

    def __str__(self) -> str:
        rate = self.pairs / self.run_seconds if self.run_seconds else float("inf")
        return (
            f"{self.pairs:,} pairs in {self.seconds:.2f} s (plan {self.plan_seconds:.2f} s, join {self.run_seconds:.2f} s, "
            f"{rate:,.0f} pairs/s) -> {self.path} ({self.files} files + _SUCCESS)"
        )


def _choice(value, allowed, name):
    if value not in allowed:
        raise InputError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def _budget(memory_budget):
    """Bytes, or "auto" (resolved against the cluster's workers once a client is known)."""
    raw = config.get("memory-budget") if memory_budget is None else memory_budget
    if raw == "auto":
        return raw
    try:
        value = config.parse_bytes(raw)
    except (ValueError, TypeError) as exc:
        raise InputError(f"memory_budget must be a size such as '2GB' or a number of bytes, got {raw!r}") from exc
    if value <= 0:
        raise InputError(f"memory_budget must be positive, got {raw!r}")
    return value


#: Whether each worker sees a GPU, per (client id, worker addresses): workers do not gain or lose GPUs while alive.
_GPU_SEEN: dict = {}


def _workers(client) -> dict:
    """Address -> scheduler info of each worker.

    A client of a cluster object (LocalCluster, LocalCUDACluster, jobqueue) reads the worker
    list that the cluster keeps current; others ask the scheduler (one round trip).
    """
    if client is None:
        return {}
    known = getattr(getattr(client, "cluster", None), "scheduler_info", None)
    if isinstance(known, dict) and known.get("workers"):
        return dict(known["workers"])
    return client.scheduler_info().get("workers", {})


def _gpu_seen(client, workers: dict | None = None) -> dict:
    """Worker address -> whether CuPy sees a CUDA device there; asked once per set of live workers."""
    from .kernels.gpu_common import gpu_available

    if client is None:
        return {"local": gpu_available()}
    workers = _workers(client) if workers is None else workers
    seen = _GPU_SEEN.get((client.id, frozenset(workers)))
    if seen is None:
        seen = client.run(gpu_available)
        if len(_GPU_SEEN) >= 64:
            _GPU_SEEN.clear()
        # keyed by the workers that answered: a worker that came or went meanwhile means asking again next time
        _GPU_SEEN[(client.id, frozenset(seen))] = seen
    return seen


def _backend(backend: str, client, workers: dict | None = None) -> tuple[str, bool]:
    """The backend and whether tasks will run on GPUs ('auto' picks per task; 'gpu' needs a GPU worker)."""
    _choice(backend, BACKENDS, "backend")
    if backend == "cpu":
        return backend, False
    seen = _gpu_seen(client, workers)
    if backend == "gpu":
        if not any(seen.values()):
            raise InputError(
                "backend='gpu' is not available: no Dask worker sees a CUDA device through CuPy "
                "(install the 'gpu' extra and start GPU workers, e.g. `dask cuda worker`); "
                "use backend='cpu' or 'auto'"
            )
    return backend, bool(seen) and all(seen.values())


def check_join_inputs(a, b=None, *, eps, method: str = "auto", partitioning: str = "auto", backend: str = "auto",
                      memory_budget=None):
    """Every check that needs no cluster (raises :class:`InputError`); returns (eps, A, B, budget).

    Runs before any client is resolved or started, so bad input costs nothing.
    """
    eps = check_eps(eps)
    _choice(method, ("auto",) + METHODS, "method")
    _choice(partitioning, PARTITIONINGS, "partitioning")
    _choice(backend, BACKENDS, "backend")
    budget = _budget(memory_budget)
    src_a = open_points(a, "A")
    src_b = None if b is None else open_points(b, "B")
    if src_b is not None:
        check_same_dims(src_a.d, src_b.d)
    return eps, src_a, src_b, budget


def protected_paths(*sources) -> dict:
    """What an output must stay apart from: each Zarr input's store and its cache locations."""
    protected = {}
    for name, source in zip("AB", sources):
        if isinstance(source, ZarrSource):
            protected[f"input {name}"] = source.store_path
            for k, path in enumerate(cache_locations(source.label)):
                protected[f"the cache of input {name}" + (f" ({k + 1})" if k else "")] = path
    return protected


def check_output(out, overwrite: bool, protected: dict) -> str:
    """Every check of a Parquet output path that needs no cluster: exists, apart from the inputs, replaceable."""
    check_output_apart(out, protected)  # first: the more telling refusal where both apply
    out = check_output_path(out, overwrite)
    if overwrite and os.path.lexists(out):
        check_replaceable(out)
    return out


def _auto_budget(client, workers: dict | None = None) -> int:
    """A quarter of the smallest worker memory per task thread, within [256 MiB, 16 GiB].

    Workers without a memory limit count the client host's memory (a local cluster).
    """
    import psutil

    per_thread = []
    for info in (_workers(client) if workers is None else workers).values():
        limit = info.get("memory_limit") or psutil.virtual_memory().total
        per_thread.append(limit / max(1, info.get("nthreads", 1)))
    share = min(per_thread) if per_thread else psutil.virtual_memory().total
    return int(min(16 << 30, max(256 << 20, share / 4)))


_WITH_OPTIONS: dict = {}  # (id(plan), gpu options) -> (plan, plan with those options)


def _cluster_id(client) -> str | None:
    """The scheduler a plan is made for (part of the in-process plan cache key)."""
    scheduler = getattr(client, "scheduler", None)
    return getattr(scheduler, "address", None)


def _gpu_options(options, method: str) -> tuple:
    if not options:
        return ()
    allowed = set(GPU_OPTIONS["grid"] + GPU_OPTIONS["brute"]) if method == "auto" else set(GPU_OPTIONS[method])
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InputError(f"gpu_options {unknown} are not options of method {method!r}; allowed: {sorted(allowed)}")
    return tuple(sorted(options.items()))


def _plan(checked, *, method, partitioning, backend, client, gpu_options=None) -> Plan:
    eps, src_a, src_b, budget = checked
    workers = _workers(client) if budget == "auto" or backend != "cpu" else None
    if budget == "auto":
        budget = _auto_budget(client, workers)
    resolved_backend, on_gpu = _backend(backend, client, workers)
    plan = make_plan(src_a, src_b, eps, method=method, partitioning=partitioning, backend=resolved_backend,
                     memory_budget=budget, runner=ClusterRunner(client), gpu=on_gpu, cluster=_cluster_id(client))
    if gpu_options:
        options = _gpu_options(gpu_options, plan.method)
        key = (id(plan), options)
        hit = _WITH_OPTIONS.get(key)
        if hit is None or hit[0] is not plan:  # the same cached plan gets the same derived plan (and graph)
            if len(_WITH_OPTIONS) >= 16:
                _WITH_OPTIONS.clear()
            hit = _WITH_OPTIONS[key] = (plan, Plan(**{**plan.__dict__, "gpu_options": options}))
        plan = hit[1]
    return plan


def plan_join(a, b=None, *, eps, method: str = "auto", partitioning: str = "auto", backend: str = "auto",
              memory_budget=None, client=None) -> Plan:
    """Plan an ε-join without running it.

    Reads only metadata, one cached statistics pass and a sample (plus, for
    ``partitioning="slabs"``, a one-time sorted copy of each input).

    Parameters
    ----------
    a, b : Zarr path, zarr.Array, numpy, dask or cupy array
        Points as rows.  ``b=None`` plans a self-join.
    eps : float
        Join radius (pairs with Euclidean distance ``<= eps``).
    method : {"auto", "grid", "brute"}
    partitioning : {"auto", "chunk_pairs", "slabs"}
    backend : {"auto", "cpu", "gpu"}
        ``auto``: each task runs on its worker's GPU when CuPy sees one, else on the CPU.
    memory_budget : str or int, optional
        Memory one task may use (default ``daskjoin.memory-budget``: "auto", a quarter of the
        smallest worker's memory per thread, between 256 MiB and 16 GiB).
    client : distributed.Client, optional

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
    checked = check_join_inputs(a, b, eps=eps, method=method, partitioning=partitioning, backend=backend,
                                memory_budget=memory_budget)
    return _plan(checked, method=method, partitioning=partitioning, backend=backend, client=resolve_client(client))


def similarity_join(a, b=None, *, eps, method: str = "auto", partitioning: str = "auto", backend: str = "auto",
                    output: str = "pairs", with_distance: bool = True, memory_budget=None, client=None,
                    out=None, overwrite: bool = False, progress: bool = False, gpu_options: dict | None = None):
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
    method : {"auto", "grid", "brute"}
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
    progress : bool
        Show a progress bar while tasks run (count and Parquet output).
    gpu_options : dict, optional
        Tuning of the GPU driver, used where a task runs on a GPU: for ``grid``
        ``threads_per_point`` (1), ``work_queue`` (True), ``sort_by_workload`` (False),
        ``max_dims`` (6); for ``brute`` ``tile`` (256), ``batch_bytes``.

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
    _choice(output, OUTPUTS, "output")
    if gpu_options is not None and not isinstance(gpu_options, dict):
        raise InputError(f"gpu_options must be a dict such as {{'threads_per_point': 4}}, got {gpu_options!r}")
    _gpu_options(gpu_options, method if method in GPU_OPTIONS else "auto")
    if out is not None and output == "count":
        raise InputError("output='count' returns a number; it cannot be combined with out=PATH")
    checked = check_join_inputs(a, b, eps=eps, method=method, partitioning=partitioning, backend=backend,
                                memory_budget=memory_budget)
    if out is not None:
        out = check_output(out, overwrite, protected_paths(checked[1], checked[2]))
    client = resolve_client(client)
    plan_options = dict(method=method, partitioning=partitioning, backend=backend, client=client,
                        gpu_options=gpu_options)
    if out is None:
        plan = _plan(checked, **plan_options)
        if output == "count":
            return graph.count(JoinJob.from_plan(plan, False), plan.partitions, client, progress=progress)
        return graph.to_dataframe(JoinJob.from_plan(plan, with_distance), plan.partitions,
                                  cache_key=(id(plan), with_distance), owner=plan)
    with OutputRun(out, overwrite) as run:  # owned from before planning: a second writer fails at once
        start = time.perf_counter()
        plan = _plan(checked, **plan_options)
        planned = time.perf_counter()
        extra = {"eps": plan.eps, "method": plan.method, "partitioning": plan.partitioning, "selfjoin": plan.selfjoin}
        manifest = graph.write_parquet(JoinJob.from_plan(plan, with_distance), plan.partitions, client, run,
                                       progress=progress, extra=extra)
    return JoinResult(
        path=out, pairs=manifest["rows"], files=len(manifest["files"]), plan_seconds=planned - start,
        run_seconds=time.perf_counter() - planned, plan=plan,
    )
