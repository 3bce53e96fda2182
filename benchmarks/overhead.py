"""Fixed costs of an end-to-end join: the kernel alone vs a warm ``similarity_join`` (Zarr -> persisted pairs).

    python benchmarks/overhead.py [--backend cpu|gpu] [--workloads 2d,64d] [--repeat 5] [--before OLD.json]

Workloads: ``2d``, uniform points in the unit square (``daskjoin.io.synth``, eps for ~32
neighbours); ``64d``, the Gaussian clusters of DESIGN.md section 7 (``design_clusters_64d``,
eps 0.470697).  Sizes default to 200k / 20k points on the CPU and to the DESIGN.md sizes
(2M / 200k) with ``--backend gpu``.  Each workload is written to a Zarr store (default
chunking, as ``daskjoin import``), then:

* kernel: ``get_kernel(method, backend).self_join(x, eps)`` in this process, points in host
  memory, pairs out in host memory (best of ``--repeat``);
* e2e: ``dj.similarity_join(path, eps=eps, client=client).persist()`` and wait, on a
  one-worker cluster (``LocalCluster`` of one process, or a one-GPU ``LocalCUDACluster``),
  the first run (cold: statistics, kernel compilation) and the best of ``--repeat`` warm runs,
  broken down into *plan* (``daskjoin.api._plan``), *call* (the rest of the
  ``similarity_join`` call: validation, opening the store, building the graph), *task* (the
  tasks' compute time on the worker, from the task stream) and *rest* (scheduling,
  transfers, waiting);
* worker: inside one task, reading the rows (``plan.reader_a.read``) and the kernel.

``--before OLD.json`` prints OLD's warm numbers next to these and stores them in the result.
Results go to ``benchmarks/results/overhead-<cpu-vm|gpu-DEVICE>-<date>.json``.
A LocalCUDACluster spawns its worker: run this as a script, never from stdin.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import tempfile
import time

import numpy as np

DESIGN_64D_EPS = 0.470697
SIZES = {"cpu": {"2d": 200_000, "64d": 20_000}, "gpu": {"2d": 2_000_000, "64d": 200_000}}


def make_store(name: str, n: int, folder: str):
    """(path, x, eps, method) of a workload written to ``folder``."""
    from daskjoin.io.synth import design_clusters_64d, eps_for_neighbours, generate, synth
    from daskjoin.io.zarr_out import ZarrPointsWriter

    path = os.path.join(folder, f"{name}.zarr")
    if name == "2d":
        synth("uniform", n, 2, path, seed=0)
        return path, generate("uniform", n, 2, seed=0), eps_for_neighbours(n, 2, 32), "grid"
    x = design_clusters_64d(n)
    with ZarrPointsWriter(path, d=64, dtype=x.dtype) as writer:
        writer.append(x)
    return path, x, DESIGN_64D_EPS, "brute"


def _sync(backend: str) -> None:
    if backend == "gpu":
        import cupy as cp

        cp.cuda.Device().synchronize()


def time_kernel(x, eps, method, backend, repeat):
    from daskjoin.kernels import get_kernel

    kern = get_kernel(method, backend)
    best, pairs = np.inf, 0
    for _ in range(repeat + 1):  # the first call compiles / warms
        _sync(backend)
        start = time.perf_counter()
        got = kern.self_join(x, eps)
        _sync(backend)
        best = min(best, time.perf_counter() - start)
        pairs = len(got[0])
        del got
    return best, pairs


def worker_breakdown(plan, backend):
    """On a worker: seconds to read one task's rows (as the task does) and to run the kernel on them."""
    from daskjoin.kernels import get_kernel

    try:  # read as the task does (pinned host memory for a GPU kernel, where this version has it)
        from daskjoin.kernels import host_allocator

        empty = host_allocator(backend)
    except ImportError:
        empty = None
    part = plan.partitions[0]
    t0 = time.perf_counter()
    x = plan.reader_a.read(*part.a) if empty is None else plan.reader_a.read(*part.a, empty)
    t1 = time.perf_counter()
    got = get_kernel(plan.method, backend).self_join(x, plan.eps)
    t2 = time.perf_counter()
    return {"read_s": t1 - t0, "kernel_s": t2 - t1, "rows": int(x.shape[0]), "pairs": int(len(got[0]))}


