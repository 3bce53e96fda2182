"""``method="auto"`` and ``partitioning="auto"``: pure functions that also return their reason."""
from __future__ import annotations

#: Above this dimensionality the ε-grid prunes little (it indexes at most 6 dimensions).
GRID_MAX_DIMS = 16


def choose_method(requested: str, d: int) -> tuple[str, str]:
    if requested != "auto":
        return requested, "requested"
    if d <= GRID_MAX_DIMS:
        return "grid", f"d={d} <= {GRID_MAX_DIMS}: the ε-grid over non-empty cells prunes well at low and mid d"
    return "brute", f"d={d} > {GRID_MAX_DIMS}: a grid prunes little at high d; tiled nested loop"


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
