"""[scale] benchmark: large ε-joins to Parquet on a GPU cluster under memory budgets, with the balance of tasks.

Run on a GPU machine with dask-cuda (``benchmarks/device_scale.sh`` does it on a lent one):

    python benchmarks/bench_scale.py [--n 20000000] [--d 3] [--dists uniform,expo] [--budgets 16GB,2GB,256MB]

For each distribution (uniform in the unit cube; exponential, λ = 40, in every dimension; Gaussian
clusters: ``--dists clusters``) a fresh
Zarr store is written and eps chosen for ~32 neighbours a point; the exact count is taken once
(count-only run).  Then for each memory budget the join is written to Parquet on a
``LocalCUDACluster`` (one worker per GPU, ``GPU=1``; daskjoin's ``start_local_cuda``) and the
run reports: wall time, tasks, the pairs (checked against the count), the spread of task times
(from Dask's task stream), how busy the GPU was (nvidia-smi's utilisation sampled every 100 ms
while the join ran) and the peak device memory a task's pool held (sampled in the worker),
against the budget, and how many slab partitions outgrew the device's room (sorted there in passes over
id ranges / on the host: "over room" passes/host).  JSON to benchmarks/results/, a table last.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

import numpy as np

import daskjoin as dj
from daskjoin.io.synth import eps_for_neighbours, synth


def calibrated_eps(kind: str, n: int, d: int, neighbours: float, seed: int = 0) -> float:
    """eps giving ~``neighbours`` a point on the n-point dataset: bisection on the pair count of its first
    400,000 rows (rows are drawn independently, so they are a sample), scaled to n."""
    from scipy.spatial import cKDTree

    from daskjoin.io.synth import generate

    m = min(n, 400_000)
    tree = cKDTree(generate(kind, n, d, seed=seed, stop=m))
    scale = n / m  # neighbours a point grow with n
    lo, hi = 1e-7, 1.0
    for _ in range(40):
        mid = (lo * hi) ** 0.5
        per_point = (tree.count_neighbors(tree, mid) - m) / m * scale  # ordered pairs and each point with itself
        lo, hi = (mid, hi) if per_point < neighbours else (lo, mid)
    return float(hi)


class GpuSampler:
    """nvidia-smi's utilisation and memory of every visible GPU every 100 ms, on a thread, while a block runs
    (with several GPUs the busy share and mean are over all of them)."""

    def __init__(self):
        self.util, self.mem = [], []
        self._proc = None
        self._thread = None

    def __enter__(self):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")  # nvidia-smi itself lists every GPU
        self._proc = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
                                       "-lms", "100", *(["-i", visible] if visible else [])],
                                      stdout=subprocess.PIPE, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self):
        for line in self._proc.stdout:
            try:
                u, m = (float(v) for v in line.strip().split(",")[:2])
            except ValueError:
                continue
            self.util.append(u)
            self.mem.append(m)

    def __exit__(self, *exc):
        self._proc.terminate()
        self._proc.wait()

    def summary(self) -> dict:
        u = np.asarray(self.util or [0.0])
        return {"gpu_busy_mean_pct": round(float(u.mean()), 1), "gpu_busy_share": round(float((u > 0).mean()), 3),
                "samples": len(self.util), "smi_memory_used_max_mib": max(self.mem or [0])}


def _pool_sampler_start(dask_worker=None):
    """In a worker: sample CuPy's pool (bytes in use and held) every 10 ms until stopped."""
    import cupy as cp

    pool = cp.get_default_memory_pool()
    state = {"run": True, "used": 0, "held": 0}

    def loop():
        while state["run"]:
            state["used"] = max(state["used"], pool.used_bytes())
            state["held"] = max(state["held"], pool.total_bytes())
            time.sleep(0.01)

    pool.free_all_blocks()
    threading.Thread(target=loop, daemon=True).start()
    dask_worker.daskjoin_pool_state = state  # the worker outlives these pickled-by-value functions
    return True


def _pool_sampler_stop(dask_worker=None):
    state = dask_worker.daskjoin_pool_state
    state["run"] = False
    time.sleep(0.05)
    return {"used": state["used"], "held": state["held"]}


def _over_room_start(dask_worker=None):
    """In a worker: count the slab partitions whose pairs outgrew the device's room (daskjoin logs each at
    INFO): sorted on the device in passes over id ranges, or on the host."""
    import logging

    class Count(logging.Handler):
        def __init__(self):
            super().__init__(logging.INFO)
            self.counts = {"passes": 0, "host": 0}

        def emit(self, record):
            text = record.getMessage()
            if "outgrow the device's room" in text:
                self.counts["host" if "sorted on the host" in text else "passes"] += 1

    log = logging.getLogger("daskjoin.kinds.epsilon")
    old = getattr(dask_worker, "daskjoin_over_room", None)
    if old is not None:
        log.removeHandler(old)
    handler = dask_worker.daskjoin_over_room = Count()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return True


def _over_room_stop(dask_worker=None):
    """The counts (a task run again after running out of memory is counted again), the logger as it was."""
    import logging

    log = logging.getLogger("daskjoin.kinds.epsilon")
    log.removeHandler(dask_worker.daskjoin_over_room)
    log.setLevel(logging.NOTSET)
    return dict(dask_worker.daskjoin_over_room.counts)


def task_times(stream) -> list[float]:
    out = []
    for t in stream:
        if "partition_to_parquet" not in str(t.get("key", "")):
            continue
        for ss in t.get("startstops", ()):
            if ss.get("action") == "compute":
                out.append(ss["stop"] - ss["start"])
    return out


