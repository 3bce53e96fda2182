#!/usr/bin/env python
"""Versions of cuda/brute_tc.cu side by side on one GPU, in one process on the same prepared join: the tensor-core
filter kernel alone (thresholds that list almost nothing), with its real candidate lists, and the prepared count.

    python benchmarks/ab_tc_sources.py [--n 1000000] [--kind uniform] [--filter int8] [--rounds 3] \
        base=path/to/old/brute_tc.cu new=daskjoin/kernels/cuda/brute_tc.cu

Each version's source replaces cuda/brute_tc.cu for its runs (NVRTC compiles it; the cubin cache keys on the
source); rounds alternate the order; the best of each is printed, and the counts must agree.  Old versions come
from git: ``git show REV:daskjoin/kernels/cuda/brute_tc.cu > /tmp/old.cu``.  A diagnostic, like profile_tc.py.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--kind", default="uniform")
    p.add_argument("--k", type=int, default=64)
    p.add_argument("--filter", default="int8")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ncu", default="", help="variant name: run only its filter with lists once (for ncu)")
    p.add_argument("variants", nargs="+")
    a = p.parse_args()
    import cupy as cp

    from daskjoin.kernels import brute_gpu, gpu_common, tc_quant
    from daskjoin.io.synth import generate
    from bench_highd import eps_for_k

    orig = gpu_common.cuda_source
    variants = dict(v.split("=", 1) for v in a.variants)

    def use(path):
        text = open(path).read().replace('#include "exact.cuh"', orig("exact.cuh").replace("#pragma once\n", ""))
        gpu_common.cuda_source = lambda name: text if name == "brute_tc.cu" else orig(name)
        gpu_common._module.cache_clear()

    x = generate(a.kind, a.n, a.d, seed=0, start=0, stop=a.n).astype(np.float32)
    eps = eps_for_k(x, a.k)
    use(next(iter(variants.values())))
    join = brute_gpu.GpuBruteJoin(x, None, eps, filter=a.filter)
    npairs = int(join.pairs_p.shape[0])
    rowbytes = join.A.tc[1]
    macs = 2.0 * npairs * 128 * 128 * (rowbytes // (1 if join.filter == "int8" else 2))
    tx0, ty0 = tc_quant.thresholds(join.A.tc[2], tc_quant.row_reach(join.A.tc[3], 0.0, cp), join.A.tc[2],
                                   tc_quant.row_reach(join.A.tc[3], 0.0, cp), join.filter, join.A.ntiles * 128,
                                   join.A.ntiles * 128, cp)
    room = 1 << 26
    cand = cp.empty((room, 2), cp.int32)
    listed = cp.zeros(1, cp.uint64)
    print(f"{a.n:,} x {a.d} {a.kind}, eps {eps:.6g}, {npairs:,} tile pairs", flush=True)

    def events(fn, reps=3):
        best = 1e9
        for _ in range(reps):
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            fn()
            e.record()
            e.synchronize()
            best = min(best, cp.cuda.get_elapsed_time(s, e) / 1e3)
        return best

    if a.ncu:
        use(variants[a.ncu])
        launch = brute_gpu.tc_filter_launch(join.filter, join.A.tc, join.B.tc, join.pairs_p, join.pairs_q,
                                            join.thresholds, join.selfjoin)
        launch(0, npairs, listed, room, cand, None)
        cp.cuda.Device().synchronize()
        print("listed", int(listed.get()[0]))
        return
    res = {v: {} for v in variants}
    for rnd in range(a.rounds):
        for name, path in (variants.items() if rnd % 2 == 0 else reversed(list(variants.items()))):
            use(path)
            alone = brute_gpu.tc_filter_launch(join.filter, join.A.tc, join.A.tc, join.pairs_p, join.pairs_q,
                                               (tx0, ty0), True)
            lists = brute_gpu.tc_filter_launch(join.filter, join.A.tc, join.B.tc, join.pairs_p, join.pairs_q,
                                               join.thresholds, join.selfjoin)

            def run_alone():
                listed.fill(0)
                alone(0, npairs, listed, room, cand, None)

            def run_lists():
                listed.fill(0)
                lists(0, npairs, listed, room, cand, None)

            run_alone()
            run_lists()
            r = res[name]
            r["alone"] = min(r.get("alone", 9), events(run_alone))
            r["lists"] = min(r.get("lists", 9), events(run_lists))
            r["listed"] = int(listed.get()[0])
            join.count()
            t = []
            for _ in range(3):
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                r["count"] = join.count()
                t.append(time.perf_counter() - t0)
            r["count_s"] = min(r.get("count_s", 9), min(t))
    print(f"{'variant':12s} {'alone s':>8s} {'TOPS':>6s} {'lists s':>8s} {'TOPS':>6s} {'count s':>8s} {'listed':>12s} {'pairs':>12s}")
    for name, r in res.items():
        print(f"{name:12s} {r['alone']:8.4f} {macs / r['alone'] / 1e12:6.0f} {r['lists']:8.4f} {macs / r['lists'] / 1e12:6.0f} "
              f"{r['count_s']:8.4f} {r['listed']:12,d} {r['count']:12,d}")
    counts = {r["count"] for r in res.values()}
    print("counts agree" if len(counts) == 1 else f"COUNTS DIFFER {counts}")


if __name__ == "__main__":
    main()
