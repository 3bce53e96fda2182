"""Write a 2-D points array to a Zarr (v3) store so that it appears only complete.

:class:`ZarrPointsWriter` streams blocks of rows of any size into a temporary
sibling directory ``.<name>.tmp-<random>`` (:mod:`.commit`), writes every chunk once and whole
(never a read-modify-write), and renames the directory to ``out`` only when the
``with`` block ends without an exception. On an exception the temporary
directory is deleted, so a half-written array never sits at ``out``.
"""
from __future__ import annotations

import os
from numbers import Integral

import numpy as np

from ..validation import InputError, check_output_path
from . import commit

TARGET_CHUNK_BYTES = 8 * 2**20
MIN_CHUNK_ROWS = 1024


def default_chunk_rows(d: int, itemsize: int) -> int:
    """Rows per chunk so that one chunk of ``d`` columns holds about 8 MiB.

    Parameters
    ----------
    d : int
        Number of columns (dimensions), at least 1.
    itemsize : int
        Bytes per value (4 for float32, 8 for float64).

    Returns
    -------
    int
        A power of two, at least 1024.

    Examples
    --------
    >>> default_chunk_rows(2, 4)
    1048576
    >>> default_chunk_rows(64, 4)
    32768
    >>> default_chunk_rows(100_000, 8)
    1024
    """
    for name, value in (("d", d), ("itemsize", itemsize)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    rows = TARGET_CHUNK_BYTES // (int(d) * int(itemsize))
    if rows < MIN_CHUNK_ROWS:
        return MIN_CHUNK_ROWS
    return 1 << (int(rows).bit_length() - 1)


class ZarrPointsWriter:
    """Context manager that streams rows into a new 2-D Zarr array and commits it atomically.

    Parameters
    ----------
    out : str or os.PathLike
        Final path of the Zarr store (a directory). It must not exist unless
        ``overwrite=True``; this is checked when the writer is constructed,
        before anything is written.
    d : int
        Number of columns (dimensions), at least 1.
    dtype : numpy dtype-like, default float32
        Stored dtype (``float32`` or ``float64``). Appended blocks are cast to it.
    chunk_rows : int, optional
        Rows per Zarr chunk; default :func:`default_chunk_rows` (about 8 MiB per chunk).
    overwrite : bool, default False
        Replace an existing ``out`` at commit time (the old data stays in place
        until the new array is complete).
    attrs : dict, optional
        JSON-serialisable provenance, stored as ``attrs["daskjoin"]`` next to
        ``"kind": "points"``.
    expected_rows : int, optional
        Expected total number of rows; lets the array be sized once up front.
        It is only a hint: the final shape is always the number of rows appended.

    Examples
    --------
    >>> import numpy as np, tempfile, os, zarr
    >>> out = os.path.join(tempfile.mkdtemp(), "points.zarr")
    >>> with ZarrPointsWriter(out, d=3, chunk_rows=4, attrs={"source": "doc"}) as w:
    ...     w.append(np.ones((5, 3)))
    ...     w.append(np.zeros((2, 3)))
    >>> arr = zarr.open_array(out, mode="r")
    >>> arr.shape, arr.chunks, str(arr.dtype)
    ((7, 3), (4, 3), 'float32')
    >>> arr.attrs["daskjoin"]["kind"]
    'points'
    """

    def __init__(
        self,
        out,
        *,
        d: int,
        dtype=np.float32,
        chunk_rows: int | None = None,
        overwrite: bool = False,
        attrs: dict | None = None,
        expected_rows: int | None = None,
    ) -> None:
        path = os.fspath(out)
        path = path.rstrip(os.sep) or path
        self.path = check_output_path(path, overwrite)
        if isinstance(d, bool) or not isinstance(d, Integral) or d < 1:
            raise InputError(f"d (number of columns) must be an integer >= 1, got {d!r}")
        self.d = int(d)
        try:
            self.dtype = np.dtype(dtype)
        except TypeError as exc:
            raise InputError(f"dtype must be float32 or float64, got {dtype!r}") from exc
        if self.dtype not in (np.float32, np.float64):
            raise InputError(
                f"dtype must be float32 or float64, got {self.dtype}; "
                "convert integer data to float64 (exact below 2**53) first"
            )
        if chunk_rows is None:
            chunk_rows = default_chunk_rows(self.d, self.dtype.itemsize)
        if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, Integral) or chunk_rows < 1:
            raise InputError(f"chunk_rows must be a positive integer, got {chunk_rows!r}; omit it for the default")
        self.chunk_rows = int(chunk_rows)
        if expected_rows is not None and (
            isinstance(expected_rows, bool) or not isinstance(expected_rows, Integral) or expected_rows < 0
        ):
            raise InputError(f"expected_rows must be a non-negative integer or None, got {expected_rows!r}")
        self.expected_rows = None if expected_rows is None else int(expected_rows)
        self.overwrite = bool(overwrite)
        self.attrs = {"kind": "points", **{k: v for k, v in (attrs or {}).items() if k != "kind"}}
        self.tmp_path = commit.temp_path(self.path)
        self.rows = 0  # rows appended so far (buffered or written)
        self._written = 0  # rows already in the array
        self._capacity = 0
        self._buffer = np.empty((self.chunk_rows, self.d), dtype=self.dtype)
        self._fill = 0
        self._array = None
        self._done = False

    # -- context manager -------------------------------------------------
    def __enter__(self) -> "ZarrPointsWriter":
        import zarr

        if self._array is not None or self._done:
            raise RuntimeError("a ZarrPointsWriter can be entered only once")
        capacity = self.expected_rows or 0
        self._writer = commit.sole_writer(self.path)
        try:
            self._writer.__enter__()  # a second writer of this path fails here; killed writers' temporaries go
        except commit.LockBusy as exc:
            self._writer = None
            self._done = True
            raise InputError(commit.busy_message(self.path, exc)) from None
        try:
            self._array = zarr.create_array(
                store=self.tmp_path,
                shape=(capacity, self.d),
                chunks=(self.chunk_rows, self.d),
                dtype=self.dtype,
                fill_value=0,
                zarr_format=3,
                # uncompressed: random floating-point coordinates compress by a few percent at best,
                # and decompression was the largest share of a GPU task's time (H200: 45 of 130 ms)
                compressors=None,
                # every chunk on disk, zeros included: a missing chunk file then always means damage
                config={"write_empty_chunks": True},
                attributes={"daskjoin": self.attrs},
            )
        except BaseException:
            self._abort()
            self._release()
            raise
        self._capacity = capacity
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is not None:
                self._abort()
                return False
            try:
                self._finish()
            except BaseException:
                self._abort()
                raise
            return False
        finally:
            self._release()

    def _release(self) -> None:
        writer, self._writer = getattr(self, "_writer", None), None
        if writer is not None:
            writer.__exit__(None, None, None)

    # -- writing ----------------------------------------------------------
    def append(self, block) -> None:
        """Append the rows of ``block`` (2-D, ``d`` columns, any number of rows)."""
        if self._array is None or self._done:
            raise RuntimeError("append() is only allowed inside `with ZarrPointsWriter(...) as w:`")
        block = np.asarray(block)
        if block.ndim != 2 or block.shape[1] != self.d:
            raise InputError(
                f"each block must be 2-D with {self.d} columns, got shape {block.shape}; "
                f"reshape it to (-1, {self.d})"
            )
        if block.dtype.kind not in "iuf":
            raise InputError(f"blocks must hold real numbers, got dtype {block.dtype}")
        block = block.astype(self.dtype, copy=False)
        n = block.shape[0]
        pos = 0
        if self._fill:
            take = min(n, self.chunk_rows - self._fill)
            self._buffer[self._fill : self._fill + take] = block[:take]
            self._fill += take
            pos = take
            if self._fill == self.chunk_rows:
                self._write(self._buffer)
                self._fill = 0
        whole = (n - pos) // self.chunk_rows * self.chunk_rows
        if whole:
            self._write(block[pos : pos + whole])
            pos += whole
        rest = n - pos
        if rest:
            self._buffer[:rest] = block[pos:]
            self._fill = rest
        self.rows += n

    def _write(self, rows: np.ndarray) -> None:
        """Write rows that start on a chunk boundary (whole chunks, or the final partial one)."""
        start = self._written
        stop = start + rows.shape[0]
        if stop > self._capacity:
            self._capacity = max(stop, self.expected_rows or 0)
            self._array.resize((self._capacity, self.d))
        self._array[start:stop] = rows
        self._written = stop

    def _finish(self) -> None:
        if self._fill:
            self._write(self._buffer[: self._fill])
            self._fill = 0
        if self._capacity != self._written:
            self._array.resize((self._written, self.d))
        self._array = None
        self._buffer = None
        self._commit()
        self._done = True

    def _commit(self) -> None:
        try:
            commit.replace_dir(self.tmp_path, self.path, replace=self.overwrite)
        except FileExistsError:
            raise InputError(
                f"output path {self.path!r} appeared while it was being written; choose another "
                "path or pass overwrite=True"
            ) from None

    def _abort(self) -> None:
        self._array = None
        self._buffer = None
        self._done = True
        if os.path.lexists(self.tmp_path):
            commit.remove_path(self.tmp_path)
