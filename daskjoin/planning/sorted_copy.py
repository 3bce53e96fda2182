"""A copy of an input sorted along one dimension (Böhm's slabs need it).

Layout of the Zarr group: ``points`` (n, d) in the input's dtype, ``ids`` (n,)
int64 original row numbers, ``keys`` (n,) float64 the split coordinate, and
``key_index`` = ``keys[::KEY_STRIDE]``, a coarse index that lets the planner
bound slab extensions without reading every key.  Rows are ordered by
(key, original row), a total order, so duplicates never make the sort ambiguous.
It does not depend on eps: one copy serves every join of the same array.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from ..io.zarr_in import MemorySource, Source, ZarrSource, _open_cached, read_rows

KEY_STRIDE = 256


@dataclass(frozen=True, eq=False)
class SortedCopy:
    """Sorted rows (``points``), their original ids, and the coarse key index."""

    points: Source
    dim: int
    key_index: np.ndarray = field(repr=False)
    ids: np.ndarray | None = field(default=None, repr=False)  # in memory, or
    group_path: str | None = None  # read from ``group_path/ids``

    @property
    def n(self) -> int:
        return self.points.n

    def read(self, start: int, stop: int, empty=None):
        """Rows [start, stop) of the sorted points and their original ids (``empty``: see ``ZarrSource.read``)."""
        pts = self.points.read(start, stop, empty)
        if self.ids is not None:
            return pts, self.ids[start:stop]
        arr = _open_cached(self.group_path, "ids", ((self.n,), "int64"))
        return pts, np.asarray(read_rows(arr, self.group_path, "ids", start, stop, "error"), dtype=np.int64)

    def upper_key(self, stop: int) -> float:
        """An upper bound of ``keys[stop - 1]`` (the largest key of rows before ``stop``)."""
        t = (stop - 1) // KEY_STRIDE + 1
        return float(self.key_index[t]) if t < self.key_index.shape[0] else np.inf

    def lower_key(self, start: int) -> float:
        """A lower bound of ``keys[start]``."""
        return float(self.key_index[start // KEY_STRIDE])

    def first_above(self, bound: float) -> int:
        """A row p such that every row at or after p has key > bound (coarse, never too small)."""
        if not np.isfinite(bound):
            return self.n
        t = int(np.searchsorted(self.key_index, bound, side="right"))
        return min(t * KEY_STRIDE, self.n)

    def last_below(self, bound: float) -> int:
        """A row p such that every row before p has key < bound (coarse, never too large)."""
        t = int(np.searchsorted(self.key_index, bound, side="left"))
        return max(0, (t - 1) * KEY_STRIDE)


def sort_in_memory(source: MemorySource, dim: int) -> SortedCopy:
    from ..kernels.key_sort import argsort_keys

    keys = source.data[:, dim].astype(np.float64)
    order = argsort_keys(keys)  # (key, row) order, as np.lexsort((rows, keys)) but in linear time
    return SortedCopy(
        points=MemorySource(np.ascontiguousarray(source.data[order]), label=f"{source.label} sorted on dim {dim}"),
        dim=dim,
        key_index=keys[order][::KEY_STRIDE].copy(),
        ids=order,
    )


#: Marks copies written with every chunk on disk (a missing chunk is damage, never zeros); copies
#: without it (older versions) are rebuilt.
LAYOUT = "all-chunks-v1"


def sorted_copy_exists(group_path: str) -> bool:
    """Whether a complete, current sorted copy is published at ``group_path`` (it appears there only whole)."""
    if not os.path.exists(os.path.join(group_path, "key_index", "zarr.json")):
        return False
    try:
        with open(os.path.join(group_path, "zarr.json")) as f:
            attrs = json.load(f).get("attributes", {}).get("daskjoin", {})
    except (OSError, ValueError, AttributeError):
        return False
    return attrs.get("layout") == LAYOUT


def open_sorted(group_path: str, dim: int) -> SortedCopy:
    import zarr

    group = zarr.open_group(group_path, mode="r")
    points = group["points"]
    return SortedCopy(
        points=ZarrSource(group_path, "points", tuple(points.shape), str(points.dtype), int(points.chunks[0]),
                          missing_chunks="error"),
        dim=dim,
        key_index=np.asarray(group["key_index"][:], dtype=np.float64),
        group_path=group_path,
    )
