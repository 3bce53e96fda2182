"""``daskjoin warm``: compile the kernels into their on-disk caches before the first join needs them.

The CPU kernels are Numba functions cached on disk (``cache=True``: beside the package, or in
``NUMBA_CACHE_DIR``). A new install has an empty cache, so the first join of each kind in each new
process compiled what it used: 15 of the demo's 16 s on a 2-core VM (1M × 3-d; 1.6 s with the cache
warm). ``make`` and the Docker images run this once after installing, so that a user's first join
shows its real speed.

It runs joins of every kind through the public API, in processes of its own (the ε-, kNN- and set
joins each in one, on this machine's threads: never a configured scheduler's workers), sized to take
the paths large joins take (the grid's estimate and single pass, the two-pass sort of a large output,
the brute filter's tiles), over float32 and float64 rows, with and without distances; the set joins
self and A×B, by both methods. With ``gpu=True`` and a visible GPU the same joins also run there,
which compiles the CUDA modules they use (NVRTC; CuPy and :mod:`daskjoin.kernels.gpu_common` keep
them on disk).

Numba keys its cache by the CPU it compiled for: a cache built on one machine and used on another
of a different CPU is compiled again there (correctly, only not ahead of time).
"""
from __future__ import annotations

import time

import numpy as np

from .cores import usable_cores

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


def _eps_joins(rng, backend: str, dtype, low: int, high: int) -> int:
    """The ε-joins: self and A×B, pairs with and without distances and the count, low-d (the grid) and 16-d
    (brute force)."""
    from . import similarity_join
    from .execution.inprocess import in_process
    from .io.synth import eps_for_neighbours

    done = 0
    # (a tenth of the low-d rows: the one-pass sort that smaller outputs take; sparse 5-d rows: the grid indexes
    # fewer of its dimensions, kernels/grid_dims.py)
    for n, d, neighbours in ((low, 3, NEIGHBOURS), (low // 10, 3, NEIGHBOURS), (high, 16, NEIGHBOURS),
                             (low // 10, 5, 0.1)):
        eps = eps_for_neighbours(n, d, neighbours)
        a, b = _points(rng, n, d, dtype), _points(rng, n // 2, d, dtype)
        for other in (None, b):
            here = {"eps": eps, "backend": backend, "client": in_process()}
            similarity_join(a, other, output="count", **here)
            similarity_join(a, other, **here).compute()
            similarity_join(a, other, with_distance=False, **here).compute()
            done += 3
    return done


def _knn_joins(rng, backend: str, dtype, high: int) -> int:
    """The kNN-joins: self and A×B, low-d (the grid; from 4-d with its range pass) and 16-d (brute)."""
    from . import knn_join
    from .execution.inprocess import in_process

    done = 0
    for d in (3, 6, 16):
        a, b = _points(rng, high, d, dtype), _points(rng, high // 2, d, dtype)
        for other in (None, b):
            knn_join(a, other, k=8, backend=backend, client=in_process()).compute()
            done += 1
    return done


def _set_joins(rng, backend: str, high: int) -> int:
    """The set-similarity joins of KOSARAK-like sets with some repeated (groups of equal sets): self and A×B, by
    each method, the pairs to Parquet (sorted by (i, j) there) and the count."""
    import tempfile

    from . import set_similarity_join
    from .execution.inprocess import in_process
    from .io.synth_sets import kosarak_like

    tokens, offsets = kosarak_like(high, seed=int(rng.integers(1 << 30)))
    a = [tokens[offsets[k]:offsets[k + 1]].tolist() for k in range(high)]
    a += a[: high // 20]
    b = a[::2]
    done = 0
    with tempfile.TemporaryDirectory(prefix="daskjoin-warm-") as tmp:
        for method in ("ppjoin", "allpairs"):
            for other in (None, b):
                here = {"threshold": 0.5, "method": method, "backend": backend, "client": in_process()}
                set_similarity_join(a, other, out=f"{tmp}/pairs-{done}.parquet", **here)
                set_similarity_join(a, other, **here).compute()
                set_similarity_join(a, other, output="count", **here)
                done += 3
    return done


#: the parts, each run in a process of its own where ``parallel`` (they compile different functions: on the 2-core
#: VM 82 s one after another, 47-69 s at once)
PARTS = ("eps", "knn", "sets")


def run_part(part: str, backend: str, rows: tuple[int, int]) -> tuple[int, float]:
    """The joins of one part on one backend, both row types (sets: no rows), ``rows`` the low-d ε-joins' and the
    others' (:data:`LOW_ROWS`, :data:`HIGH_ROWS`): (joins run, seconds)."""
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    low, high = rows
    if part == "sets":
        joins = _set_joins(rng, backend, high)
    elif part == "eps":
        joins = sum(_eps_joins(rng, backend, dtype, low, high) for dtype in (np.float32, np.float64))
    else:
        joins = sum(_knn_joins(rng, backend, dtype, high) for dtype in (np.float32, np.float64))
    return joins, time.perf_counter() - start


def warm(gpu: bool = False, log=print, parallel: bool = True,
         rows: tuple[int, int] = (LOW_ROWS, HIGH_ROWS)) -> dict:
    """Run the joins of every part (on the CPU; with ``gpu`` also on the GPU where CuPy sees one: the CLI's
    default), each part in a process of its own where ``parallel``, up to one a usable core (spawned: a script
    that calls this needs the ``if __name__ == "__main__":`` guard); ``rows``: see :func:`run_part`.  Returns
    ``{backend: (joins run, seconds)}``."""
    backends = ["cpu"]
    if gpu:
        from .kernels.gpu_common import gpu_available

        if gpu_available():
            backends.append("gpu")
        else:
            log("daskjoin warm: no GPU here (or no CuPy); the GPU kernels compile on a GPU worker's first join")
    done = {}
    for backend in backends:
        start = time.perf_counter()
        joins = 0
        if parallel:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            # spawned, not forked: a forked child of a process that used CUDA or Numba's threads may hang
            workers = max(1, min(len(PARTS), usable_cores()))
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = {pool.submit(run_part, part, backend, rows): part for part in PARTS}
                for future in as_completed(futures):
                    n, seconds = future.result()
                    joins += n
                    log(f"daskjoin warm: {backend} {futures[future]} joins done ({seconds:.1f} s)")
        else:
            for part in PARTS:
                n, seconds = run_part(part, backend, rows)
                joins += n
                log(f"daskjoin warm: {backend} {part} joins done ({seconds:.1f} s)")
        done[backend] = (joins, time.perf_counter() - start)
        log(f"daskjoin warm: {backend} kernels compiled and cached: {joins} joins in {done[backend][1]:.1f} s")
    return done
