"""Where ``grid`` and ``brute`` cross over, by dimensionality: the data behind ``method="auto"``.

    python benchmarks/crossover.py --backend gpu --n 200000
    python benchmarks/crossover.py --backend cpu --n 20000

Uniform points in the unit cube and Gaussian clusters (as DESIGN.md §7's 64-d
workload), eps for ~16 neighbours per point; prints seconds per method and d,
and the smallest d from which brute wins on both datasets.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from daskjoin.io.synth import eps_for_neighbours, generate


def clustered_eps(x, k=16, sample=2000, seed=0):
    """eps giving ~k neighbours per point, from a sample's exact k-th neighbour distances."""
    rng = np.random.default_rng(seed)
    rows = x[rng.choice(x.shape[0], min(sample, x.shape[0]), replace=False)].astype(np.float64)
    d2 = ((rows[:, None, :] - x[None, : min(x.shape[0], 20000), :].astype(np.float64)) ** 2).sum(axis=2)
    scale = x.shape[0] / min(x.shape[0], 20000)
    kth = np.sort(d2, axis=1)[:, min(d2.shape[1] - 1, int(np.ceil(k / scale)))]
    return float(np.sqrt(np.median(kth)))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="gpu")
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--dims", default="2,4,8,12,16,24,32,64")
    parser.add_argument("--out-json", default=None)
    args = parser.parse_args()
    from daskjoin.kernels import get_kernel

    warm = np.random.default_rng(0).random((2000, 3))
    for m in ("grid", "brute"):
        get_kernel(m, args.backend).self_count(warm, 0.1)
    table = []
    for kind in ("uniform", "clusters"):
        for d in map(int, args.dims.split(",")):
            x = generate(kind, args.n, d, seed=1)
            eps = eps_for_neighbours(args.n, d, 16) if kind == "uniform" else clustered_eps(x)
            row = {"kind": kind, "d": d, "eps": eps}
            for m in ("grid", "brute"):
                kern = get_kernel(m, args.backend)
                start = time.perf_counter()
                row[f"{m}_pairs"] = kern.self_count(x, eps)
                row[m] = time.perf_counter() - start
            assert row["grid_pairs"] == row["brute_pairs"], row
            table.append(row)
            print(f"{kind:9} d={d:3} eps={eps:.4f} pairs={row['grid_pairs']:>10,} grid {row['grid']:.3f} s  brute {row['brute']:.3f} s",
                  flush=True)
    for kind in ("uniform", "clusters"):
        wins = [r["d"] for r in table if r["kind"] == kind and r["brute"] < r["grid"]]
        print(f"{kind}: brute faster from d = {min(wins) if wins else 'never'}")
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump({"backend": args.backend, "n": args.n, "rows": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
