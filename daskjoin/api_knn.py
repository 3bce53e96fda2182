"""The kNN-join's entry points: validate -> plan -> execute (the same path as the ε-join's)."""
from __future__ import annotations

import dataclasses

from .api import _open_inputs, check_output, device_limit, protected_paths, write_join
from .execution import graph
from .execution.cluster import ClusterRunner
from .execution.resources import auto_budget, choose_backend, cluster_threads, worker_info
from .kinds.knn import KnnJob
from .options import KNN_OUTPUT, check_gpu_options, check_options, resolve
from .planning.knn import KnnPlan, choose_knn_method, make_knn_plan, wants_knn_share
from .run_record import join_record


def _plan(checked, *, k: int, method: str, backend: str, client, gpu_options=None) -> KnnPlan:
    _, src_a, src_b, budget = checked
    workers = worker_info(client) if budget == "auto" or backend != "cpu" else None
    if budget == "auto":
        budget = auto_budget(client, workers)
    resolved, on_gpus = choose_backend(backend, client, workers)
    # in this process a task's kernels use every core: one task searches the data once; on a cluster, a
    # task per thread
    in_process = getattr(client, "scheduler", None) is None
    parallelism = 1 if in_process else cluster_threads(client, workers)
    options = ()
    chosen = None
    # the method follows from d and the backend: its options checked before any data pass (on CPUs from 7-d,
    # where auto's choice rests on the planning sample, against every method's, then the chosen one's)
    if gpu_options:
        gpus = on_gpus or resolved == "gpu"
        chosen, _ = choose_knn_method(method, src_a.d, gpus)
        if wants_knn_share(method, src_a.d, gpus):
            chosen = "auto"
        label = "gpu_options" if method == chosen else \
            f"gpu_options (--option; method 'auto' chose {chosen!r} for {src_a.d}-d rows)"
        options = tuple(sorted(check_gpu_options("knn", chosen, gpu_options, label).items()))
    plan = make_knn_plan(src_a, src_b, k, method=method, backend=resolved, memory_budget=budget,
                         runner=ClusterRunner(client), parallelism=parallelism, gpus=on_gpus)
    if options and plan.method != chosen:  # auto's choice on CPUs can rest on the sample
        label = f"gpu_options (--option; method 'auto' chose {plan.method!r} for {src_a.d}-d rows)"
        options = tuple(sorted(check_gpu_options("knn", plan.method, dict(options), label).items()))
    return dataclasses.replace(plan, gpu_options=options) if options else plan


def _checked(a, b, opts):
    # the ε-join's opening and checks of the inputs (eps is not an option here: a placeholder passes through)
    return _open_inputs(a, b, {**opts, "eps": None})


def plan_knn(a, b=None, *, k, method: str = "auto", backend: str = "auto", memory_budget=None, client=None,
             gpu_options: dict | None = None) -> KnnPlan:
    """Plan a kNN-join without running it (one cached statistics pass per input).

    Returns a frozen :class:`~daskjoin.planning.knn.KnnPlan`; ``print(plan.explain())`` tells what will
    run and why.

    Examples
    --------
    >>> import numpy as np, daskjoin as dj
    >>> plan = dj.plan_knn(np.random.default_rng(0).random((1000, 3)), k=8)
    >>> plan.method, plan.ntasks
    ('grid', 1)
    """
    opts = check_options("knn", k=k, method=method, backend=backend, memory_budget=memory_budget, client=client,
                         gpu_options=gpu_options, stacklevel=2)
    checked = _checked(a, b, opts)
    return _plan(checked, k=opts["k"], method=opts["method"], backend=opts["backend"], client=resolve(client),
                 gpu_options=opts["gpu_options"])


