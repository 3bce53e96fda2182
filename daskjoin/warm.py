"""``daskjoin warm``: compile the kernels into their on-disk caches before the first join needs them.

The CPU kernels are Numba functions cached on disk (``cache=True``: beside the package, or in
``NUMBA_CACHE_DIR``). A new install has an empty cache, so the first join of each kind in each new
process compiled what it used: 15 of the demo's 16 s on a 2-core VM (1M × 3-d; 1.6 s with the cache
warm). ``make`` and the Docker images run this once after installing, so that a user's first join
shows its real speed.

It runs joins of every kind through the public API in this process, sized to take the paths large
joins take (the grid's estimate and single pass, the two-pass sort of a large output, the brute
filter's tiles), over float32 and float64 rows, with and without distances: the ε-, kNN- and set
joins each in a process of their own. With ``gpu=True`` and a
visible GPU the same joins also run there, which compiles the CUDA modules they use (NVRTC; CuPy
and :mod:`daskjoin.kernels.gpu_common` keep them on disk).

Numba keys its cache by the CPU it compiled for: a cache built on one machine and used on another
of a different CPU is compiled again there (correctly, only not ahead of time).
"""
from __future__ import annotations

import os
import time

import numpy as np

#: rows of the low-dimensional ε-joins: enough cells for the grid's sampled estimate and single pass
#: (:data:`daskjoin.kernels.grid.SAMPLE_MIN_BLOCKS`), and rows for the two-pass sort of their pairs
#: even on one thread (:func:`daskjoin.kernels.pair_sort._two_passes`)
LOW_ROWS = 600_000
#: rows of the joins that brute force takes (16-d) and of the kNN- and set joins (enough for the kNN
#: grid's range pass: :data:`daskjoin.kernels.knn_range.MIN_ROWS`)
HIGH_ROWS = 6_000
NEIGHBOURS = 32


def _points(rng, n: int, d: int, dtype) -> np.ndarray:
    return rng.random((n, d)).astype(dtype)


def _eps_joins(rng, backend: str, dtype) -> int:
    """The ε-joins: self and A×B, pairs with and without distances and the count, low-d (the grid) and 16-d
    (brute force)."""
    from . import similarity_join
    from .io.synth import eps_for_neighbours

    done = 0
    # (a tenth of LOW_ROWS: the one-pass sort that smaller outputs take)
    for n, d in ((LOW_ROWS, 3), (LOW_ROWS // 10, 3), (HIGH_ROWS, 16)):
        eps = eps_for_neighbours(n, d, NEIGHBOURS)
        a, b = _points(rng, n, d, dtype), _points(rng, n // 2, d, dtype)
        for other in (None, b):
            similarity_join(a, other, eps=eps, backend=backend, output="count")
            similarity_join(a, other, eps=eps, backend=backend).compute()
            similarity_join(a, other, eps=eps, backend=backend, with_distance=False).compute()
            done += 3
    return done


def _knn_joins(rng, backend: str, dtype) -> int:
    """The kNN-joins: self and A×B, low-d (the grid; from 4-d with its range pass) and 16-d (brute)."""
    from . import knn_join

    done = 0
    for d in (3, 6, 16):
        a, b = _points(rng, HIGH_ROWS, d, dtype), _points(rng, HIGH_ROWS // 2, d, dtype)
        for other in (None, b):
            knn_join(a, other, k=8, backend=backend).compute()
            done += 1
    return done


def _set_joins(rng, backend: str) -> int:
    """The set-similarity joins: a self-join's pairs and count."""
    from . import set_similarity_join

    sizes = rng.integers(4, 40, HIGH_ROWS)
    sets = [rng.integers(0, 3_000, s).tolist() for s in sizes]
    set_similarity_join(sets, threshold=0.5, backend=backend).compute()
    set_similarity_join(sets, threshold=0.5, backend=backend, output="count")
    return 2


#: the parts, each run in a process of its own where ``parallel`` (they compile different functions: on the 2-core
#: VM 82 s one after another, ~55 s at once)
PARTS = ("eps", "knn", "sets")


def run_part(part: str, backend: str) -> tuple[int, float]:
    """The joins of one part on one backend, both row types (sets: no rows): (joins run, seconds)."""
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    if part == "sets":
        joins = _set_joins(rng, backend)
    else:
        fn = _eps_joins if part == "eps" else _knn_joins
        joins = sum(fn(rng, backend, dtype) for dtype in (np.float32, np.float64))
    return joins, time.perf_counter() - start


def warm(gpu: bool = False, log=print, parallel: bool = True) -> dict:
    """Run the joins of every part (on the CPU; with ``gpu`` also on the GPU where one is visible), each part in a
    process of its own where ``parallel``, up to one a core; returns ``{backend: (joins run, seconds)}``."""
    backends = ["cpu"]
    if gpu:
        from .kernels.gpu_common import gpu_available

        if gpu_available():
            backends.append("gpu")
        else:
            log("daskjoin warm: no GPU visible here; the GPU kernels compile on a GPU worker's first join")
    done = {}
    for backend in backends:
        start = time.perf_counter()
        joins = 0
        if parallel:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            # spawned, not forked: a forked child of a process that used CUDA or Numba's threads may hang
            workers = max(1, min(len(PARTS), os.cpu_count() or 1))
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = {pool.submit(run_part, part, backend): part for part in PARTS}
                for future in as_completed(futures):
                    n, seconds = future.result()
                    joins += n
                    log(f"daskjoin warm: {backend} {futures[future]} joins done ({seconds:.1f} s)")
        else:
            for part in PARTS:
                n, seconds = run_part(part, backend)
                joins += n
                log(f"daskjoin warm: {backend} {part} joins done ({seconds:.1f} s)")
        done[backend] = (joins, time.perf_counter() - start)
        log(f"daskjoin warm: {backend} kernels compiled and cached: {joins} joins in {done[backend][1]:.1f} s")
    return done
