#!/usr/bin/env python
"""Where one partition's time goes: its batches (kernel and transfer), the order check or sort, the Parquet writes.

    python3 benchmarks/profile_task.py STORE --eps E [--part K] [--profile] [--memory-budget B]
        [--partitioning auto|chunk_pairs|slabs] [--backend auto|cpu|gpu] [--count]

Plans the join in this process (as the CLI does), then runs partition K's steps one by one on
the main thread with timers (and cProfile with ``--profile``), and prints a table.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import tempfile
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("store")
    p.add_argument("--eps", type=float, required=True)
    p.add_argument("--part", type=int, default=0)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--memory-budget", default=None)
    p.add_argument("--partitioning", default="auto")
    p.add_argument("--backend", default="auto")
    p.add_argument("--count", action="store_true", help="time the rows' read and the count only")
    args = p.parse_args()

    import daskjoin as dj
    from daskjoin.execution import task
    from daskjoin.execution.pair_order import sorted_pieces
    from daskjoin.io.parquet_out import write_partition
    from daskjoin.kernels.pair_sort import is_sorted
    from daskjoin.kinds.epsilon import JoinJob

    start = time.perf_counter()
    plan = dj.plan_join(args.store, eps=args.eps, memory_budget=args.memory_budget, partitioning=args.partitioning,
                        backend=args.backend)
    print(plan.explain())
    print(f"plan {time.perf_counter() - start:.2f} s")
    job = JoinJob.from_plan(plan, True)
    part = plan.partitions[args.part]
    if args.count:
        from daskjoin.kinds.epsilon import _Sides

        for attempt in ("first", "again"):
            prof = cProfile.Profile() if args.profile and attempt == "first" else None
            if prof:
                prof.enable()
            t0 = time.perf_counter()
            sides = _Sides(job, part)
            t1 = time.perf_counter()
            count = sides.count()
            t2 = time.perf_counter()
            if prof:
                prof.disable()
            print(f"{attempt}: read {t1 - t0:.3f} s, count {t2 - t1:.3f} s ({count:,} pairs)")
            if prof:
                pstats.Stats(prof).sort_stats("cumtime").print_stats(40)
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            del sides
        return 0
    rows = task.sort_rows(job)
    for attempt in ("first", "again"):
        t0 = time.perf_counter()
        batches = []
        for b in job.batches(part, rows):
            batches.append((time.perf_counter() - t0, len(b[0])))
        t1 = time.perf_counter()
        print(f"{attempt}: batches {t1 - t0:.3f} s: {[(round(t, 3), n) for t, n in batches]}")
    got = list(job.batches(part, rows))
    t0 = time.perf_counter()
    flags = [is_sorted(b[0], b[1]) for b in got]
    print(f"is_sorted {time.perf_counter() - t0:.3f} s: {flags}")
    t0 = time.perf_counter()
    pieces = list(sorted_pieces(iter(got), task.max_batch_pairs(), rows))
    print(f"sorted_pieces {time.perf_counter() - t0:.3f} s: {len(pieces)} pieces")
    folder = tempfile.mkdtemp()
    try:
        t0 = time.perf_counter()
        entries = write_partition(folder, part.index, iter(pieces))
        print(f"write_partition {time.perf_counter() - t0:.3f} s: {len(entries)} files, "
              f"{sum(e['bytes'] for e in entries) / 2**20:.0f} MiB, thread-seconds {sum(e['write_s'] for e in entries):.2f}")
        shutil.rmtree(folder)
        os.mkdir(folder)
        t0 = time.perf_counter()
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
        task.partition_to_parquet(part, job, folder)
        if args.profile:
            prof.disable()
        print(f"partition_to_parquet (the whole task body) {time.perf_counter() - t0:.3f} s")
        if args.profile:
            pstats.Stats(prof).sort_stats("cumtime").print_stats(30)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
