"""What a join may use of its cluster: the workers, whether they see GPUs, the backend, a task's memory budget.

Shared by every join kind's planner (asked once per join, before any task runs).
"""
from __future__ import annotations

from ..caches import CACHE
from ..validation import InputError


def worker_info(client) -> dict:
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


#: worker hosts a client on this machine reaches as surely as the scheduler does
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def _local_cluster(client) -> bool:
    """Whether ``client`` belongs to a ``LocalCluster`` (or ``LocalCUDACluster``) object of this process."""
    cluster = getattr(client, "cluster", None)
    if cluster is None:
        return False
    try:
        from distributed import LocalCluster
    except ImportError:
        return False
    return isinstance(cluster, LocalCluster)


def gather_directly(client) -> bool:
    """Have ``client`` fetch results from the workers themselves where they are on this host; True if so.

    Through the scheduler (distributed's default) a frame of 16M pairs (320 MB) came from a
    ``LocalCluster`` worker in 1.3-2.3 s on the 2-core VM, directly in 0.17 s.  Only where the
    user's client left the choice open (``direct_to_workers=None``) and belongs to a ``LocalCluster``
    object of this process whose workers listen on loopback (a client that connected by address may
    reach a remote scheduler through a tunnel, where workers' loopback addresses are not its own);
    ``daskjoin.direct-gather`` True or False decides instead.  The client keeps the setting (its own
    later gathers and scatters go to the workers directly too).
    """
    from .. import config

    if getattr(client, "scheduler", None) is None or getattr(client, "direct_to_workers", False) is not None:
        return bool(getattr(client, "direct_to_workers", False))
    wanted = config.get("direct-gather")
    if wanted in (None, "auto"):  # a cluster object of this process (a client by address may be tunnelled)
        workers = worker_info(client) if _local_cluster(client) else {}
        wanted = bool(workers) and all(w.get("host") in LOOPBACK_HOSTS for w in workers.values())
    elif not isinstance(wanted, bool):
        raise InputError(f"daskjoin.direct-gather must be 'auto', True or False, got {wanted!r}")
    if wanted:
        client.direct_to_workers = True
    return wanted


def cluster_threads(client, workers: dict | None = None) -> int:
    """Task threads of the cluster (1 without one)."""
    workers = worker_info(client) if workers is None else workers
    return sum(w.get("nthreads", 1) for w in workers.values()) or 1


def task_slots(client, on_gpu: bool, workers: dict | None = None) -> int:
    """How many of a join's tasks its cluster runs at once, for planning (:func:`..planning.cost.parallel_split`).

    ``daskjoin.parallel-tasks`` where set to a number; else GPU tasks: the workers that see a GPU (one GPU
    task at a time each: ``GPU=1``); CPU tasks: the hosts, not the workers or threads (a task's Numba
    kernels already use every core of its host: on a 2-core VM two local workers sharing the cores made a
    cut 1.1M x 3-d count 1.7x slower); threads of this process: 1.
    """
    from .. import config

    wanted = config.get("parallel-tasks")
    if wanted not in (None, "auto"):
        try:
            if not isinstance(wanted, bool) and int(float(wanted)) >= 1 and int(float(wanted)) == float(wanted):
                return int(float(wanted))
        except (TypeError, ValueError):
            pass
        raise InputError(f"daskjoin.parallel-tasks must be 'auto' or a positive integer, got {wanted!r}")
    if getattr(client, "scheduler", None) is None:
        return 1
    workers = worker_info(client) if workers is None else workers
    if on_gpu:
        return max(1, sum(bool(seen) for seen in gpu_seen(client, workers).values()))
    return max(1, len({w.get("host") for w in workers.values()}))


def concurrent_tasks(client, job) -> int | None:
    """How many of ``job``'s tasks the cluster runs at once (None for threads of this process): its GPU
    workers for GPU tasks (one at a time each), else its task threads."""
    if getattr(client, "scheduler", None) is None:
        return None
    workers = worker_info(client)
    backend = getattr(job, "backend", "cpu")
    if backend != "cpu":
        seen = gpu_seen(client, workers)
        gpus = sum(bool(v) for v in seen.values())
        if gpus and (backend == "gpu" or all(seen.values())):
            return gpus
    return cluster_threads(client, workers)


def cluster_id(client) -> str | None:
    """The scheduler a plan is made for (part of the in-process plan cache key)."""
    scheduler = getattr(client, "scheduler", None)
    return getattr(scheduler, "address", None)


def gpu_seen(client, workers: dict | None = None) -> dict:
    """Worker address -> whether CuPy sees a CUDA device there; asked once per set of live workers."""
    from ..kernels.gpu_common import gpu_available

    if client is None:
        return {"local": gpu_available()}
    workers = worker_info(client) if workers is None else workers
    # workers do not gain or lose GPUs while alive: asked once per (client, set of workers)
    seen = CACHE.get("gpu-seen", (client.id, frozenset(workers)))
    if seen is None:
        seen = client.run(gpu_available)
        # keyed by the workers that answered: a worker that came or went meanwhile means asking again next time
        CACHE.put("gpu-seen", (client.id, frozenset(seen)), seen)
    return seen


