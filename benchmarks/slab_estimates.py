#!/usr/bin/env python
"""Each slab's estimated pairs against its exact count, and against a GPU task's device room: the plan a
join of 20M x 3-d rows gets under a budget (the same on either backend), counted slab by slab on this
machine's CPU.  A deterministic measure, no timing::

    python3 benchmarks/slab_estimates.py --dist uniform --budget 256MB [--n 20000000] [--unweighted]

``--unweighted``: the sampled owners near the top of the keys not weighted back (``slabs.top_weights``), as
before 2026-11-27.  Prints one line (and ``--out-json``): slabs, those whose pairs outgrow the device's room
(``0.8 * budget / 56`` pairs: they are sorted there in passes), actual / estimated pairs (min, p10, p90, max)
and the largest slab over the median.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
from unittest import mock

import numpy as np

#: exponential data's eps for ~32 neighbours at 20M x 3-d (``bench_scale.calibrated_eps``, seed 0)
EXPO_EPS_20M = 0.00036477913249670526


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dist", default="uniform", choices=["uniform", "expo"])
    ap.add_argument("--n", type=int, default=20_000_000)
    ap.add_argument("--budget", default="256MB")
    ap.add_argument("--eps", type=float, default=None, help="default: ~32 neighbours a row")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "daskjoin-slab-estimates"))
    ap.add_argument("--unweighted", action="store_true")
    ap.add_argument("--out-json", default=None)
    args = ap.parse_args()

    from distributed import Client

    from daskjoin.config import parse_bytes
    from daskjoin.execution.cluster import ClusterRunner
    from daskjoin.io.synth import eps_for_neighbours, synth
    from daskjoin.io.zarr_in import open_points
    from daskjoin.kernels.gpu_common import LIMITED_SHARE
    from daskjoin.kernels.grid_gpu import OUTPUT_BYTES_PER_PAIR, SORT_BYTES_PER_PAIR
    from daskjoin.kinds.epsilon import JoinJob
    from daskjoin.planning import planner

    os.makedirs(args.workdir, exist_ok=True)
    store = os.path.join(args.workdir, f"{args.dist}-{args.n}.zarr")
    if not os.path.exists(store):
        synth(args.dist, args.n, 3, store, seed=0)
    eps = args.eps or (eps_for_neighbours(args.n, 3, 32) if args.dist == "uniform" else EXPO_EPS_20M)
    budget = parse_bytes(args.budget)
    unit = mock.patch.object(planner, "top_weights", lambda keys, *a: np.ones(len(keys)))
    with Client(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as client:
        if args.unweighted:
            unit.start()
        try:
            plan = planner.make_plan(open_points(store, "A"), None, eps, method="grid", partitioning="slabs",
                                     backend="gpu", memory_budget=budget, runner=ClusterRunner(client), gpu=True)
        finally:
            if args.unweighted:
                unit.stop()
        # the GPU's plan, its slabs counted by the CPU driver (the same pairs)
        job = JoinJob.from_plan(dataclasses.replace(plan, backend="cpu"), with_distance=False)
        got = np.array([job.count(p) for p in plan.partitions], np.float64)
    est = np.array([p.est_pairs for p in plan.partitions])
    room = LIMITED_SHARE * budget / (OUTPUT_BYTES_PER_PAIR + SORT_BYTES_PER_PAIR)
    ratio = got / np.maximum(est, 1.0)
    row = {"dist": args.dist, "n": args.n, "eps": eps, "budget": args.budget, "weighted": not args.unweighted,
           "slabs": plan.ntasks, "over_room": int((got > room).sum()), "largest_over_room": round(got.max() / room, 3),
           "actual_over_estimate": {"min": round(ratio.min(), 3), "p10": round(float(np.quantile(ratio, 0.1)), 3),
                                    "p90": round(float(np.quantile(ratio, 0.9)), 3), "max": round(ratio.max(), 3)},
           "largest_over_median": round(got.max() / np.median(got), 3)}
    print(json.dumps(row))
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
