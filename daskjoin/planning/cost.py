"""``method="auto"`` and ``partitioning="auto"``: pure functions that also return their reason."""
from __future__ import annotations

#: Crossovers measured by benchmarks/crossover.py (results in benchmarks/results/crossover-*.json).
#: GPU (H200, 200k points, ~16 neighbours): brute won from d=16 on uniform data (0.20 s vs 0.58 s),
#: tied at 16 and won from 24 on clustered data; the grid won below 16 on both (up to 380x at d=2).
GPU_BRUTE_FROM_D = 16
#: CPU (2 cores, 50k points, ~32 neighbours; benchmarks/bench_methods.py, results
#: methods-cpu-vm-2026-11-27-session23-gemm-brute.json): with brute's GEMM filter (kernels/brute_gemm.py) brute
#: won every cell from 10-d (uniform 12-d 3.5 s against the directory's 10.1 and the grid's 24.3; 16-d 3.3 s
#: against 17.4-28.1; exponential 12-d 3.1 against 7.3-8.6), the grid at 8-d (1.7 s against 3.1).  Brute's work
#: grows as n^2 and the grid's more slowly, so the crossover rises with n: at 10-d brute led by 1.3-2.4x only,
#: and auto takes brute from 12-d, where it led by 2.5-7x.  (The nested loop alone lost to the directory at
#: 12-16 d: methods-cpu-vm-2026-11-26.json.)
CPU_BRUTE_FROM_D = 12
#: ... and from 10-d where the join has at most this many pairs of rows (n_a n_b).  Session 24 (brute's products
#: screened per thread in cache; methods-cpu-vm-2026-11-27-session24-brute-blocks*.json), 10-d, exponential /
#: uniform: 50k rows, brute 1.12 / 1.17 s against the grid's 4.10 / 8.40 s; 150k rows, 10.2 / 10.0 s against
#: 20.6 / 35.7 s.  Brute grows as n^2.0, the grid here as n^1.47 / n^1.32, so they would meet near 560k / 970k rows
#: (extrapolated); up to 1e11 pairs of rows (a 316k self-join) brute is predicted at least 1.35x / 2.1x faster.  At
#: 8-d brute led by 1.1-1.55x at 50k rows (1.10 s against 1.21 / 1.71 s).  Session 25 (bench_methods.py --backend
#: cpu --methods grid,brute, methods-cpu-vm-2026-11-27-session25-*.json), exponential / uniform: 9-d, 60k rows
#: brute 1.73 / 1.77 s against the grid's 2.55 / 5.03 s, 150k rows 10.9 / 10.8 s against 12.1 / 16.5 s (they would
#: meet near 210k / 270k rows); 8-d, 60k rows brute 1.69 / 1.72 s against 1.62 / 2.19 s, 150k rows 10.8 / 10.7 s
#: against 4.66 / 6.46 s; 7-d the grid at 60k rows (0.71-0.74 s against 1.7 s).  So: d -> the most pairs of rows
#: (n_a n_b) for which brute is taken below CPU_BRUTE_FROM_D, each where it was measured faster on both data.
CPU_BRUTE_SMALL_ROW_PAIRS = {8: 50_000 ** 2, 9: 150_000 ** 2, 10: 1e11, 11: 1e11}
#: (Those rules predate the grid's whole-sum decisions of session 27, 3x faster at 8-12 d, and hold only where
#: the grid's share below is unknown.)  On the CPU from CPU_SHARE_FROM_D dimensions, where the planning sample
#: gives the *grid's share* (its candidates, the pairs of rows whose distance it computes, among brute force's
#: pairs of rows: ``Estimate.grid_share``), the grid's time over brute force's is about kappa(d) * d * share:
#: brute force's time follows its pairs of rows alone (1.7-1.9 s for 60k rows at every d from 8 to 20, 10.6-11.0 s
#: for 150k), the grid's its candidates times their length.  Measured (benchmarks/bench_methods.py and
#: benchmarks/crossover_share.py on the 2-core VM, session 28; results methods-cpu-vm-2026-12-06-session28-*.json):
#: kappa 0.36-0.47 on uniform and exponential data from 8- to 20-d, 60k and 150k rows, 32 and 256 neighbours
#: (a share from 0.04 to 1); 0.50-0.56 at 32-d and 0.79-0.94 at 64-d (clusters, embeddings: there the grid also
#: pays per point), so kappa rises from 0.45 at 20-d to 0.9 at 64-d.  The grid is taken while the predicted ratio stays below 1: at 150k rows it now wins
#: through 10-d (uniform 9.9 s against 10.8 s), where the rules above took brute force.
CPU_SHARE_FROM_D = 7
#: kappa(d): (d, kappa) points, linear between them, flat outside
CPU_GRID_KAPPA = ((20, 0.45), (64, 0.9))


