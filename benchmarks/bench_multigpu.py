"""[multi-gpu] benchmark: ε-joins on 1, 2, 4 GPUs of one machine, one dask-cuda worker per GPU.

Run on a machine with several GPUs (``benchmarks/device_multigpu.sh`` does it on a lent one):

    python benchmarks/bench_multigpu.py [--parts scaling,outofcore,highd] [--gpus 1,2]
        [--n 20000000] [--ooc-n 200000000] [--ooc-budget 8GB] [--highd-n 10000000] [--highd-d 128]

Parts (each row is written to the JSON as soon as it is measured):

- ``scaling``: a fresh Zarr store of ``--n`` x 3-d uniform points, eps for ~32 neighbours.  For each GPU
  count a ``LocalCUDACluster`` on the first g GPUs (daskjoin's ``start_local_cuda``), a first count and
  Parquet run (kernels compiled or loaded, plan made), then the best of ``--repeat`` repeats of each: wall
  time, speedup over one GPU, the tasks (the plan cuts a large join for the GPU workers), each GPU's busy
  time and the task-time spread (Dask's task stream), the share of the wall spent outside tasks
  (scheduling, the client), inside tasks the kernels+transfers+sort against Parquet writing; the kernel
  alone on the whole array in this process (one GPU, warmed) for the ratio.
- ``outofcore``: ``--ooc-n`` x 3-d uniform points in Zarr, ~32 neighbours a point, on all ``--gpus``' largest
  count: the exact count (count-only run), then the pairs streamed to Parquet under ``--ooc-budget``;
  the pairs written checked against the count (manifest and Parquet footers), time, peak host memory (the
  machine's, sampled, and each worker's peak RSS), peak GPU memory (nvidia-smi per GPU, CuPy pool per worker).
- ``highd``: ``daskjoin synth embeddings`` ``--highd-n`` x ``--highd-d`` in Zarr, eps for ~64 neighbours; the
  exact count (GPU brute force, tensor-core filter) on each GPU count, largest first, ``--highd-repeat`` times
  (the best after the first, which loads the kernels); a count predicted to run past ``--deadline`` seconds
  from the start is skipped and says so.

``--cpu`` runs the same on CPU workers (a LocalCluster of g processes) at small sizes, to check the script.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import cloudpickle
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_scale  # noqa: E402
import daskjoin as dj  # noqa: E402
from daskjoin.io.synth import eps_for_neighbours, synth  # noqa: E402

T0 = time.perf_counter()
cloudpickle.register_pickle_by_value(bench_scale)  # its pool sampler runs on workers, where benchmarks/ is not on the path


class Samplers:
    """While a block runs: each GPU's utilisation and memory (nvidia-smi every 200 ms) and the machine's
    memory in use (psutil every 200 ms), as peaks above the level before."""

    def __init__(self, gpu: bool):
        self.gpu = gpu
        self.util, self.mem, self.host = {}, {}, []
        self._stop = threading.Event()

    def __enter__(self):
        import psutil

        self._base = psutil.virtual_memory().used
        self._threads = [threading.Thread(target=self._host, daemon=True)]
        if self.gpu:
            self._proc = subprocess.Popen(["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used",
                                           "--format=csv,noheader,nounits", "-lms", "200"],
                                          stdout=subprocess.PIPE, text=True)
            self._threads.append(threading.Thread(target=self._smi, daemon=True))
        for t in self._threads:
            t.start()
        return self

    def _host(self):
        import psutil

        while not self._stop.is_set():
            self.host.append(psutil.virtual_memory().used)
            self._stop.wait(0.2)

    def _smi(self):
        for line in self._proc.stdout:
            try:
                k, u, m = (float(v) for v in line.strip().split(",")[:3])
            except ValueError:
                continue
            self.util.setdefault(int(k), []).append(u)
            self.mem.setdefault(int(k), []).append(m)

    def __exit__(self, *exc):
        self._stop.set()
        if self.gpu:
            self._proc.terminate()
            self._proc.wait()

    def summary(self) -> dict:
        out = {"host_used_peak_gib": round(max(self.host or [0]) / 2**30, 2),
               "host_used_rise_gib": round((max(self.host or [0]) - self._base) / 2**30, 2)}
        if self.gpu:
            out["gpu_busy_mean_pct"] = {k: round(float(np.mean(v)), 1) for k, v in sorted(self.util.items())}
            out["gpu_mem_peak_mib"] = {k: max(v) for k, v in sorted(self.mem.items())}
        return out


def _peak_rss(dask_worker=None):
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def task_stats(stream, prefix: str, wall: float) -> dict:
    """Per worker: busy seconds (tasks computing); over tasks: the spread of their times; the share of the
    wall not covered by the busiest worker's tasks."""
    busy, times = {}, []
    for t in stream:
        if not str(t.get("key", "")).startswith(prefix) and prefix not in str(t.get("key", "")):
            continue
        for ss in t.get("startstops", ()):
            if ss.get("action") == "compute":
                dur = ss["stop"] - ss["start"]
                times.append(dur)
                busy[t.get("worker", "?")] = busy.get(t.get("worker", "?"), 0.0) + dur
    if not times:
        return {}
    s = np.sort(np.asarray(times))
    most = max(busy.values())
    return {"tasks": len(s), "task_min_s": round(float(s[0]), 3), "task_median_s": round(float(np.median(s)), 3),
            "task_max_s": round(float(s[-1]), 3), "worker_busy_s": sorted(round(v, 2) for v in busy.values()),
            "busy_spread": round(min(busy.values()) / most, 3) if len(busy) > 1 else 1.0,
            "outside_tasks_share": round(max(0.0, 1 - most / wall), 3) if wall else None}


