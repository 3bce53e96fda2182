"""``method="auto"`` and ``partitioning="auto"``: pure functions that also return their reason."""
from __future__ import annotations

#: Crossovers measured by benchmarks/crossover.py (results in benchmarks/results/crossover-*.json).
#: GPU (H200, 200k points, ~16 neighbours): brute won from d=16 on uniform data (0.20 s vs 0.58 s),
#: tied at 16 and won from 24 on clustered data; the grid won below 16 on both (up to 380x at d=2).
GPU_BRUTE_FROM_D = 16
#: CPU (2 cores, 20k points): the grid won up to d=8 by 7-30x; from d=12 the two were within noise
#: of each other, the grid indexing at most 6 dimensions; brute is chosen above 16.
CPU_BRUTE_FROM_D = 17


def choose_method(requested: str, d: int, *, gpu: bool = False) -> tuple[str, str]:
    """``grid`` below the measured crossover dimensionality of the backend, ``brute`` from it."""
    if requested != "auto":
        return requested, "requested"
    limit, where = (GPU_BRUTE_FROM_D, "GPU") if gpu else (CPU_BRUTE_FROM_D, "CPU")
    if d < limit:
        return "grid", f"d={d} < {limit}: on the {where} the ε-grid over non-empty cells wins below d={limit} (measured crossover)"
    return "brute", (
        f"d={d} >= {limit}: on the {where} the tiled nested loop (box-pruned tiles) wins from d={limit} (measured crossover)"
    )


def choose_partitioning(requested: str, *, fits_one_task: bool, kept_fraction: float, nblocks: int) -> tuple[str, str]:
    """Chunk pairs when they prune well (or one task suffices); slabs over a sorted copy otherwise."""
    if requested != "auto":
        return requested, "requested"
    if fits_one_task:
        return "chunk_pairs", "the whole join fits one task's memory budget"
    if kept_fraction <= 2.0 / max(1, nblocks):
        return "chunk_pairs", f"block boxes prune well ({kept_fraction:.1%} of block pairs kept)"
    return "slabs", (
        f"block boxes prune poorly ({kept_fraction:.0%} of block pairs kept): "
        "overlapping slabs over a sorted copy read each row about once"
    )


#: GPU brute's filter (benchmarks/bench_highd.py --workloads filters): the tensor cores on integer rows
#: from this dimensionality on, SGEMM on the CUDA cores below it.
TC_FROM_D = 32


def choose_filter(requested: str, d: int) -> tuple[str, str]:
    """The GPU brute-force filter: ``int8`` tensor cores from ``TC_FROM_D`` dimensions, ``fp32`` below."""
    if requested != "auto":
        return requested, "requested"
    if d >= TC_FROM_D:
        return "int8", (f"d={d} >= {TC_FROM_D}: int8 tensor cores on rows quantised to a 255-level grid "
                        "(exact integer products; float64 decides)")
    return "fp32", f"d={d} < {TC_FROM_D}: float32 products on the CUDA cores (the grid's tiles are short)"
