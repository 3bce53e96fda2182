"""Several task threads per worker on every Numba threading layer.

Numba's ``workqueue`` layer (the fallback where neither OpenMP nor TBB loads)
aborts the whole process when two threads launch ``parallel=True`` functions
at once.  ``dask worker`` runs one task thread per core, so without
:mod:`daskjoin.kernels.parallel_guard` every worker died ("Terminating: Nested
parallel kernel launch detected"), the ε-join ended in ``KilledWorker`` and the
set join in ``FutureCancelledError``.  Here the layer is forced with
``NUMBA_THREADING_LAYER=workqueue`` in a subprocess, whose spawned workers
inherit it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial import cKDTree

from set_cases import zipf_sets
from set_oracle import oracle_join_fast

ROOT = Path(__file__).resolve().parents[1]
EPS = 0.05
SET_THRESHOLD = 0.5

# Runs in a subprocess: data from argv[1], a JSON line of results on stdout.
_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    import numba
    import numpy as np

    import daskjoin as dj
    from daskjoin.kernels import parallel_guard

    EPS, THRESHOLD = float(sys.argv[2]), float(sys.argv[3])


    def main(data):
        from distributed import Client, LocalCluster

        x = np.load(data / "points.npy")
        sets = json.loads((data / "sets.json").read_text())
        out = {}
        with LocalCluster(n_workers=1, threads_per_worker=4, processes=True, dashboard_address=":0",
                          memory_limit=0) as cluster, Client(cluster) as client:
            # one join of many tasks: up to 4 of its kernels run at once in the worker
            eps_join = dict(eps=EPS, output="count", client=client, backend="cpu", memory_budget="1MB")
            out["alone"] = int(dj.similarity_join(x, **eps_join))
            # several joins at once, planned (sample kernels run here) from several client threads
            with ThreadPoolExecutor(3) as pool:
                jobs = {
                    "grid": pool.submit(dj.similarity_join, x, method="grid", **eps_join),
                    "brute": pool.submit(dj.similarity_join, x, method="brute", **eps_join),
                    "sets": pool.submit(dj.set_similarity_join, sets, threshold=THRESHOLD, client=client,
                                        output="count", backend="cpu", partitions=6),
                    # pairs, not a count: each task's matches to rows (a parallel kernel) run at once too
                    "set_pairs": pool.submit(lambda: len(dj.set_similarity_join(
                        sets, threshold=THRESHOLD, client=client, backend="cpu", partitions=6).compute())),
                }
                out.update({name: int(job.result()) for name, job in jobs.items()})
            out["worker_layers"] = sorted(client.run(numba.threading_layer).values())
            # the in-process threaded scheduler (planned with the client, run without it)
            frame = dj.similarity_join(x, eps=EPS, client=client, backend="cpu", memory_budget="1MB")
            out["partitions"] = int(frame.npartitions)
            out["threads"] = int(len(frame.compute(scheduler="threads", num_workers=4)))
            out["main_layer"] = numba.threading_layer()
            out["main_locks"] = parallel_guard.serialised() is parallel_guard._LOCK
        print("RESULT " + json.dumps(out), flush=True)


    if __name__ == "__main__":  # spawned workers import this module too
        main(Path(sys.argv[1]))
    """
)


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_concurrent_tasks_on_workqueue(tmp_path):
    x = np.random.default_rng(7).random((20_000, 3))
    sets = zipf_sets(3000, seed=91, vocab=1500, max_size=40, exponent=1.15)
    np.save(tmp_path / "points.npy", x)
    (tmp_path / "sets.json").write_text(json.dumps(sets))
    script = tmp_path / "concurrent_join.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), repr(EPS), repr(SET_THRESHOLD)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    log = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{log}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, log
    got = json.loads(lines[-1][len("RESULT "):])

    assert got["worker_layers"] == ["workqueue"] and got["main_layer"] == "workqueue", got
    assert got["main_locks"], got
    assert got["partitions"] >= 8, got  # several tasks per join, so they overlap
    expected = len(cKDTree(x).query_pairs(EPS))
    assert expected > 10_000
    assert got["alone"] == expected
    assert got["grid"] == expected
    assert got["brute"] == expected
    assert got["threads"] == expected
    expected_sets = len(oracle_join_fast(sets, threshold=SET_THRESHOLD))
    assert expected_sets > 0
    assert got["sets"] == expected_sets
    assert got["set_pairs"] == expected_sets


def test_guard_is_lock_free_on_a_threadsafe_layer():
    """Here the default layer is OpenMP: the guard is a shared no-op, the lock is never taken."""
    import numba

    from daskjoin.kernels import parallel_guard
    from daskjoin.kernels.brute import BruteJoin

    layer = parallel_guard.threading_layer()
    if layer not in parallel_guard.THREAD_SAFE_LAYERS:
        pytest.skip(f"Numba threading layer here is {layer} (config {numba.config.THREADING_LAYER})")
    guard = parallel_guard.serialised()
    assert isinstance(guard, nullcontext) and parallel_guard.serialised() is guard

    # with the lock held elsewhere, a kernel call still goes through at once
    x = np.random.default_rng(3).random((500, 2))
    result = {}
    with parallel_guard._LOCK:
        t = threading.Thread(target=lambda: result.setdefault("n", BruteJoin(x, None, 0.1).count()))
        t.start()
        t.join(60)
    assert not t.is_alive()
    assert result["n"] == len(cKDTree(x).query_pairs(0.1))
