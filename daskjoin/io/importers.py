"""Import points from ``.npy``, ``.csv`` and ``.parquet`` files into a chunked Zarr array.

Every importer streams its file in blocks (``np.load(mmap_mode="r")``,
``pandas.read_csv(chunksize=...)``, ``ParquetFile.iter_batches``) into a
:class:`~daskjoin.io.zarr_out.ZarrPointsWriter`, so no file is ever loaded whole
and a failed import leaves nothing at ``out``. float32 and float64 values are
kept as they are; integers are stored as float64 (exact below 2**53).
"""
from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from numbers import Integral

import numpy as np

from ..validation import (InputError, check_dtype, check_exact_integers, check_output_apart, check_output_path,
                          check_shape)
from .zarr_in import as_float
from .zarr_out import ZarrPointsWriter, default_chunk_rows

FORMATS = {".npy": "npy", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


@dataclass(frozen=True)
class _Stream:
    """What an opened file will produce: the columns taken, the width, the stored dtype and the blocks."""

    columns: list
    d: int
    dtype: np.dtype
    blocks: Iterator = field(repr=False)


def import_points(src, out, *, chunk_rows: int | None = None, overwrite: bool = False, columns=None) -> dict:
    """Copy the points of a ``.npy``, ``.csv`` or ``.parquet`` file into a new Zarr array.

    Parameters
    ----------
    src : str or os.PathLike
        Input file. ``.npy``: a 2-D numeric array. ``.csv``: comma-separated;
        the first line is a header if any of its fields is not a number; the
        numeric columns are kept (others, e.g. labels, are skipped, and so is a
        column with an empty header name: the index written by
        ``DataFrame.to_csv``). ``.parquet`` (or ``.pq``): the numeric scalar
        columns, or a single list / fixed-size-list column of numeric vectors
        (preferred over scalar columns when it is the only one).
    out : str or os.PathLike
        Path of the Zarr store to create; must not exist unless ``overwrite=True``.
    chunk_rows : int, optional
        Rows per Zarr chunk; default about 8 MiB per chunk.
    overwrite : bool, default False
        Replace an existing ``out`` once the new array is complete.
    columns : list, optional
        Columns to keep, in this order: names (CSV with header, Parquet) or
        0-based positions (``.npy``, CSV with or without header). For Parquet, a
        single list column may be named to take its vectors.

    Returns
    -------
    dict
        ``{"path", "rows", "d", "dtype", "columns"}``: the Zarr path written, its
        shape, its dtype name and the columns taken.

    Raises
    ------
    InputError
        Missing file, unknown extension, no numeric columns, non-numeric values,
        ragged vectors, or an existing ``out`` without ``overwrite=True``.

    Examples
    --------
    >>> import os, tempfile, numpy as np, zarr
    >>> tmp = tempfile.mkdtemp()
    >>> with open(os.path.join(tmp, "p.csv"), "w") as f:
    ...     _ = f.write("x,y,label\\n0.5,1,a\\n2,3.25,b\\n")
    >>> info = import_points(os.path.join(tmp, "p.csv"), os.path.join(tmp, "p.zarr"))
    >>> info["rows"], info["d"], info["dtype"], info["columns"]
    (2, 2, 'float64', ['x', 'y'])
    >>> zarr.open_array(info["path"], mode="r")[:].tolist()
    [[0.5, 1.0], [2.0, 3.25]]
    """
    path = os.fspath(src)
    check_output_apart(out, {"the input file": path})  # --overwrite must never delete the source
    out = check_output_path(out, overwrite)
    if not os.path.isfile(path):
        what = "is a directory, not a file" if os.path.isdir(path) else "does not exist"
        raise InputError(f"input file {path!r} {what}; pass the path of a .npy, .csv or .parquet file")
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise InputError(
            f"cannot import {path!r}: unknown extension {ext or '(none)'!r}; allowed are "
            f"{sorted(FORMATS)}; convert the file to one of them (e.g. numpy.save for .npy)"
        )
    bad_chunks = isinstance(chunk_rows, bool) or not isinstance(chunk_rows, Integral) or chunk_rows < 1
    if chunk_rows is not None and bad_chunks:
        raise InputError(f"chunk_rows must be a positive integer, got {chunk_rows!r}; omit it for the default")
    if columns is not None:
        if isinstance(columns, (str, int)):
            columns = [columns]
        columns = list(columns)
        if not columns:
            raise InputError(
                "columns must name at least one column, got an empty list; omit it to keep all numeric columns"
            )
    fmt = FORMATS[ext]
    opener = {"npy": _open_npy, "csv": _open_csv, "parquet": _open_parquet}[fmt]
    stream = opener(path, columns, chunk_rows)
    if chunk_rows is None:
        chunk_rows = default_chunk_rows(stream.d, stream.dtype.itemsize)
    labels = [c if isinstance(c, (int, str)) else str(c) for c in stream.columns]
    attrs = {"source": os.path.abspath(path), "format": fmt, "columns": labels}
    with ZarrPointsWriter(
        out, d=stream.d, dtype=stream.dtype, chunk_rows=chunk_rows, overwrite=overwrite, attrs=attrs
    ) as writer:
        try:
            for block in stream.blocks:
                writer.append(block)
        finally:
            stream.blocks.close()  # releases the file (e.g. pandas' reader) on success and failure
    return {"path": writer.path, "rows": writer.rows, "d": stream.d, "dtype": str(stream.dtype), "columns": labels}


def _stored_dtype(dtypes) -> np.dtype:
    """float32 if every input column is float32 (or narrower float), else float64."""
    dtypes = [np.dtype(t) for t in dtypes]
    if dtypes and all(t.kind == "f" and t.itemsize <= 4 for t in dtypes):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def _read_rows(chunk_rows, width: int, itemsize: int = 8) -> int:
    return int(chunk_rows) if chunk_rows else default_chunk_rows(max(1, width), itemsize)


def _positions(columns, width: int, path: str) -> list[int]:
    positions = []
    for c in columns:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not -width <= c < width:
            raise InputError(
                f"column {c!r} does not exist in {path!r}, which has {width} columns; "
                f"pass 0-based positions in [0, {width})"
            )
        positions.append(int(c) % width)
    return positions


# -- .npy -----------------------------------------------------------------
def _open_npy(path: str, columns, chunk_rows) -> _Stream:
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as exc:  # bad magic, pickled objects, truncated file...
        raise InputError(
            f"cannot read {path!r} as a .npy array ({type(exc).__name__}: {exc}); "
            "save a numeric array with numpy.save"
        ) from exc
    check_shape(arr.shape, path)
    check_dtype(arr.dtype, path)
    cols = _positions(columns, arr.shape[1], path) if columns is not None else list(range(arr.shape[1]))
    whole = cols == list(range(arr.shape[1]))
    step = _read_rows(chunk_rows, len(cols), 8)

    def blocks():
        for start in range(0, arr.shape[0], step):
            part = arr[start : start + step]
            part = np.array(part if whole else part[:, cols])  # copy out of the memory map
            check_exact_integers(part, path, start)  # int64 beyond 2**53 would round in float64
            yield as_float(part)

    return _Stream(columns=cols, d=len(cols), dtype=_stored_dtype([arr.dtype]), blocks=blocks())


# -- .csv -----------------------------------------------------------------
def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _first_row(path: str) -> list[str]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            return next(csv.reader(f), [])
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"cannot read {path!r} as a UTF-8 CSV text file ({exc})") from exc