def timed(client, prefix: str, fn):
    from distributed import get_task_stream

    with get_task_stream(client) as stream:
        start = time.perf_counter()
        value = fn()
        wall = time.perf_counter() - start
    return value, wall, task_stats(stream.data, prefix, wall)


#: GPU tasks a worker runs at once (``--slots-per-gpu``): with two, one task's Parquet pieces are written while
#: the next task computes on the same device (each task thread holds one of the worker's ``GPU`` resources)
SLOTS = {"per_gpu": 1}


def start(g: int, cpu: bool):
    from daskjoin.execution.cluster import _become_default, close_default, start_local_cuda

    close_default()
    t = time.perf_counter()
    if cpu:
        from distributed import LocalCluster

        client = _become_default(lambda: LocalCluster(n_workers=g, threads_per_worker=1, memory_limit=0,
                                                      dashboard_address=":0"))
    else:
        # memory_limit=0: no Dask pausing/spilling by a limit sized from MemTotal, which on some lent machines
        # starts far below the memory they have
        slots = SLOTS["per_gpu"]
        extra = {} if slots == 1 else {"threads_per_worker": slots, "resources": {"GPU": slots}}
        client = start_local_cuda(CUDA_VISIBLE_DEVICES=",".join(str(k) for k in range(g)), memory_limit=0, **extra)
    client.wait_for_workers(g)
    return client, time.perf_counter() - t


def _free_client_gpu(backend: str) -> None:
    """What this process's CuPy pool holds given back: GPU 0 is also a worker's."""
    if backend == "gpu":
        import cupy as cp

        cp.get_default_memory_pool().free_all_blocks()
        cp.get_default_pinned_memory_pool().free_all_blocks()


def save(report: dict, path: str) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(report, f, indent=1)
    os.replace(path + ".tmp", path)


