"""Import token sets from text files, Parquet list columns or Python iterables into a set store.

Files are read streaming (text line by line, Parquet row group by row group);
tokens are turned into integer codes on the way, so memory holds one int64 per
token plus the distinct tokens. Ranking needs every set's tokens, so the store
is written once all are read; it appears at ``out`` only complete.
"""
from __future__ import annotations

import os
from array import array

import numpy as np

from ..validation import InputError, check_output_apart, check_output_path
from .sets_prepare import _prepare_codes, prepare_flat, prepare_sets
from .sets_store import write_sets


class _Codes(dict):
    """token -> code, handing out the next code to a token not seen yet."""

    def __missing__(self, token):
        code = self[token] = len(self)
        return code

    def values_array(self) -> np.ndarray:
        out = np.empty(len(self), dtype=object)
        out[:] = list(self)  # dicts keep insertion order: position == code
        return out


def _check_input_file(path, what: str) -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        state = "is a directory, not a file" if os.path.isdir(path) else "does not exist"
        raise InputError(f"input file {path!r} {state}; pass the path of {what}")
    return path


def import_sets_text(path, out, *, sep: str | None = None, overwrite: bool = False, ids=None) -> str:
    """Import a text file with one set per line into a new set store.

    Parameters
    ----------
    path : str or os.PathLike
        UTF-8 text file (a leading byte-order mark is ignored). Line ``k`` is set ``k``.
    out : str or os.PathLike
        Store to create; must not exist unless ``overwrite=True``.
    sep : str, optional
        Token separator such as ``","``; default: runs of whitespace. With a
        separator, tokens are stripped of surrounding whitespace and empty
        tokens are dropped.
    overwrite : bool, default False
        Replace an existing ``out`` once the new store is complete.
    ids : array-like of int, optional
        Unique id per line; default the 0-based line number.

    Returns
    -------
    str
        The path of the store. Tokens are strings (``vocab_kind == "str"``);
        blank lines are empty sets.

    Raises
    ------
    InputError
        A missing file, text that is not UTF-8 (the line is named), an empty
        ``sep``, or an existing ``out``.

    Examples
    --------
    >>> import os, tempfile
    >>> from daskjoin.io.sets_store import open_sets
    >>> tmp = tempfile.mkdtemp()
    >>> with open(os.path.join(tmp, "s.txt"), "w") as f:
    ...     _ = f.write("red green\\n\\ngreen blue green\\n")
    >>> c = open_sets(import_sets_text(os.path.join(tmp, "s.txt"), os.path.join(tmp, "s.zarr")))
    >>> c.ids.tolist(), [sorted(c.original_tokens(k).tolist()) for k in range(len(c))]
    ([1, 2, 0], [[], ['blue', 'green'], ['green', 'red']])
    """
    src = _check_input_file(path, "a text file with one set per line")
    check_output_apart(out, {"the input file": src})  # --overwrite must never delete the source
    out = check_output_path(out, overwrite)
    if sep is not None and (not isinstance(sep, str) or not sep):
        raise InputError(f"sep must be a non-empty string such as ',' or None for whitespace, got {sep!r}")
    codes = _Codes()
    lookup = codes.__getitem__
    flat = array("q")
    sizes = array("q")
    with open(src, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"{src!r} is not UTF-8 text: line {lineno} has an invalid byte ({exc.reason} at byte "
                    f"{exc.start}); convert the file, e.g. with `iconv -t UTF-8`"
                ) from None
            if lineno == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if sep is None:
                tokens = line.split()
            else:
                tokens = [t for t in (p.strip() for p in line.rstrip("\r\n").split(sep)) if t]
            flat.extend(map(lookup, tokens))
            sizes.append(len(tokens))
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(np.frombuffer(sizes, dtype=np.int64), out=offsets[1:])
    coll = _prepare_codes(np.frombuffer(flat, dtype=np.int64), offsets, codes.values_array(), ids)
    attrs = {"source": os.path.abspath(src), "format": "text", "sep": sep}
    return write_sets(coll, out, overwrite, attrs=attrs)


def _list_types(pa, t):
    """The value type of a list / large_list / fixed_size_list type, or None for other types."""
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return t.value_type
    return None