def _open_csv(path: str, columns, chunk_rows) -> _Stream:
    import pandas as pd

    first = _first_row(path)
    if not first:
        raise InputError(f"CSV file {path!r} is empty; it needs at least one row of numbers")
    has_header = any(field.strip() and not _is_number(field.strip()) for field in first)
    width = len(first)
    reader = None
    try:
        reader = pd.read_csv(
            path,
            header=0 if has_header else None,
            chunksize=_read_rows(chunk_rows, width, 8),
            skipinitialspace=True,
            encoding="utf-8-sig",
        )
        chunks = iter(reader)
        head = next(chunks, None)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        if reader is not None:
            reader.close()
        raise InputError(f"cannot parse CSV file {path!r} ({exc}); check that every row has the same fields") from exc
    if head is None or len(head) == 0:
        reader.close()
        raise InputError(f"CSV file {path!r} has a header line but no data rows; there are no points to import")
    try:
        # a column with an empty header name is the index written by DataFrame.to_csv: not a coordinate
        unnamed = [c for c, f in zip(head.columns, first) if has_header and not f.strip()]
        selected = _csv_columns(head, columns, path, unnamed)
    except BaseException:
        reader.close()
        raise
    line0 = 2 if has_header else 1  # file line number of the first data row

    def blocks():
        offset = 0
        chunk = head
        try:
            while chunk is not None:
                yield _csv_block(chunk, selected, path, line0 + offset)
                offset += len(chunk)
                chunk = next(chunks, None)
        except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(
                f"cannot parse CSV file {path!r} after line {line0 + offset - 1} ({exc}); "
                "check that every row has the same fields"
            ) from exc
        finally:
            reader.close()

    return _Stream(columns=selected, d=len(selected), dtype=np.dtype(np.float64), blocks=blocks())


