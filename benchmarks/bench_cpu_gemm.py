#!/usr/bin/env python
"""CPU ``brute``: the nested loop against the GEMM-filtered join (``kernels/brute_gemm.py``), with scikit-learn's
brute-force radius search and scipy's cKDTree beside them on the same rows, in one process.

    python benchmarks/bench_cpu_gemm.py [--n 20000] [--dims 4,8,16,32,64,128] [--kinds uniform,embeddings]

Each row: one self-join count (eps for about ``--k`` neighbours a point, from a sample), best of ``--repeat``
after a warm-up call (Numba compiled, BLAS threads started).  Peers count ordered pairs within eps their own way
(float64 distances in their own order): their counts are shown beside the exact one.  Results go to
``benchmarks/results/cpu-gemm-<host>-<date>.json``.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
import time

import numpy as np


def eps_for_k(x: np.ndarray, k: int, sample: int = 500, seed: int = 0) -> float:
    """The median distance from ``sample`` rows to their k-th nearest other row (float64, brute force)."""
    rng = np.random.default_rng(seed)
    rows = x[rng.choice(len(x), min(sample, len(x)), replace=False)].astype(np.float64)
    xs = x.astype(np.float64)
    d2 = (rows ** 2).sum(1)[:, None] + (xs ** 2).sum(1)[None, :] - 2 * rows @ xs.T
    kth = np.sort(np.maximum(d2, 0), axis=1)[:, k]  # column 0 is the row itself
    return float(np.sqrt(np.median(kth)))


def best(fn, repeat: int):
    fn()  # warm-up
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--dims", default="4,8,16,32,64,128")
    p.add_argument("--kinds", default="uniform,embeddings")
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--skip-peers", action="store_true")
    p.add_argument("--out-json", default=None)
    args = p.parse_args()

    from daskjoin.io.synth import generate
    from daskjoin.kernels.brute import BruteJoin
    from daskjoin.kernels.brute_gemm import GemmBruteJoin

    rows = []
    for kind in args.kinds.split(","):
        for d in map(int, args.dims.split(",")):
            x = generate(kind, args.n, d, seed=0)
            eps = eps_for_k(x, args.k)
            row = {"kind": kind, "n": args.n, "d": d, "eps": eps}
            row["nested_s"], nested = best(lambda: BruteJoin(x, None, eps).count(), args.repeat)
            row["gemm_s"], gemm = best(lambda: GemmBruteJoin(x, None, eps, filter="fp32").count(), args.repeat)
            assert nested == gemm, (nested, gemm)
            row["pairs"] = gemm
            row["gemm_speedup"] = row["nested_s"] / row["gemm_s"]
            if not args.skip_peers:
                from scipy.spatial import cKDTree
                from sklearn.neighbors import NearestNeighbors

                def sk():
                    nn = NearestNeighbors(radius=eps, algorithm="brute").fit(x)
                    return (sum(len(r) for r in nn.radius_neighbors(x, return_distance=False)) - len(x)) // 2

                row["sklearn_brute_s"], row["sklearn_pairs"] = best(sk, args.repeat)
                row["ckdtree_s"], row["ckdtree_pairs"] = best(
                    lambda: int(cKDTree(x).query_pairs(eps, output_type="ndarray").shape[0]), args.repeat)
            rows.append(row)
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    out = args.out_json or os.path.join(os.path.dirname(__file__), "results",
                                        f"cpu-gemm-{socket.gethostname()[:12]}-{dt.date.today()}.json")
    with open(out, "w") as f:
        json.dump({"date": str(dt.date.today()), "cores": os.cpu_count(), "args": vars(args), "rows": rows}, f,
                  indent=1)
    print(f"\n{'kind':11} {'d':>4} {'pairs':>10} {'nested s':>9} {'gemm s':>8} {'x':>6} {'sklearn s':>10} {'cKDTree s':>10}")
    for r in rows:
        print(f"{r['kind']:11} {r['d']:>4} {r['pairs']:>10,} {r['nested_s']:>9.3f} {r['gemm_s']:>8.3f} "
              f"{r['gemm_speedup']:>6.2f} {r.get('sklearn_brute_s', float('nan')):>10.3f} "
              f"{r.get('ckdtree_s', float('nan')):>10.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
