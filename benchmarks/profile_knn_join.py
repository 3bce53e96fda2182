#!/usr/bin/env python
"""``knn_join(x).compute()`` in this process under cProfile, after a warm-up call and the kernel alone on the
same data: where the end to end path spends what the kernel does not::

    python3 benchmarks/profile_knn_join.py --n 1000000 --d 64 --data clusters
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--data", default="clusters")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    import daskjoin as dj
    from daskjoin.io.synth import generate
    from daskjoin.kernels.registry import make

    x = generate(args.data, args.n, args.d, seed=0)
    dj.knn_join(x[:5000], k=args.k).compute()  # compile / warm
    ids = np.arange(len(x), dtype=np.int64)
    start = time.perf_counter()
    make("knn", "brute" if args.d > 6 else "grid", "gpu", x, args.k, 0).rows(x, ids, True)
    print(f"kernel alone: {time.perf_counter() - start:.3f} s", flush=True)
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    frame = dj.knn_join(x, k=args.k).compute()
    profile.disable()
    print(f"knn_join(x).compute(): {time.perf_counter() - start:.3f} s, {len(frame):,} rows", flush=True)
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
