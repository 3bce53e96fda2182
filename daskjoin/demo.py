"""``make demo``: synthesise points in Zarr, plan and run an exact self-join on a local cluster.

Run it with ``python -m daskjoin.demo [--n N] [--d D] [--dir DIR]``.
"""
from __future__ import annotations

import argparse
import os
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000, help="points (default 1,000,000)")
    parser.add_argument("--d", type=int, default=3, help="dimensions (default 3)")
    parser.add_argument("--dir", default="demo-data", help="where the Zarr input and Parquet output go")
    args = parser.parse_args(argv)

    import daskjoin as dj
    from daskjoin.execution.cluster import local_cluster_options
    from daskjoin.io.synth import eps_for_neighbours, synth
    from distributed import Client, LocalCluster

    os.makedirs(args.dir, exist_ok=True)
    points = os.path.join(args.dir, f"uniform-{args.n}x{args.d}.zarr")
    if not os.path.exists(points):
        start = time.perf_counter()
        synth("uniform", args.n, args.d, points, seed=0)
        print(f"synthesised {args.n:,} uniform points in {args.d}-d -> {points} ({time.perf_counter() - start:.1f} s)")
    eps = eps_for_neighbours(args.n, args.d, 32)
    out = os.path.join(args.dir, "pairs.parquet")
    with LocalCluster(**local_cluster_options()) as cluster, Client(cluster) as client:
        print(f"local Dask cluster: {len(cluster.workers)} worker(s), dashboard {client.dashboard_link}")
        plan = dj.plan_join(points, eps=eps, client=client)
        print(plan.explain())
        result = dj.similarity_join(points, eps=eps, client=client, out=out, overwrite=True, progress=True)
        print(f"\n{result}")
        first = result.read().head(5)
        print(f"\nfirst pairs (i < j, dist <= eps = {eps:.6f}):\n{first.to_string(index=False)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