def _csv_columns(head, columns, path: str, unnamed=()) -> list:
    """The columns to keep: the given ones (names or positions), or every numeric one not in ``unnamed``."""
    names = list(head.columns)
    if columns is None:
        selected = [c for c in names if _numeric(head[c]) and c not in unnamed]
        if not selected:
            dtypes = {str(c): str(head[c].dtype) for c in names}
            raise InputError(
                f"CSV file {path!r} has no numeric columns (columns and types: {dtypes}); "
                "the points must be numbers, one column per dimension"
            )
    else:
        selected = []
        for c in columns:
            if c in names:
                selected.append(c)
            elif isinstance(c, (int, np.integer)) and not isinstance(c, bool):
                selected.append(names[_positions([c], len(names), path)[0]])
            else:
                raise InputError(
                    f"column {c!r} is not in CSV file {path!r}; its columns are {names} "
                    "(or pass 0-based positions)"
                )
    return selected


def _numeric(series) -> bool:
    import pandas as pd

    return pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)


def _csv_block(frame, selected: list, path: str, first_line: int) -> np.ndarray:
    import pandas as pd

    out = np.empty((len(frame), len(selected)), dtype=np.float64)
    for k, name in enumerate(selected):
        col = frame[name]
        if not _numeric(col):
            converted = pd.to_numeric(col, errors="coerce") if not pd.api.types.is_bool_dtype(col.dtype) else None
            bad = np.ones(len(col), bool) if converted is None else (converted.isna() & col.notna()).to_numpy()
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise InputError(
                    f"CSV file {path!r}, line {first_line + row}, column {name!r}: value {col.iloc[row]!r} "
                    "is not a number; fix or drop that row, or choose numeric columns with columns=[...]"
                )
            col = converted
        if col.dtype.kind in "iu":  # pandas parsed integers: float64 must hold them exactly
            check_exact_integers(col.to_numpy(), f"CSV file {path!r}, column {name!r}", first_line)
        out[:, k] = col.to_numpy(dtype=np.float64, na_value=np.nan)
    return out


# -- .parquet ---------------------------------------------------------------
def _is_vector(pa, t) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) and _is_scalar(
        pa, t.value_type
    )


