"""Open the points of a join as a :class:`Source`: a Zarr array on disk or an in-memory array.

A source is small and picklable: tasks receive it and read only their own rows,
so a Zarr source never ships data through the scheduler.

Reading rows: an uncompressed Zarr v3 array of whole-row chunks (what
``daskjoin import`` and ``daskjoin synth`` write) is read straight from its
chunk files into one preallocated array, chunks in parallel (:func:`read_raw`);
anything else goes through zarr.  Both give the same values.

Damaged stores: a chunk file that is missing, of the wrong size or undecodable raises
:class:`~daskjoin.validation.DamagedStoreError` naming the store and the chunk key.
Zarr's own rule (a missing chunk reads as the fill value) applies only where the dask
config ``daskjoin.missing-chunks`` is ``"fill"`` when the input is opened.  Integer
inputs are checked to be exact in float64 (magnitudes up to 2**53).
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import threading
from dataclasses import dataclass, field

import numpy as np

from .. import config
from ..caches import CACHE
from ..validation import DamagedStoreError, InputError, check_dtype, check_exact_integers, check_shape

DEFAULT_MEMORY_CHUNK_ROWS = 1 << 16
METADATA_FILES = ("zarr.json", ".zarray")
MISSING_CHUNKS = ("error", "fill")


def missing_chunks_mode() -> str:
    """The dask config ``daskjoin.missing-chunks`` of this process: "error" (default) or "fill"."""
    value = config.get("missing-chunks")
    mode = value.strip().lower() if isinstance(value, str) else value
    if mode not in MISSING_CHUNKS:
        raise InputError(
            f"dask config daskjoin.missing-chunks must be 'error' or 'fill', got {value!r}; "
            "set it with dask.config.set({'daskjoin.missing-chunks': 'fill'}) or DASK_DASKJOIN__MISSING_CHUNKS=fill"
        )
    return mode


def metadata_token(folder: str) -> tuple | None:
    """(file, inode, mtime, ctime, size) of an array's metadata file, or None: changes whenever the array is re-created."""
    for name in METADATA_FILES:
        try:
            st = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        return (name, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    return None


def _open_cached(store_path: str, array_path: str, token: tuple):
    """The zarr array, opened once per (store, array, ``token``) in this process (``token`` changes with the array)."""
    def build():
        import zarr

        return zarr.open_array(store=store_path, path=array_path, mode="r")

    return CACHE.get_or_build("zarr-arrays", (store_path, array_path, token), build)


@dataclass(frozen=True)
class ZarrSource:
    """Rows of a 2-D Zarr array in a local (or shared) directory store."""

    store_path: str
    array_path: str
    shape: tuple
    dtype: str
    chunk_rows: int
    # what a missing chunk file means: "error" (DamagedStoreError) or "fill" (zarr's fill value).
    # open_points sets it from the client's daskjoin.missing-chunks (default "error"); the
    # default here is zarr's rule, for arrays daskjoin writes itself (sorted copies), whose
    # all-fill chunks zarr leaves unwritten
    missing_chunks: str = "fill"

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

        Raises :class:`~daskjoin.validation.DamagedStoreError` for a chunk that is missing
        (unless ``missing_chunks == "fill"``), of the wrong size or undecodable, and
        :class:`~daskjoin.validation.InputError` for integers beyond 2**53.
        """
        block = read_raw(self, start, stop, empty)
        if block is None:
            block = read_rows(self.array(), self.store_path, self.array_path, start, stop, self.missing_chunks)
        check_exact_integers(block, self.label, start)
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
    """float32/float64 kept as they are; other real dtypes become float64 (exact for |ints| <= 2**53).

    Callers check int64/uint64 inputs with :func:`~daskjoin.validation.check_exact_integers` first.
    """
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
    if not _plain_bytes(meta):
        return None
    key = _key_format(meta)
    if key is None:
        return None
    prefix, separator = key
    return RawLayout(folder, int(chunk_rows), int(shape[1]) * np.dtype(dtype).itemsize, prefix, separator)


def _plain_bytes(meta: dict) -> bool:
    """Whether a v3 array's chunks are its elements' little-endian bytes, uncompressed, on this little-endian host."""
    codecs = meta.get("codecs")
    return (sys.byteorder == "little" and isinstance(codecs, list) and len(codecs) == 1
            and isinstance(codecs[0], dict) and codecs[0].get("name") == "bytes"
            and (codecs[0].get("configuration") or {}).get("endian", "little") == "little")


_METADATA: dict = {}  # (folder, metadata token) -> parsed zarr.json / .zarray; plain dict operations only (threads)
_MISSING = object()


def stored_metadata(folder: str) -> dict | None:
    """The parsed metadata file (``zarr.json`` or ``.zarray``) of the array in ``folder``, or None.

    Parsed again only when the file changes (its :func:`metadata_token`).
    """
    token = metadata_token(folder)
    if token is None:
        return None
    key = (folder, token)
    meta = _METADATA.get(key, _MISSING)
    if meta is _MISSING:
        try:
            with open(os.path.join(folder, token[0]), "rb") as f:
                meta = json.load(f)
        except (OSError, ValueError):
            return None
        meta = meta if isinstance(meta, dict) else None
        if len(_METADATA) >= 256:
            _METADATA.clear()
        _METADATA[key] = meta
    return meta


def array_metadata(folder: str) -> dict | None:
    """The parsed ``zarr.json`` of the v3 array in ``folder`` (parsed again only when the file changes), or None."""
    meta = stored_metadata(folder)
    return meta if meta is not None and meta.get("zarr_format") == 3 else None


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


@dataclass(frozen=True)
class ChunkGrid:
    """Where the chunk files of an array on a regular grid are: one file per chunk (per shard if sharded)."""

    folder: str
    shape: tuple
    chunks: tuple  # chunk shape (shard shape for sharded v3 arrays)
    prefix: str
    separator: str

    def key(self, index: tuple) -> str:
        """The chunk's key inside the array, e.g. ``c/5/0`` (v3), ``5.0`` (v2)."""
        return self.prefix + self.separator.join(str(i) for i in index)

    def path(self, index: tuple) -> str:
        return os.path.join(self.folder, *self.key(index).split("/"))

    def rows(self, index: tuple) -> tuple[int, int]:
        """The rows (first axis) ``[lo, hi)`` that chunk ``index`` holds."""
        size = self.chunks[0]
        return index[0] * size, min(self.shape[0], (index[0] + 1) * size)

    def covering(self, start: int, stop: int) -> list[tuple]:
        """The indices of the chunks holding rows ``[start, stop)`` (all columns), in grid order."""
        if stop <= start or not self.shape or min(self.shape) <= 0:
            return []
        ranges = [range(start // self.chunks[0], (stop - 1) // self.chunks[0] + 1)]
        ranges += [range(-(-s // c)) for s, c in zip(self.shape[1:], self.chunks[1:])]
        return list(itertools.product(*ranges))


def chunk_grid(folder: str) -> ChunkGrid | None:
    """The :class:`ChunkGrid` of the v3 or v2 array in ``folder``, or None where its layout is not known."""
    meta = stored_metadata(folder)
    if meta is None:
        return None
    if meta.get("zarr_format") == 3:
        if meta.get("node_type") != "array" or meta.get("storage_transformers"):
            return None
        grid = meta.get("chunk_grid") or {}
        chunks = (grid.get("configuration") or {}).get("chunk_shape") or ()
        key = _key_format(meta)
        if grid.get("name") != "regular" or key is None:
            return None
        prefix, separator = key
    elif meta.get("zarr_format") == 2:
        chunks = meta.get("chunks") or ()
        separator = meta.get("dimension_separator") or "."
        prefix = ""
        if separator not in ("/", "."):
            return None
    else:
        return None
    shape = meta.get("shape") or ()
    try:
        shape, chunks = tuple(int(s) for s in shape), tuple(int(c) for c in chunks)
    except (TypeError, ValueError):
        return None
    if not shape or len(chunks) != len(shape) or min(chunks) < 1:
        return None
    return ChunkGrid(folder, shape, chunks, prefix, separator)


def chunk_files(source: "ZarrSource") -> list[str] | None:
    """The path of every chunk (or shard) file of a 2-D v3 or v2 array on a regular grid, in grid order.

    None where the layout is not known.
    """
    grid = chunk_grid(source.label)
    if grid is None or len(grid.shape) != 2:
        return None
    return [grid.path(index) for index in grid.covering(0, grid.shape[0])]


# --------------------------------------------------------------------------- damaged stores


def _chunk_name(array_path: str, grid: ChunkGrid, index: tuple) -> str:
    """The chunk's key inside the store: ``c/5/0``, or ``points/c/5/0`` for an array inside a group."""
    key = grid.key(index)
    return f"{array_path.strip('/')}/{key}" if array_path.strip("/") else key


def _where(grid: ChunkGrid, index: tuple) -> str:
    lo, hi = grid.rows(index)
    what = "rows" if len(grid.shape) > 1 else "entries"
    return f"{what} {lo}..{hi - 1}" if hi > lo else what


_RESTORE = "restore that file (from a backup, or copy the store again) or re-create the store"


def missing_chunk_error(store: str, array_path: str, grid: ChunkGrid, index: tuple) -> DamagedStoreError:
    key = _chunk_name(array_path, grid, index)
    return DamagedStoreError(
        f"damaged Zarr store {store!r}: chunk {key!r} ({_where(grid, index)}) is missing (no file "
        f"{grid.path(index)!r}); {_RESTORE}; if missing chunks are meant to read as the array's fill value "
        "(zarr's rule, e.g. a store written with write_empty_chunks=False), set the dask config "
        "daskjoin.missing-chunks to 'fill' (DASK_DASKJOIN__MISSING_CHUNKS=fill)",
        store, key,
    )


def bad_chunk_error(store: str, array_path: str, grid: ChunkGrid, index: tuple, found: str) -> DamagedStoreError:
    key = _chunk_name(array_path, grid, index)
    return DamagedStoreError(
        f"damaged Zarr store {store!r}: chunk {key!r} ({_where(grid, index)}) {found}; {_RESTORE}", store, key,
    )


def missing_file_error(source: "ZarrSource", k: int) -> DamagedStoreError:
    """The error for the ``k``-th file of :func:`chunk_files` (``source``) being missing."""
    grid = chunk_grid(source.label)
    return missing_chunk_error(source.store_path, source.array_path, grid, grid.covering(0, grid.shape[0])[k])


def wrong_size_error(source: "ZarrSource", k: int, size: int, expected: int) -> DamagedStoreError:
    """The error for the ``k``-th file of :func:`chunk_files` (``source``) being ``size`` bytes, not ``expected``."""
    grid = chunk_grid(source.label)
    return bad_chunk_error(source.store_path, source.array_path, grid, grid.covering(0, grid.shape[0])[k],
                           _size_found(size, expected))


def _size_found(size: int, expected: int) -> str:
    how = "truncated" if size < expected else "longer than an uncompressed chunk"
    return f"is {size} bytes, expected {expected} ({how})"


def check_chunks_present(store: str, array_path: str, grid: ChunkGrid, start: int, stop: int,
                         allow_missing=None) -> None:
    """Raise :class:`DamagedStoreError` for the first missing chunk file holding rows ``[start, stop)``.

    One ``stat`` per chunk (shard) file.  ``allow_missing(index)`` may accept a missing chunk.
    """
    exists = os.path.exists
    for index in grid.covering(start, stop):
        if not exists(grid.path(index)) and not (allow_missing is not None and allow_missing(index)):
            raise missing_chunk_error(store, array_path, grid, index)


def _locate_bad_chunk(arr, store: str, array_path: str, grid: ChunkGrid, start: int, stop: int):
    """After a failed read: the first chunk of rows ``[start, stop)`` that zarr cannot read, as an error, or None."""
    for index in grid.covering(start, stop):
        region = tuple(slice(i * c, min(s, (i + 1) * c)) for i, c, s in zip(index, grid.chunks, grid.shape))
        try:
            arr[region]
        except (MemoryError, OSError):  # the machine's trouble (EIO, ESTALE, ...): not proof of damage
            raise
        except Exception as exc:  # noqa: BLE001 - zarr and its codecs raise many types
            return bad_chunk_error(store, array_path, grid, index,
                                   f"cannot be read or decoded ({type(exc).__name__}: {exc})")
    return None


def read_rows(arr, store_path: str, array_path: str, start: int, stop: int, missing_chunks: str = "error",
              allow_missing=None) -> np.ndarray:
    """Rows ``[start, stop)`` of the zarr array ``arr`` stored at ``store_path/array_path``, through zarr.

    With ``missing_chunks == "error"`` every chunk (shard) file holding those rows must exist
    (``allow_missing(index)`` may accept one: a chunk known to be all fill value); a chunk
    zarr cannot read or decode is a :class:`DamagedStoreError` naming its key either way.
    """
    folder = os.path.join(store_path, array_path) if array_path else store_path
    grid = chunk_grid(folder) if stop > start else None
    if grid is not None and missing_chunks != "fill":
        check_chunks_present(store_path, array_path, grid, start, stop, allow_missing)
    try:
        return np.asarray(arr[start:stop])
    except (MemoryError, OSError):
        raise
    except Exception as exc:  # noqa: BLE001 - zarr and its codecs raise many types
        damaged = None if grid is None else _locate_bad_chunk(arr, store_path, array_path, grid, start, stop)
        if damaged is not None:
            raise damaged from exc
        raise


# --------------------------------------------------------------------------- direct chunk reads (continued)


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


class _BadChunk(Exception):
    """A chunk file read straight from disk is missing or not what the layout says (turned into DamagedStoreError)."""

    def __init__(self, index: tuple, found: str | None):
        super().__init__(index, found)
        self.index, self.found = index, found  # found None: the file is missing


def _read_piece(piece) -> None:
    index, path, chunk_bytes, offset, view = piece
    try:
        f = open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise _BadChunk(index, None) from None
    # other OSErrors (EIO, ESTALE, EMFILE, EACCES) are the machine's trouble, not proof of a damaged
    # store: they propagate as themselves (a task failure, exit 1), not as DamagedStoreError
    with f:
        size = os.fstat(f.fileno()).st_size
        if size != chunk_bytes:
            raise _BadChunk(index, _size_found(size, chunk_bytes))
        f.seek(offset)
        done = 0
        while done < len(view):  # readinto releases the GIL; large reads may come back in parts
            got = f.readinto(view[done:])
            if not got:
                raise _BadChunk(index, f"ended early: it shrank to {offset + done} bytes while being read")
            done += got


def read_raw(source: "ZarrSource", start: int, stop: int, empty=None) -> np.ndarray | None:
    """Rows ``[start, stop)`` read straight from the chunk files into ``empty((rows, d), dtype)``.

    None where the array is not laid out for it (compressed, sharded, transposed, ...), or where
    a chunk is missing and ``source.missing_chunks == "fill"``: the caller reads through zarr.
    A missing chunk otherwise, or one of the wrong size, is a :class:`DamagedStoreError`.
    Chunks are read concurrently.
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
        pieces.append(((c, 0), layout.chunk_file(c), size * rb, (lo - c * size) * rb,
                       view[(lo - start) * rb:(hi - start) * rb]))

    def grid() -> ChunkGrid:
        return ChunkGrid(layout.folder, tuple(source.shape), (layout.chunk_rows, source.d), layout.key_prefix,
                         layout.separator)

    def may_fill(index) -> bool:
        return source.missing_chunks == "fill"

    return out if _read_pieces(pieces, source.store_path, source.array_path, grid, may_fill) else None


def _read_pieces(pieces, store_path: str, array_path: str, grid, may_fill) -> bool:
    """Read ``pieces`` (``(grid index, file, chunk bytes, offset, view)``, :func:`_read_piece`), concurrently.

    False where a chunk is missing and ``may_fill(index)`` says zarr is to read it as the fill value (a
    chunk never written); a missing chunk otherwise, or one of the wrong size, is a :class:`DamagedStoreError`
    (``grid()`` gives the :class:`ChunkGrid` that names it)."""
    try:
        if len(pieces) == 1:
            _read_piece(pieces[0])
        else:
            list(_pool().map(_read_piece, pieces))
    except _BadChunk as bad:
        if bad.found is None and may_fill(bad.index):
            return False
        if bad.found is None:
            raise missing_chunk_error(store_path, array_path, grid(), bad.index) from None
        raise bad_chunk_error(store_path, array_path, grid(), bad.index, bad.found) from None
    return True


#: element types a 1-D array may have to be read straight from its chunk files
_ENTRY_TYPES = frozenset({"int32", "int64", "float32", "float64"})


def _entries_grid(folder: str) -> ChunkGrid | None:
    """The grid of a 1-D v3 array in ``folder`` whose chunk files are its entries' little-endian bytes, or None."""
    meta = array_metadata(folder)
    if meta is None or meta.get("data_type") not in _ENTRY_TYPES or not _plain_bytes(meta):
        return None
    grid = chunk_grid(folder)
    return grid if grid is not None and len(grid.shape) == 1 else None


def read_raw_entries(store_path: str, array_path: str, start: int, stop: int, missing_chunks: str = "error",
                     allow_missing=None) -> np.ndarray | None:
    """Entries ``[start, stop)`` of a 1-D uncompressed v3 array (a set store's tokens, offsets, ids), read
    straight from its chunk files, concurrently: zarr's reads of the same files took 30-60 ms for the 19 MB of
    tokens of a KOSARAK-like store on the 2-core VM, these 3-5 ms.

    None where the array is not laid out for it, or where a chunk is missing and zarr is to read it as
    the fill value (``missing_chunks == "fill"``, or ``allow_missing(index)``): the caller reads through
    zarr.  A missing chunk otherwise, or one of the wrong size, is a :class:`DamagedStoreError`.
    """
    folder = os.path.join(store_path, array_path) if array_path else store_path
    grid = _entries_grid(folder)
    if grid is None or not 0 <= start <= stop <= grid.shape[0]:
        return None
    dtype = np.dtype(array_metadata(folder)["data_type"])
    out = np.empty(stop - start, dtype)
    if stop == start:
        return out
    view = memoryview(out.view(np.uint8))
    size, width = grid.chunks[0], dtype.itemsize
    pieces = []
    for (c,) in grid.covering(start, stop):
        lo, hi = max(start, c * size), min(stop, (c + 1) * size)
        pieces.append(((c,), grid.path((c,)), size * width, (lo - c * size) * width,
                       view[(lo - start) * width:(hi - start) * width]))

    def may_fill(index) -> bool:
        return missing_chunks == "fill" or (allow_missing is not None and bool(allow_missing(index)))

    return out if _read_pieces(pieces, store_path, array_path, lambda: grid, may_fill) else None


def _zarr_source(arr, label: str) -> Source:
    check_shape(arr.shape, label)
    check_dtype(arr.dtype, label)
    mode = missing_chunks_mode()  # the client's choice, carried by the source to every worker
    store = arr.store
    root = getattr(store, "root", None)
    if root is None:
        # In-memory or remote store: read it once here; joins on such data are client-sized.
        data = np.asarray(arr[:])
        check_exact_integers(data, label)
        return MemorySource(as_float(data), label=label)
    chunk_rows = int(arr.chunks[0]) if arr.shape[0] else 1
    return ZarrSource(
        store_path=os.path.abspath(os.fspath(root)),  # workers may run in another directory
        array_path=arr.path,
        shape=tuple(int(s) for s in arr.shape),
        dtype=str(arr.dtype),
        chunk_rows=max(1, chunk_rows),
        missing_chunks=mode,
    )


def open_zarr_path(path, name: str) -> Source:
    """Open a Zarr array at ``path`` (``store.zarr`` or ``store.zarr/inner/array``).

    A path opened before whose metadata file is unchanged (same inode, times and size) is
    not opened again: its shape, dtype and chunking are what they were.
    """
    path = os.fspath(path)
    token = metadata_token(path)
    key = None if token is None else (os.path.abspath(path), token, missing_chunks_mode())
    source = None if key is None else CACHE.get("opened", key)  # (absolute path, metadata token, missing-chunks mode)
    if source is not None:
        return source
    source = _open_zarr_path(path, name)
    if key is not None and isinstance(source, ZarrSource):
        CACHE.put("opened", key, source)
    return source


#: the fields of a v3 array's zarr.json (the spec's; another field zarr refuses unless it says
#: ``"must_understand": false``, so such a file is left to zarr)
_V3_ARRAY_FIELDS = frozenset({"zarr_format", "node_type", "shape", "data_type", "chunk_grid", "chunk_key_encoding",
                              "fill_value", "codecs", "attributes", "storage_transformers", "dimension_names"})


def _plain_fill(value) -> bool:
    """A float array's fill value as the v3 spec writes one: a number, NaN or an infinity, or raw bits in hex."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, str) and (value in ("NaN", "Infinity", "-Infinity") or value.startswith("0x"))


def _open_raw(path: str, name: str) -> ZarrSource | None:
    """The array at ``path`` opened from its ``zarr.json`` alone where it is a plain v3 array of whole-row,
    uncompressed float chunks (what ``daskjoin synth`` and ``import`` write): the source zarr would give,
    without importing zarr (0.5-0.7 s in a new process).  None for anything else, and for any file this
    does not recognise field by field: zarr opens it, or refuses it with its own message."""
    meta = array_metadata(path)
    if meta is None or meta.get("node_type") != "array" or not set(meta) <= _V3_ARRAY_FIELDS:
        return None
    names = meta.get("dimension_names")
    if not _plain_fill(meta.get("fill_value")) or not isinstance(meta.get("attributes", {}), dict) or not (
            names is None or (isinstance(names, list) and len(names) == 2)):
        return None
    try:
        grid = chunk_grid(path)
        if grid is None or len(grid.shape) != 2 or grid.shape[0] == 0:
            return None
        dtype = str(np.dtype(meta["data_type"]))
        if parse_raw_layout(path, meta, grid.shape, dtype, grid.chunks[0]) is None:
            return None
    except (TypeError, AttributeError, ValueError, KeyError):  # fields of unexpected types: zarr decides
        return None
    check_shape(grid.shape, name)
    check_dtype(np.dtype(dtype), name)
    return ZarrSource(store_path=os.path.abspath(path), array_path="", shape=grid.shape, dtype=dtype,
                      chunk_rows=grid.chunks[0], missing_chunks=missing_chunks_mode())


def _open_zarr_path(path: str, name: str) -> Source:
    raw = _open_raw(path, name) if os.path.isdir(path) else None
    if raw is not None:
        return raw
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
        data = np.asarray(obj.compute())
        check_exact_integers(data, name)
        return MemorySource(as_float(data), label="<dask array>")
    if module == "cupy":
        obj = obj.get()
    if isinstance(obj, np.ndarray) or hasattr(obj, "__array__"):
        arr = np.asarray(obj)
        check_shape(arr.shape, name)
        check_dtype(arr.dtype, name)
        check_exact_integers(arr, name)
        return MemorySource(np.ascontiguousarray(as_float(arr)), label=f"<{module} array>")
    raise InputError(
        f"{name} must be a Zarr path, a zarr.Array, or a numpy, dask or cupy array, got {type(obj).__name__}"
    )
