#!/usr/bin/env python
"""The GPU grid kernel's whole ``self_join`` (all pairs to host memory) on uniform points, best of ``--repeat``,
each repeat keeping its result until the next (as a caller would)::

    python3 benchmarks/time_pairs_to_host.py --n 20000000 --d 3
"""
from __future__ import annotations

import argparse
import time


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000_000)
    p.add_argument("--d", type=int, default=3)
    p.add_argument("--neighbours", type=float, default=32.0)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    import cupy as cp

    from daskjoin.io.synth import eps_for_neighbours, generate
    from daskjoin.kernels import get_kernel

    x = generate("uniform", args.n, args.d, seed=0)
    eps = eps_for_neighbours(args.n, args.d, args.neighbours)
    kernel = get_kernel("grid", "gpu")
    kernel.self_count(x[:20000], eps)
    times, out = [], None
    for _ in range(args.repeat):
        cp.cuda.Device().synchronize()
        start = time.perf_counter()
        out = kernel.self_join(x, eps)
        times.append(round(time.perf_counter() - start, 3))
    print(f"self_join to host, {args.n:,} x {args.d}: {len(out[0]):,} pairs, seconds {times}", flush=True)


if __name__ == "__main__":
    main()
