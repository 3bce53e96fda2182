"""Where brute's pairs-to-device time goes on the [highd] exponential workload (1M x 128, eps 0.296), GPU only.

Counts the filter passes and the tensor-core product launches of: a count; filling the device with every pair
the way ``_range_parts`` guesses its room; the same with rooms at their caps (sorted per range, and as compact
copies); and ``batches()`` end to end.  Second filter passes over a range show as more filters or launches than
ranges.  Usage (on a lent GPU machine): ``python benchmarks/profile_brute_rooms.py [n]``
"""
import sys
import time

import cupy as cp

from daskjoin.io.synth import generate
from daskjoin.kernels import brute_gpu as bg
from daskjoin.kernels.brute_gpu import GpuBruteJoin

STATS = {"launch": 0, "filter": 0}


def _count_calls():
    """Wrap the candidate lister and the filter so that each call is counted."""
    listed, filtered = bg.listed_candidates, GpuBruteJoin._filter

    def counting_lister(launch, npairs, room, per_pair=False, first=0):
        def counted(*args):
            STATS["launch"] += 1
            return launch(*args)
        return listed(counted, npairs, room, per_pair, first)

    def counting_filter(self, *args, **kwargs):
        STATS["filter"] += 1
        return filtered(self, *args, **kwargs)

    bg.listed_candidates = counting_lister
    GpuBruteJoin._filter = counting_filter


def timed(join, label, fn):
    cp.cuda.Device().synchronize()
    STATS.update(launch=0, filter=0)
    start = time.perf_counter()
    result = fn()
    cp.cuda.Device().synchronize()
    print(f"{label:46s} {time.perf_counter() - start:7.3f} s  ranges {len(join._ranges())} "
          f"filters {STATS['filter']} product launches {STATS['launch']}", flush=True)
    return result


def fill(join, capped: bool, sort: bool = True):
    """Every range's pairs held on the device; ``capped``: rooms at their caps before each range."""
    held = []
    for lo, hi in join._ranges():
        if capped:
            join._capacity, join._candidates = 200_000_000, bg.CANDIDATES_MAX
        held.extend(join._range_parts(lo, hi, 1 << 40, sort=sort))
    return len(held)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    x, eps = generate("expo", n, 128, seed=0), 0.296
    _count_calls()
    for fmt in ("fp16", "fp16", "int8"):  # the first round pays compiles and the host pool's first blocks
        print("==", fmt)
        join = GpuBruteJoin(x, None, eps, filter=fmt)
        timed(join, "count", join.count)
        timed(join, "count again", join.count)
        timed(join, "fill, running guesses", lambda: fill(join, False))
        timed(join, "fill, rooms at the cap (per-range sort)", lambda: fill(join, True))
        timed(join, "fill, rooms at the cap, compact copies", lambda: fill(join, True, sort=False))
        timed(join, "batches() end to end", lambda: sum(len(b[0]) for b in join.batches(1 << 22)))
        join = None  # noqa: F841 - frees the device arrays before the next round
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