def scaling(args, report, path, backend):
    from bench_e2e import kernel_alone

    store = os.path.join(args.workdir, "uniform.zarr")
    shutil.rmtree(store, ignore_errors=True)
    t = time.perf_counter()
    synth("uniform", args.n, 3, store, seed=0)
    eps = eps_for_neighbours(args.n, 3, 32)
    info = {"n": args.n, "d": 3, "eps": eps, "synth_s": round(time.perf_counter() - t, 2)}
    kernel, _ = kernel_alone(store, eps, backend)
    _free_client_gpu(backend)
    info["kernel_alone"] = {k: round(v, 4) if isinstance(v, float) else v for k, v in kernel.items()}
    report["scaling"] = {"workload": info, "rows": []}
    print(f"scaling: {args.n:,} x 3, eps {eps:.6g}; kernel alone count {kernel['count_s']:.3f} s, "
          f"pairs to host {kernel['pairs_to_host_s']:.2f} s ({kernel['pairs']:,} pairs)", flush=True)
    outs = iter(os.path.join(args.workdir, f"pairs-{k}.parquet") for k in range(1_000_000))

    def fresh() -> str:  # a new output path each run: a user's usual case (replacing an output removes the old one)
        for old in os.listdir(args.workdir):
            if old.startswith("pairs-"):
                shutil.rmtree(os.path.join(args.workdir, old), ignore_errors=True)
        return next(outs)

    for g in args.gpus:
        client, start_s = start(g, args.cpu)
        row = {"gpus": g, "cluster_start_s": round(start_s, 2), "slots_per_gpu": SLOTS["per_gpu"]}
        if SLOTS["per_gpu"] > 1:  # plan for every slot (the planner counts one GPU task a worker)
            import dask.config

            dask.config.set({"daskjoin.parallel-tasks": SLOTS["per_gpu"] * g})
        opts = dict(eps=eps, client=client, backend=backend, memory_budget=args.budget)
        for k, how in enumerate(args.count_partitioning):
            got = _counts(client, store, {**opts, "partitioning": how}, args.repeat)
            if k == 0:  # the first listed is the row's count
                row.update(count_first_s=got["first_s"], count_s=got["count_s"], count_pairs=got["count"],
                           count_exact=got["count"] == kernel["pairs"], count_tasks=got["tasks"],
                           plan_count=got["plan"])
            else:
                row.setdefault("count_other", []).append({**got, "exact": got["count"] == kernel["pairs"]})
        _, row["parquet_first_s"], _ = timed(client, "partition_to_parquet",
                                             lambda: dj.similarity_join(store, out=fresh(), **opts))
        best = None
        for _ in range(args.repeat):
            out = fresh()
            res, wall, stats = timed(client, "partition_to_parquet", lambda: dj.similarity_join(store, out=out, **opts))
            if best is None or wall < best[0]:
                best = (wall, stats, res)
        wall, stats, res = best
        row.update(parquet_s=round(wall, 3), parquet_plan_s=round(res.plan_seconds, 3), parquet_pairs=res.pairs,
                   parquet_exact=res.pairs == kernel["pairs"], parquet_bytes=res.bytes, parquet_tasks=stats,
                   inside_tasks=res.tasks, pairs_per_s=round(res.pairs / wall))
        base = report["scaling"]["rows"][0] if report["scaling"]["rows"] else row
        row["speedup_count"] = round(base["count_s"] / row["count_s"], 2)
        row["speedup_parquet"] = round(base["parquet_s"] / row["parquet_s"], 2)
        row["count_x_kernel"] = round(row["count_s"] / kernel["count_s"], 1)
        for k, other in enumerate(row.get("count_other", ())):
            other["speedup"] = round(base["count_other"][k]["count_s"] / other["count_s"], 2)
        report["scaling"]["rows"].append(row)
        save(report, path)
        print(json.dumps({k: v for k, v in row.items() if k != "plan_count"}), flush=True)
    fresh()
    shutil.rmtree(store, ignore_errors=True)


def outofcore(args, report, path, backend):
    g = max(args.gpus)
    store = os.path.join(args.workdir, "big.zarr")
    shutil.rmtree(store, ignore_errors=True)
    t = time.perf_counter()
    synth("uniform", args.ooc_n, 3, store, seed=1)
    eps = eps_for_neighbours(args.ooc_n, 3, 32)
    row = {"gpus": g, "n": args.ooc_n, "d": 3, "eps": eps, "synth_s": round(time.perf_counter() - t, 2),
           "budget": args.ooc_budget, "partitioning": args.ooc_partitioning}
    print(f"out of core: {args.ooc_n:,} x 3 written in {row['synth_s']} s, eps {eps:.6g}", flush=True)
    report["outofcore"] = row
    row["counts"] = []
    for k in args.gpus:  # the count on every GPU count (the largest last: its cluster writes the Parquet)
        client, start_s = start(k, args.cpu)
        opts = dict(eps=eps, client=client, backend=backend, memory_budget=args.ooc_count_budget)
        for how in args.count_partitioning:
            got = _counts(client, store, {**opts, "partitioning": how}, args.ooc_count_repeat)
            row["counts"].append({"gpus": k, "cluster_start_s": round(start_s, 2), "partitioning": how, **got})
            print(f"  {k} GPUs, {how}: count {got['count']:,} in {got['count_s']:.2f} s (first {got['first_s']:.2f} s, "
                  f"plan {got['plan_s']:.2f} s, {got['tasks'].get('tasks')} tasks)", flush=True)
            save(report, path)
    row["count"] = row["counts"][-1]["count"]
    row["counts_agree"] = len({c["count"] for c in row["counts"]}) == 1
    for c in row["counts"]:
        one = next(o for o in row["counts"] if o["partitioning"] == c["partitioning"])
        c["speedup"] = round(one["count_s"] / c["count_s"], 2)
    row["writes"] = []
    for k in sorted([g] if args.ooc_write_gpus is None else args.ooc_write_gpus, reverse=True):  # the largest first: its cluster is running
        if k != g:
            client, _ = start(k, args.cpu)
            opts["client"] = client
        write = _ooc_write(args, client, store, opts, row["count"])
        write["speedup"] = None
        row["writes"].append(write)
        save(report, path)
        print(json.dumps({key: v for key, v in write.items() if key != "plan"}), flush=True)
    one = next((w for w in row["writes"] if w["gpus"] == min(w["gpus"] for w in row["writes"])), None)
    for w in row["writes"]:
        w["speedup"] = round(one["parquet_s"] / w["parquet_s"], 2)
    if row["writes"]:
        row.update(row["writes"][0])  # the largest GPU count's run, for the table
    save(report, path)
    shutil.rmtree(store, ignore_errors=True)


