"""Joins with no Dask cluster (threads of this process), the parallel Parquet writer, caches across processes.

Behaviour only: what runs where, what is written, what is left after a failure; never timing.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import dask
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import daskjoin as dj
from daskjoin.execution import cluster as cluster_mod
from daskjoin.execution.inprocess import InProcess
from daskjoin.io import parquet_out
from joinhelpers import frame_triple, oracle, write_zarr
from oracle import assert_same_pairs, oracle_self_count

ROOT = Path(__file__).resolve().parents[1]
EPS = 0.06


@pytest.fixture
def no_cluster(monkeypatch):
    """No current client, no configured scheduler, and starting a local cluster fails the test."""
    import distributed

    def no_client(*args, **kwargs):
        raise ValueError("no client")

    def refuse(*args, **kwargs):
        raise AssertionError("a local cluster was started")

    monkeypatch.setattr(distributed, "get_client", no_client)
    monkeypatch.setattr(cluster_mod, "start_local", refuse)
    monkeypatch.delenv("DASKJOIN_SCHEDULER", raising=False)
    with dask.config.set({"scheduler-address": None}):
        yield


def _points(seed=0, n=2500, d=3):
    return np.random.default_rng(seed).random((n, d))


def _parts(path) -> list[str]:
    return sorted(p for p in os.listdir(path) if parquet_out.PART_RE.match(p))


def _read(path) -> pd.DataFrame:
    return pd.concat([pq.read_table(os.path.join(path, p)).to_pandas() for p in _parts(path)], ignore_index=True)


def test_without_a_cluster_the_join_runs_in_this_process(no_cluster, tmp_path, monkeypatch):
    """Frame, count and Parquet of a multi-task slab plan (its sorted copy built here) all equal the oracle."""
    from daskjoin.execution import sort as sort_mod

    built = []
    here = sort_mod.sort_zarr_here
    monkeypatch.setattr(sort_mod, "sort_zarr_here", lambda *a, **k: built.append(1) or here(*a, **k))
    x = _points()
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=300)
    assert isinstance(cluster_mod.resolve_client(), InProcess)
    common = dict(eps=EPS, partitioning="slabs", memory_budget="256KiB")
    plan = dj.plan_join(path, **common)
    assert plan.ntasks >= 3 and built == [1]
    expected = oracle(x, None, EPS)
    assert dj.similarity_join(path, output="count", **common) == expected[0].size
    got = dj.similarity_join(path, **common).compute()
    assert_same_pairs(frame_triple(got), expected, a=x, eps=EPS)
    res = dj.similarity_join(path, out=tmp_path / "out.parquet", progress=True, **common)
    assert res.pairs == expected[0].size and res.bytes > 0 and set(res.tasks) == {"compute_s", "write_s"}
    back = _read(tmp_path / "out.parquet")
    assert_same_pairs(frame_triple(back), expected, a=x, eps=EPS)
    assert back.equals(got.reset_index(drop=True))  # the frame's rows in the files' order: sorted by (i, j)


def test_in_process_and_cluster_write_the_same_bytes(no_cluster, tmp_path, client):
    x = _points(1)
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=250)
    common = dict(eps=EPS, memory_budget="256KiB", partitioning="chunk_pairs")
    dj.similarity_join(path, out=tmp_path / "here.parquet", **common)
    dj.similarity_join(path, out=tmp_path / "there.parquet", client=client, **common)
    names = _parts(tmp_path / "here.parquet")
    assert names == _parts(tmp_path / "there.parquet") and len(names) > 3
    for name in names:
        assert (tmp_path / "here.parquet" / name).read_bytes() == (tmp_path / "there.parquet" / name).read_bytes()


def test_the_grids_sorted_run_writes_the_bytes_the_tasks_sort_writes(no_cluster, tmp_path, monkeypatch):
    """Partitions whose one pass held every pair come from the grid sorted (pair_sort.sort_lanes, one SortedRun the task
    streams); the same plan with the count-then-fill path (unsorted batches, sorted by the task) writes the same bytes,
    and both the oracle's pairs."""
    from daskjoin.kernels import grid, pair_sort

    x = _points(2, n=6000, d=2)
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=1500)
    common = dict(eps=0.02, memory_budget="1MiB", partitioning="chunk_pairs", method="grid", backend="cpu")
    assert dj.plan_join(path, **common).ntasks > 3
    runs = []
    here = pair_sort.sort_lanes
    monkeypatch.setattr(grid, "sort_lanes", lambda *a: runs.append(1) or here(*a))
    monkeypatch.setattr(grid, "SAMPLE_MIN_BLOCKS", 0)  # the sampled one pass at this size
    monkeypatch.setattr(grid, "CAPACITY_SLACK", 4.0)
    dj.similarity_join(path, out=tmp_path / "lanes.parquet", **common)
    assert len(runs) > 3
    monkeypatch.setattr(grid, "SAMPLE_MIN_BLOCKS", 10**9)  # count, then fill: batches the task sorts
    dj.similarity_join(path, out=tmp_path / "sorted.parquet", **common)
    names = _parts(tmp_path / "lanes.parquet")
    assert names == _parts(tmp_path / "sorted.parquet")
    for name in names:
        assert (tmp_path / "lanes.parquet" / name).read_bytes() == (tmp_path / "sorted.parquet" / name).read_bytes()
    assert_same_pairs(frame_triple(_read(tmp_path / "lanes.parquet")), oracle(x, None, 0.02), a=x, eps=0.02)