def import_sets_parquet(path, out, *, column: str, id_column: str | None = None, overwrite: bool = False) -> str:
    """Import a Parquet list column (one set per row) into a new set store.

    Parameters
    ----------
    path : str or os.PathLike
        Parquet file, read one row group at a time.
    out : str or os.PathLike
        Store to create; must not exist unless ``overwrite=True``.
    column : str
        A ``list<integer>`` or ``list<string>`` column (large and fixed-size
        lists too). Duplicate tokens in a row are dropped; empty lists are empty
        sets; a null row or a null token is an error.
    id_column : str, optional
        An integer column with each row's unique id; default the row number.
    overwrite : bool, default False
        Replace an existing ``out`` once the new store is complete.

    Returns
    -------
    str
        The path of the store.

    Raises
    ------
    InputError
        A missing or unreadable file, a missing column, a column that is not a
        list of integers or strings, nulls, or an existing ``out``.

    Examples
    --------
    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> from daskjoin.io.sets_store import open_sets
    >>> tmp = tempfile.mkdtemp()
    >>> pq.write_table(pa.table({"items": [[3, 1], [1], []]}), os.path.join(tmp, "s.parquet"))
    >>> c = open_sets(import_sets_parquet(os.path.join(tmp, "s.parquet"), os.path.join(tmp, "s.zarr"), column="items"))
    >>> c.ids.tolist(), c.sizes.tolist(), c.vocab.tolist()
    ([2, 1, 0], [0, 1, 2], [3, 1])
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    src = _check_input_file(path, "a Parquet file")
    check_output_apart(out, {"the input file": src})  # --overwrite must never delete the source
    out = check_output_path(out, overwrite)
    try:
        pf = pq.ParquetFile(src)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError...
        raise InputError(f"cannot read {src!r} as a Parquet file ({type(exc).__name__}: {exc})") from exc
    schema = pf.schema_arrow
    for name in (column, id_column):
        if name is not None and name not in schema.names:
            raise InputError(f"column {name!r} is not in Parquet file {src!r}; its columns are {schema.names}")
    value_type = _list_types(pa, schema.field(column).type)
    if value_type is not None and pa.types.is_dictionary(value_type):
        value_type = value_type.value_type
    is_int = value_type is not None and pa.types.is_integer(value_type)
    is_str = value_type is not None and (pa.types.is_string(value_type) or pa.types.is_large_string(value_type))
    if not (is_int or is_str):
        raise InputError(
            f"Parquet column {column!r} of {src!r} has type {schema.field(column).type}; a set column must be a "
            "list of integers or of strings (e.g. list<int64> or list<string>)"
        )
    if id_column is not None and not pa.types.is_integer(schema.field(id_column).type):
        raise InputError(
            f"id column {id_column!r} of {src!r} has type {schema.field(id_column).type}; ids must be integers"
        )
    codes = _Codes()
    parts, sizes, id_parts = [], [], []
    row = 0
    for group in range(pf.num_row_groups):
        table = pf.read_row_group(group, columns=[column] if id_column is None else [column, id_column])
        col = table.column(column).combine_chunks()
        if col.null_count:
            first = row + int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise InputError(
                f"Parquet column {column!r} of {src!r}: row {first} has no set (null); use [] for an empty set"
            )
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False).astype(np.int64)
        values = col.flatten()
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        if values.null_count:
            pos = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
            first = row + int(np.searchsorted(np.cumsum(lengths), pos, side="right"))
            raise InputError(f"Parquet column {column!r} of {src!r}: row {first} holds a null token; drop or fill it")
        if is_int:
            try:
                parts.append(pc.cast(values, pa.int64()).to_numpy(zero_copy_only=False))
            except pa.ArrowInvalid as exc:
                raise InputError(
                    f"Parquet column {column!r} of {src!r}: a token does not fit in int64 ({exc})"
                ) from exc
        else:
            encoded = values.dictionary_encode()
            local = np.fromiter(map(codes.__getitem__, encoded.dictionary.to_pylist()), dtype=np.int64)
            parts.append(local[encoded.indices.to_numpy(zero_copy_only=False)] if len(encoded.indices) else local[:0])
        sizes.append(lengths)
        if id_column is not None:
            ids = table.column(id_column)
            if ids.null_count:
                raise InputError(f"id column {id_column!r} of {src!r} holds nulls; every row needs an id")
            id_parts.append(pc.cast(ids, pa.int64()).to_numpy())
        row += table.num_rows
    sizes = np.concatenate(sizes) if sizes else np.empty(0, np.int64)
    offsets = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    tokens = np.concatenate(parts) if parts else np.empty(0, np.int64)
    ids = np.concatenate(id_parts) if id_column is not None and id_parts else None
    if id_column is not None and ids is None:
        ids = np.empty(0, np.int64)
    if is_int:
        coll = prepare_flat(tokens, offsets, ids)
    else:
        coll = _prepare_codes(tokens, offsets, codes.values_array(), ids)
    attrs = {"source": os.path.abspath(src), "format": "parquet", "column": column, "id_column": id_column}
    return write_sets(coll, out, overwrite, attrs=attrs)


def import_sets(sets, out, *, ids=None, overwrite: bool = False) -> str:
    """Write sets given as any iterable of iterables of tokens (see ``prepare_sets``) to a new set store.

    Examples
    --------
    >>> import os, tempfile
    >>> from daskjoin.io.sets_store import open_sets
    >>> path = import_sets([["a", "b"], ["b", "c"]], os.path.join(tempfile.mkdtemp(), "s.zarr"))
    >>> len(open_sets(path))
    2
    """
    out = check_output_path(out, overwrite)
    return write_sets(prepare_sets(sets, ids=ids), out, overwrite, attrs={"source": "python"})


__all__ = ["import_sets", "import_sets_parquet", "import_sets_text"]