def _counts(client, store: str, opts: dict, repeat: int) -> dict:
    """A count as a user makes it: the plan (``plan_s``: its data passes, statistics and a sorted copy for
    slabs, where not cached), the first call (``first_s``: kernels compiled or loaded), then the best of
    ``repeat`` more, with the plan and its task times."""
    t = time.perf_counter()
    plan = dj.plan_join(store, output="count", **opts)
    plan_s = time.perf_counter() - t
    count, first, _ = timed(client, "partition_count", lambda: dj.similarity_join(store, output="count", **opts))
    best = (first, None, count)
    for _ in range(repeat):
        n, wall, stats = timed(client, "partition_count", lambda: dj.similarity_join(store, output="count", **opts))
        if best[1] is None or wall < best[0]:
            best = (wall, stats, n)
    if best[1] is None:  # no repeat: the first call's figures
        best = (first, {}, count)
    counts = {count, best[2]}
    return {"partitioning": opts.get("partitioning", "auto"), "plan_s": round(plan_s, 2), "first_s": round(first, 3),
            "count_s": round(best[0], 3), "count": best[2], "repeat_agrees": len(counts) == 1, "tasks": best[1],
            "plan": plan.explain()}


def _ooc_write(args, client, store, opts, count) -> dict:
    """The pairs to Parquet under the out-of-core budget, checked against the count, with peaks sampled."""
    import pyarrow.parquet as pq

    out = os.path.join(args.workdir, "big-pairs.parquet")
    shutil.rmtree(out, ignore_errors=True)
    if not args.cpu:
        client.run(bench_scale._pool_sampler_start)
    with Samplers(gpu=not args.cpu) as samplers:
        res, wall, stats = timed(client, "partition_to_parquet", lambda: dj.similarity_join(
            store, out=out, **{**opts, "memory_budget": args.ooc_budget}, partitioning=args.ooc_partitioning))
    footers = sum(pq.read_metadata(os.path.join(out, f)).num_rows for f in os.listdir(out) if f.endswith(".parquet"))
    write = dict(gpus=len(client.scheduler_info()["workers"]), parquet_s=round(wall, 2),
                 plan_s=round(res.plan_seconds, 2), pairs=res.pairs, footer_rows=footers,
                 exact=res.pairs == count == footers, files=res.files, parquet_gib=round(res.bytes / 2**30, 2),
                 tasks=stats, inside_tasks=res.tasks, pairs_per_s=round(res.pairs / wall), plan=res.plan.explain(),
                 **samplers.summary(),
                 worker_peak_rss_gib=sorted(round(v / 2**30, 2) for v in client.run(_peak_rss).values()))
    if not args.cpu:
        pools = client.run(bench_scale._pool_sampler_stop)
        write["pool_used_peak_gib"] = sorted(round(p["used"] / 2**30, 2) for p in pools.values())
    shutil.rmtree(out, ignore_errors=True)
    return write


def eps_for_k(store: str, k: int, cpu: bool) -> float:
    """eps for ~k neighbours a point on average (``bench_highd.eps_for_k``: the (k m)-th smallest of m = 2,000
    sampled rows' nearest distances, ``KEEP_PER_ROW * k`` a row)."""
    import zarr

    x = zarr.open_array(store, mode="r")
    if cpu:
        from scipy.spatial import cKDTree

        a = np.asarray(x[:])
        rows = a[np.random.default_rng(0).choice(len(a), min(2000, len(a)), replace=False)]
        from bench_highd import KEEP_PER_ROW

        d, _ = cKDTree(a).query(rows, min(len(a), KEEP_PER_ROW * k + 1))
        return float(np.sort(d[:, 1:].ravel())[len(rows) * k - 1])
    from bench_highd import eps_for_k as gpu_eps

    return gpu_eps(np.asarray(x[:]), k)


