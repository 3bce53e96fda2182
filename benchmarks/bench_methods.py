"""Every ε-join method on one backend, cell by cell (issue [methods]): seconds per method, the winner, and
``method="auto"``'s pick against it.

Cells: distribution (uniform, or exponential with λ = 40 in every dimension) × d × neighbours per point
(eps from a sample, ``bench_highd.eps_for_k`` on a GPU, cKDTree on the CPU).  Each method counts the
pairs of the whole self-join (the driver alone, warm: one call on a slice first), input already on the
device for GPU drivers, best of ``--repeat`` runs; every method's count must agree.  A method that took longer than ``--cap``
seconds in a cell is skipped at the larger d of that distribution and neighbour count (marked "skipped").

    python benchmarks/bench_methods.py --backend gpu --n 2000000 --out-json results/methods-H200.json
    python benchmarks/bench_methods.py --backend cpu --n 100000 --dims 2,3,6 --neighbours 32
    python benchmarks/bench_methods.py --methods grid,grid@pattern=unicomp --dims 2,6   # a method's options

A method given as ``NAME@KEY=VALUE;KEY=VALUE`` runs with those options (``gpu_options``); such variants
are timed and checked like the methods but take no part in the winner and ``auto`` columns.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))


def generate(dist: str, n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dist == "uniform":
        return rng.random((n, d), dtype=np.float32)
    return rng.exponential(1 / 40, size=(n, d)).astype(np.float32)


def eps_for(x: np.ndarray, k: int, backend: str) -> float:
    if backend == "gpu":
        from bench_highd import eps_for_k

        return eps_for_k(x, k)
    from scipy.spatial import cKDTree

    rows = x[np.random.default_rng(0).choice(len(x), min(2000, len(x)), replace=False)]
    dist, _ = cKDTree(x).query(rows, k=4 * k + 1)
    pooled = np.sort(dist[:, 1:].ravel())
    return float(pooled[len(rows) * k - 1])


def planned_share(x: np.ndarray, eps: float, d: int, gpu: bool):
    """The grid's share that ``method="auto"`` would measure on the planner's sample (evenly spread rows), where
    it would measure one (the CPU from ``CPU_SHARE_FROM_D`` dimensions), else None."""
    from daskjoin import config
    from daskjoin.planning.cost import wants_grid_share
    from daskjoin.planning.estimate import sample_grid_share

    if not wants_grid_share(d, gpu):
        return None
    rows = np.unique(np.linspace(0, len(x) - 1, min(len(x), int(config.get("sample-rows")))).astype(np.int64))
    return sample_grid_share(np.ascontiguousarray(x[rows], np.float64), eps)


def parse_spec(spec: str) -> tuple[str, dict]:
    """``NAME@KEY=VALUE;KEY=VALUE`` -> (name, options); values read as ``--option`` reads them."""
    from daskjoin.cli import parse_option_value

    name, _, rest = spec.partition("@")
    options = {}
    for item in filter(None, rest.split(";")):
        key, _, value = item.partition("=")
        options[key] = parse_option_value(value)
    return name, options


def timed_count(spec: str, backend: str, x, eps: float, repeat: int, cap: float) -> tuple[float, int]:
    from daskjoin.kernels import get_kernel

    method, options = parse_spec(spec)
    kernel = get_kernel(method, backend, **options)
    kernel.self_count(x[:2000], eps)  # compile and warm
    sync = (lambda: __import__("cupy").cuda.Device().synchronize()) if backend == "gpu" else (lambda: None)
    best = math.inf
    for _ in range(repeat):  # the best of `repeat`, a run over the cap counting as the last
        sync()
        t0 = time.perf_counter()
        count = kernel.self_count(x, eps)
        sync()
        best = min(best, time.perf_counter() - t0)
        if best > cap:
            break
    return best, int(count)


def main() -> None:
    from daskjoin.kernels import METHODS
    from daskjoin.planning.cost import choose_method

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="gpu", choices=["cpu", "gpu"])
    p.add_argument("--n", type=int, default=2_000_000)
    p.add_argument("--dims", default="2,3,4,5,6,16,32")
    p.add_argument("--neighbours", default="32,256")
    p.add_argument("--dists", default="uniform,expo")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--cap", type=float, default=30.0, help="seconds after which a method skips larger d")
    p.add_argument("--repeat", type=int, default=2, help="runs per method and cell (the best is kept)")
    p.add_argument("--out-json")
    args = p.parse_args()
    methods = args.methods.split(",")
    gpu = args.backend == "gpu"
    cells = []
    for dist in args.dists.split(","):
        for k in (int(v) for v in args.neighbours.split(",")):
            slow = set()
            for d in (int(v) for v in args.dims.split(",")):
                x = generate(dist, args.n, d, seed=d)
                eps = eps_for(x, k, args.backend)
                data = __import__("cupy").asarray(x) if gpu else x
                cell = {"dist": dist, "d": d, "neighbours": k, "n": args.n, "eps": eps, "seconds": {}, "counts": {}}
                for method in methods:
                    if method in slow:
                        cell["seconds"][method] = None
                        continue
                    seconds, count = timed_count(method, args.backend, data, eps, args.repeat, args.cap)
                    cell["seconds"][method], cell["counts"][method] = seconds, count
                    if seconds > args.cap:
                        slow.add(method)
                counts = set(cell["counts"].values())
                if not counts:
                    continue  # every method was over the cap at a smaller d
                assert len(counts) == 1, f"methods disagree: {cell['counts']}"
                timed = {m: s for m, s in cell["seconds"].items() if s is not None and "@" not in m}
                cell["winner"] = min(timed, key=timed.get)
                auto = choose_method("auto", d, gpu=gpu, row_pairs=float(args.n) ** 2,
                                     grid_share=planned_share(x, eps, d, gpu))[0]
                cell["auto"] = auto
                cell["auto_ratio"] = (timed[auto] / timed[cell["winner"]]) if auto in timed else math.inf
                cells.append(cell)
                text = "  ".join(f"{m} {'skipped' if s is None else f'{s:7.3f}'}" for m, s in cell["seconds"].items())
                print(f"{dist:7s} d={d:2d} k={k:3d} pairs={counts.pop():>13,}  {text}  winner {cell['winner']}"
                      f"  auto {auto} x{cell['auto_ratio']:.2f}", flush=True)
                if args.out_json:
                    _write(args.out_json, args, cells)
    within = sum(c["auto_ratio"] <= 1.25 for c in cells)
    print(f"auto within 1.25x of the best in {within}/{len(cells)} cells")
    for m in methods:
        if "@" in m:
            ratios = [c["seconds"][m] / c["seconds"][m.split("@")[0]] for c in cells
                      if c["seconds"].get(m) and c["seconds"].get(m.split("@")[0])]
            if ratios:
                print(f"{m}: {min(ratios):.2f}-{max(ratios):.2f}x the time of {m.split('@')[0]}")
            continue
        print(f"{m}: best in {sum(c['winner'] == m for c in cells)} cells")


def _write(path: str, args, cells) -> None:
    from daskjoin.info import versions, visible_gpus

    with open(path, "w") as f:
        json.dump({"args": vars(args), "versions": versions(), "gpus": visible_gpus(), "cores": os.cpu_count(),
                   "cells": cells}, f, indent=1)


if __name__ == "__main__":
    main()