@pytest.mark.parametrize("threads", [(4, 1), (1, 3), (4, 3)])
def test_writer_and_task_threads_do_not_change_the_bytes(no_cluster, tmp_path, threads):
    """Pieces written by 1 or 4 writer threads, from 1 or 3 task threads: byte-identical files."""
    writers, tasks = threads
    x = _points(2)
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=250)
    outs = []
    for label, w in (("one", 1), ("many", writers)):
        out = tmp_path / f"{label}.parquet"
        with dask.config.set({"daskjoin.writer-threads": w, "daskjoin.row-group-bytes": 20 * 700}):
            runner = InProcess(threads=tasks if label == "many" else 1)
            dj.similarity_join(path, eps=EPS, memory_budget="256KiB", client=runner, out=out)
        outs.append(out)
    names = _parts(outs[0])
    assert names == _parts(outs[1])
    assert sum(1 for n in names if n.endswith("-00001.parquet")) >= 1  # some partition has several pieces
    for name in names:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes()
        assert pq.ParquetFile(outs[0] / name).num_row_groups <= 1


def test_a_writer_failing_mid_partition_leaves_nothing(no_cluster, tmp_path, monkeypatch):
    """The third piece fails: no part file, no _SUCCESS, no staging directory, and the path is free again."""
    x = _points(3)
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=2500)
    calls = []
    real = parquet_out.write_piece

    def failing(target, piece, value=parquet_out.DISTANCE):
        calls.append(target)
        if len(calls) == 3:
            raise OSError("disk full (injected)")
        return real(target, piece, value)

    monkeypatch.setattr(parquet_out, "write_piece", failing)
    out = tmp_path / "out.parquet"
    with dask.config.set({"daskjoin.row-group-bytes": 20 * 500}):
        with pytest.raises(OSError, match="injected"):
            dj.similarity_join(path, eps=EPS, out=out)
    assert len(calls) >= 3
    assert not out.exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".out.parquet")] in ([], [".out.parquet.lock"])
    monkeypatch.setattr(parquet_out, "write_piece", real)
    res = dj.similarity_join(path, eps=EPS, out=out)
    assert res.pairs == oracle_self_count(x, EPS)


def test_write_partition_removes_its_pieces_when_its_pairs_fail(tmp_path):
    """The pieces come from the kernel and sort: a failure there after two pieces removes the two files."""
    def pieces():
        for k in range(2):
            yield np.arange(k * 5, k * 5 + 5), np.arange(5) + 100, np.ones(5, np.float32)
        raise MemoryError("kernel failed (injected)")

    with pytest.raises(MemoryError):
        parquet_out.write_partition(str(tmp_path), 7, pieces())
    assert os.listdir(tmp_path) == []
    entries = parquet_out.write_partition(str(tmp_path), 7, iter([]))
    assert [e["file"] for e in entries] == ["part-00007-00000.parquet"] and entries[0]["rows"] == 0
    assert pq.read_schema(tmp_path / entries[0]["file"]).names == ["i", "j", "dist"]