def worker_busy(stream) -> dict:
    """Seconds each worker spent in the join's Parquet tasks, and the least busy worker's share of the busiest's
    (1.0: every GPU as busy as the busiest; one worker: 1.0)."""
    busy = {}
    for t in stream:
        if "partition_to_parquet" not in str(t.get("key", "")):
            continue
        for ss in t.get("startstops", ()):
            if ss.get("action") == "compute":
                busy[t.get("worker", "?")] = busy.get(t.get("worker", "?"), 0.0) + ss["stop"] - ss["start"]
    if not busy:
        return {}
    return {"worker_busy_s": sorted(round(v, 2) for v in busy.values()),
            "busy_spread": round(min(busy.values()) / max(busy.values()), 3) if len(busy) > 1 else 1.0}


def spread(times: list[float]) -> dict:
    if not times:
        return {}
    t = np.sort(np.asarray(times))
    return {"tasks": len(t), "min_s": round(float(t[0]), 3), "median_s": round(float(np.median(t)), 3),
            "p90_s": round(float(np.quantile(t, 0.9)), 3), "max_s": round(float(t[-1]), 3),
            "sum_s": round(float(t.sum()), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000_000)
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--dists", default="uniform,expo")
    ap.add_argument("--budgets", default="16GB,2GB,256MB")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out-json", default=None)
    args = ap.parse_args()

    from distributed import get_task_stream

    from daskjoin.execution.cluster import close_default, start_local_cuda

    work = args.workdir or tempfile.mkdtemp(prefix="bench-scale-")
    os.makedirs(work, exist_ok=True)
    client = start_local_cuda()
    gpus = len(client.scheduler_info()["workers"])
    rows = []
    try:
        for dist in args.dists.split(","):
            store = os.path.join(work, f"{dist}.zarr")
            shutil.rmtree(store, ignore_errors=True)
            t0 = time.perf_counter()
            synth(dist, args.n, args.d, store, seed=0)
            synth_s = time.perf_counter() - t0
            eps = eps_for_neighbours(args.n, args.d, 32) if dist == "uniform" else calibrated_eps(dist, args.n, args.d, 32)
            t0 = time.perf_counter()
            count = dj.similarity_join(store, eps=eps, output="count", client=client, backend="gpu")
            count_s = time.perf_counter() - t0
            print(f"{dist}: {args.n:,} x {args.d}, eps {eps:.6g}, {count:,} pairs (count {count_s:.2f} s, "
                  f"synth {synth_s:.1f} s)", flush=True)
            for budget in args.budgets.split(","):
                out = os.path.join(work, "pairs.parquet")
                shutil.rmtree(out, ignore_errors=True)
                client.run(_pool_sampler_start)
                client.run(_over_room_start)
                with GpuSampler() as smi, get_task_stream(client) as stream:
                    t0 = time.perf_counter()
                    result = dj.similarity_join(store, eps=eps, out=out, memory_budget=budget, client=client,
                                                backend="gpu")
                    wall = time.perf_counter() - t0
                pools = client.run(_pool_sampler_stop)
                over = list(client.run(_over_room_stop).values())
                used = max(p["used"] for p in pools.values())
                held = max(p["held"] for p in pools.values())
                from daskjoin.config import parse_bytes

                row = {"dist": dist, "n": args.n, "d": args.d, "eps": eps, "budget": budget, "gpus": gpus,
                       "wall_s": round(wall, 2), "plan_s": round(result.plan_seconds, 2), "pairs": result.pairs,
                       "exact": result.pairs == count, "files": result.files, "bytes": result.bytes,
                       "partitions": result.plan.ntasks, "partitioning": result.plan.partitioning,
                       "pairs_per_s": round(result.pairs / wall), "task_times": spread(task_times(stream.data)),
                       **worker_busy(stream.data),
                       **smi.summary(), "pool_used_max_bytes": int(used), "pool_held_max_bytes": int(held),
                       "within_budget": used <= parse_bytes(budget), "tasks_inside": result.tasks,
                       "over_room_passes": sum(o["passes"] for o in over),
                       "over_room_host": sum(o["host"] for o in over)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(store, ignore_errors=True)
    finally:
        close_default()
    device = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                            text=True).stdout.strip().splitlines()
    report = {"date": dt.date.today().isoformat(), "device": device, "rows": rows}
    path = args.out_json or os.path.join(os.path.dirname(__file__), "results",
                                         f"scale-{dt.date.today().isoformat()}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"\n{'dist':8} {'budget':>7} {'tasks':>6} {'wall s':>7} {'plan s':>6} {'Mpairs/s':>9} {'task med/max s':>15} "
          f"{'GPU busy':>8} {'pool peak':>10} {'exact':>5} {'over room':>9}")
    for r in rows:
        t = r["task_times"]
        print(f"{r['dist']:8} {r['budget']:>7} {r['partitions']:>6} {r['wall_s']:>7.2f} {r['plan_s']:>6.2f} "
              f"{r['pairs_per_s'] / 1e6:>9.1f} "
              f"{t.get('median_s', 0):>7.2f}/{t.get('max_s', 0):<7.2f} {r['gpu_busy_mean_pct']:>7.0f}% "
              f"{r['pool_used_max_bytes'] / 2**20:>8.0f}Mi {str(r['exact']):>5} "
              f"{r['over_room_passes']:>3}/{r['over_room_host']:<3}")


if __name__ == "__main__":
    main()
