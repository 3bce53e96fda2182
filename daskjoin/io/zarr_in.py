"""Open the points of a join as a :class:`Source`: a Zarr array on disk or an in-memory array.

A source is small and picklable: tasks receive it and read only their own rows,
so a Zarr source never ships data through the scheduler.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

import numpy as np

from ..validation import InputError, check_dtype, check_shape

DEFAULT_MEMORY_CHUNK_ROWS = 1 << 16


@functools.lru_cache(maxsize=64)
def _open_cached(store_path: str, array_path: str, token: tuple):
    import zarr

    return zarr.open_array(store=store_path, path=array_path, mode="r")


@dataclass(frozen=True)
class ZarrSource:
    """Rows of a 2-D Zarr array in a local (or shared) directory store."""

    store_path: str
    array_path: str
    shape: tuple
    dtype: str
    chunk_rows: int

    @property
    def n(self) -> int:
        return self.shape[0]

    @property
    def d(self) -> int:
        return self.shape[1]

    @property
    def label(self) -> str:
        return os.path.join(self.store_path, self.array_path) if self.array_path else self.store_path

    def array(self):
        return _open_cached(self.store_path, self.array_path, (self.shape, self.dtype))

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` as a numpy array (float32 or float64)."""
        block = np.asarray(self.array()[start:stop])
        return as_float(block)


@dataclass(frozen=True, eq=False)
class MemorySource:
    """Rows of an in-memory numpy array (shipped once with the graph)."""

    data: np.ndarray = field(repr=False)
    label: str = "<array>"
    chunk_rows: int = DEFAULT_MEMORY_CHUNK_ROWS

    @property
    def shape(self) -> tuple:
        return self.data.shape

    @property
    def n(self) -> int:
        return self.data.shape[0]

    @property
    def d(self) -> int:
        return self.data.shape[1]

    @property
    def dtype(self) -> str:
        return str(self.data.dtype)

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.data[start:stop]


Source = ZarrSource | MemorySource


def as_float(block: np.ndarray) -> np.ndarray:
    """float32/float64 kept as they are; other real dtypes become float64 (exact for |ints| < 2**53)."""
    if block.dtype in (np.float32, np.float64):
        return block
    return block.astype(np.float64)


def _zarr_source(arr, label: str) -> Source:
    check_shape(arr.shape, label)
    check_dtype(arr.dtype, label)
    store = arr.store
    root = getattr(store, "root", None)
    if root is None:
        # In-memory or remote store: read it once here; joins on such data are client-sized.
        return MemorySource(as_float(np.asarray(arr[:])), label=label)
    chunk_rows = int(arr.chunks[0]) if arr.shape[0] else 1
    return ZarrSource(
        store_path=os.path.abspath(os.fspath(root)),  # workers may run in another directory
        array_path=arr.path,
        shape=tuple(int(s) for s in arr.shape),
        dtype=str(arr.dtype),
        chunk_rows=max(1, chunk_rows),
    )


def open_zarr_path(path, name: str) -> Source:
    """Open a Zarr array at ``path`` (``store.zarr`` or ``store.zarr/inner/array``)."""
    import zarr

    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(
            f"{name}: no Zarr store at {path!r}; check the path, or create one with "
            "`daskjoin import FILE OUT.zarr` or `daskjoin synth uniform --n N --d D OUT.zarr`"
        )
    try:
        node = zarr.open(store=path, mode="r")
    except Exception as exc:  # zarr raises several types for unreadable stores
        raise InputError(f"{name}: cannot read a Zarr array at {path!r} ({type(exc).__name__}: {exc})") from exc
    if isinstance(node, zarr.Group):
        arrays = [k for k, v in node.arrays()]
        hint = f"; it holds arrays {arrays}, pass e.g. {os.path.join(path, arrays[0])!r}" if arrays else ", and it is empty"
        raise InputError(f"{name}: {path!r} is a Zarr group, not an array{hint}")
    return _zarr_source(node, name)


def open_points(obj, name: str = "A") -> Source:
    """Turn a user input (path, zarr.Array, numpy, dask or cupy array) into a :class:`Source`."""
    if isinstance(obj, (ZarrSource, MemorySource)):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        return open_zarr_path(obj, name)
    module = type(obj).__module__.split(".")[0]
    if module == "zarr":
        return _zarr_source(obj, name)
    if module == "dask":
        check_shape(obj.shape, name)
        check_dtype(obj.dtype, name)
        return MemorySource(as_float(np.asarray(obj.compute())), label="<dask array>")
    if module == "cupy":
        obj = obj.get()
    if isinstance(obj, np.ndarray) or hasattr(obj, "__array__"):
        arr = np.asarray(obj)
        check_shape(arr.shape, name)
        check_dtype(arr.dtype, name)
        return MemorySource(np.ascontiguousarray(as_float(arr)), label=f"<{module} array>")
    raise InputError(
        f"{name} must be a Zarr path, a zarr.Array, or a numpy, dask or cupy array, got {type(obj).__name__}"
    )