class PlanTimer:
    """Wraps ``daskjoin.api._plan`` to record how long planning took in each call."""

    def __init__(self):
        import daskjoin.api as api

        self.api, self.inner, self.seconds = api, api._plan, []

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return self.inner(*args, **kwargs)
            finally:
                self.seconds.append(time.perf_counter() - start)

        api._plan = timed

    def close(self):
        self.api._plan = self.inner


def _compute_seconds(records) -> float:
    total = 0.0
    for rec in records:  # only the join's tasks run while the stream records
        for ss in rec.get("startstops", ()):
            if ss.get("action") == "compute":
                total += ss["stop"] - ss["start"]
    return total


def e2e_once(path, eps, join_backend, client, plan_timer, gap):
    import daskjoin as dj
    from distributed import get_task_stream, wait

    # Idle a moment first: the previous run's clean-up messages would otherwise hold this run's
    # graph in distributed's batched comms (the client sends at most every 10 ms, the scheduler
    # to a worker every 5 ms), a delay a join started after any pause never sees.
    time.sleep(gap)
    with get_task_stream(client=client) as stream:
        start = time.perf_counter()
        frame = dj.similarity_join(path, eps=eps, backend=join_backend, client=client)
        called = time.perf_counter()
        frame = frame.persist()
        wait(frame)
        done = time.perf_counter()
    pairs = int(frame.map_partitions(len).compute().sum())
    del frame
    plan_s = plan_timer.seconds[-1]
    task_s = _compute_seconds(stream.data)
    total = done - start
    return {
        "total_s": total, "plan_s": plan_s, "call_s": (called - start) - plan_s, "task_s": task_s,
        "rest_s": total - plan_s - ((called - start) - plan_s) - task_s, "pairs": pairs,
    }


def start_cluster(backend: str):
    from distributed import Client, LocalCluster

    if backend == "gpu":
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            LocalCUDACluster = None
        if LocalCUDACluster is not None:
            cluster = LocalCUDACluster(n_workers=1)
            return cluster, Client(cluster)
    from daskjoin.execution.cluster import local_cluster_options

    cluster = LocalCluster(**local_cluster_options())
    return cluster, Client(cluster)


def _warm_worker():
    import daskjoin.api  # noqa: F401 - imports the package on the worker
    from daskjoin.kernels import get_kernel

    x = np.random.default_rng(0).random((2000, 3)).astype(np.float32)
    for method in ("grid", "brute"):
        get_kernel(method, "auto").self_join(x, 0.05)
    return True


def run_workload(name, n, args, client, folder):
    import dask

    import daskjoin as dj

    path, x, eps, method = make_store(name, n, folder)
    info = {"n": int(x.shape[0]), "d": int(x.shape[1]), "eps": eps, "method": method}
    info["kernel_s"], info["kernel_pairs"] = time_kernel(x, eps, method, args.backend, args.repeat)
    timer = PlanTimer()
    try:
        with dask.config.set({"daskjoin.memory-budget": args.memory_budget}):
            runs = [e2e_once(path, eps, args.join_backend, client, timer, args.gap) for _ in range(args.repeat + 1)]
            plan = dj.plan_join(path, eps=eps, backend=args.join_backend, client=client)
    finally:
        timer.close()
    cold, warm = runs[0], runs[1:]
    best = min(warm, key=lambda r: r["total_s"])
    info["e2e_cold"] = cold
    info["e2e_warm_best"] = best
    info["e2e_warm_min"] = {k: min(r[k] for r in warm) for k in ("total_s", "plan_s", "call_s", "task_s", "rest_s")}
    info["e2e_warm_all_s"] = [r["total_s"] for r in warm]
    info["ntasks"] = plan.ntasks
    info["ratio"] = best["total_s"] / info["kernel_s"]
    worker_backend = "gpu" if args.backend == "gpu" else "cpu"
    client.submit(worker_breakdown, plan, worker_backend, pure=False).result()  # warm
    info["worker"] = min((client.submit(worker_breakdown, plan, worker_backend, pure=False).result()
                          for _ in range(args.repeat)), key=lambda r: r["read_s"] + r["kernel_s"])
    if best["pairs"] != info["kernel_pairs"] or cold["pairs"] != best["pairs"]:
        raise AssertionError(f"{name}: e2e found {best['pairs']} pairs, the kernel {info['kernel_pairs']}")
    return info


