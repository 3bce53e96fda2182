"""Joins that outlive their workers: real Nanny worker processes killed mid-run (SIGKILL).

A cluster of four single-threaded worker processes joins a Zarr store to Parquet in a few hundred
tasks; one worker with a task in flight is killed when a quarter, half and nine tenths of the
partitions are recorded as finished.  The run must commit exactly the oracle's pairs, each once,
with ``_SUCCESS`` counting them and no temporaries left.  On a one-worker cluster (daskjoin's own
local default) the worker holding an in-memory input dies with it: the input is sent again.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import daskjoin as dj
from daskjoin.io import commit, parquet_out
from joinhelpers import exact_pairs, killable_cluster, unique_sorted_pairs, write_zarr

pytestmark = pytest.mark.integration

EPS = 0.004
BUDGET = "1MiB"


def _check_output(out, x, eps=EPS) -> None:
    manifest = json.loads(open(os.path.join(out, "_SUCCESS")).read())
    names = sorted(n for n in os.listdir(out) if n != "_SUCCESS")
    assert names == [e["file"] for e in manifest["files"]], "files other than the committed parts"
    frames = [pq.read_table(os.path.join(out, n)).to_pandas() for n in names]
    assert [len(f) for f in frames] == [e["rows"] for e in manifest["files"]]
    got, expected = unique_sorted_pairs(pd.concat(frames, ignore_index=True)), exact_pairs(x, eps)
    assert got.shape == expected.shape and (got == expected).all()
    assert manifest["rows"] == len(expected)


def _leftovers(folder) -> list[str]:
    found = []
    for root, dirs, files in os.walk(folder):
        found += [os.path.join(root, n) for n in dirs + files if commit.TEMP_MARK in n or n.endswith(".lock")]
    return found


def _finished(folder) -> int:
    """Partitions the run in ``folder`` has recorded as finished so far."""
    for name in os.listdir(folder):
        log = os.path.join(folder, name, parquet_out.DONE_LOG)
        if ".tmp-run-" in name and os.path.exists(log):
            with open(log) as f:
                return sum(1 for _ in f)
    return 0


def _kill_a_busy_worker(client, ended=lambda: False) -> bool:
    """SIGKILL a worker with a task in flight; False where the work ``ended()`` before one could be found."""
    pids = client.run(os.getpid)
    deadline = time.time() + 30
    while time.time() < deadline and not ended():
        busy = [addr for addr, keys in client.processing().items() if keys and addr in pids]
        if busy:
            os.kill(pids[busy[0]], signal.SIGKILL)
            return True
        time.sleep(0.005)
    assert ended(), "no worker was busy"
    return False


def _join_and_kill(client, run, kill_when, attempts: int = 3):
    """``run()`` on a thread; one busy worker killed once ``kill_when()`` holds; the result (or its error).

    Where the join ends before the kill can land (the last tasks of a fast run), it is run again
    (``run`` must be repeatable: outputs written with overwrite), at most ``attempts`` times.
    """
    for _ in range(attempts):
        result = {}

        def target():
            try:
                result["value"] = run()
            except BaseException as exc:  # noqa: BLE001 - reported below
                result["error"] = exc

        thread = threading.Thread(target=target)
        thread.start()
        deadline = time.time() + 120
        while not kill_when() and not result:
            assert time.time() < deadline, "the join never reached the point of the kill"
            time.sleep(0.005)
        killed = not result and _kill_a_busy_worker(client, ended=lambda: bool(result))
        thread.join(timeout=300)
        assert not thread.is_alive()
        if "error" in result:
            raise result["error"]
        if killed:
            return result["value"]
    raise AssertionError(f"the join ended before a worker could be killed, {attempts} times")


@pytest.fixture(scope="module")
def four_workers():
    with killable_cluster(4) as client:
        yield client


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("loss")
    x = np.random.default_rng(21).random((400_000, 2))
    return x, write_zarr(folder / "x.zarr", x, 10_000)


KILLS = [(at, trial) for trial in range(4) for at in (0.25, 0.5, 0.9)]


@pytest.mark.parametrize("at, trial", [pytest.param(at, trial, marks=[] if (at, trial) == (0.5, 0) else
                                                    [pytest.mark.slow]) for at, trial in KILLS], ids=lambda v: str(v))
def test_a_worker_killed_mid_run_loses_nothing(four_workers, store, tmp_path, at, trial):
    """12 kills in all (one in the default run, all with ``-m slow``): at 25%, 50% and 90% of the partitions."""
    client = four_workers
    x, path = store
    plan = dj.plan_join(path, eps=EPS, memory_budget=BUDGET, client=client)
    assert plan.ntasks >= 150
    out = tmp_path / "pairs.parquet"
    result = _join_and_kill(client, lambda: dj.similarity_join(path, eps=EPS, memory_budget=BUDGET, client=client,
                                                               out=out, overwrite=True),
                            lambda: _finished(tmp_path) >= at * plan.ntasks)
    assert result.files >= plan.ntasks
    _check_output(out, x)
    assert _leftovers(tmp_path) == []
    assert len(client.scheduler_info()["workers"]) == 4  # the nanny restarted the killed worker


@pytest.fixture(scope="module")
def one_worker():
    """daskjoin's own local cluster shape: one worker process."""
    with killable_cluster(1) as client:
        yield client


