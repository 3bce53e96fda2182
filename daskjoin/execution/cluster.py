"""Which Dask client runs a join: the one given, an address, the current one, a batch-job cluster, or a local cluster."""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import threading

import numpy as np

logger = logging.getLogger(__name__)

_DEFAULT = {}
_CONNECTED = {}


def local_cluster_options() -> dict:
    """One worker process, one task at a time: each task's Numba kernel uses every core.

    The dashboard (or, without bokeh, the scheduler's HTTP endpoints) takes a free port: a
    fixed 8787 that another cluster holds would only print a warning and move anyway.
    """
    return {"n_workers": 1, "processes": True, "memory_limit": 0, **_worker_defaults()}


def _worker_defaults() -> dict:
    """What every local cluster daskjoin starts has: one task thread a worker, a free dashboard port, and the
    worker setup (workers ignore a terminal's Ctrl-C, restarted ones too; the user's own preloads kept)."""
    import dask.config

    return {"threads_per_worker": 1, "dashboard_address": ":0",
            "preload": [*dask.config.get("distributed.worker.preload", []), "daskjoin.execution.worker_setup"]}


def _become_default(make_cluster):
    """Start a cluster (workers spawned ignoring Ctrl-C, quiet if asked) and make it daskjoin's default,
    closed at exit; returns its client."""
    from distributed import Client

    with _workers_ignore_sigint(), _quiet_spawn():
        cluster = make_cluster()
    _DEFAULT["cluster"] = cluster
    _DEFAULT["client"] = Client(cluster, set_as_default=False)
    atexit.register(close_default)
    return _DEFAULT["client"]


_QUIET = {"workers": False}
_QUIET_ENV = "DASK_LOGGING__DISTRIBUTED"


def quiet_local_workers() -> None:
    """Workers of a local cluster daskjoin starts from now on log only critical events (unless the user set a level).

    What they would log (a failed task's traceback, shutdown notices) reaches the caller
    anyway, with the task's exception; used by the CLI, which prints one line and keeps the
    traceback in a log file.  Batch-job workers (dask-jobqueue) are not affected: their logs
    are the only diagnostics there.
    """
    _QUIET["workers"] = True


@contextlib.contextmanager
def _quiet_spawn():
    """Spawned local workers read their log level from the environment they start with."""
    if not _QUIET["workers"] or _QUIET_ENV in os.environ:
        yield
        return
    os.environ[_QUIET_ENV] = "critical"
    try:
        yield
    finally:
        os.environ.pop(_QUIET_ENV, None)


@contextlib.contextmanager
def _workers_ignore_sigint():
    """Worker processes spawned inside ignore SIGINT: Ctrl-C in a terminal reaches the whole
    process group, and only the client should react (it closes the cluster itself)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def start_local():
    """daskjoin's local cluster (``local_cluster_options``), started on first use and closed at exit."""
    from distributed import LocalCluster

    if "client" not in _DEFAULT:
        return _become_default(lambda: LocalCluster(**local_cluster_options()))
    return _DEFAULT["client"]


def start_local_cuda(rmm_pool_size=None, **overrides):
    """A client of one dask-cuda worker per GPU of this machine (``LocalCUDACluster``), each with one task
    thread and the resource ``GPU=1``, by which GPU tasks are placed (:func:`.resources.gpu_placement`).

    ``rmm_pool_size`` (bytes, "40GB", or a fraction of the device such as 0.8): each worker's CuPy allocates
    from an RMM pool of that size (``rmm-cu13``; one reservation up front instead of CuPy's own pool growing
    and being given back between tasks).  ``overrides`` go to ``LocalCUDACluster`` (e.g.
    ``CUDA_VISIBLE_DEVICES="0,1"``).  The cluster is daskjoin's default until :func:`close_default` (also at exit).
    """
    from ..validation import InputError

    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as exc:
        raise InputError("a local GPU cluster needs dask-cuda: pip install 'daskjoin[gpu]'") from exc
    from .resources import GPU_RESOURCE

    options = {**_worker_defaults(), "resources": {GPU_RESOURCE: 1}, **overrides}
    if rmm_pool_size is not None:
        try:
            import rmm  # noqa: F401 - the workers import it; its absence is told here, in one line
        except ImportError as exc:
            raise InputError("an RMM pool needs the rmm package: pip install 'daskjoin[gpu-rmm]'") from exc
        options.update(rmm_pool_size=_pool_size(rmm_pool_size), rmm_allocator_external_lib_list=["cupy"])
    close_default()
    return _become_default(lambda: LocalCUDACluster(**options))


def _pool_size(value):
    """A pool size as dask-cuda takes it: bytes, a size string, or a fraction of the device (0 < f <= 1)."""
    from ..validation import InputError

    try:
        number = float(value)
    except (TypeError, ValueError):
        return value  # "40GB": dask-cuda parses it (and says what is wrong with it)
    if not number > 0:
        raise InputError(f"an RMM pool size must be positive (bytes, e.g. 40GB, or a fraction of the device "
                         f"such as 0.8), got {value!r}")
    return number if number <= 1 else int(number)