def cpu_grid_kappa(d: int) -> float:
    """kappa(d) of :data:`CPU_SHARE_FROM_D`'s model."""
    (d0, k0), (d1, k1) = CPU_GRID_KAPPA
    return k0 + (k1 - k0) * min(max(d - d0, 0), d1 - d0) / (d1 - d0)


def wants_grid_share(d: int, gpu: bool) -> bool:
    """Whether ``choose_method`` would use the grid's share (so the planner should measure it on its sample)."""
    return not gpu and d >= CPU_SHARE_FROM_D


def choose_method(requested: str, d: int, *, gpu: bool = False, row_pairs: float | None = None,
                  grid_share: float | None = None) -> tuple[str, str]:
    """``grid`` below the measured crossover dimensionality of the backend, ``brute`` from it; on the CPU, where
    ``grid_share`` is known (:func:`wants_grid_share`), whichever the model of :data:`CPU_SHARE_FROM_D` predicts
    faster; else at the dimensionalities of :data:`CPU_BRUTE_SMALL_ROW_PAIRS` brute force where ``row_pairs``
    (n_a n_b) is small enough."""
    if requested != "auto":
        return requested, "requested"
    limit, where = (GPU_BRUTE_FROM_D, "GPU") if gpu else (CPU_BRUTE_FROM_D, "CPU")
    how = "tiled nested loop (box-pruned tiles)" if gpu else "nested loop behind float32 BLAS products (a proven filter)"
    if grid_share is not None and wants_grid_share(d, gpu):
        kappa = cpu_grid_kappa(d)
        ratio = kappa * d * grid_share
        said = (f"the grid computes {grid_share:.3g} of brute force's distances (sampled); its time over brute "
                f"force's predicted at {kappa:g} x d x that = {ratio:.2g} (CPU, measured model)")
        return ("brute", f"d={d}: {said}: the {how} wins") if ratio >= 1.0 else \
            ("grid", f"d={d}: {said}: the ε-grid over non-empty cells wins")
    most = None if gpu or d >= limit else CPU_BRUTE_SMALL_ROW_PAIRS.get(d)
    if most is not None and row_pairs is not None and row_pairs <= most:
        return "brute", (f"d={d} and {row_pairs:.3g} pairs of rows <= {most:.3g}: on the CPU the {how} wins there "
                         f"(measured at {d}-d; its work grows as the pairs of rows, the grid's more slowly)")
    if d < limit:
        return "grid", f"d={d} < {limit}: on the {where} the ε-grid over non-empty cells wins below d={limit} (measured crossover)"
    return "brute", f"d={d} >= {limit}: on the {where} the {how} wins from d={limit} (measured crossover)"


#: below these sizes a join stays in as few tasks as its budget allows, whatever the cluster: splitting it for
#: several workers would add more per-task cost (reading a block twice, a grid built per task) than it saves
SPLIT_MIN_ROWS = 1 << 20
SPLIT_MIN_PAIRS = 1 << 24
#: brute force's work is the row products: split from ~0.3 s of GPU tile work (280k x 128-d)
SPLIT_MIN_PRODUCTS = 1e13


def parallel_split(parallelism: int, *, rows: int, pairs: float, products: float) -> int:
    """Into how many blocks (self-join: block pairs of them; slabs: twice as many) a join is cut at least so
    that ``parallelism`` workers share it: 1 (no split) for one worker or a small join.

    ``parallelism`` blocks of a self-join give p(p+1)/2 block pairs: p diagonal ones and p(p-1)/2 cross pairs of
    twice a diagonal one's work, so that largest-first scheduling gives every worker the same share
    (p = 2: 1/2 | 1/4 + 1/4)."""
    if parallelism <= 1:
        return 1
    big = rows >= SPLIT_MIN_ROWS or pairs >= SPLIT_MIN_PAIRS or products >= SPLIT_MIN_PRODUCTS
    return int(parallelism) if big else 1


