#!/usr/bin/env python
"""How evenly slabs cut by estimated work share the pairs: each slab's actual pairs (its Parquet part's rows)
against the mean, with the slabs placed by the sample's pairs at eps and (``planning.estimate.shape_pairs``)
at a grown radius where the sample holds few.  CPU, in this process; a deterministic measure, no timing::

    python3 benchmarks/slab_balance.py --n 2000000 --d 3 --sample-rows 2000 --budgets 64MB,256MB

``--sample-rows`` below the default (20,000) gives a 2M-row input as few sampled pairs as a 20M-row one has.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

import numpy as np


def slab_pairs(x, eps, budget, shape: bool, client=None):
    import time

    import dask
    import pyarrow.parquet as pq

    import daskjoin as dj
    from daskjoin.planning import estimate

    saved = estimate.SHAPE_PAIRS
    estimate.SHAPE_PAIRS = saved if shape else 0  # 0: the pairs at eps always suffice (the earlier rule)
    dj.clear_cache()
    try:
        with tempfile.TemporaryDirectory() as tmp, dask.config.set({"daskjoin.row-group-bytes": "1GiB"}):
            plan = dj.plan_join(x, eps=eps, partitioning="slabs", memory_budget=budget, backend="cpu")
            out = os.path.join(tmp, "pairs.parquet")
            tasks, start = [], time.perf_counter()
            if client is None:
                dj.similarity_join(x, eps=eps, partitioning="slabs", memory_budget=budget, backend="cpu", out=out)
            else:
                from distributed import get_task_stream

                with get_task_stream(client) as stream:
                    dj.similarity_join(x, eps=eps, partitioning="slabs", memory_budget=budget, backend="cpu", out=out,
                                       client=client)
                tasks = [ss["stop"] - ss["start"] for t in stream.data if "partition_to_parquet" in str(t.get("key", ""))
                         for ss in t.get("startstops", ()) if ss.get("action") == "compute"]
            wall = time.perf_counter() - start
            files = sorted(f for f in os.listdir(out) if f.endswith(".parquet"))
            pairs = np.array([pq.ParquetFile(os.path.join(out, f)).metadata.num_rows for f in files])
    finally:
        estimate.SHAPE_PAIRS = saved
    reason = plan.partitioning_reason
    timing = {"wall_s": round(wall, 2)}
    if tasks:
        timing.update(task_median_s=round(float(np.median(tasks)), 3), task_max_s=round(float(max(tasks)), 3),
                      task_sum_s=round(float(sum(tasks)), 2))
    return {**timing, "tasks": len(plan.partitions), "files": len(files), "pairs": int(pairs.sum()),
            "max_over_mean": round(float(pairs.max() / pairs.mean()), 2),
            "max_over_median": round(float(pairs.max() / max(1.0, np.median(pairs))), 2),
            "reason": reason[reason.find("slabs cut"):] if "slabs cut" in reason else reason}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2_000_000)
    p.add_argument("--d", type=int, default=3)
    p.add_argument("--kind", default="expo")
    p.add_argument("--neighbours", type=float, default=32.0)
    p.add_argument("--sample-rows", type=int, default=2000)
    p.add_argument("--budgets", default="64MB,256MB")
    p.add_argument("--workers", type=int, default=0, help="run on a LocalCluster of this many one-thread workers "
                   "(task times from its task stream) instead of in this process")
    p.add_argument("--out-json", default=None)
    args = p.parse_args(argv)
    import dask
    from scipy.spatial import cKDTree

    from daskjoin.io.synth import generate

    x = generate(args.kind, args.n, args.d, seed=0)
    probe = x[:200_000].astype(np.float64)
    tree, lo, hi = cKDTree(probe), 1e-6, 1.0
    want = args.neighbours * len(probe) / len(x) * len(probe) / 2  # pairs among the probe rows
    for _ in range(40):  # bisection on the probe's pair count
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tree.count_neighbors(tree, mid) / 2 < want else (lo, mid)
    eps = hi
    rows, client = [], None
    if args.workers:
        from distributed import Client, LocalCluster

        client = Client(LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True))
    with dask.config.set({"daskjoin.sample-rows": args.sample_rows}):
        for budget in args.budgets.split(","):
            for shape in (False, True):
                r = {"budget": budget, "shape": shape, **slab_pairs(x, eps, budget, shape, client)}
                rows.append(r)
                times = (f"  wall {r['wall_s']} s, tasks median {r['task_median_s']} / max {r['task_max_s']} s"
                         if "task_max_s" in r else f"  wall {r['wall_s']} s")
                print(f"{budget:>6} {'grown radius' if shape else 'eps only':<13} tasks {r['tasks']:>4}  pairs "
                      f"{r['pairs']:,}  largest slab {r['max_over_mean']}x the mean, {r['max_over_median']}x the "
                      f"median{times}  ({r['reason']})", flush=True)
    if client is not None:
        client.close()
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump({"n": args.n, "d": args.d, "kind": args.kind, "eps": eps, "sample_rows": args.sample_rows,
                       "workers": args.workers, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