def print_table(results, before=None):
    keys = ("kernel_s", "total_s", "plan_s", "call_s", "task_s", "rest_s", "read_s", "ratio")
    print(f"\noverhead on {results['device']} ({results['date']}), warm e2e = best of {results['repeat']}, ms")
    header = f"{'workload':9} {'':7}" + "".join(f"{k[:-2] if k.endswith('_s') else k:>9}" for k in keys)
    print(header)
    for name, info in results["workloads"].items():
        for label, src in (("before", (before or {}).get("workloads", {}).get(name)), ("after" if before else "", info)):
            if src is None:
                continue
            best, worker = src["e2e_warm_best"], src.get("worker", {})
            vals = [src["kernel_s"], best["total_s"], best["plan_s"], best["call_s"], best["task_s"], best["rest_s"],
                    worker.get("read_s", float("nan"))]
            cells = "".join(f"{v * 1e3:9.1f}" for v in vals) + f"{src['ratio']:8.2f}x"
            print(f"{name:9} {label:7}{cells}")
    print("kernel: the kernel alone in this process; total = plan + call + task + rest; "
          "read: the task's Zarr read (inside task); ratio = total / kernel")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--join-backend", default=None, help="backend= of the join (default: auto on cpu, gpu on gpu)")
    parser.add_argument("--workloads", default="2d,64d")
    parser.add_argument("--n2d", type=int, default=None)
    parser.add_argument("--n64d", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--memory-budget", default="16GiB", help="one task per join, as bench_gpu.py")
    parser.add_argument("--gap", type=float, default=0.1, help="idle seconds before each e2e run")
    parser.add_argument("--before", default=None, help="an earlier result JSON to compare with")
    parser.add_argument("--out-json", default=None)
    args = parser.parse_args()
    args.join_backend = args.join_backend or ("gpu" if args.backend == "gpu" else "auto")
    sizes = {"2d": args.n2d or SIZES[args.backend]["2d"], "64d": args.n64d or SIZES[args.backend]["64d"]}

    if args.backend == "gpu":
        import cupy as cp

        device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
        tag = f"gpu-{device.replace(' ', '_')}"
    else:
        device, tag = f"cpu ({os.cpu_count()} cores)", "cpu-vm"
    results = {"device": device, "date": dt.date.today().isoformat(), "host": platform.node(),
               "cpus": os.cpu_count(), "backend": args.backend, "join_backend": args.join_backend,
               "repeat": args.repeat, "gap_s": args.gap, "memory_budget": args.memory_budget, "workloads": {}}
    cluster, client = start_cluster(args.backend)
    folder = tempfile.mkdtemp(prefix="daskjoin-overhead-")
    results["loadavg_start"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    results["daskjoin"] = os.path.dirname(__import__("daskjoin").__file__)
    try:
        client.run(_warm_worker)
        for name in args.workloads.split(","):
            results["workloads"][name] = run_workload(name, sizes[name], args, client, folder)
    finally:
        client.close()
        cluster.close()
        shutil.rmtree(folder, ignore_errors=True)
    results["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    before = None
    if args.before:
        with open(args.before) as f:
            before = json.load(f)
        results["before"] = before
    out = args.out_json or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                        f"overhead-{tag}-{results['date']}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print_table(results, before)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
