"""Nothing lost, nothing wrong marked complete: output ownership, inputs never overwritten, concurrent joins.

Real Zarr stores on disk, the session's multi-process ``LocalCluster`` (and a
cluster of its own for the worker-kill test), Parquet read back.
"""
from __future__ import annotations

import json
import os
import threading
import time

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import daskjoin as dj
from daskjoin.io import commit
from daskjoin.io.parquet_out import OutputBusy, OutputRun
from joinhelpers import exact_pairs, killable_cluster, tree_bytes, write_zarr
from oracle import oracle_self_count

pytestmark = pytest.mark.integration


def _leftovers(folder) -> list[str]:
    """Temporaries, staging directories and lock files anywhere under ``folder``."""
    found = []
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            if commit.TEMP_MARK in name or name.endswith(".lock"):
                found.append(os.path.relpath(os.path.join(root, name), folder))
    return found


def _pairs(path) -> pd.DataFrame:
    names = sorted(n for n in os.listdir(path) if n.startswith("part-"))
    frames = [pq.read_table(os.path.join(path, n)).to_pandas() for n in names]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({"i": [], "j": []})


def _check_complete(path, points) -> dict:
    """``_SUCCESS`` lists exactly the parts present, and they hold exactly the pairs of the eps it records."""
    manifest = json.loads(open(os.path.join(path, "_SUCCESS")).read())
    parts = sorted(n for n in os.listdir(path) if n != "_SUCCESS")
    assert parts == [e["file"] for e in manifest["files"]], (parts, manifest["files"])
    got = _pairs(path)
    assert len(got) == manifest["rows"]
    assert not got.duplicated(["i", "j"]).any(), "duplicate pairs in a committed output"
    got = got[["i", "j"]].to_numpy(np.int64)
    got = got[np.lexsort((got[:, 1], got[:, 0]))]
    expected = exact_pairs(points, manifest["eps"])
    assert got.shape == expected.shape and (got == expected).all(), "the pairs are not those of the recorded eps"
    return manifest


@pytest.fixture
def store(tmp_path):
    x = np.random.default_rng(7).random((3000, 2))
    return x, write_zarr(tmp_path / "x.zarr", x, 250)


# --------------------------------------------------------------------------- inputs are never outputs

