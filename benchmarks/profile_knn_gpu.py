#!/usr/bin/env python
"""Where a GPU kNN driver's ``rows`` spends its time: build, query order, search, finish, transfer.

Each step is timed with the device synchronised before and after (best of ``--repeat``), on the
``3d`` workload of ``bench_knn.py`` (uniform points, k = 16) or a clustered 64-d one::

    python3 benchmarks/profile_knn_gpu.py --n 2000000 --d 3 --method grid
    python3 benchmarks/profile_knn_gpu.py --n 1000000 --d 64 --method brute
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2_000_000)
    p.add_argument("--d", type=int, default=3)
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--method", default="grid")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--filter", default=None, help="brute's filter: auto, fp32, fp16, int8 (default: the driver's)")
    p.add_argument("--out-json", default=None)
    args = p.parse_args(argv)

    import cupy as cp

    from daskjoin.io.synth import generate
    from daskjoin.kernels import knn_gpu
    from daskjoin.kernels.knn import NO_ID
    from daskjoin.kernels.registry import make

    x = generate("uniform" if args.d <= 6 else "clusters", args.n, args.d, seed=0)
    ids = np.arange(len(x), dtype=np.int64)
    options = {} if args.filter is None else {"filter": args.filter}
    make("knn", args.method, "gpu", x[:3000], args.k, 0, **options).rows(x[:3000], ids[:3000], True)  # compile / warm

    def timed(fn):
        cp.cuda.Device().synchronize()
        start = time.perf_counter()
        out = fn()
        cp.cuda.Device().synchronize()
        return time.perf_counter() - start, out

    best: dict[str, float] = {}
    for _ in range(args.repeat):
        steps = {}
        steps["build driver (index, upload)"], driver = timed(lambda: make("knn", args.method, "gpu", x, args.k, 0, **options))
        steps["queries to the device"], q = timed(lambda: cp.ascontiguousarray(cp.asarray(x, dtype=cp.float64)))
        dev_ids = cp.asarray(ids)
        hd, hj = cp.full((len(x), args.k), cp.inf), cp.full((len(x), args.k), NO_ID, dtype=cp.int64)
        if args.method == "grid":
            steps["query order"], order = timed(lambda: knn_gpu._query_order_device(q, driver.host))
            steps["search kernel"], _ = timed(lambda: driver._run(q, dev_ids, order, hd, hj, True))
        else:
            steps["search (products + filter)"], _ = timed(lambda: driver._run(x, ids, hd, hj, True))
        steps["finish and copy to host"], _ = timed(lambda: knn_gpu._rows_on_device(hd, hj, ids))
        steps["rows() whole"], _ = timed(lambda: driver.rows(x, ids, True))
        for name, t in steps.items():
            best[name] = min(best.get(name, np.inf), t)
    for name, t in best.items():
        print(f"{name:<34} {t:8.4f} s", flush=True)
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump({"n": args.n, "d": args.d, "k": args.k, "method": args.method, "filter": args.filter,
                       "best_seconds": best}, f, indent=1)


if __name__ == "__main__":
    main()
