"""Phase timings of the GPU kernels (CUDA events), to see where the time goes.

    python benchmarks/profile_gpu.py
"""
from __future__ import annotations

import time

import numpy as np

from daskjoin.io.synth import design_clusters_64d, eps_for_neighbours, generate


def main() -> int:
    import cupy as cp
    import cupyx

    from daskjoin.kernels.brute_gpu import GpuBruteJoin
    from daskjoin.kernels.grid_gpu import GpuGridJoin

    def clock():
        cp.cuda.Device().synchronize()
        return time.perf_counter()

    for d in (2, 6):
        n = 2_000_000
        x = generate("uniform", n, d, seed=0)
        eps = eps_for_neighbours(n, d, 32)
        for _ in range(2):
            t0 = clock()
            g = GpuGridJoin(x, None, eps)
            t1 = clock()
            g.counts()
            t2 = clock()
            oi, oj, od = g.pairs(True, device=True)
            t3 = clock()
            hi = oi.get()
            hj = oj.get()
            hd = od.get()
            t4 = clock()
            pi = cupyx.empty_pinned(oi.shape, np.int64)
            pj = cupyx.empty_pinned(oj.shape, np.int64)
            pd = cupyx.empty_pinned(od.shape, np.float32)
            t5 = clock()
            oi.get(out=pi)
            oj.get(out=pj)
            od.get(out=pd)
            t6 = clock()
            print(f"grid {d}-d: index {t1-t0:.3f} count {t2-t1:.3f} fill {t3-t2:.3f} "
                  f"D2H pageable {t4-t3:.3f} pinned alloc {t5-t4:.3f} D2H pinned {t6-t5:.3f} pairs {len(hi)}")
            del hi, hj, hd, pi, pj, pd, oi, oj, od, g
    x = design_clusters_64d()
    for _ in range(2):
        t0 = clock()
        b = GpuBruteJoin(x, None, 0.470697)
        t1 = clock()
        gemm = filt = 0.0
        total = 0
        for r0 in range(0, b.n, b.tile_rows):
            r1 = min(r0 + b.tile_rows, b.n)
            s0 = clock()
            G = b.A32[r0:r1] @ b.B32[r0:].T
            s1 = clock()
            del G
            gemm += s1 - s0
            s2 = clock()
            found, got = b._tile(r0, r1, False)
            s3 = clock()
            filt += s3 - s2
            total += found
        print(f"brute 64-d: prepare {t1-t0:.3f} tiles {-(-b.n // b.tile_rows)} of {b.tile_rows} rows; "
              f"GEMM alone {gemm:.3f}; tile (GEMM+filter+sort) {filt:.3f}; pairs {total}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
