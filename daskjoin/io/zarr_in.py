"""Open the points of a join as a :class:`Source`: a Zarr array on disk or an in-memory array.

A source is small and picklable: tasks receive it and read only their own rows,
so a Zarr source never ships data through the scheduler.

Reading rows: an uncompressed Zarr v3 array of whole-row chunks (what
``daskjoin import`` and ``daskjoin synth`` write) is read straight from its
chunk files into one preallocated array, chunks in parallel (:func:`read_raw`);
anything else goes through zarr.  Both give the same values.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import threading
from dataclasses import dataclass, field

import numpy as np

from ..validation import InputError, check_dtype, check_shape

DEFAULT_MEMORY_CHUNK_ROWS = 1 << 16
METADATA_FILES = ("zarr.json", ".zarray")


def metadata_token(folder: str) -> tuple | None:
    """(file, inode, mtime, ctime, size) of an array's metadata file, or None: changes whenever the array is re-created."""
    for name in METADATA_FILES:
        try:
            st = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        return (name, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    return None


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
        """The zarr array (opened once per process, again whenever its metadata file changes)."""
        token = (self.shape, self.dtype, metadata_token(self.label))
        return _open_cached(self.store_path, self.array_path, token)

    def read(self, start: int, stop: int, empty=None) -> np.ndarray:
        """Rows ``[start, stop)`` as a numpy array (float32 or float64).

        ``empty(shape, dtype)`` allocates the result where the rows are read straight from
        the chunk files (e.g. pinned host memory for a GPU task); default ``numpy.empty``.
        """
        block = read_raw(self, start, stop, empty)
        if block is None:
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

    def read(self, start: int, stop: int, empty=None) -> np.ndarray:
        return self.data[start:stop]


Source = ZarrSource | MemorySource


def as_float(block: np.ndarray) -> np.ndarray:
    """float32/float64 kept as they are; other real dtypes become float64 (exact for |ints| < 2**53)."""
    if block.dtype in (np.float32, np.float64):
        return block
    return block.astype(np.float64)


# --------------------------------------------------------------------------- direct chunk reads


@dataclass(frozen=True)
class RawLayout:
    """An uncompressed Zarr v3 array of whole-row chunks: chunk ``c`` holds rows ``[c R, (c + 1) R)`` as C-order bytes."""

    folder: str
    chunk_rows: int
    row_bytes: int
    key_prefix: str  # "c/" (default encoding) or "" (v2 encoding)
    separator: str

    def chunk_file(self, index: int) -> str:
        return os.path.join(self.folder, f"{self.key_prefix}{index}{self.separator}0")


def parse_raw_layout(folder: str, meta: dict, shape: tuple, dtype: str, chunk_rows: int) -> RawLayout | None:
    """The layout of a v3 array whose chunk files are its rows' little-endian bytes, or None (read through zarr)."""
    if meta.get("zarr_format") != 3 or meta.get("node_type") != "array" or meta.get("storage_transformers"):
        return None
    if meta.get("data_type") not in ("float32", "float64") or meta["data_type"] != dtype or sys.byteorder != "little":
        return None
    if list(meta.get("shape") or ()) != list(shape) or len(shape) != 2:
        return None
    grid = meta.get("chunk_grid") or {}
    chunks = list((grid.get("configuration") or {}).get("chunk_shape") or ())
    if grid.get("name") != "regular" or chunks != [chunk_rows, shape[1]]:
        return None
    codecs = meta.get("codecs")
    if not (isinstance(codecs, list) and len(codecs) == 1 and isinstance(codecs[0], dict)
            and codecs[0].get("name") == "bytes"
            and (codecs[0].get("configuration") or {}).get("endian", "little") == "little"):
        return None
    key = _key_format(meta)
    if key is None:
        return None
    prefix, separator = key
    return RawLayout(folder, int(chunk_rows), int(shape[1]) * np.dtype(dtype).itemsize, prefix, separator)


_METADATA: dict = {}  # (folder, metadata token) -> parsed zarr.json; plain dict operations only (threads)
_MISSING = object()


def array_metadata(folder: str) -> dict | None:
    """The parsed ``zarr.json`` of the v3 array in ``folder`` (parsed again only when the file changes), or None."""
    token = metadata_token(folder)
    if token is None or token[0] != "zarr.json":
        return None
    key = (folder, token)
    meta = _METADATA.get(key, _MISSING)
    if meta is _MISSING:
        try:
            with open(os.path.join(folder, "zarr.json"), "rb") as f:
                meta = json.load(f)
        except (OSError, ValueError):
            return None
        meta = meta if isinstance(meta, dict) else None
        if len(_METADATA) >= 256:
            _METADATA.clear()
        _METADATA[key] = meta
    return meta


def _key_format(meta: dict) -> tuple[str, str] | None:
    """(prefix, separator) of the chunk keys: ``c/1/0`` (default encoding) or ``1.0`` (v2 encoding)."""
    encoding = meta.get("chunk_key_encoding") or {"name": "default"}
    separator = (encoding.get("configuration") or {}).get("separator")
    if encoding.get("name") == "default":
        separator = separator or "/"
        prefix = "c" + separator
    elif encoding.get("name") == "v2":
        separator, prefix = separator or ".", ""
    else:
        return None
    return (prefix, separator) if separator in ("/", ".") else None


def raw_layout(source: "ZarrSource") -> RawLayout | None:
    """``source``'s :class:`RawLayout`, or None where its rows must be read through zarr."""
    meta = array_metadata(source.label)
    return None if meta is None else parse_raw_layout(source.label, meta, source.shape, source.dtype, source.chunk_rows)


def chunk_files(source: "ZarrSource") -> list[str] | None:
    """The path of every chunk (or shard) file of a v3 array on a regular grid, in grid order; None if unknown."""
    meta = array_metadata(source.label)
    if meta is None or meta.get("zarr_format") != 3 or meta.get("storage_transformers"):
        return None
    grid = meta.get("chunk_grid") or {}
    chunks = list((grid.get("configuration") or {}).get("chunk_shape") or ())
    shape = list(meta.get("shape") or ())
    key = _key_format(meta)
    if grid.get("name") != "regular" or key is None or len(chunks) != 2 or len(shape) != 2 or min(chunks) < 1:
        return None
    prefix, sep = key
    base = source.label + os.sep + prefix
    nrow, ncol = -(-shape[0] // chunks[0]), -(-shape[1] // chunks[1])
    return [f"{base}{i}{sep}{j}" for i in range(nrow) for j in range(ncol)]


class _NotRaw(Exception):
    """A chunk file is missing or not the expected size: read through zarr instead."""


_POOL = {"pool": None, "lock": threading.Lock()}
READ_THREADS = 8


def _pool():
    if _POOL["pool"] is None:
        from concurrent.futures import ThreadPoolExecutor

        with _POOL["lock"]:
            if _POOL["pool"] is None:
                _POOL["pool"] = ThreadPoolExecutor(max_workers=min(READ_THREADS, os.cpu_count() or 1),
                                                   thread_name_prefix="daskjoin-read")
    return _POOL["pool"]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _POOL.update(pool=None, lock=threading.Lock()))


def _read_piece(piece) -> None:
    path, chunk_bytes, offset, view = piece
    try:
        f = open(path, "rb", buffering=0)
    except FileNotFoundError as exc:  # a chunk never written: zarr knows its fill value
        raise _NotRaw(path) from exc
    with f:
        if os.fstat(f.fileno()).st_size != chunk_bytes:
            raise _NotRaw(path)
        f.seek(offset)
        done = 0
        while done < len(view):  # readinto releases the GIL; large reads may come back in parts
            got = f.readinto(view[done:])
            if not got:
                raise _NotRaw(path)
            done += got


def read_raw(source: "ZarrSource", start: int, stop: int, empty=None) -> np.ndarray | None:
    """Rows ``[start, stop)`` read straight from the chunk files into ``empty((rows, d), dtype)``.

    None where the array is not laid out for it (compressed, sharded, transposed, a missing
    chunk, ...): the caller reads through zarr.  Chunks are read concurrently.
    """
    layout = raw_layout(source)
    if layout is None:
        return None
    rows = stop - start
    out = (empty or np.empty)((rows, source.d), np.dtype(source.dtype))
    if rows <= 0:
        return out
    if not out.flags.c_contiguous:
        return None
    view = memoryview(out.reshape(-1).view(np.uint8))
    size, rb = layout.chunk_rows, layout.row_bytes
    pieces = []
    for c in range(start // size, (stop - 1) // size + 1):
        lo, hi = max(start, c * size), min(stop, (c + 1) * size)
        pieces.append((layout.chunk_file(c), size * rb, (lo - c * size) * rb, view[(lo - start) * rb:(hi - start) * rb]))
    try:
        if len(pieces) == 1:
            _read_piece(pieces[0])
        else:
            list(_pool().map(_read_piece, pieces))
    except _NotRaw:
        return None
    return out


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


_OPENED: dict = {}  # (absolute path, metadata token) -> ZarrSource


def open_zarr_path(path, name: str) -> Source:
    """Open a Zarr array at ``path`` (``store.zarr`` or ``store.zarr/inner/array``).

    A path opened before whose metadata file is unchanged (same inode, times and size) is
    not opened again: its shape, dtype and chunking are what they were.
    """
    path = os.fspath(path)
    token = metadata_token(path)
    key = None if token is None else (os.path.abspath(path), token)
    source = None if key is None else _OPENED.get(key)
    if source is not None:
        return source
    source = _open_zarr_path(path, name)
    if key is not None and isinstance(source, ZarrSource):
        if len(_OPENED) >= 256:
            _OPENED.clear()
        _OPENED[key] = source
    return source


def _open_zarr_path(path: str, name: str) -> Source:
    import zarr

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