def highd(args, report, path, backend):
    store = os.path.join(args.workdir, "emb.zarr")
    shutil.rmtree(store, ignore_errors=True)
    t = time.perf_counter()
    synth("embeddings", args.highd_n, args.highd_d, store, seed=0)
    info = {"n": args.highd_n, "d": args.highd_d, "synth_s": round(time.perf_counter() - t, 2)}
    info["eps"] = eps_for_k(store, 64, args.cpu)
    _free_client_gpu(backend)
    report["highd"] = {"workload": info, "rows": []}
    print(f"highd: {args.highd_n:,} x {args.highd_d} in {info['synth_s']} s, eps {info['eps']:.6g}", flush=True)
    seconds = {}
    for g in sorted(args.gpus, reverse=True):
        guess = max(seconds.values(), default=0.0) * max(seconds, default=g) / g if seconds else 0.0
        left = args.deadline - (time.perf_counter() - T0)
        if guess and guess * 1.15 + 30 > left:
            row = {"gpus": g, "skipped": f"predicted {guess:.0f} s from the {max(seconds)}-GPU run; "
                                         f"{left:.0f} s left before the deadline"}
        else:
            client, start_s = start(g, args.cpu)
            opts = dict(eps=info["eps"], client=client, backend=backend, memory_budget=args.highd_budget)
            plan = dj.plan_join(store, output="count", **opts)
            runs = [timed(client, "partition_count", lambda: dj.similarity_join(store, output="count", **opts))
                    for _ in range(max(1, args.highd_repeat))]
            count, wall, stats = min(runs[1:] or runs, key=lambda r: r[1])  # the first loads the kernels
            seconds[g] = wall
            row = {"gpus": g, "cluster_start_s": round(start_s, 2), "count": count, "count_s": round(wall, 2),
                   "count_first_s": round(runs[0][1], 2), "tasks": stats, "plan": plan.explain()}
        report["highd"]["rows"].append(row)
        save(report, path)
        print(json.dumps({k: v for k, v in row.items() if k != "plan"}), flush=True)
    counts = {r["count"] for r in report["highd"]["rows"] if "count" in r}
    report["highd"]["counts_agree"] = len(counts) <= 1
    save(report, path)
    shutil.rmtree(store, ignore_errors=True)