@pytest.mark.parametrize("where", ["same", "inside", "contains", "cache"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_output_overlapping_an_input_is_refused_untouched(client, tmp_path, store, where, overwrite):
    x, path = store
    dj.similarity_join(path, eps=0.01, output="count", client=client)  # its statistics cache exists now
    out = {"same": path, "inside": os.path.join(path, "pairs"), "contains": str(tmp_path),
           "cache": os.path.join(path + ".daskjoin", "pairs")}[where]
    before = tree_bytes(tmp_path)
    with pytest.raises(dj.InputError, match="a join never writes into or replaces what it reads"):
        dj.similarity_join(path, eps=0.01, out=out, overwrite=overwrite, client=client)
    assert tree_bytes(tmp_path) == before
    assert dj.similarity_join(path, eps=0.01, output="count", client=client) == oracle_self_count(x, 0.01)


def test_output_through_a_symlink_to_the_input_is_refused(client, tmp_path, store):
    _, path = store
    os.symlink(path, tmp_path / "alias")
    with pytest.raises(dj.InputError, match="is input A"):
        dj.similarity_join(path, eps=0.01, out=tmp_path / "alias", overwrite=True, client=client)
    assert os.path.isdir(path)


def test_set_join_output_overlapping_its_store_is_refused(client, tmp_path):
    from daskjoin.io.sets_in import import_sets

    store = import_sets([["a", "b"], ["a", "b", "c"], ["x"]], tmp_path / "s.zarr")
    before = tree_bytes(store)
    with pytest.raises(dj.InputError, match="is input A"):
        dj.set_similarity_join(store, threshold=0.5, out=store, overwrite=True, client=client)
    assert tree_bytes(store) == before


# --------------------------------------------------------------------------- one run owns its output

def test_second_writer_fails_at_once_naming_the_first(client, tmp_path, store):
    _, path = store
    out = tmp_path / "pairs.parquet"
    with OutputRun(str(out), overwrite=False) as holder:
        with pytest.raises(OutputBusy, match=f"being written by another daskjoin run .*run {holder.run_id}, "
                                             f"pid {os.getpid()}"):
            dj.similarity_join(path, eps=0.01, out=out, client=client)
    assert not out.exists() and _leftovers(tmp_path) == []


def test_concurrent_writers_never_leave_a_mixed_output(client, tmp_path, store):
    """Two joins of different eps to one path with overwrite, started together, ten times."""
    x, path = store
    out = tmp_path / "pairs.parquet"
    outcomes = []
    for trial in range(10):
        barrier = threading.Barrier(2)
        results = [None, None]

        def run(k, eps):
            barrier.wait()
            try:
                results[k] = dj.similarity_join(path, eps=eps, out=out, overwrite=True, client=client,
                                                memory_budget="64KiB")
            except OutputBusy as exc:
                results[k] = exc

        threads = [threading.Thread(target=run, args=(k, eps)) for k, eps in enumerate((0.02, 0.025))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert any(isinstance(r, dj.JoinResult) for r in results), results
        outcomes.append(tuple(type(r).__name__ for r in results))
        _check_complete(out, x)
        assert _leftovers(tmp_path) == [], trial
    # the lock is what turned the second writer away (staging alone would let both commit in turn)
    assert any("OutputBusy" in o for o in outcomes), outcomes


def test_overwrite_keeps_the_old_output_readable_until_the_new_one_commits(client, tmp_path, store, monkeypatch):
    x, path = store
    exchanged = []
    real_exchange = commit.exchange
    monkeypatch.setattr(commit, "exchange", lambda a, b: exchanged.append(real_exchange(a, b)) or exchanged[-1])
    out = tmp_path / "pairs.parquet"
    dj.similarity_join(path, eps=0.02, out=out, client=client)
    seen, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            try:  # one directory, pinned by its descriptor: the manifest and the listing of the same output
                folder = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                seen.append("missing")
                continue
            try:
                with os.fdopen(os.open("_SUCCESS", os.O_RDONLY, dir_fd=folder)) as f:
                    manifest = json.loads(f.read())
                parts = sorted(n for n in os.listdir(folder) if n.startswith("part-"))
            except FileNotFoundError:  # the old output, replaced after we opened it, is being removed
                continue
            finally:
                os.close(folder)
            # parts may already be going (the old output is removed after the exchange), never foreign ones
            listed = {e["file"] for e in manifest["files"]}
            seen.append(manifest["eps"] if set(parts) <= listed else "mixed")

    t = threading.Thread(target=reader)
    t.start()
    try:
        dj.similarity_join(path, eps=0.025, out=out, overwrite=True, client=client, memory_budget="64KiB")
    finally:
        stop.set()
        t.join()
    assert "mixed" not in seen
    if exchanged == [True]:  # where the file system cannot exchange, the path is absent for a moment
        assert "missing" not in seen, "the output path was missing while the new output replaced it"
    assert seen and set(seen) <= {0.02, 0.025}
    assert _check_complete(out, x)["eps"] == 0.025


def test_leftovers_of_a_killed_run_are_removed_by_the_next(client, tmp_path, store):
    x, path = store
    out = tmp_path / "pairs.parquet"
    stale = commit.temp_path(str(out), "run-deadbeef0000")
    os.mkdir(stale)
    open(os.path.join(stale, "part-00000.parquet"), "wb").write(b"from a killed run")
    open(os.path.join(stale, ".part-00001.parquet.tmp-12345678"), "wb").write(b"half")
    open(commit.lock_path(str(out)), "w").write("{}")  # a lock file nobody holds
    dj.similarity_join(path, eps=0.02, out=out, client=client)
    _check_complete(out, x)
    assert _leftovers(tmp_path) == []


def test_commit_refuses_parts_it_did_not_report(tmp_path):
    run = OutputRun(str(tmp_path / "o.parquet"), overwrite=False)
    with run:
        open(os.path.join(run.staging, "part-00000.parquet"), "wb").write(b"x" * 10)
        open(os.path.join(run.staging, "part-00001.parquet"), "wb").write(b"y")  # nobody reported this one
        with pytest.raises(RuntimeError, match="unexpected file part-00001.parquet.*nothing was committed"):
            run.commit([{"file": "part-00000.parquet", "rows": 1, "bytes": 10}])
    assert not (tmp_path / "o.parquet").exists() and _leftovers(tmp_path) == []
    with OutputRun(str(tmp_path / "o.parquet"), overwrite=False) as run:
        open(os.path.join(run.staging, "part-00000.parquet"), "wb").write(b"x" * 9)
        with pytest.raises(RuntimeError, match="has 9 bytes, its task wrote 10"):
            run.commit([{"file": "part-00000.parquet", "rows": 1, "bytes": 10}])
        with pytest.raises(RuntimeError, match="missing"):
            run.commit([{"file": "part-00000.parquet", "rows": 1, "bytes": 9},
                        {"file": "part-00002.parquet", "rows": 1, "bytes": 9}])
    assert not (tmp_path / "o.parquet").exists()


# --------------------------------------------------------------------------- caches beside an input

@pytest.mark.parametrize("partitioning", ["chunk_pairs", "slabs"])
def test_concurrent_joins_of_a_fresh_input(client, tmp_path, partitioning):
    """Statistics and the sorted copy are built once, whole, whatever the interleaving (nine fresh stores)."""
    from daskjoin.planning.planner import clear_caches

    for trial in range(9):
        x = np.random.default_rng(trial).random((2000, 3))
        path = write_zarr(tmp_path / f"x{trial}.zarr", x, 200)
        clear_caches()
        barrier = threading.Barrier(3)
        got, errors = [], []

        def run(eps):
            barrier.wait()
            try:
                got.append((eps, dj.similarity_join(path, eps=eps, output="count", client=client,
                                                    partitioning=partitioning, memory_budget="256KiB")))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(eps,)) for eps in (0.05, 0.06, 0.07)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for eps, n in got:
            assert n == oracle_self_count(x, eps)
        assert _leftovers(tmp_path) == []


def test_build_once_builds_once_and_clears_stale_temporaries(tmp_path):
    final = str(tmp_path / "item.bin")
    stale = commit.temp_path(final)
    open(stale, "wb").write(b"left by a killed builder")
    calls = []

    def build(path):
        calls.append(1)
        time.sleep(0.2)
        commit.write_bytes(path, b"whole")

    threads = [threading.Thread(target=commit.build_once, args=(final, os.path.exists, build)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert open(final, "rb").read() == b"whole"
    assert sorted(os.listdir(tmp_path)) == ["item.bin"]


def test_file_lock_excludes_threads_of_one_process(tmp_path):
    path = str(tmp_path / "x.lock")
    with commit.FileLock(path, note="first"):
        with pytest.raises(commit.LockBusy) as info:
            commit.FileLock(path, blocking=False).acquire()
        assert info.value.holder == "first"
    assert not os.path.exists(path)
    with commit.FileLock(path, blocking=False):
        pass


# --------------------------------------------------------------------------- a worker killed mid-run

@pytest.fixture(scope="module")
def nanny_cluster():
    with killable_cluster(2) as client:
        yield client


@pytest.mark.parametrize("trial", [0] + [pytest.param(t, marks=pytest.mark.slow) for t in range(1, 9)])
def test_worker_killed_mid_write_leaves_no_temporaries(nanny_cluster, tmp_path, trial):
    """A worker process killed while tasks write parts: exact output, no temporaries anywhere."""
    import signal

    client = nanny_cluster
    x = np.random.default_rng(trial).random((120_000, 2))
    path = write_zarr(tmp_path / "x.zarr", x, 5000)
    out = tmp_path / "pairs.parquet"
    eps = 0.01
    plan = dj.plan_join(path, eps=eps, memory_budget="2MiB", client=client)
    assert plan.ntasks >= 20
    done = threading.Event()
    result = {}

    def run():
        result["r"] = dj.similarity_join(path, eps=eps, out=out, memory_budget="2MiB", client=client)
        done.set()

    t = threading.Thread(target=run)
    t.start()
    staging = None
    deadline = time.time() + 60
    while time.time() < deadline and staging is None:  # kill once parts are being written
        found = [n for n in os.listdir(tmp_path) if ".tmp-run-" in n]
        if found and len(os.listdir(tmp_path / found[0])) >= 2 + trial * 3:
            staging = found[0]
        time.sleep(0.01)
    pids = client.run(os.getpid)
    busy = [addr for addr, keys in client.processing().items() if keys and addr in pids]
    assert busy and not done.is_set(), "the join ended before a worker could be killed mid-run"
    os.kill(pids[busy[trial % len(busy)]], signal.SIGKILL)  # a worker with a task in flight
    t.join(timeout=300)
    assert done.is_set()
    _check_complete(out, x)
    assert _leftovers(tmp_path) == []


# --------------------------------------------------------------------------- found in review

def _hold_output(path, ready, release):
    from daskjoin.io.parquet_out import OutputRun

    with OutputRun(path, overwrite=False):
        ready.set()
        release.wait(60)


def test_lock_excludes_another_process(client, tmp_path, store):
    import multiprocessing

    _, path = store
    out = str(tmp_path / "pairs.parquet")
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_output, args=(out, ready, release))
    child.start()
    try:
        assert ready.wait(60)
        with pytest.raises(OutputBusy, match=f"pid {child.pid} "):
            dj.similarity_join(path, eps=0.01, out=out, client=client)
    finally:
        release.set()
        child.join(60)
    dj.similarity_join(path, eps=0.01, out=out, client=client)  # free again once the holder is gone
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("existing", ["file", "pyarrow_dataset"])
def test_overwrite_refuses_what_daskjoin_did_not_write(client, tmp_path, existing):
    x = np.random.default_rng(1).random((300, 2))
    out = tmp_path / "out"
    if existing == "file":
        out.write_text("precious")
    else:
        out.mkdir()
        pd.DataFrame({"a": [1]}).to_parquet(out / "part-0.parquet")  # pyarrow's write_dataset naming
    before = tree_bytes(tmp_path)
    with pytest.raises(dj.InputError, match="overwrite replaces only daskjoin outputs"):
        dj.similarity_join(x, eps=0.05, out=out, overwrite=True, client=client)
    assert tree_bytes(tmp_path) == before


def test_only_hidden_temporaries_are_cleaned_and_an_old_copy_is_put_back(tmp_path):
    final = tmp_path / "out"
    mine = tmp_path / "out.tmp-mybackup"  # the user's own directory, not a daskjoin temporary
    mine.mkdir()
    (mine / "keep").write_text("x")
    old = commit.temp_path(str(final), f"{commit.OLD_TAG}0123abcd")  # killed between publish_dir's renames
    os.mkdir(old)
    open(os.path.join(old, "_SUCCESS"), "w").write("{}")
    commit.remove_temps(str(final))
    assert (mine / "keep").exists()
    assert (final / "_SUCCESS").exists() and not os.path.exists(old)


def test_set_store_missing_first_offsets_chunk_is_damage(tmp_path):
    from daskjoin.io.sets_in import import_sets, read_sets_range
    from daskjoin.validation import DamagedStoreError

    rng = np.random.default_rng(2)
    sets = [list(rng.choice(50, rng.integers(1, 4), replace=False)) for _ in range(140_000)]
    path = import_sets(sets, tmp_path / "s.zarr")
    os.remove(os.path.join(path, "offsets", "c", "0"))
    with pytest.raises(DamagedStoreError, match="offsets/c/0"):
        read_sets_range(path, 10, 20)


def test_damaged_or_legacy_sorted_copy(client, tmp_path):
    """A sorted copy missing a chunk is an error, never zeros (a count reads its points only, pairs its ids too);
    a copy without the current layout mark is rebuilt."""
    import glob
    import json as _json

    from daskjoin.planning.planner import clear_caches
    from daskjoin.validation import DamagedStoreError

    x = np.random.default_rng(5).random((4000, 2))
    path = write_zarr(tmp_path / "x.zarr", x, 250)
    kw = dict(eps=0.02, output="count", client=client, partitioning="slabs", memory_budget="64KiB")
    expected = oracle_self_count(x, 0.02)
    assert dj.similarity_join(path, **kw) == expected
    [copy] = glob.glob(path + ".daskjoin/sorted-dim*.zarr")
    meta_path = os.path.join(copy, "zarr.json")
    meta = _json.load(open(meta_path))
    del meta["attributes"]["daskjoin"]["layout"]  # as an older version wrote it
    open(meta_path, "w").write(_json.dumps(meta))
    clear_caches()
    assert dj.similarity_join(path, **kw) == expected
    assert "layout" in _json.load(open(meta_path))["attributes"]["daskjoin"]  # rebuilt
    os.remove(os.path.join(copy, "ids", "c", "3"))
    clear_caches()
    with pytest.raises(DamagedStoreError, match="ids/c/3"):  # pairs need the ids
        dj.similarity_join(path, **{**kw, "output": "pairs"}).compute()
    assert dj.similarity_join(path, **kw) == expected  # a count reads no ids
    [chunk] = glob.glob(os.path.join(copy, "points", "c", "3", "*"))
    os.remove(chunk)
    clear_caches()
    with pytest.raises(DamagedStoreError, match="points/c/3"):
        dj.similarity_join(path, **kw)


def test_file_lock_without_flock_falls_back_to_exclusive_creation(tmp_path, monkeypatch, request):
    """Where flock is not supported (Lustre without -o flock, some NFS): a lock by exclusive creation."""
    import errno
    import subprocess
    import sys

    class NoFlock:
        LOCK_EX, LOCK_NB = 2, 4

        @staticmethod
        def flock(fd, flags):
            raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(commit, "fcntl", NoFlock)
    from daskjoin.caches import CACHE

    CACHE.clear("flock")  # probe again, with NoFlock; and forget that answer afterwards
    request.addfinalizer(lambda: CACHE.clear("flock"))
    path = str(tmp_path / "x.lock")
    with commit.FileLock(path, blocking=False):
        with pytest.raises(commit.LockBusy):
            commit.FileLock(path, blocking=False).acquire()
    assert not os.path.exists(path)
    # a lock file left by a process of this host that has died is taken over
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    with open(path, "w") as f:
        json.dump({"pid": int(dead.stdout), "host": __import__("socket").gethostname()}, f)
    with commit.FileLock(path, blocking=False):
        pass
    with open(path, "w") as f:
        json.dump({"pid": os.getpid(), "host": "another-host"}, f)  # cannot tell: busy
    with pytest.raises(commit.LockBusy) as info:
        commit.FileLock(path, blocking=False).acquire()
    assert info.value.undecidable
    # an output whose lock a run on another host left: refused, saying which file to remove if that run is gone
    out = tmp_path / "pairs.parquet"
    lock = commit.lock_path(str(out))
    with open(lock, "w") as f:
        json.dump({"run": "abc", "pid": 1, "host": "another-host", "started": "2026-11-24 01:00:00"}, f)
    with pytest.raises(OutputBusy, match=r"no flock.*remove '.*\.pairs\.parquet\.lock'"):
        with OutputRun(str(out), overwrite=False):
            pass
    os.remove(lock)
    with OutputRun(str(out), overwrite=False):  # once removed, the path is free again
        pass


def test_import_never_deletes_its_source(tmp_path):
    """``daskjoin import SRC OUT --overwrite`` with SRC inside OUT (or OUT being SRC) is refused, SRC kept."""
    from daskjoin.io.importers import import_points
    from daskjoin.io.sets_in import import_sets_text

    folder = tmp_path / "data"
    folder.mkdir()
    np.save(folder / "x.npy", np.ones((4, 2)))
    (folder / "s.txt").write_text("a b\nb c\n")
    for src, run in ((folder / "x.npy", import_points), (folder / "s.txt", import_sets_text)):
        for out in (folder, src):
            with pytest.raises(dj.InputError, match="the input file"):
                run(src, out, overwrite=True)
            assert src.exists()


def test_local_workers_ignore_ctrl_c_even_after_a_restart():
    import signal

    from distributed import Client, LocalCluster

    from daskjoin.execution.cluster import local_cluster_options

    with LocalCluster(**local_cluster_options()) as cluster, Client(cluster) as c:
        ignored = lambda: signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # noqa: E731
        assert all(c.run(ignored).values())
        c.restart()
        assert all(c.run(ignored).values())


def test_store_writers_own_their_path_and_clear_killed_writers_temporaries(tmp_path):
    """A Zarr point store or set store being written refuses a second writer of the same path at once,
    and a temporary a killed writer left beside the path is removed by the next writer."""
    from daskjoin.io.sets_in import prepare_sets, write_sets
    from daskjoin.io.zarr_out import ZarrPointsWriter

    out = tmp_path / "p.zarr"
    killed = commit.temp_path(str(out))
    os.mkdir(killed)  # what a writer killed mid-write leaves
    (tmp_path / "unrelated.txt").write_text("kept")
    with ZarrPointsWriter(out, d=2) as w:
        w.append(np.ones((5, 2)))
        with pytest.raises(dj.InputError, match="being written by another writer"):
            with ZarrPointsWriter(out, d=2, overwrite=True) as other:
                other.append(np.zeros((1, 2)))
    assert not os.path.exists(killed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.zarr", "unrelated.txt"]
    import zarr

    assert zarr.open_array(str(out), mode="r").shape == (5, 2)

    store = tmp_path / "s.zarr"
    os.mkdir(commit.temp_path(str(store)))
    lock = commit.FileLock(commit.lock_path(str(store)), blocking=False)
    with lock:
        with pytest.raises(dj.InputError, match="being written by another writer"):
            write_sets(prepare_sets([[1, 2], [2, 3]]), str(store))
    write_sets(prepare_sets([[1, 2], [2, 3]]), str(store))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.zarr", "s.zarr", "unrelated.txt"]
