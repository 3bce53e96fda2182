#!/usr/bin/env python
"""Where the kNN brute force's tensor-core filter (kernels/knn_tc.py) spends its time: each step timed with
the device synchronised, the tile pairs and candidates of each pass counted::

    python3 benchmarks/profile_knn_tc.py --n 200000 --d 64 --filter fp16
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--data", default="clusters")
    p.add_argument("--filter", default="fp16")
    p.add_argument("--out-json", default=None)
    args = p.parse_args(argv)
    import cupy as cp

    from daskjoin.io.synth import generate
    from daskjoin.kernels import knn_tc
    from daskjoin.kernels.registry import make

    x = generate(args.data, args.n, args.d, seed=0)
    ids = np.arange(len(x), dtype=np.int64)
    make("knn", "brute", "gpu", x[:3000], args.k, 0, filter=args.filter).rows(x[:3000], ids[:3000], True)
    steps: dict[str, float] = {}
    counts: dict[str, list] = {"tile pairs": [], "candidates": []}

    def timed(name, fn):
        def wrapper(*a, **kw):
            cp.cuda.Device().synchronize()
            start = time.perf_counter()
            out = fn(*a, **kw)
            cp.cuda.Device().synchronize()
            steps[name] = steps.get(name, 0.0) + time.perf_counter() - start
            return out
        return wrapper

    original = knn_tc.listed_candidates

    def counting(launch, npairs, room, per_pair=False):
        counts["tile pairs"].append(int(npairs))
        total = 0
        for item in original(launch, npairs, room, per_pair):
            total += item[2]
            yield item
        counts["candidates"].append(total)

    knn_tc.listed_candidates = counting
    for name in ("_nearest_tiles", "_tile_pairs_within", "_offer_pairs"):
        setattr(knn_tc.TcSearch, name, timed(name, getattr(knn_tc.TcSearch, name)))
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    driver = make("knn", "brute", "gpu", x, args.k, 0, filter=args.filter)
    cp.cuda.Device().synchronize()
    steps["build (grid rows of the data)"] = time.perf_counter() - start
    start = time.perf_counter()
    driver.rows(x, ids, True)
    cp.cuda.Device().synchronize()
    steps["rows() whole"] = time.perf_counter() - start
    for name, t in steps.items():
        print(f"{name:<32} {t:8.3f} s", flush=True)
    ntiles = -(-args.n // 128)
    print(f"tile pairs per pass {counts['tile pairs']} of {ntiles * ntiles:,}; candidates per pass "
          f"{counts['candidates']} ({[round(c / args.n, 1) for c in counts['candidates']]} a query)")
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump({"n": args.n, "d": args.d, "k": args.k, "data": args.data, "filter": args.filter,
                       "seconds": steps, **counts}, f, indent=1)


if __name__ == "__main__":
    main()