_CACHE_PROBE = textwrap.dedent("""
    import json, sys
    import numpy as np
    import daskjoin as dj
    import daskjoin.kernels.grid, daskjoin.kernels.pair_sort, daskjoin.kernels.grid_index
    from numba.core.dispatcher import Dispatcher

    x = np.random.default_rng(0).random((3000, 3))
    n = dj.similarity_join(x, eps=0.05, output="count")
    df = dj.similarity_join(x, eps=0.05).compute()
    hits = misses = 0
    for module in (daskjoin.kernels.grid, daskjoin.kernels.pair_sort, daskjoin.kernels.grid_index):
        for f in vars(module).values():
            if isinstance(f, Dispatcher) and f.signatures:
                hits += sum(f.stats.cache_hits.values())
                misses += sum(f.stats.cache_misses.values())
    print(json.dumps({"n": n, "rows": len(df), "hits": hits, "misses": misses}))
""")


def test_compiled_kernels_are_reused_by_the_next_process(tmp_path):
    """A new process loads the kernels an earlier one compiled (Numba's on-disk cache): no compilation.

    The cache is the suite's own (the first run fills it where it is still empty): an empty private
    cache would compile every kernel of a join once more, ~45 s of the suite's time on 2 cores.  A
    third run is allowed where the second missed: Numba rewrites a function's cache index without a
    lock, so another test process compiling another signature at that moment can drop an entry
    (a cache that is not reused misses in every run)."""
    runs = []
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-c", _CACHE_PROBE], capture_output=True, text=True,
                              cwd=tmp_path, timeout=600)
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        if len(runs) > 1 and runs[-1]["misses"] == 0:
            break
    first, last = runs[0], runs[-1]
    assert first["hits"] + first["misses"] > 0  # the probe saw the kernels it ran
    assert last["misses"] == 0 and last["hits"] > 0  # (callees compiled inside a cached caller are not loaded)
    assert first["n"] == last["n"] == last["rows"]


def test_readme_python_quickstart_runs_without_warnings(tmp_path):
    """The README's first Python example, run as written (a store at points.zarr), with warnings as errors."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Quickstart: Python\s+```python\n(.*?)```", text, re.S).group(1)
    setup = "from daskjoin.io.synth import synth\nsynth('uniform', 200_000, 3, 'points.zarr', seed=0)\n"
    script = tmp_path / "quickstart.py"
    script.write_text(setup + block)
    proc = subprocess.run([sys.executable, "-W", "error", str(script)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "pairs in" in proc.stdout and "plan:" in proc.stdout


def test_cli_reports_phases(tmp_path):
    x = _points(4)
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=500)
    timings = tmp_path / "t.json"
    proc = subprocess.run([sys.executable, "-m", "daskjoin", "join", path, "--eps", str(EPS), "--out",
                           str(tmp_path / "o.parquet"), "--timings", str(timings)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(timings.read_text())
    assert record["pairs"] == oracle_self_count(x, EPS)
    assert {"startup_s", "client_s", "plan_s", "join_s", "plan_steps", "tasks", "bytes"} <= set(record)
    assert "kernels and sort" in proc.stdout and "pairs/s" in proc.stderr  # summary and progress bar


def test_in_memory_input_is_shipped_once_not_in_the_graph(client):
    """A 16 MB numpy input with a cluster: scattered once; no "large graph" warning; the same pairs."""
    import warnings

    x = np.random.default_rng(5).random((1_000_000, 2))
    eps = 0.0005
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = dj.similarity_join(x, eps=eps, client=client).compute()
    assert not [w for w in caught if "large graph" in str(w.message)], [str(w.message) for w in caught]
    assert len(got) == dj.similarity_join(x, eps=eps, output="count", client=InProcess())  # (exactness: elsewhere)


def test_a_count_is_planned_for_rows_alone(tmp_path):
    """A count holds no pairs: its plan needs fewer tasks than the pairs' plan, and counts the same."""
    x = _points(6, n=4000)
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=500)
    common = dict(eps=0.08, memory_budget="1MiB", client=InProcess())
    pairs_plan = dj.plan_join(path, **common)
    count_plan = dj.plan_join(path, output="count", **common)
    assert count_plan.count_only and not pairs_plan.count_only
    assert count_plan.ntasks < pairs_plan.ntasks and "a count holds no pairs" in count_plan.explain()
    n = oracle_self_count(x, 0.08)
    assert dj.similarity_join(path, output="count", **common) == n
    assert len(dj.similarity_join(path, **common).compute()) == n


def test_gather_raises_the_first_failure_without_waiting_for_earlier_tasks():
    """A later task fails while an earlier one still runs: gather raises it then (and the earlier is left running)."""
    import threading

    runner = InProcess(threads=2)
    release = threading.Event()
    futures = runner.map(lambda k: release.wait(30) if k == 0 else (_ for _ in ()).throw(ValueError("late task")),
                         [0, 1])
    try:
        with pytest.raises(ValueError, match="late task"):
            runner.gather(futures)
        assert not futures[0].done()
    finally:
        release.set()
    assert futures[0].result() is True