def gpu_signature(client, workers: dict | None = None) -> str | None:
    """The one ``gpu_common.device_signature`` of every GPU worker (the bits of their cuBLAS products agree),
    or None where they differ or none sees a GPU."""
    seen = gpu_seen(client, workers)
    if not any(seen.values()):
        return None
    key = (getattr(client, "id", None), frozenset(seen))  # asked once per set of live workers, as gpu_seen
    signatures = CACHE.get("gpu-signatures", key)
    if signatures is None:
        answers = {"local": _signature_or_none()} if client is None else client.run(_signature_or_none)
        signatures = CACHE.put("gpu-signatures", key, {a: s for a, s in answers.items() if s})
    distinct = set(signatures.values())
    return distinct.pop() if len(distinct) == 1 else None


def gpu_memory(client, workers: dict | None = None) -> int:
    """Bytes of the smallest GPU the GPU workers see (0 where none sees one); asked once per set of live workers."""
    seen = gpu_seen(client, workers)
    if not any(seen.values()):
        return 0
    key = (getattr(client, "id", None), frozenset(seen))
    sizes = CACHE.get("gpu-memory", key)
    if sizes is None:
        sizes = CACHE.put("gpu-memory", key,
                          {"local": _memory_or_zero()} if client is None else client.run(_memory_or_zero))
    return min((v for v in sizes.values() if v), default=0)


def _memory_or_zero() -> int:
    from ..kernels.gpu_common import device_memory_bytes, gpu_available

    return device_memory_bytes() if gpu_available() else 0


def _signature_or_none():
    from ..kernels.gpu_common import device_signature, gpu_available

    return device_signature() if gpu_available() else None


def choose_backend(backend: str, client, workers: dict | None = None) -> tuple[str, bool]:
    """The backend and whether tasks will run on GPUs ('auto' picks per task; 'gpu' needs a GPU worker)."""
    if backend == "cpu":
        return backend, False
    seen = gpu_seen(client, workers)
    if backend == "gpu":
        if not any(seen.values()):
            raise InputError(
                "backend='gpu' is not available: no Dask worker sees a CUDA device through CuPy "
                "(install the 'gpu' extra and start GPU workers, e.g. `dask cuda worker`); "
                "use backend='cpu' or 'auto'"
            )
    return backend, bool(seen) and all(seen.values())


def auto_budget(client, workers: dict | None = None) -> int:
    """A quarter of the smallest worker memory per task thread, within [256 MiB, 16 GiB].

    Workers without a memory limit count the client host's memory (a local cluster).
    """
    import psutil

    per_thread = []
    for info in (worker_info(client) if workers is None else workers).values():
        limit = info.get("memory_limit") or psutil.virtual_memory().total
        per_thread.append(limit / max(1, info.get("nthreads", 1)))
    share = min(per_thread) if per_thread else psutil.virtual_memory().total
    return int(min(16 << 30, max(256 << 20, share / 4)))


#: the worker resource GPU workers declare (``dask cuda worker --resources GPU=1``, deploy/, :func:`.cluster.start_local_cuda`)
GPU_RESOURCE = "GPU"


def gpu_placement(client, job) -> dict:
    """Where a job's tasks may run, as ``client.map`` keywords: GPU tasks (``backend="gpu"``) only on workers
    that see a GPU.

    Workers that declare the resource ``GPU`` (deploy/'s compose and batch-job workers do) are asked
    for by resource, one GPU task at a time on each, so a restarted worker is used again.  Where every
    worker sees a GPU nothing needs saying.  A cluster mixing GPU and CPU workers that declare no
    resource is refused: tasks pinned to addresses would wait forever for a GPU worker that died and
    came back on another port.  CPU and ``auto`` tasks run anywhere (an ``auto`` task picks its
    backend on the worker it lands on), so a cluster may mix both.
    """
    if getattr(client, "scheduler", None) is None or getattr(job, "backend", "cpu") != "gpu":
        return {}
    workers = worker_info(client)
    if any((w.get("resources") or {}).get(GPU_RESOURCE) for w in workers.values()):
        return {"resources": {GPU_RESOURCE: 1}}
    seen = gpu_seen(client, workers)
    if all(seen.values()):
        return {}
    raise InputError(
        "backend='gpu' on a cluster of GPU and CPU workers needs the GPU workers to declare the resource "
        f"{GPU_RESOURCE}=1 (`dask cuda worker ... --resources {GPU_RESOURCE}=1`, or "
        "daskjoin.execution.cluster.start_local_cuda()), so that GPU tasks go only to them; "
        "or use backend='auto' (each task on the kernel its worker has)")
