"""Shared fixtures: one real multi-process Dask cluster per session and a Zarr writer.

The cluster is a ``distributed.LocalCluster`` with two worker *processes* (one
thread each), so every integration test ships its graph, its sources and its
kernels to spawned workers exactly as a user's cluster would.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from joinhelpers import QUIET_DASK_ENV, write_zarr  # noqa: E402

# in the environment, so that spawned workers and CLI subprocesses take it too
for _key, _value in QUIET_DASK_ENV.items():
    os.environ.setdefault(_key, _value)
if "dask" in sys.modules:  # read at dask's import: an earlier import (a plugin) reads it again
    import dask.config

    dask.config.refresh()


#: files of long tests (subprocesses, clusters of their own, fresh compilations): run first, so that the
#: two test processes of ``make test`` end together on the many short ones instead of one waiting on a
#: two-minute test at the end (the suite's wall time is what CI and a newcomer wait for)
LONG_FIRST = ("test_kernels_boundscheck.py", "test_worker_loss.py", "test_deploy.py", "test_resume.py",
              "test_notebooks.py", "test_cli_safety.py", "test_cli.py", "test_cli_sets.py", "test_in_process.py",
              "test_knn_adversarial.py")


def pytest_collection_modifyitems(items):
    rank = {name: k for k, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FIRST)))  # stable: order kept within a file


@pytest.fixture(scope="session")
def cluster():
    from distributed import LocalCluster

    cl = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", memory_limit=0,
    )
    yield cl
    cl.close()


@pytest.fixture(scope="session")
def client(cluster):
    """A client of the session cluster, also the default client (``get_client()``)."""
    from distributed import Client

    c = Client(cluster)
    # warm the workers: import daskjoin and load the cached Numba kernels once
    c.run(_warm_worker)
    yield c
    c.close()


def _warm_worker():
    """Best effort only: a failure here shows up in the tests themselves."""
    try:
        import numpy as np

        from daskjoin.kernels import get_kernel

        x = np.random.default_rng(0).random((50, 2))
        for method in ("grid", "brute", "szl"):
            k = get_kernel(method, "cpu")
            k.self_join(x, 0.1)
            k.cross_join(x, x, 0.1)
            k.self_count(x, 0.1)
        return True
    except Exception:  # noqa: BLE001
        return False


@pytest.fixture
def zarr_writer(tmp_path):
    """``make(data, name="x", chunk_rows=64) -> path`` writing under this test's tmp_path."""
    counter = {"n": 0}

    def make(data, name: str | None = None, chunk_rows: int = 64) -> str:
        counter["n"] += 1
        name = name or f"arr{counter['n']}"
        return write_zarr(tmp_path / f"{name}.zarr", data, chunk_rows)

    return make