def _wait_for_workers(client, n):
    client.wait_for_workers(n, timeout=60)


def test_in_memory_input_survives_the_death_of_the_only_worker(one_worker, tmp_path):
    """The scattered job dies with its worker: it is sent again to the restarted one, for Parquet and count."""
    client = one_worker
    x = np.random.default_rng(22).random((200_000, 2))
    assert x.nbytes > 1 << 20  # scattered, not embedded in the graph
    out = tmp_path / "pairs.parquet"
    _join_and_kill(client, lambda: dj.similarity_join(x, eps=EPS, memory_budget="512KiB", client=client, out=out,
                                                      overwrite=True),
                   lambda: _finished(tmp_path) >= 20)
    _check_output(out, x)
    assert _leftovers(tmp_path) == []
    _wait_for_workers(client, 1)

    count = _join_and_kill(client, lambda: dj.similarity_join(x, eps=EPS, memory_budget="128KiB", client=client,
                                                              output="count"),
                           lambda: any(client.processing().values()))
    assert count == len(exact_pairs(x, EPS))
    _wait_for_workers(client, 1)


def test_set_join_input_survives_the_death_of_the_only_worker(one_worker, tmp_path, monkeypatch):
    from daskjoin.execution import graph
    from set_oracle import oracle_join_fast

    monkeypatch.setattr(graph, "SCATTER_BYTES", 0)  # these small sets are scattered as a large input would be
    client = one_worker
    rng = np.random.default_rng(23)
    records = [sorted(set(rng.integers(0, 400, rng.integers(3, 30)).tolist())) for _ in range(6000)]
    out = tmp_path / "sets.parquet"
    _join_and_kill(client, lambda: dj.set_similarity_join(records, threshold=0.5, client=client, out=out,
                                                         partitions=40, overwrite=True),
                   lambda: _finished(tmp_path) >= 3)
    frames = [pq.read_table(out / n).to_pandas() for n in sorted(os.listdir(out)) if n.startswith("part-")]
    got = pd.concat(frames, ignore_index=True)
    assert not got.duplicated(["i", "j"]).any()
    assert {(int(i), int(j)) for i, j in got[["i", "j"]].to_numpy()} == set(oracle_join_fast(records, threshold=0.5))
    assert _leftovers(tmp_path) == []
    _wait_for_workers(client, 1)


def test_lazy_frame_of_an_in_memory_input_survives_a_worker_death(four_workers):
    """A frame's graph holds the scattered job: a copy on every worker survives the loss of one."""
    client = four_workers
    x = np.random.default_rng(24).random((150_000, 2))
    frame = dj.similarity_join(x, eps=EPS, memory_budget="256KiB", client=client)
    assert frame.npartitions >= 50
    future = client.compute(frame)
    deadline = time.time() + 60
    while not client.processing() or not any(client.processing().values()):
        assert time.time() < deadline
        time.sleep(0.01)
    time.sleep(0.5)
    assert _kill_a_busy_worker(client, ended=future.done), "the frame was computed before a worker could be killed"
    got = unique_sorted_pairs(future.result(timeout=300))
    expected = exact_pairs(x, EPS)
    assert got.shape == expected.shape and (got == expected).all()
    _wait_for_workers(client, 4)
