#!/usr/bin/env python
"""The kNN brute force's filters side by side on the GPU: float32 GEMM (``fp32``) against the tensor cores
(``fp16``, ``int8``), the driver's ``rows`` on the same data, every filter's rows checked identical to the
first's.  Where ``knn_tc.TC_FROM_D`` comes from::

    python3 benchmarks/bench_knn_filters.py --n 200000 --dims 8,16,32,64,128 --out-json filters.json
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--dims", default="8,16,32,64,128")
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--data", default="clusters", help="a synth generator: clusters, uniform, expo")
    p.add_argument("--filters", default="fp32,fp16,int8")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--out-json", default=None)
    args = p.parse_args(argv)
    import cupy as cp

    from daskjoin.io.synth import generate
    from daskjoin.kernels.registry import make

    results = []
    for d in [int(v) for v in args.dims.split(",")]:
        x = generate(args.data, args.n, d, seed=0)
        ids = np.arange(len(x), dtype=np.int64)
        first = None
        row = {"n": args.n, "d": d, "k": args.k, "data": args.data, "seconds": {}}
        for name in args.filters.split(","):
            make("knn", "brute", "gpu", x[:3000], args.k, 0, filter=name).rows(x[:3000], ids[:3000], True)
            best = np.inf
            for _ in range(args.repeat):
                cp.cuda.Device().synchronize()
                start = time.perf_counter()
                out = make("knn", "brute", "gpu", x, args.k, 0, filter=name).rows(x, ids, True)
                cp.cuda.Device().synchronize()
                best = min(best, time.perf_counter() - start)
            if first is None:
                first = out
            same = all(np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
                       for a, b in zip(out, first))
            row["seconds"][name] = round(best, 4)
            row.setdefault("identical_to_first", {})[name] = same
            print(f"{args.data} {args.n:,} x {d:<4} k={args.k} {name:<5} {best:8.3f} s  identical: {same}", flush=True)
        results.append(row)
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump({"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