def choose_partitioning(requested: str, *, fits_one_task: bool, kept_fraction: float, nblocks: int,
                        slab_reads: float = 1.0) -> tuple[str, str]:
    """Chunk pairs when they prune well (or one task suffices); slabs over a sorted copy otherwise.

    Rows read, a row's worth each: the kept block pairs read ``kept_fraction * nblocks`` (two blocks a pair);
    slabs read at most ``slab_reads`` (the heaviest slab's rows as a multiple of its own: the slab and eps
    above it) plus one pass that writes the sorted copy.  Slabs win only where they read less: on
    high-dimensional data one coordinate's spread is a few eps, and the first slab would read every row."""
    if requested != "auto":
        return requested, "requested"
    if fits_one_task:
        return "chunk_pairs", "the whole join fits one task's memory budget"
    chunk_reads = kept_fraction * max(1, nblocks)
    if chunk_reads <= 2.0:
        return "chunk_pairs", f"block boxes prune well ({kept_fraction:.1%} of block pairs kept)"
    if chunk_reads <= 1.0 + slab_reads:
        return "chunk_pairs", (
            f"block boxes prune poorly ({kept_fraction:.0%} of block pairs kept), but slabs would too: with eps "
            f"beside it a slab would read {slab_reads:.1f} times its rows (block pairs read each row "
            f"{chunk_reads:.1f} times)")
    return "slabs", (
        f"block boxes prune poorly ({kept_fraction:.0%} of block pairs kept): "
        "overlapping slabs over a sorted copy read each row about once"
    )


#: GPU brute's filter (benchmarks/bench_highd.py; results highd-H100-2026-11-25-*.json).  Measured on an
#: H100 at 128-d (exponential data, 200k rows): fp32 0.52 s, int8 0.27 s, fp16 0.24 s; at 1M rows int8 5.2 s,
#: fp16 4.4 s (fp16's finer grid passes 1.5 candidates per pair, int8's 3.2).  At 512-d (12k rows) the three
#: tie.  Below 64-d the tensor cores were not measured, so the fp32 filter (tuned there) stays.
#: (Mirrored by kernels/tc_quant.auto_filter, which the driver runs: planning never imports kernels;
#: tests/test_tc_quant.py ties the two.)
TC_FROM_D = 64
#: fp16's integer grid is at least twice as fine as int8's up to this d (2048 levels down to 254); beyond,
#: int8 has as fine a grid at twice the tensor-core rate
FP16_TO_D = 260


def choose_filter(requested: str, d: int, tile: int | None = None) -> tuple[str, str]:
    """The GPU brute-force filter: ``fp16`` tensor cores from ``TC_FROM_D`` to ``FP16_TO_D`` dimensions,
    ``int8`` beyond, the ``fp32`` CUDA-core filter below or where a ``tile`` other than the tensor-core
    filters' 128 rows is asked for."""
    if requested != "auto":
        return requested, "requested"
    if tile is not None and int(tile) != 128:
        return "fp32", f"tile={tile} requested: tiles of that size are the fp32 filter's (the tensor cores take 128)"
    if d < TC_FROM_D:
        return "fp32", f"d={d} < {TC_FROM_D}: float32 products on the CUDA cores (tensor cores not measured faster here)"
    if d <= FP16_TO_D:
        return "fp16", (f"{TC_FROM_D} <= d={d} <= {FP16_TO_D}: fp16 tensor cores on rows quantised to integers "
                        "(exact products, a grid finer than int8's; float64 decides); a join of 2^32 pairs or more "
                        "takes int8 (twice the rate) where a sample of its pairs shows int8's coarser grid passing "
                        "under 1.5e-3 of all pairs more")
    return "int8", (f"d={d} > {FP16_TO_D}: int8 tensor cores on rows quantised to a 255-level grid "
                    "(exact products, twice fp16's rate at as fine a grid; float64 decides)")