def test_sorted_copy_by_sample_sort_in_process_matches_the_in_memory_one(tmp_path, monkeypatch):
    """An input over the in-memory limit is sorted by the bucketed sample sort on the in-process runner:
    the same copy as the in-memory sort, with no more buckets gathered at once than the runner has threads."""
    import threading

    import zarr

    from daskjoin.execution import sort as sort_mod
    from daskjoin.io.zarr_in import open_points
    from daskjoin.planning.bounds import block_stats

    x = _points(7, n=6000)
    x[::7, 0] = x[3, 0]  # ties on the key: broken by row
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=500)
    source = open_points(path, "A")
    stats = block_stats(source)
    busy, most, lock = [0], [0], threading.Lock()
    gather = sort_mod._gather_bucket

    def counted(*args):
        with lock:
            busy[0] += 1
            most[0] = max(most[0], busy[0])
        try:
            return gather(*args)
        finally:
            with lock:
                busy[0] -= 1

    monkeypatch.setattr(sort_mod, "_gather_bucket", counted)
    runner = InProcess(threads=2)
    sort_mod.sort_zarr(source, 0, stats, str(tmp_path / "bucketed.zarr"), runner, bucket_bytes=8000)
    sort_mod.sort_zarr_here(source, 0, str(tmp_path / "here.zarr"))
    a, b = zarr.open_group(str(tmp_path / "bucketed.zarr")), zarr.open_group(str(tmp_path / "here.zarr"))
    for name in ("points", "ids", "keys", "key_index"):
        assert np.array_equal(a[name][:], b[name][:]), name
    assert 1 <= most[0] <= 2


def test_sorted_runs_survive_only_where_ids_keep_their_order():
    """A kernel's SortedRun stays one for a single-stream partition read by row offsets; with two streams
    (a block and its extension) or with ids from a sorted copy it becomes a plain batch (the task sorts)."""
    from types import SimpleNamespace

    from daskjoin.kernels.registry import SortedRun
    from daskjoin.kinds.epsilon import _Sides

    def sides(ia, ib, selfjoin=True):
        s = object.__new__(_Sides)
        s.job, s.part, s.ia, s.ib = SimpleNamespace(selfjoin=selfjoin), None, ia, ib
        return s

    def run():
        return SortedRun((np.array([0, 0, 1]), np.array([1, 2, 2]), None))

    assert isinstance(sides(100, 0)._globalize(run(), cross=False, one_stream=True), SortedRun)
    assert isinstance(sides(100, 500, False)._globalize(run(), cross=True, one_stream=True), SortedRun)
    assert type(sides(100, 500)._globalize(run(), cross=True, one_stream=False)) is tuple
    ids = np.array([7, 3, 9])
    got = sides(ids, None)._globalize(run(), cross=False, one_stream=True)
    assert type(got) is tuple and list(got[0]) == [3, 7, 3] and list(got[1]) == [7, 9, 9]


@pytest.mark.integration
def test_a_local_cluster_builds_sorted_copies_here(client, tmp_path, monkeypatch):
    """Workers on this host: the sorted copy is built in this process (a parallel radix sort), not by a
    sample sort over the workers; a cluster elsewhere still gets the sample sort."""
    from daskjoin.execution import cluster as cluster_mod
    from daskjoin.execution import sort as sort_mod
    from daskjoin.io.zarr_in import open_points
    from daskjoin.planning.bounds import block_stats
    from joinhelpers import write_zarr

    x = np.random.default_rng(3).random((5000, 2))
    source = open_points(write_zarr(tmp_path / "x.zarr", x, 500), "A")
    stats = block_stats(source)
    assert cluster_mod.workers_here(client)
    calls = []
    monkeypatch.setattr(sort_mod, "sort_zarr", lambda *a, **k: calls.append("sample") or None)
    cluster_mod.ClusterRunner(client).sort(source, 0, stats, str(tmp_path / "here.zarr"), bucket_bytes=1 << 20)
    assert calls == [] and os.path.exists(tmp_path / "here.zarr")
    monkeypatch.setattr(cluster_mod, "workers_here", lambda c: False)
    cluster_mod.ClusterRunner(client).sort(source, 0, stats, str(tmp_path / "far.zarr"), bucket_bytes=1 << 20)
    assert calls == ["sample"]
