#!/usr/bin/env python
"""Set-join filter throughput: ``local.candidate_chunks`` alone (PPJoin / AllPairs on the CPU).

The filter is what bounds a set join once verification runs on a GPU (DBLP-like data at
low thresholds gives 1e9+ candidates).  This times it alone (the chunks are counted,
nothing else is done with them), per Numba thread count, on the synthetic workloads of
``bench_sets.py`` (one representative per run of identical sets, as the kernel filters),
and records the candidates and, from a separate untimed pass, an order-free checksum of
the (probe, candidate) pairs, so two versions of the filter can be compared run against
run: a change must keep both and only move the seconds.

Usage::

    .venv/bin/python benchmarks/bench_filter.py                         # DBLP-like 20k + KOSARAK-like 200k
    .venv/bin/python benchmarks/bench_filter.py --dblp-n 100000 --thresholds 0.5
    # an earlier version, same data, for a before/after table:
    git worktree add /tmp/before <commit>
    PYTHONPATH=/tmp/before .venv/bin/python benchmarks/bench_filter.py --label before --out-json /tmp/before.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numba
import numpy as np

from bench_cpu import _cores, _load  # noqa: E402  (this folder is on sys.path when run as a script)


def workload(name: str, n: int, seed: int):
    from daskjoin.io.sets_in import prepare_flat
    from daskjoin.io.synth_sets import GENERATORS
    from daskjoin.kernels.sets import local

    tokens, offsets = GENERATORS[name](n, seed=seed)
    coll = prepare_flat(tokens, offsets)
    return local._Runs.of(local.Flat.of(coll.tokens, coll.offsets)).reps


def one_pass(reps, threshold, algorithm):
    """(seconds, candidates, chunks) of one full candidates pass, nothing else timed."""
    from daskjoin.kernels.sets import local

    start = time.perf_counter()
    cands = chunks = 0
    for _probes, _offsets, cand in local.candidate_chunks(reps, None, threshold, algorithm):
        cands += len(cand)
        chunks += 1
    return time.perf_counter() - start, cands, chunks


def checksum_pass(reps, threshold, algorithm) -> int:
    """Checksum of the (probe, candidate) pairs, independent of their order (an untimed pass)."""
    from daskjoin.kernels.sets import local

    checksum = 0
    for probes, offsets, cand in local.candidate_chunks(reps, None, threshold, algorithm):
        probe_of = np.repeat(probes.astype(np.uint64), np.diff(offsets))
        keys = probe_of * np.uint64(2654435761) ^ cand.astype(np.uint64) * np.uint64(40503)
        checksum = (checksum + int(keys.sum(dtype=np.uint64))) % (1 << 64)
    return checksum


def main(argv=None) -> int:
    from daskjoin.planning.set_threshold import parse_threshold

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["dblp", "kosarak"], choices=["dblp", "kosarak"])
    parser.add_argument("--dblp-n", type=int, default=20_000)
    parser.add_argument("--kosarak-n", type=int, default=200_000)
    parser.add_argument("--thresholds", nargs="+", type=float, default=[0.5, 0.7])
    parser.add_argument("--threads", nargs="+", type=int, default=None, help="Numba thread counts (default: 1 and all)")
    parser.add_argument("--algorithm", default="ppjoin", choices=["ppjoin", "allpairs"])
    parser.add_argument("--repeat", type=int, default=3, help="best of R (default 3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--out-json", default=None)
    args = parser.parse_args(argv)
    threads = args.threads or sorted({1, numba.config.NUMBA_NUM_THREADS})
    import daskjoin

    rows = []
    for name in args.datasets:
        n = args.dblp_n if name == "dblp" else args.kosarak_n
        reps = workload(name, n, args.seed)
        for t in args.thresholds:
            th = parse_threshold("jaccard", t)
            checksum = checksum_pass(reps, th, args.algorithm)  # also the JIT compile and first touch
            for k in threads:
                numba.set_num_threads(k)
                runs = [one_pass(reps, th, args.algorithm) for _ in range(args.repeat)]
                best = min(r[0] for r in runs)
                _, cands, chunks = runs[0]
                if any(r[1] != cands for r in runs):
                    print(f"!!!!!!!! MISMATCH between runs of {name} t={t}", file=sys.stderr)
                    return 1
                rows.append({"dataset": name, "n": n, "sets_filtered": len(reps), "threshold": t, "threads": k,
                             "seconds": round(best, 4), "times": [round(r[0], 4) for r in runs],
                             "candidates": cands, "chunks": chunks, "checksum": f"{checksum:016x}",
                             "mcand_per_s": round(cands / best / 1e6, 2), "load": _load()})
                print(f"{name} {n:,} t={t} threads={k}: {best:.3f} s, {cands:,} candidates "
                      f"({cands / best / 1e6:.1f} M/s), checksum {checksum:016x}", flush=True)
    out = {"label": args.label, "daskjoin": os.path.dirname(daskjoin.__file__), "algorithm": args.algorithm,
           "cores": _cores(), "numba": numba.__version__, "date": time.strftime("%Y-%m-%d"), "rows": rows}
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump(out, f, indent=1)
    print(f"\n{'dataset':<10}{'t':>5}{'thr':>5}{'seconds':>10}{'Mcand/s':>10}  checksum")
    for r in rows:
        print(f"{r['dataset']:<10}{r['threshold']:>5}{r['threads']:>5}{r['seconds']:>10.3f}"
              f"{r['mcand_per_s']:>10.1f}  {r['checksum']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
