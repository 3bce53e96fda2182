"""What a join takes of a local cluster: the cores of a worker running one task, and the path its pairs come back by.

The README's first example, ``similarity_join(x, eps).compute()`` on
``LocalCluster(n_workers=1, threads_per_worker=2)``, has one partition: its task must use both
cores (not the one core a thread of two would get), and its frame must come to the client from
the worker directly (through the scheduler 16M pairs took ~10x as long on the 2-core VM).
"""
from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

import daskjoin as dj
from daskjoin import config
from daskjoin.cores import usable_cores
from daskjoin.execution import resources, task

from oracle import oracle_self_pairs


@pytest.fixture(scope="module")
def two_thread_client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=":0",
                      memory_limit=0) as cl, Client(cl) as c:
        yield c


def _threads(tasks=None):
    import numba

    task._set_threads(tasks)
    return numba.get_num_threads(), usable_cores()


def _threads_beside_another(deadline_s: float = 30.0):
    """Wait until two tasks execute on this worker (and the other saw it too), then take the Numba share
    of a task whose join has one task: the tasks executing count too."""
    import numba
    from distributed import get_worker

    state = get_worker().state
    stop = time.monotonic() + deadline_s
    while state.executing_count < 2 and time.monotonic() < stop:
        time.sleep(0.01)
    task._set_threads(1)  # told it is its join's only task, but another task executes beside it
    seen = state.executing_count
    time.sleep(0.3)
    return numba.get_num_threads(), usable_cores(), seen


def test_the_only_task_of_a_join_takes_every_core(two_thread_client):
    threads, cores = two_thread_client.submit(_threads, 1, pure=False).result()
    assert threads == cores


def test_tasks_of_a_larger_join_share_the_cores(two_thread_client):
    threads, cores = two_thread_client.submit(_threads, 5, pure=False).result()
    assert threads == max(1, cores // 2)
    threads, cores = two_thread_client.submit(_threads, None, pure=False).result()  # not told: its threads
    assert threads == max(1, cores // 2)


def test_tasks_executing_at_once_share_the_cores(two_thread_client):
    futures = [two_thread_client.submit(_threads_beside_another, pure=False) for _ in range(2)]
    for threads, cores, executing in two_thread_client.gather(futures):
        assert executing == 2
        assert threads == max(1, cores // 2)


@pytest.mark.parametrize("memory_budget, partitions", [(None, 1), ("4MiB", None)])
def test_a_frames_tasks_are_told_how_many_the_join_has(two_thread_client, memory_budget, partitions):
    """Through the real graph: each task of a frame carries its join's task count (what _set_threads divides by)."""
    x = np.random.default_rng(5).random((20000, 2))
    df = dj.similarity_join(x, eps=0.02, client=two_thread_client, memory_budget=memory_budget)
    if partitions is not None:
        assert df.npartitions == partitions
    else:
        assert df.npartitions > 1
    tasks = [v for v in dict(df.__dask_graph__()).values() if getattr(v, "func", None) is task.partition_frame]
    assert len(tasks) == df.npartitions
    assert all(t.kwargs == {"tasks": df.npartitions} for t in tasks)


def test_numba_threads_setting_wins(two_thread_client):
    import dask

    def run():
        with dask.config.set({"daskjoin.numba-threads": 1}):
            return _threads(1)[0]

    assert two_thread_client.submit(run, pure=False).result() == 1


def test_a_frame_on_a_local_cluster_is_gathered_from_the_workers(two_thread_client):
    two_thread_client.direct_to_workers = None
    x = np.random.default_rng(3).random((3000, 2))
    df = dj.similarity_join(x, eps=0.03, client=two_thread_client)
    assert two_thread_client.direct_to_workers is True
    got = df.compute()
    oi, oj, _ = oracle_self_pairs(x, 0.03)
    assert len(oi) > 1000
    np.testing.assert_array_equal(got.i.to_numpy(), oi)  # the oracle's (i, j) order: a task's order
    np.testing.assert_array_equal(got.j.to_numpy(), oj)


def test_a_client_by_address_is_left_alone(two_thread_client):
    """A client that connected by address may reach a remote scheduler through a tunnel, where the workers'
    loopback addresses are not its own: only a LocalCluster object of this process counts as local."""
    from distributed import Client

    with Client(two_thread_client.scheduler.address) as by_address:
        assert by_address.cluster is None
        assert resources.gather_directly(by_address) is False
        assert by_address.direct_to_workers is None
    assert resources._local_cluster(two_thread_client)


def test_the_clients_own_choice_is_kept(two_thread_client):
    two_thread_client.direct_to_workers = False
    try:
        assert resources.gather_directly(two_thread_client) is False
        assert two_thread_client.direct_to_workers is False
    finally:
        two_thread_client.direct_to_workers = None


def _fake_client(hosts):
    workers = {f"tcp://{h}:{4000 + k}": {"host": h, "nthreads": 1} for k, h in enumerate(hosts)}
    return SimpleNamespace(scheduler=object(), direct_to_workers=None,
                           cluster=SimpleNamespace(scheduler_info={"workers": workers}),
                           scheduler_info=lambda: {"workers": workers})


@pytest.mark.parametrize("hosts, expected", [
    (["127.0.0.1", "127.0.0.1"], True),
    (["127.0.0.1", "10.0.0.7"], False),  # a worker elsewhere: the client may not reach it
    (["10.0.0.7"], False),
    ([], False),
])
def test_direct_gather_only_where_every_worker_is_on_loopback(hosts, expected, monkeypatch):
    monkeypatch.setattr(resources, "_local_cluster", lambda client: True)
    client = _fake_client(hosts)
    assert resources.gather_directly(client) is expected
    assert client.direct_to_workers is (True if expected else None)


def test_direct_gather_setting(monkeypatch):
    import dask

    monkeypatch.setattr(resources, "_local_cluster", lambda client: True)
    with dask.config.set({"daskjoin.direct-gather": False}):
        client = _fake_client(["127.0.0.1"])
        assert resources.gather_directly(client) is False and client.direct_to_workers is None
    with dask.config.set({"daskjoin.direct-gather": True}):
        client = _fake_client(["10.0.0.7"])
        assert resources.gather_directly(client) is True and client.direct_to_workers is True
    with dask.config.set({"daskjoin.direct-gather": "sometimes"}):
        with pytest.raises(dj.InputError, match="direct-gather"):
            resources.gather_directly(_fake_client(["127.0.0.1"]))
    assert config.get("direct-gather") == "auto"


def test_no_client_and_in_process_runner_are_untouched():
    from daskjoin.execution.inprocess import in_process

    assert resources.gather_directly(None) is False
    assert resources.gather_directly(in_process()) is False