def start_jobqueue(kind: str, jobs: int, **overrides):
    """A client of ``jobs`` batch jobs of ``kind`` ('slurm' or 'pbs'), configured in dask config.

    The cluster is daskjoin's default until :func:`close_default`, which cancels the jobs
    (also at exit), so that an interrupted CLI run leaves nothing in the queue.
    """
    from distributed import Client

    from .jobqueue import make_cluster

    close_default()
    cluster = make_cluster(kind, jobs, **overrides)
    _DEFAULT["cluster"] = cluster
    _DEFAULT["client"] = Client(cluster, set_as_default=False)
    atexit.register(close_default)
    return _DEFAULT["client"]


def close_default() -> None:
    """Close the cluster daskjoin started (a local cluster or batch jobs), if any."""
    client = _DEFAULT.pop("client", None)
    cluster = _DEFAULT.pop("cluster", None)
    if client is not None:
        client.close()
    if cluster is not None:
        try:
            cluster.close()
        except Exception as exc:  # noqa: BLE001 - e.g. jobs the batch system refused; nothing left to cancel
            logger.warning("closing %s: %s: %s", type(cluster).__name__, type(exc).__name__, exc)


def configured_address() -> str | None:
    """The scheduler named by dask config's ``scheduler-address`` (env ``DASK_SCHEDULER_ADDRESS``), if any."""
    import dask.config

    return dask.config.get("scheduler-address", None) or None


def _connect(address: str):
    """One client per address and process, so repeated joins do not pile up connections.

    A ``tls://`` address takes its certificates from dask config (``distributed.comm.tls.*``); without
    them the refusal says so before any connection is tried."""
    from distributed import Client

    if address.startswith("tls://"):
        _check_tls_config(address)
    client = _CONNECTED.get(address)
    if client is None or client.status not in ("running", "connecting"):
        client = _CONNECTED[address] = Client(address, set_as_default=False)
    return client


def _check_tls_config(address: str) -> None:
    from distributed.security import Security

    if Security().get_connection_args("client").get("ssl_context") is None:
        from ..validation import InputError

        raise InputError(
            f"the scheduler {address} speaks TLS, and no client certificate is configured: set dask config's "
            "distributed.comm.tls.ca-file, .client.cert and .client.key (e.g. DASK_DISTRIBUTED__COMM__TLS__CA_FILE, "
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT, DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY), or pass a Client "
            "made with security=... to the API")


def resolve_client(client=None, *, address: str | None = None):
    """The client that runs a join, first match wins.

    ``client``; a client of ``address`` or of ``$DASKJOIN_SCHEDULER``; the current client;
    a client of dask config's ``scheduler-address`` (how the compose notebook finds its
    scheduler); else threads of this process (:mod:`.inprocess`: no cluster to start, nothing
    shipped; :func:`start_local` gives a local cluster instead).
    """
    if client is not None:
        return client
    address = address or os.environ.get("DASKJOIN_SCHEDULER")
    if address:
        return _connect(address)
    if "distributed" in sys.modules:  # a current client can exist only where distributed was imported
        from distributed import get_client

        try:
            return get_client()
        except ValueError:
            pass
    configured = configured_address()
    if configured:
        return _connect(configured)
    from .inprocess import in_process

    return in_process()


class ClusterRunner:
    """What planning may ask of the cluster: run a function over items, build a sorted copy."""

    def __init__(self, client):
        self.client = client

    def map(self, func, items):
        if not items:
            return []
        from .inprocess import InProcess

        if isinstance(self.client, InProcess):  # a pass over data in this process: every core reads
            from concurrent.futures import ThreadPoolExecutor

            # the first item alone: it loads what every item needs (compiled kernels) once, not once per thread
            first = [func(items[0])]
            with ThreadPoolExecutor(max(1, os.cpu_count() or 1), thread_name_prefix="daskjoin-pass") as pool:
                return first + list(pool.map(func, items[1:]))
        return self.client.gather(self.client.map(func, items, pure=False))

    #: bytes per row a sorted copy built in memory holds besides two copies of the row: keys, their
    #: sorted copy, the radix sort's keys and permutations (8 bytes each)
    HERE_ROW_EXTRA = 48

    def sort(self, source, dim, stats, path, *, bucket_bytes):
        from .inprocess import InProcess
        from .sort import sort_zarr, sort_zarr_here

        # in this process, from memory, where it fits a task's budget (four buckets) and the workers run on this
        # host (the in-process runner, a local cluster: the same disk and memory; a parallel radix sort here
        # beats a sample sort spread over a few local workers: 20M x 3-d on a one-GPU-worker cluster took
        # 27-29 s that way); else a sample sort on the cluster
        row = 2 * source.d * np.dtype(source.dtype).itemsize + self.HERE_ROW_EXTRA
        if source.n * row <= 4 * bucket_bytes and (isinstance(self.client, InProcess) or workers_here(self.client)):
            return sort_zarr_here(source, dim, path)
        return sort_zarr(source, dim, stats, path, self.client, bucket_bytes=bucket_bytes)


def workers_here(client) -> bool:
    """Whether every worker of ``client``'s cluster runs on this host (a local cluster)."""
    import socket

    from .resources import worker_info

    try:
        workers = worker_info(client)
        names = {"127.0.0.1", "localhost", "::1", socket.gethostname()}
        names.add(socket.gethostbyname(socket.gethostname()))
    except Exception:  # noqa: BLE001 - an address that cannot be resolved: not known to be here
        return False
    hosts = {(w.get("host") or "").strip("[]") for w in workers.values()}
    return bool(hosts) and hosts <= names