def _is_scalar(pa, t) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _open_parquet(path: str, columns, chunk_rows) -> _Stream:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError...
        raise InputError(f"cannot read {path!r} as a Parquet file ({type(exc).__name__}: {exc})") from exc
    schema = pf.schema_arrow
    types = {name: schema.field(name).type for name in schema.names}
    if columns is None:
        vectors = [c for c, t in types.items() if _is_vector(pa, t)]
        if len(vectors) > 1:
            raise InputError(
                f"Parquet file {path!r} has several vector columns {vectors}; choose one with columns=[name]"
            )
        selected = vectors or [c for c, t in types.items() if _is_scalar(pa, t)]
        if not selected:
            schema_text = {c: str(t) for c, t in types.items()}
            raise InputError(
                f"Parquet file {path!r} has no numeric columns (schema: {schema_text}); "
                "store the points as numeric columns, one per dimension, or as one list column of vectors"
            )
    else:
        selected = []
        for c in columns:
            if isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c not in types:
                c = schema.names[_positions([c], len(schema.names), path)[0]]
            if c not in types:
                raise InputError(f"column {c!r} is not in Parquet file {path!r}; its columns are {schema.names}")
            selected.append(c)
        bad = [c for c in selected if not (_is_scalar(pa, types[c]) or _is_vector(pa, types[c]))]
        if bad:
            raise InputError(
                f"Parquet column(s) {bad} of {path!r} are not numeric ({[str(types[c]) for c in bad]}); "
                "choose integer or floating columns, or one list column of numbers"
            )
        if any(_is_vector(pa, types[c]) for c in selected) and len(selected) > 1:
            raise InputError(
                f"a list (vector) column must be imported alone, got columns={selected}; pass columns=[name]"
            )
    if _is_vector(pa, types[selected[0]]):
        return _parquet_vectors(pf, selected[0], types[selected[0]], path, chunk_rows)
    dtype = _stored_dtype([types[c].to_pandas_dtype() for c in selected])
    step = _read_rows(chunk_rows, len(selected), dtype.itemsize)

    def blocks():
        start = 0
        for batch in pf.iter_batches(batch_size=step, columns=selected):
            out = np.empty((batch.num_rows, len(selected)), dtype=dtype)
            for k in range(len(selected)):
                column = batch.column(k).to_numpy(zero_copy_only=False)
                check_exact_integers(column, f"column {selected[k]!r} of {path}", start)  # before any rounding
                out[:, k] = column
            start += batch.num_rows
            yield out

    return _Stream(columns=selected, d=len(selected), dtype=dtype, blocks=blocks())


def _parquet_vectors(pf, name: str, type_, path: str, chunk_rows) -> _Stream:
    import pyarrow as pa
    import pyarrow.compute as pc

    dtype = _stored_dtype([type_.value_type.to_pandas_dtype()])
    if pa.types.is_fixed_size_list(type_):
        d = type_.list_size
    else:
        d = None
        for batch in pf.iter_batches(batch_size=1024, columns=[name]):
            lengths = pc.list_value_length(batch.column(0)).drop_null()
            if len(lengths):
                d = int(lengths[0].as_py())
                break
        if d is None:
            raise InputError(f"Parquet column {name!r} of {path!r} holds no vectors; nothing to import")
    if d < 1:
        raise InputError(f"Parquet column {name!r} of {path!r} holds empty vectors; each needs at least one value")
    step = _read_rows(chunk_rows, d, dtype.itemsize)

    def blocks():
        offset = 0
        for batch in pf.iter_batches(batch_size=step, columns=[name]):
            col = batch.column(0)
            if col.null_count:
                row = offset + int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
                raise InputError(
                    f"Parquet column {name!r} of {path!r}: row {row} has no vector (null); drop or fill it"
                )
            lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
            wrong = np.flatnonzero(lengths != d)
            if wrong.size:
                row = int(wrong[0])
                raise InputError(
                    f"Parquet column {name!r} of {path!r} holds ragged vectors: row {offset + row} has "
                    f"{int(lengths[row])} values but the first vector has {d}; every point needs {d} coordinates"
                )
            values = col.flatten().to_numpy(zero_copy_only=False)
            check_exact_integers(values.reshape(-1, d), f"column {name!r} of {path}", offset)
            yield values.reshape(-1, d).astype(dtype, copy=False)
            offset += batch.num_rows

    return _Stream(columns=[name], d=d, dtype=dtype, blocks=blocks())
