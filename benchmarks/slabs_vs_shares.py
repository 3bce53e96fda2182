"""Slabs against the planner's choice on 1..g GPUs: counts and Parquet runs of one fresh uniform store.

    python benchmarks/slabs_vs_shares.py N GPUS MODES [--cpu]
    e.g. python benchmarks/slabs_vs_shares.py 20000000 1,2,4 auto,slabs,auto:pq,slabs:pq

A mode is a partitioning (``auto``, ``slabs``, ``chunk_pairs``), with ``:pq`` for pairs to Parquet instead of
a count.  For each GPU count (a ``LocalCUDACluster`` on the first g GPUs, or g CPU workers with ``--cpu``) and
mode: the first run (slabs: it builds the sorted copy, which later runs reuse), then the best of 3 (counts)
or 2 (Parquet) with Dask's task stream (tasks, each worker's busy seconds).  JSON to ``$OUT/mg_probe.json``
(or /tmp), a table last.  Asked whether slab counts over a reused sorted copy scale where query shares,
which read every row in every task, do not (results ``slabs-vs-shares-*.json``).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_multigpu as bm  # noqa: E402
import daskjoin as dj  # noqa: E402
from daskjoin.io.synth import eps_for_neighbours, synth  # noqa: E402


def main():
    cpu = "--cpu" in sys.argv
    n = int(sys.argv[1])
    gpus = [int(g) for g in sys.argv[2].split(",")]
    modes = sys.argv[3].split(",")
    outdir = os.environ.get("OUT", "/tmp")
    work = "/tmp/mgp"
    os.makedirs(work, exist_ok=True)
    store = os.path.join(work, "u.zarr")
    shutil.rmtree(store, ignore_errors=True)
    synth("uniform", n, 3, store, seed=0)
    eps = eps_for_neighbours(n, 3, 32)
    backend = "cpu" if cpu else "gpu"
    rows = []
    for g in gpus:
        client, _ = bm.start(g, cpu)
        for mode in modes:
            part, out = mode.split(":") if ":" in mode else (mode, "count")
            opts = dict(eps=eps, client=client, backend=backend, memory_budget="16GB", partitioning=part)
            prefix = "partition_count" if out == "count" else "partition_to_parquet"

            def fn(opts=opts, out=out):
                if out == "count":
                    return dj.similarity_join(store, output="count", **opts)
                path = os.path.join(work, "pairs.parquet")
                shutil.rmtree(path, ignore_errors=True)  # a fresh output each run
                return dj.similarity_join(store, out=path, **opts).pairs

            t = time.perf_counter()
            fn()
            first_s = time.perf_counter() - t
            best = None
            for _ in range(3 if out == "count" else 2):
                v, wall, st = bm.timed(client, prefix, fn)
                if best is None or wall < best[0]:
                    best = (wall, st, v)
            plan = dj.plan_join(store, output="count" if out == "count" else "pairs", **opts).explain()
            row = dict(gpus=g, mode=mode, first_s=round(first_s, 3), best_s=round(best[0], 3), value=int(best[2]),
                       tasks=best[1], plan=[line for line in plan.splitlines() if "partitioning" in line or "tasks" in line])
            rows.append(row)
            print(json.dumps(row), flush=True)
            with open(os.path.join(outdir, "mg_probe.json"), "w") as f:
                json.dump(rows, f, indent=1)
    from daskjoin.execution.cluster import close_default

    close_default()
    print("\nTABLE")
    for r in rows:
        print(f"{r['gpus']} {r['mode']:22s} first {r['first_s']:7.3f} best {r['best_s']:7.3f} "
              f"tasks {r['tasks'].get('tasks')} busy {r['tasks'].get('worker_busy_s')} value {r['value']}")


if __name__ == "__main__":
    main()
