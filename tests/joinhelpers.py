"""Helpers shared by the planning / execution / API / CLI tests (plain functions, no fixtures)."""
from __future__ import annotations

import contextlib

import numpy as np

from oracle import oracle_cross_pairs, oracle_self_pairs

#: Dask's periodic work slowed for the suite's clusters (``conftest`` puts these in the environment, and the CLI
#: tests pass them on while dropping every other ``DASK_`` setting): the statistical profiler (every 10 ms),
#: the blocked-loop tick (20 ms) and the system monitor (500 ms) cost an idle worker ~4% of a core and a
#: scheduler with its client ~6% (VM: 1.3 -> 0.15 CPU-s per idle worker per 30 s); nothing tests them.
QUIET_DASK_ENV = {"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
                  "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s",
                  "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "2s"}


def write_zarr(path, data: np.ndarray, chunk_rows: int = 64) -> str:
    """Write ``data`` as a 2-D (or any-D) Zarr array at ``path`` with ``chunk_rows`` rows per chunk."""
    import zarr

    data = np.asarray(data)
    chunks = (max(1, int(chunk_rows)),) + tuple(max(1, s) for s in data.shape[1:])
    arr = zarr.create_array(store=str(path), shape=data.shape, chunks=chunks, dtype=data.dtype)
    if data.size:
        arr[...] = data
    return str(path)


def oracle(a, b, eps):
    """The oracle's (i, j, dist) of a self-join (``b is None``) or an A×B join."""
    return oracle_self_pairs(a, eps) if b is None else oracle_cross_pairs(a, b, eps)


def frame_triple(df):
    """(i, j, dist) numpy arrays of a pandas DataFrame of pairs (dist None if absent)."""
    dist = df["dist"].to_numpy() if "dist" in df.columns else None
    return df["i"].to_numpy(), df["j"].to_numpy(), dist


def pair_tuples(df) -> set:
    return set(zip(df["i"].tolist(), df["j"].tolist()))


def budget_for_tasks(a, b, eps, partitioning, target, client, *, method="grid", hi=1 << 26, lo=1 << 10):
    """The largest ``memory_budget`` (bytes, ``hi`` over a power of 2^(1/4)) whose plan has at least ``target``
    tasks.

    Found with ``daskjoin.plan_join(...).ntasks`` only: halving from ``hi``, then quarter-octave steps within
    the last octave (a plan's task count jumps with the budget: halving alone can step over a target's
    range); returns ``(budget, ntasks)``.  With ``target=1`` this is ``hi`` (a budget the whole join fits).
    """
    import daskjoin as dj

    def tasks(budget):
        return dj.plan_join(a, b, eps=eps, method=method, partitioning=partitioning, memory_budget=budget,
                            client=client).ntasks

    budget, ntasks = hi, tasks(hi)
    while ntasks < target and budget > lo:
        above, budget = budget, max(lo, budget // 2)
        ntasks = tasks(budget)
        if ntasks >= target:
            for q in (1, 2, 3):  # the largest quarter-octave step below ``above`` that reaches the target
                finer = int(above / 2 ** (q / 4))
                if finer > budget and (got := tasks(finer)) >= target:
                    return finer, got
    return budget, ntasks


def check_frame(df, *, selfjoin: bool, with_distance: bool = True):
    """Columns and dtypes of a computed pairs frame; ``i < j`` for a self-join."""
    expected = ["i", "j", "dist"] if with_distance else ["i", "j"]
    assert list(df.columns) == expected, f"columns {list(df.columns)}, expected {expected}"
    assert df["i"].dtype == np.int64 and df["j"].dtype == np.int64, dict(df.dtypes)
    if with_distance:
        assert df["dist"].dtype == np.float32, dict(df.dtypes)
    if selfjoin and len(df):
        bad = df[df["i"] >= df["j"]]
        assert bad.empty, f"self-join pairs with i >= j: {bad.head(10).values.tolist()}"


def tree_bytes(path) -> dict:
    """Every file under ``path``: relative name -> its bytes (to show a directory was left untouched)."""
    import os

    out = {}
    for folder, _, files in os.walk(path):
        for name in files:
            full = os.path.join(folder, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = f.read()
    return out


def exact_pairs(x, eps, y=None) -> np.ndarray:
    """The oracle's pairs for larger inputs, sorted by (i, j): cKDTree candidates (radius padded), each decided
    by the float64 rule (squared differences summed in dimension order, ``<= eps * eps``).  Self-join: i < j."""
    from scipy.spatial import cKDTree

    pad = eps * (1 + 1e-6) + 1e-12
    if y is None:
        cand = cKDTree(x).query_pairs(pad, output_type="ndarray").reshape(-1, 2)
        other = x
    else:
        cand = cKDTree(x).sparse_distance_matrix(cKDTree(y), pad, output_type="ndarray")
        cand = np.stack([cand["i"], cand["j"]], axis=1).astype(np.int64) if len(cand) else np.zeros((0, 2), np.int64)
        other = y
    diff = x[cand[:, 0]] - other[cand[:, 1]]
    s = np.zeros(len(cand))
    for k in range(x.shape[1]):  # dimension order, as the rule says
        s = s + diff[:, k] * diff[:, k]
    keep = cand[s <= np.float64(eps) * np.float64(eps)]
    return keep[np.lexsort((keep[:, 1], keep[:, 0]))]


def unique_sorted_pairs(frame) -> np.ndarray:
    """A pairs frame's (i, j) as an int64 array sorted by (i, j), asserting no pair appears twice."""
    assert not frame.duplicated(["i", "j"]).any(), "duplicate pairs"
    got = frame[["i", "j"]].to_numpy(np.int64)
    return got[np.lexsort((got[:, 1], got[:, 0]))]


@contextlib.contextmanager
def killable_cluster(n_workers: int):
    """A client of ``n_workers`` single-threaded Nanny worker processes, for tests that SIGKILL workers.

    The nanny of a killed worker stays for good: a ``SpecCluster`` closes the nanny of a worker still
    missing ``distributed.deploy.lost-worker-timeout`` (15 s) after *a* loss under its name, so a second
    kill landing 15 s after the first (while the nanny restarts the worker) would take the worker away for
    the rest of the module (seen once in CI: "No valid workers found" on the one-worker cluster).
    """
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.deploy.lost-worker-timeout": "1 day"}), \
            LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                         memory_limit=0) as cluster, Client(cluster) as client:
        yield client
