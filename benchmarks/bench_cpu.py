#!/usr/bin/env python
"""CPU benchmark: daskjoin against scipy and scikit-learn on the same data, in one process.

Workload (DESIGN.md section 7, scaled to one machine): ``n`` uniform float32
points in the unit cube (``daskjoin.io.synth.generate("uniform", n, d, seed=0)``),
``eps = (32 / (n * V_d)) ** (1/d)`` (about 32 neighbours per point), self-join.

Methods, each timed with ``time.perf_counter`` (best of ``--repeat`` runs):

1. daskjoin kernel alone: ``get_kernel("grid", "cpu").self_join(x, eps)``, numpy
   in, pairs out (Numba JIT warmed up on a small sample first).
2. daskjoin end to end: the same data written to a Zarr store ->
   ``daskjoin.similarity_join(path, eps=eps, client=client).persist()`` and
   ``distributed.wait`` on a ``LocalCluster(**local_cluster_options())``: a first
   run (one-time statistics pass and any sorted copy; the input's cache is deleted
   before each repeat) and a warm re-run (cached statistics).
3. scipy ``cKDTree(x).query_pairs(eps, output_type="ndarray")`` (1 core, tree build included).
4. scikit-learn ``radius_neighbors_graph(x, eps, mode="distance", n_jobs=-1)``
   (both directions, no self-loops: pairs = nnz / 2).

The exact answer is the float64 one (scipy's convention, which daskjoin follows):
the kernel, the end-to-end run and cKDTree must report the same number of pairs
(kernel and cKDTree the same set of pairs), otherwise a ``MISMATCH`` line is printed
and the script exits with status 1.  scikit-learn's difference is reported, not enforced.

Usage::

    .venv/bin/python benchmarks/bench_cpu.py                      # n = 1M, d = 2 and 6
    .venv/bin/python benchmarks/bench_cpu.py --n 100000 --dims 2 --repeat 3 --skip-sklearn
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import shutil
import socket
import sys
import tempfile
import time

import numpy as np

KERNEL_TARGET = {2: 2.0, 6: 5.0}  # kernel must be at least this many times faster than cKDTree
E2E_TARGET = 1.5  # end-to-end time at most this many times the kernel's
NEIGHBOURS = 32
WARMUP_ROWS = 20_000
SKLEARN_BYTES_PER_NNZ = 48  # index + distance lists, their concatenation and the CSR matrix, conservatively

_mismatches: list[str] = []
_pretouch_bytes = 1 << 30  # set from --pretouch-mib


# --------------------------------------------------------------------------- helpers


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _mismatch(msg: str) -> None:
    line = f"!!!!!!!! MISMATCH: {msg}"
    _mismatches.append(msg)
    print(line, flush=True)
    print(line, file=sys.stderr, flush=True)


def _n_label(n: int) -> str:
    for div, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n >= div and n % (div // 10) == 0:
            value = n / div
            return f"{value:g}{suffix}"
    return str(n)


def _load() -> list[float]:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _pretouch(nbytes: int) -> None:
    """Write to (then free) ``nbytes`` of fresh memory, untimed.

    On a VM that hands memory back to its host (free page reporting), the first
    write to memory costs ~2 s/GiB; whichever method allocated first would pay it.
    """
    if nbytes > 0:
        np.ones(nbytes, dtype=np.uint8)  # ones, not empty: every page is written, then freed at once


def _best_of(repeat: int, func, before=None):
    """Run ``func`` ``repeat`` times; return (best seconds, all seconds, result of the best run)."""
    times, best, best_result = [], math.inf, None
    for _ in range(repeat):
        if before is not None:
            before()
        gc.collect()
        _pretouch(_pretouch_bytes)
        start = time.perf_counter()
        result = func()
        seconds = time.perf_counter() - start
        times.append(round(seconds, 4))
        if seconds < best:
            best, best_result = seconds, result
        else:
            del result
        _log(f"    {seconds:.3f} s")
    return best, times, best_result


def _pair_keys(i: np.ndarray, j: np.ndarray, n: int) -> np.ndarray:
    keys = i.astype(np.int64) * np.int64(n) + j.astype(np.int64)
    keys.sort()
    return keys


def _git_state() -> dict | None:
    """The commit of the daskjoin checkout and the files that differ from it (timings depend on both)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain", "--", "daskjoin"], cwd=root, capture_output=True,
                                text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if commit.returncode:
        return None
    return {"commit": commit.stdout.strip(), "modified": [line[3:] for line in status.stdout.splitlines()]}


