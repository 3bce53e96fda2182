"""Which Dask client runs a join: the one given, an address, the current one, or a local cluster."""
from __future__ import annotations

import atexit
import importlib.util
import os

_DEFAULT = {}


def local_cluster_options() -> dict:
    """One worker process, one task at a time: each task's Numba kernel uses every core."""
    return {
        "n_workers": 1,
        "threads_per_worker": 1,
        "processes": True,
        "dashboard_address": ":0" if importlib.util.find_spec("bokeh") else None,
        "memory_limit": 0,
    }


def _start_local():
    from distributed import Client, LocalCluster

    if "client" not in _DEFAULT:
        cluster = LocalCluster(**local_cluster_options())
        _DEFAULT["cluster"] = cluster
        _DEFAULT["client"] = Client(cluster, set_as_default=False)
        atexit.register(close_default)
    return _DEFAULT["client"]


def close_default() -> None:
    """Close the local cluster daskjoin started (if any)."""
    client = _DEFAULT.pop("client", None)
    cluster = _DEFAULT.pop("cluster", None)
    if client is not None:
        client.close()
    if cluster is not None:
        cluster.close()


def resolve_client(client=None, *, address: str | None = None):
    """``client`` if given; else a client of ``address``; else the current client; else a local cluster."""
    if client is not None:
        return client
    from distributed import Client, get_client

    address = address or os.environ.get("DASKJOIN_SCHEDULER")
    if address:
        return Client(address, set_as_default=False)
    try:
        return get_client()
    except ValueError:
        return _start_local()


class ClusterRunner:
    """What planning may ask of the cluster: run a function over items, build a sorted copy."""

    def __init__(self, client):
        self.client = client

    def map(self, func, items):
        if not items:
            return []
        return self.client.gather(self.client.map(func, items, pure=False))

    def sort(self, source, dim, stats, path, *, bucket_bytes):
        from .sort import sort_zarr

        return sort_zarr(source, dim, stats, path, self.client, bucket_bytes=bucket_bytes)