def table(report: dict) -> None:
    sc = report.get("scaling")
    if sc:
        k = sc["workload"]["kernel_alone"]
        print(f"\nscaling {sc['workload']['n']:,} x 3 (kernel alone: count {k['count_s']:.3f} s)")
        print(f"{'GPUs':>4} {'count s':>8} {'x1':>5} {'tasks':>5} {'parquet s':>9} {'x1':>5} {'tasks':>5} "
              f"{'Mpairs/s':>8} {'busy spread':>11} {'outside':>7} {'exact':>5}")
        for r in sc["rows"]:
            pt = r["parquet_tasks"]
            print(f"{r['gpus']:>4} {r['count_s']:>8.2f} {r['speedup_count']:>5.2f} {r['count_tasks'].get('tasks', 0):>5} "
                  f"{r['parquet_s']:>9.2f} {r['speedup_parquet']:>5.2f} {pt.get('tasks', 0):>5} "
                  f"{r['pairs_per_s'] / 1e6:>8.1f} {pt.get('busy_spread', 0):>11.2f} "
                  f"{pt.get('outside_tasks_share', 0):>7.2f} {str(r['count_exact'] and r['parquet_exact']):>5}")
            for o in r.get("count_other", ()):
                print(f"     count with {o['partitioning']}: {o['count_s']:.3f} s (x{o.get('speedup')}, first "
                      f"{o['first_s']:.2f} s), {o['tasks'].get('tasks', 0)} tasks, exact {o['exact']}")
    oc = report.get("outofcore")
    if oc and "counts" in oc and "count" in oc:
        counts = ", ".join(f"{c['gpus']} GPUs {c.get('partitioning', 'auto')} {c['count_s']:.2f} s (x{c['speedup']}, "
                           f"first {c.get('first_s', c['count_s']):.2f} s)" for c in oc["counts"])
        print(f"\nout of core {oc['n']:,} x 3: count {oc['count']:,} on {counts}, agree {oc['counts_agree']}")
        for w in oc.get("writes", [oc]):
            print(f"  {w['gpus']} GPUs, budget {oc['budget']}: Parquet {w['pairs']:,} pairs ({w['parquet_gib']} GiB, "
                  f"{w['files']} files) in {w['parquet_s']:.1f} s (x{w.get('speedup')}), {w['tasks'].get('tasks')} "
                  f"tasks, exact {w['exact']}; host peak {w['host_used_peak_gib']} GiB, worker RSS "
                  f"{w['worker_peak_rss_gib']} GiB, GPU {w.get('gpu_mem_peak_mib')} MiB")
    hd = report.get("highd")
    if hd:
        w = hd["workload"]
        print(f"\nhighd {w['n']:,} x {w['d']}, eps {w['eps']:.4g}: counts agree {hd.get('counts_agree')}")
        for r in hd["rows"]:
            print(f"  {r['gpus']} GPUs: " + (r["skipped"] if "skipped" in r else
                                            f"{r['count']:,} pairs in {r['count_s']:.1f} s, "
                                            f"{r['tasks'].get('tasks')} tasks, busy {r['tasks'].get('worker_busy_s')}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="scaling,outofcore,highd")
    ap.add_argument("--gpus", default="1,2")
    ap.add_argument("--n", type=int, default=20_000_000)
    ap.add_argument("--budget", default="16GB")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--ooc-n", type=int, default=200_000_000)
    ap.add_argument("--ooc-budget", default="8GB")
    ap.add_argument("--ooc-partitioning", default="chunk_pairs",
                    help="chunk_pairs: no sorted copy of the 200M rows (slabs would build one first)")
    ap.add_argument("--ooc-count-budget", default="48GB", help="the count's tasks hold rows only")
    ap.add_argument("--ooc-count-repeat", type=int, default=0, help="counts after the first, the best reported")
    ap.add_argument("--count-partitioning", default="auto",
                    help="partitionings the counts run with, e.g. auto,slabs (the first is the scaling row's count)")
    ap.add_argument("--ooc-write-gpus", default=None,
                    help="GPU counts that write the Parquet (default: the largest; none: no Parquet run)")
    ap.add_argument("--highd-n", type=int, default=10_000_000)
    ap.add_argument("--highd-d", type=int, default=128)
    ap.add_argument("--highd-budget", default="64GB", help="the count's tasks hold rows only")
    ap.add_argument("--highd-repeat", type=int, default=2,
                    help="counts on each GPU count; the best after the first (which loads the kernels) is reported")
    ap.add_argument("--deadline", type=float, default=560.0, help="seconds from start a highd count may end by")
    ap.add_argument("--cpu", action="store_true", help="CPU workers at small sizes: checks the script")
    ap.add_argument("--slots-per-gpu", type=int, default=1, help="GPU tasks a worker runs at once (task threads; each task plans for the whole --budget, so a GPU may hold that many budgets)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out-json", default=None)
    args = ap.parse_args()
    SLOTS["per_gpu"] = max(1, args.slots_per_gpu)
    args.gpus = sorted(int(g) for g in args.gpus.split(","))
    args.count_partitioning = args.count_partitioning.split(",")
    args.ooc_write_gpus = ([int(g) for g in args.ooc_write_gpus.split(",") if g not in ("", "none")]
                           if args.ooc_write_gpus else None)
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="bench-multigpu-")
    os.makedirs(args.workdir, exist_ok=True)
    backend = "cpu" if args.cpu else "gpu"
    if args.cpu:
        device = ["cpu"]
    else:
        device = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                text=True).stdout.strip().splitlines()
    tag = "cpu" if args.cpu else device[0].replace("NVIDIA ", "").split()[0]
    path = args.out_json or os.path.join(os.path.dirname(__file__), "results",
                                         f"multigpu-{tag}x{len(device)}-{dt.date.today().isoformat()}.json")
    report = {"date": dt.date.today().isoformat(), "device": device, "args": vars(args), "cores": os.cpu_count()}
    from daskjoin.execution.cluster import close_default

    try:
        for part in args.parts.split(","):
            {"scaling": scaling, "outofcore": outofcore, "highd": highd}[part](args, report, path, backend)
    finally:
        close_default()
        save(report, path)
        table(report)


if __name__ == "__main__":
    main()