def knn_join(a, b=None, *, k, method: str = "auto", backend: str = "auto", output: str = "pairs", client=None,
             out=None, overwrite: bool = False, memory_budget=None, progress: bool = False, resume: bool = False,
             gpu_options: dict | None = None):
    """Exact k-nearest-neighbour join: for every row ``i`` of ``a``, its ``k`` nearest rows ``j`` of ``b``.

    With ``b=None`` a self-join: the k nearest other rows of ``a`` (a row is never its own neighbour;
    its duplicates are, at distance 0).  Distances are decided as in :func:`similarity_join`: the
    float64 sum, in dimension order, of the squared differences of the stored values.  Ties are
    broken by the smaller ``j``, so the result is one set, the same on every method, backend,
    partitioning and cluster size.

    Parameters
    ----------
    a, b : Zarr path, zarr.Array, numpy, dask or cupy array
        Points as rows, of the same dimensionality.
    k : int
        Neighbours per row: 1 up to the rows of ``b`` (of ``a`` minus one in a self-join).
    method : {"auto", "grid", "brute", "szl"}
        ``grid``: cells about the k-th distance wide, searched in growing rings per row (low
        dimensions); ``brute``: every pair, filtered by float32 products from 4 dimensions (high
        dimensions; on GPUs by the tensor cores from 16); ``szl``: LSS's shifted Z-order lists, a radius from each row's Z-neighbours then
        one interval of a list. ``auto`` picks by dimensionality; ``plan_knn(...).explain()`` says
        which and why.
    backend : {"auto", "cpu", "gpu"}
        ``auto``: each task on its worker's GPU when CuPy sees one, else on the CPU (the same result).
    output : {"pairs"}
        The rows; a kNN-join has exactly ``len(a) * k`` of them.
    client, out, overwrite, memory_budget, progress, resume
        As for :func:`similarity_join`.
    gpu_options : dict, optional
        For ``brute`` on GPUs: ``filter`` ("auto", "fp32", "int8", "fp16"): the products that filter the
        candidates (the tensor cores on an integer grid, or float32 GEMM; every filter gives the same
        rows, see docs/knn.md).  Not taken on the CPU.

    Returns
    -------
    dask.dataframe.DataFrame or JoinResult
        Columns ``i``, ``j`` (int64), ``dist`` (float32, the Euclidean distance) and ``rank``
        (int32, 1 for the nearest), rows ordered by ``(i, j)`` (``.sort_values(["i", "rank"])`` for
        rank order); or, with ``out``, the Parquet result.

    Examples
    --------
    >>> import numpy as np, daskjoin as dj
    >>> x = np.array([[0.0], [1.0], [3.0], [3.0]])
    >>> dj.knn_join(x, k=1).compute().values.tolist()
    [[0.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0], [2.0, 3.0, 0.0, 1.0], [3.0, 2.0, 0.0, 1.0]]
    """
    opts = check_options("knn", k=k, method=method, backend=backend, out=out, overwrite=overwrite,
                         progress=progress, memory_budget=memory_budget, client=client, resume=resume,
                         gpu_options=gpu_options, stacklevel=2)
    KNN_OUTPUT(output, "output", "knn", opts)  # "pairs" only: a kNN-join's count is len(a) * k
    checked = _checked(a, b, opts)
    if out is not None:
        out = check_output(out, opts["overwrite"], protected_paths(checked[1], checked[2]), opts["resume"])
    client = resolve(client)
    plan_options = dict(k=opts["k"], method=opts["method"], backend=opts["backend"], client=client,
                        gpu_options=opts["gpu_options"])
    if out is None:
        plan = _plan(checked, **plan_options)
        job = KnnJob.from_plan(plan, device_limit(checked[-1], plan))
        return graph.to_dataframe(job, plan.partitions, client=client)

    def extra(plan):
        return {"k": plan.k, "method": plan.method, "selfjoin": plan.selfjoin, "kind": "knn"}

    def record(plan):  # what a resumed run must match (a query partition's rows decide its part files)
        return join_record("knn", (plan.a, plan.b), partitioning="queries", parts=plan.partitions,
                           fields=("index", "a"), k=int(plan.k), selfjoin=plan.selfjoin,
                           memory_budget=int(plan.memory_budget))

    return write_join(out, opts["overwrite"], opts["resume"], checked[-1],
                      lambda budget, recorded: _plan((*checked[:-1], budget), **plan_options), record, KnnJob.from_plan, extra,
                      client, opts["progress"])