def machine_info() -> dict:
    import dask
    import distributed
    import numba
    import scipy

    import daskjoin

    versions = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "scipy": scipy.__version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "daskjoin": getattr(daskjoin, "__version__", "unknown"),
    }
    for name in ("sklearn", "zarr"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = None
    try:
        import psutil

        memory = psutil.virtual_memory().total
    except ImportError:
        memory = None
    return {
        "hostname": socket.gethostname(),
        "git": _git_state(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cores": _cores(),
        "numba_threads": numba.get_num_threads(),
        "memory_bytes": memory,
        "versions": versions,
    }


# --------------------------------------------------------------------------- methods


def bench_kernel(x: np.ndarray, eps: float, repeat: int):
    from daskjoin.io.synth import eps_for_neighbours
    from daskjoin.kernels import get_kernel

    kernel = get_kernel("grid", "cpu")
    _log("  kernel: JIT warm-up on a small sample (not timed)")
    sample = x[: min(len(x), WARMUP_ROWS)]
    # The grid index picks its code path by points per cell: warm both the sample at the
    # full-size eps (sparse grid) and at the eps giving the same density as the full run.
    kernel.self_join(sample, eps)
    kernel.self_join(sample, eps_for_neighbours(len(sample), x.shape[1], NEIGHBOURS))
    _log("  kernel: get_kernel('grid', 'cpu').self_join(x, eps)")
    seconds, times, (i, j, _dist) = _best_of(repeat, lambda: kernel.self_join(x, eps))
    return seconds, times, i, j


def warm_cluster(client, d: int, tmp: str) -> None:
    """A tiny end-to-end join of the same dimensionality: worker imports and Numba JIT, not timed."""
    import daskjoin
    from daskjoin.io.synth import eps_for_neighbours, synth
    from distributed import wait

    n = WARMUP_ROWS
    path = synth("uniform", n, d, os.path.join(tmp, f"warmup-{d}d.zarr"), seed=1, overwrite=True)
    for _ in range(2):  # first: statistics pass; second: cached statistics, as the timed runs
        df = daskjoin.similarity_join(path, eps=eps_for_neighbours(n, d, NEIGHBOURS), client=client).persist()
        wait(df)
        len(df)
        del df


def bench_e2e(client, path: str, eps: float, repeat: int, expected: int) -> dict:
    import daskjoin
    from distributed import wait

    cache = path.rstrip(os.sep) + ".daskjoin"
    counts = []

    def clear_cache():
        shutil.rmtree(cache, ignore_errors=True)

    def release():
        gc.collect()
        client.run(gc.collect)

    def run():
        df = daskjoin.similarity_join(path, eps=eps, client=client).persist()
        wait(df)
        return df

    def measure(label, before):
        seconds_list = []
        best = math.inf
        for _ in range(repeat):
            before()
            release()
            client.run(_pretouch, _pretouch_bytes)
            start = time.perf_counter()
            df = run()
            seconds = time.perf_counter() - start
            seconds_list.append(round(seconds, 4))
            best = min(best, seconds)
            pairs = len(df)  # on the persisted frame: counts the in-memory partitions
            counts.append(pairs)
            _log(f"    {seconds:.3f} s, {pairs:,} pairs, {df.npartitions} partitions")
            if pairs != expected:
                _mismatch(f"end to end ({label}) found {pairs:,} pairs, the kernel {expected:,}")
            del df
        release()
        return best, seconds_list

    _log("  e2e: first run (statistics pass; cache deleted before each repeat)")
    first, first_times = measure("first run", clear_cache)
    _log("  e2e: warm re-run (cached statistics)")
    warm, warm_times = measure("warm re-run", lambda: None)
    plan = daskjoin.plan_join(path, eps=eps, client=client)
    return {
        "first": first,
        "first_times": first_times,
        "warm": warm,
        "warm_times": warm_times,
        "pairs": counts[-1],
        "plan": {
            "method": plan.method,
            "partitioning": plan.partitioning,
            "ntasks": plan.ntasks,
            "memory_budget": plan.memory_budget,
            "notes": list(plan.notes),
        },
    }


def bench_ckdtree(x: np.ndarray, eps: float, repeat: int):
    from scipy.spatial import cKDTree

    def run():
        return cKDTree(x).query_pairs(eps, output_type="ndarray")

    _log("  scipy: cKDTree(x).query_pairs(eps, output_type='ndarray') (tree build included)")
    return _best_of(repeat, run)


def bench_sklearn(x: np.ndarray, eps: float, repeat: int):
    from sklearn.neighbors import radius_neighbors_graph

    def run():
        graph = radius_neighbors_graph(x, eps, mode="distance", n_jobs=-1)
        rows = np.repeat(np.arange(graph.shape[0]), np.diff(graph.indptr))
        self_loops = int(np.count_nonzero(graph.indices == rows))
        return graph.nnz, self_loops

    _log("  sklearn: radius_neighbors_graph(x, eps, mode='distance', n_jobs=-1)")
    seconds, times, (nnz, self_loops) = _best_of(repeat, run)
    off_diagonal = nnz - self_loops
    if off_diagonal % 2:
        print(f"  note: sklearn graph has an odd number of off-diagonal entries ({off_diagonal:,}); not symmetric")
    return seconds, times, off_diagonal // 2, nnz, self_loops


# --------------------------------------------------------------------------- one workload


def run_workload(n: int, d: int, args, client, tmp: str) -> dict:
    from daskjoin.io.synth import eps_for_neighbours, generate, synth

    eps = eps_for_neighbours(n, d, NEIGHBOURS)
    name = f"{_n_label(n)} x {d}-d"
    _log(f"workload {name}: eps = {eps:.6g}, load average {_load()}")
    x = generate("uniform", n, d, seed=0)
    result = {"workload": name, "n": n, "d": d, "eps": eps, "load_before": _load(), "methods": []}
    methods = result["methods"]

    def add(method, seconds, pairs, times, **extra):
        methods.append({"method": method, "seconds": seconds, "pairs": pairs, "times": times, **extra})

    # 1. kernel alone
    k_seconds, k_times, ki, kj = bench_kernel(x, eps, args.repeat)
    exact = int(len(ki))
    add("daskjoin kernel (grid, cpu)", k_seconds, exact, k_times, key="kernel")

    # 2. end to end from Zarr
    if client is not None:
        path = os.path.join(tmp, f"uniform-{n}-{d}d.zarr")
        _log(f"  writing the Zarr store {path}")
        synth("uniform", n, d, path, seed=0, overwrite=True)
        import zarr

        if not np.array_equal(zarr.open_array(path, mode="r")[:], x):
            _mismatch(f"{name}: the Zarr store does not hold the generated points")
        _log("  e2e: warming the cluster with a tiny join (not timed)")
        warm_cluster(client, d, tmp)
        e2e = bench_e2e(client, path, eps, args.repeat, exact)
        add("daskjoin e2e, first run", e2e["first"], e2e["pairs"], e2e["first_times"], key="e2e_first")
        add("daskjoin e2e, warm re-run", e2e["warm"], e2e["pairs"], e2e["warm_times"], key="e2e_warm")
        result["e2e_plan"] = e2e["plan"]
        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(path + ".daskjoin", ignore_errors=True)

    # 3. scipy cKDTree
    c_seconds, c_times, cpairs = bench_ckdtree(x, eps, args.repeat)
    add("scipy cKDTree.query_pairs (1 core)", c_seconds, int(len(cpairs)), c_times, key="ckdtree")
    if len(cpairs) != exact:
        _mismatch(f"{name}: kernel {exact:,} pairs, cKDTree {len(cpairs):,} pairs")
    elif not args.no_pair_check:
        _log("  checking that the kernel and cKDTree return the same set of pairs (not timed)")
        same = np.array_equal(_pair_keys(ki, kj, n), _pair_keys(cpairs[:, 0], cpairs[:, 1], n))
        result["same_pair_set"] = bool(same)
        if same:
            _log("    same pairs")
        else:
            _mismatch(f"{name}: kernel and cKDTree report the same count but different pairs")
    del ki, kj, cpairs
    gc.collect()

    # 4. scikit-learn
    sk_label = f"sklearn radius_neighbors_graph ({_cores()} jobs)"
    if args.skip_sklearn:
        result["sklearn_note"] = "skipped (--skip-sklearn)"
    else:
        try:
            import psutil

            available = psutil.virtual_memory().available
        except ImportError:
            available = None
        need = 2 * exact * SKLEARN_BYTES_PER_NNZ
        if available is not None and need > 0.7 * available:
            note = f"skipped: needs about {need / 2**30:.1f} GiB, {available / 2**30:.1f} GiB available"
            result["sklearn_note"] = note
            _log(f"  sklearn {note}")
        else:
            try:
                s_seconds, s_times, s_pairs, nnz, loops = bench_sklearn(x, eps, args.repeat)
                add(sk_label, s_seconds, s_pairs, s_times, key="sklearn", nnz=nnz, self_loops=loops)
            except MemoryError:
                result["sklearn_note"] = "skipped: MemoryError"
                _log("  sklearn: MemoryError, skipped")

    # ratios and targets
    for m in methods:
        m["vs_ckdtree"] = c_seconds / m["seconds"]
        m["vs_kernel"] = k_seconds / m["seconds"]
        m["diff_vs_exact"] = m["pairs"] - exact
        if m["key"] == "kernel" and d in KERNEL_TARGET:
            goal = KERNEL_TARGET[d]
            m["target"] = f">= {goal:g}x faster than cKDTree: {'MET' if m['vs_ckdtree'] >= goal else 'MISSED'}"
            m["target_met"] = m["vs_ckdtree"] >= goal
        elif m["key"].startswith("e2e"):
            slowdown = m["seconds"] / k_seconds
            m["target"] = (f"within {E2E_TARGET:g}x of kernel ({slowdown:.2f}x): "
                           f"{'MET' if slowdown <= E2E_TARGET else 'MISSED'}")
            m["target_met"] = slowdown <= E2E_TARGET
    result["exact_pairs"] = exact
    result["load_after"] = _load()
    del x
    gc.collect()
    return result


# --------------------------------------------------------------------------- report


def table(results: list[dict]) -> str:
    header = ("workload", "method", "seconds", "pairs", "vs exact", "vs cKDTree", "vs kernel", "target")
    rows = []
    for r in results:
        for m in r["methods"]:
            rows.append((
                r["workload"], m["method"], f"{m['seconds']:.3f}", f"{m['pairs']:,}",
                f"{m['diff_vs_exact']:+,}" if m["diff_vs_exact"] else "exact",
                f"{m['vs_ckdtree']:.2f}x", f"{m['vs_kernel']:.2f}x", m.get("target", ""),
            ))
        if r.get("sklearn_note"):
            rows.append((r["workload"], "sklearn radius_neighbors_graph", "-", "-", "-", "-", "-", r["sklearn_note"]))
    widths = [max(len(h), *(len(row[k]) for row in rows)) for k, h in enumerate(header)]
    right = {2, 3, 4, 5, 6}

    def fmt(row):
        return "  ".join(c.rjust(w) if k in right else c.ljust(w) for k, (c, w) in enumerate(zip(row, widths))).rstrip()

    lines = [fmt(header), fmt(tuple("-" * w for w in widths))]
    lines += [fmt(row) for row in rows]
    return "\n".join(lines)


def markdown_table(results: list[dict]) -> str:
    lines = ["| workload | method | seconds | pairs | vs exact | vs cKDTree | vs kernel | target |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in results:
        for m in r["methods"]:
            diff = f"{m['diff_vs_exact']:+,}" if m["diff_vs_exact"] else "exact"
            lines.append(f"| {r['workload']} | {m['method']} | {m['seconds']:.3f} | {m['pairs']:,} | {diff} | "
                         f"{m['vs_ckdtree']:.2f}x | {m['vs_kernel']:.2f}x | {m.get('target', '')} |")
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="points per workload (default 1,000,000)")
    parser.add_argument("--dims", nargs="+", default=["2", "6"], help="dimensionalities, e.g. --dims 2 6 or 2,6")
    parser.add_argument("--repeat", type=int, default=1, help="take the best of R runs of each method (default 1)")
    parser.add_argument("--skip-sklearn", action="store_true", help="do not run scikit-learn")
    parser.add_argument("--skip-e2e", action="store_true", help="do not run daskjoin end to end (no cluster)")
    parser.add_argument("--no-pair-check", action="store_true",
                        help="compare only counts, not the pair sets, of the kernel and cKDTree")
    parser.add_argument("--pretouch-mib", type=int, default=1024,
                        help="before each timed run, write and free this much fresh memory (untimed) in the "
                             "process that will run it, so that no method pays the VM's first-touch cost (default "
                             "1024; 0: off)")
    parser.add_argument("--out-json", default=None,
                        help="results file (default benchmarks/results/cpu-<hostname>-<date>.json)")
    args = parser.parse_args(argv)
    args.dims = [int(v) for item in args.dims for v in str(item).split(",") if v.strip()]
    if args.n < 2 or args.repeat < 1 or not args.dims or min(args.dims) < 1:
        parser.error("need --n >= 2, --repeat >= 1 and dimensionalities >= 1")
    if args.out_json is None:
        stamp = datetime.date.today().isoformat()
        args.out_json = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                     f"cpu-{socket.gethostname()}-{stamp}.json")
    return args


def main(args, client=None) -> int:
    global _pretouch_bytes
    _pretouch_bytes = max(0, args.pretouch_mib) << 20
    info = machine_info()
    _log(f"machine: {info['platform']}, {info['usable_cores']} usable cores (cpu_count {info['cpu_count']}), "
         f"numba threads {info['numba_threads']}, load average {_load()}")
    _log("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    if info["git"]:
        _log(f"daskjoin checkout: commit {info['git']['commit'][:12]}, modified: {info['git']['modified'] or 'none'}")
    load = _load()
    if load and load[0] > 0.5 * info["usable_cores"]:
        _log(f"WARNING: the machine is busy (load average {load}); timings will be noisy")
    started = datetime.datetime.now().astimezone()
    results = []
    with tempfile.TemporaryDirectory(prefix="daskjoin-bench-") as tmp:
        for d in args.dims:
            results.append(run_workload(args.n, d, args, client, tmp))
            print()
            print(table(results), flush=True)
            print()
    report = {
        "benchmark": "daskjoin benchmarks/bench_cpu.py",
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "args": {"n": args.n, "dims": args.dims, "repeat": args.repeat, "skip_sklearn": args.skip_sklearn,
                 "skip_e2e": args.skip_e2e, "neighbours": NEIGHBOURS,
                 "pretouch_mib": args.pretouch_mib, "pair_check": not args.no_pair_check},
        "machine": info,
        "targets": {"kernel_vs_ckdtree": {str(d): v for d, v in KERNEL_TARGET.items()}, "e2e_vs_kernel": E2E_TARGET},
        "cluster": None if client is None else {"options": _cluster_options_json()},
        "results": results,
        "mismatches": list(_mismatches),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out_json)), exist_ok=True)
    with open(args.out_json, "w") as f:
        json.dump(report, f, indent=2)
    print("=" * 100)
    print(f"daskjoin CPU benchmark, {info['usable_cores']} cores, {started:%Y-%m-%d}, repeat {args.repeat}")
    print(table(results))
    print()
    print(markdown_table(results))
    print()
    print(f"results written to {args.out_json}")
    if _mismatches:
        print(f"!!!!!!!! {len(_mismatches)} MISMATCH(ES): " + "; ".join(_mismatches))
        return 1
    print("pair counts agree: kernel, cKDTree" + ("" if client is None else ", end to end"))
    return 0


def _cluster_options_json() -> dict:
    from daskjoin.execution.cluster import local_cluster_options

    return {k: v for k, v in local_cluster_options().items() if isinstance(v, (int, str, bool, type(None)))}


if __name__ == "__main__":
    ARGS = parse_args()
    if ARGS.skip_e2e:
        sys.exit(main(ARGS))
    from distributed import Client, LocalCluster

    from daskjoin.execution.cluster import local_cluster_options

    _log("starting LocalCluster(**local_cluster_options()) (not timed)")
    with LocalCluster(**local_cluster_options()) as CLUSTER, Client(CLUSTER) as CLIENT:
        STATUS = main(ARGS, CLIENT)
    sys.exit(STATUS)
