"""Token-set collections: the in-memory :class:`SetCollection`, its preparation from raw sets, and its Zarr store.

A collection holds every set as a sorted run of token *ranks* in one flat
``tokens`` array cut by ``offsets`` (CSR layout). Rank 0 is the token contained
in the fewest sets, ties broken by the token value, so a set's first ranks are
its rarest tokens: the prefix the set-similarity filters index. Sets are stored
by size, then lexicographically by their ranks, then by id.

The store is a Zarr v3 group (version 1 of the layout)::

    attrs["daskjoin"] = {"kind": "sets", "version": 1, "n_sets": N, "n_tokens": T, "vocab_kind": "int" | "str"}
    tokens   int32  (T,)    ranks, ascending and unique inside each set
    offsets  int64  (N+1,)  offsets[0] = 0, non-decreasing, offsets[N] = T
    ids      int64  (N,)    original id of each stored set (its input position unless given)
    vocab    int64 or string (V,)  rank -> original token
    freq     int64  (V,)    number of sets containing each rank (non-decreasing)

It is written to a temporary sibling directory and renamed into place, so a
store at its final path is always complete.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from ..caches import CACHE
from ..validation import InputError, check_output_path
from . import commit

FORMAT_VERSION = 1
TOKENS_CHUNK = 1 << 20  # elements per chunk of `tokens` (4 MiB of int32)
ROWS_CHUNK = 1 << 17  # elements per chunk of `offsets`, `ids`, `vocab` and `freq`
MAX_VOCAB = 2**31 - 1  # ranks are int32
VOCAB_KINDS = ("int", "str")


@dataclass(eq=False)
class SetCollection:
    """A collection of token sets in rank form (see the module docstring for the invariants).

    Attributes
    ----------
    tokens : numpy.ndarray of int32
        The ranks of all sets, one run per set, ascending and unique inside a run.
    offsets : numpy.ndarray of int64
        ``N + 1`` run boundaries; set ``k`` is ``tokens[offsets[k]:offsets[k + 1]]``.
    ids : numpy.ndarray of int64
        Original id of each stored set.
    vocab : numpy.ndarray
        Rank -> original token: int64, or object (Python ``str``) for string tokens.
        Empty in collections from :func:`read_sets_range`, which do not load it.
    freq : numpy.ndarray of int64
        Number of sets containing each rank (empty where ``vocab`` is).
    path : str, optional
        The store the collection was read from, if any.

    Examples
    --------
    >>> from daskjoin.io.sets_in import prepare_sets
    >>> c = prepare_sets([["b", "a"], ["c", "a", "a"], []])
    >>> len(c), c.sizes.tolist(), c.n_tokens
    (3, [0, 2, 2], 4)
    >>> c.vocab.tolist(), c.freq.tolist()
    (['b', 'c', 'a'], [1, 1, 2])
    >>> c.ids.tolist(), c.set(1).tolist(), c.original_tokens(2).tolist()
    ([2, 0, 1], [0, 2], ['c', 'a'])
    >>> c.slice(1, 3).offsets.tolist()
    [0, 2, 4]
    """

    tokens: np.ndarray
    offsets: np.ndarray
    ids: np.ndarray
    vocab: np.ndarray
    freq: np.ndarray
    path: str | None = None

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def __repr__(self) -> str:
        where = f", path={self.path!r}" if self.path else ""
        return (
            f"SetCollection(n_sets={len(self)}, n_tokens={self.n_tokens}, vocab={self.vocab.shape[0]} "
            f"{self.vocab_kind} tokens{where})"
        )

    @property
    def sizes(self) -> np.ndarray:
        """Number of tokens of each stored set (int64, non-decreasing)."""
        return np.diff(self.offsets)

    @property
    def n_tokens(self) -> int:
        """Total number of tokens over all sets."""
        return int(self.tokens.shape[0])

    @property
    def vocab_kind(self) -> str:
        """``"str"`` for string tokens, ``"int"`` for integer tokens."""
        return "str" if self.vocab.dtype.kind in "OUST" else "int"

    def _index(self, k) -> int:
        n = len(self)
        if isinstance(k, bool) or not isinstance(k, Integral) or not -n <= k < n:
            raise IndexError(f"set index {k!r} is out of range for a collection of {n} sets")
        return int(k) % n

    def set(self, k: int) -> np.ndarray:
        """Ranks of stored set ``k`` (a view of ``tokens``)."""
        k = self._index(k)
        return self.tokens[self.offsets[k] : self.offsets[k + 1]]

    def original_tokens(self, k: int) -> np.ndarray:
        """Original tokens of stored set ``k`` (``vocab[ranks]``), rarest first."""
        ranks = self.set(k)
        if ranks.size and self.vocab.shape[0] == 0:
            raise InputError(
                "this collection has no vocabulary (read_sets_range does not load it); "
                "open the whole store with open_sets to map ranks back to tokens"
            )
        return self.vocab[ranks]

    def slice(self, lo: int, hi: int) -> "SetCollection":
        """Stored sets ``lo .. hi-1`` as a collection (offsets rebased to 0, same vocab and freq)."""
        n = len(self)
        for name, value in (("lo", lo), ("hi", hi)):
            if isinstance(value, bool) or not isinstance(value, Integral):
                raise InputError(f"{name} must be an integer, got {value!r}")
        if not 0 <= lo <= hi <= n:
            raise InputError(f"need 0 <= lo <= hi <= {n} (number of sets), got lo={lo}, hi={hi}")
        a, b = int(self.offsets[lo]), int(self.offsets[hi])
        return SetCollection(
            tokens=self.tokens[a:b],
            offsets=self.offsets[lo : hi + 1] - a,
            ids=self.ids[lo:hi],
            vocab=self.vocab,
            freq=self.freq,
            path=self.path,
        )


# -- validation -------------------------------------------------------------
def _empty_vocab(kind: str) -> np.ndarray:
    return np.empty(0, dtype=object if kind == "str" else np.int64)


def _check_offsets(offsets, n_tokens: int, what: str) -> np.ndarray:
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or offsets.shape[0] < 1 or offsets.dtype.kind not in "iu":
        raise InputError(
            f"{what}: offsets must be a 1-D integer array of N + 1 run boundaries (at least [0]), "
            f"got dtype {offsets.dtype} and shape {offsets.shape}"
        )
    offsets = offsets.astype(np.int64)
    if offsets[0] != 0 or offsets[-1] != n_tokens:
        raise InputError(
            f"{what}: offsets must start at 0 and end at the number of tokens ({n_tokens}), "
            f"got {int(offsets[0])} .. {int(offsets[-1])}"
        )
    bad = np.flatnonzero(np.diff(offsets) < 0)
    if bad.size:
        raise InputError(f"{what}: offsets must be non-decreasing, but offsets[{bad[0] + 1}] < offsets[{bad[0]}]")
    return offsets


def _check_ids(ids, n: int) -> np.ndarray:
    if ids is None:
        return np.arange(n, dtype=np.int64)
    arr = np.asarray(ids)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise InputError(f"ids must be a 1-D sequence with one id per set ({n}), got shape {arr.shape}")
    if n and arr.dtype.kind not in "iu":
        raise InputError(f"ids must be integers, got dtype {arr.dtype}; omit ids to number the sets 0..N-1")
    if arr.dtype == np.uint64 and n and arr.max() > np.iinfo(np.int64).max:
        raise InputError("ids must fit in int64, got a value above 2**63 - 1")
    arr = arr.astype(np.int64)
    if n > 1:
        s = np.sort(arr)
        dup = np.flatnonzero(s[1:] == s[:-1])
        if dup.size:
            raise InputError(f"ids must be unique, got id {int(s[dup[0]])} more than once")
    return arr


def check_collection(c: SetCollection, where: str) -> None:
    """Raise :class:`InputError` unless ``c`` keeps the layout's invariants (not the lexicographic order)."""
    n_tokens = c.tokens.shape[0]
    for name, arr, dtype in (("tokens", c.tokens, np.int32), ("offsets", c.offsets, np.int64),
                             ("ids", c.ids, np.int64), ("freq", c.freq, np.int64)):
        if arr.ndim != 1 or arr.dtype != dtype:
            raise InputError(f"{where}: {name} must be a 1-D {np.dtype(dtype)} array, got {arr.dtype} {arr.shape}")
    _check_offsets(c.offsets, n_tokens, where)
    n = len(c)
    if c.ids.shape[0] != n:
        raise InputError(f"{where}: ids has {c.ids.shape[0]} entries for {n} sets")
    _check_ids(c.ids, n)
    width = c.vocab.shape[0]
    if c.vocab.ndim != 1 or c.freq.shape[0] != width:
        raise InputError(f"{where}: vocab ({c.vocab.shape}) and freq ({c.freq.shape}) must be 1-D of one length")
    if n_tokens:
        lo, hi = int(c.tokens.min()), int(c.tokens.max())
        if lo < 0 or hi >= width:
            raise InputError(f"{where}: token ranks must lie in [0, {width}) (the vocabulary), got {lo} .. {hi}")
        step_ok = np.diff(c.tokens) > 0
        starts = c.offsets[1:-1]
        step_ok[starts[(starts > 0) & (starts < n_tokens)] - 1] = True
        bad = np.flatnonzero(~step_ok)
        if bad.size:
            k = int(np.searchsorted(c.offsets, bad[0], side="right")) - 1
            raise InputError(f"{where}: the ranks of stored set {k} are not strictly increasing")
    if np.any(np.diff(c.sizes) < 0):
        raise InputError(f"{where}: sets must be stored by ascending size")
    if np.any(np.diff(c.freq) < 0) or (width and c.freq[0] < 0):
        raise InputError(f"{where}: freq must be non-negative and non-decreasing in rank")


# -- the Zarr store -----------------------------------------------------------
def _commit(tmp: str, path: str, overwrite: bool) -> None:
    try:
        commit.replace_dir(tmp, path, replace=overwrite)
    except FileExistsError:
        raise InputError(
            f"output path {path!r} appeared while it was being written; choose another path or pass overwrite=True"
        ) from None


def write_sets(coll: SetCollection, path, overwrite: bool = False, *, attrs: dict | None = None) -> str:
    """Write a collection to a new Zarr v3 group at ``path``; it appears there only complete.

    Parameters
    ----------
    coll : SetCollection
        The collection (checked against the layout's invariants first).
    path : str or os.PathLike
        Store to create; must not exist unless ``overwrite=True``.
    overwrite : bool, default False
        Replace an existing store once the new one is complete.
    attrs : dict, optional
        JSON-serialisable provenance added to ``attrs["daskjoin"]`` (it cannot
        change the layout keys).

    Returns
    -------
    str
        The absolute path written.

    Examples
    --------
    >>> import os, tempfile
    >>> from daskjoin.io.sets_in import prepare_sets
    >>> path = write_sets(prepare_sets([[1, 2], [2]]), os.path.join(tempfile.mkdtemp(), "s.zarr"))
    >>> c = open_sets(path)
    >>> c.tokens.tolist(), c.offsets.tolist(), c.vocab.tolist()
    ([1, 0, 1], [0, 1, 3], [1, 2])
    """
    if not isinstance(coll, SetCollection):
        raise InputError(f"write_sets needs a SetCollection, got {type(coll).__name__}; build one with prepare_sets")
    path = check_output_path(os.fspath(path).rstrip(os.sep) or os.fspath(path), overwrite)
    check_collection(coll, "write_sets")
    kind = coll.vocab_kind
    meta = {**(attrs or {}), "kind": "sets", "version": FORMAT_VERSION, "n_sets": len(coll),
            "n_tokens": coll.n_tokens, "vocab_kind": kind}
    try:
        with commit.sole_writer(path):  # a second writer of this path is refused; killed writers' temporaries go
            _write_store(coll, path, meta, kind, overwrite)
    except commit.LockBusy as exc:
        raise InputError(commit.busy_message(path, exc)) from None
    return path


def _write_store(coll: SetCollection, path: str, meta: dict, kind: str, overwrite: bool) -> None:
    import zarr

    tmp = commit.temp_path(path)
    try:
        group = zarr.open_group(store=tmp, mode="w", zarr_format=3, attributes={"daskjoin": meta})
        vocab = coll.vocab.astype(object) if kind == "str" else coll.vocab.astype(np.int64)
        for name, data, chunk in (
            ("tokens", coll.tokens, TOKENS_CHUNK),
            ("offsets", coll.offsets, ROWS_CHUNK),
            ("ids", coll.ids, ROWS_CHUNK),
            ("vocab", vocab, ROWS_CHUNK),
            ("freq", coll.freq, ROWS_CHUNK),
        ):
            string = name == "vocab" and kind == "str"
            arr = group.create_array(
                name,
                shape=data.shape,
                dtype=str if string else data.dtype,
                chunks=(max(1, min(chunk, data.shape[0])),),
                compressors=None,
                fill_value="" if string else 0,
                config={"write_empty_chunks": True},  # a missing chunk file then always means damage
            )
            if data.shape[0]:
                arr[:] = data
        _commit(tmp, path, overwrite)
    except BaseException:
        if os.path.lexists(tmp):
            commit.remove_path(tmp)
        raise


def _store_stamp(path: str) -> tuple:
    st = os.stat(os.path.join(path, "zarr.json"))
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _opened(path: str):
    """The store's checked (meta, arrays): opened once per process while its group ``zarr.json`` is unchanged
    (zarr's open of the group and its five arrays takes 5-10 ms; planning and each task ask again).  A store
    is replaced whole (``write_sets`` commits a new folder), which changes that file; an array's metadata
    edited in place is not noticed by a process that opened the store before."""
    stamp = store_state(path)
    return _open_store_cached(path, stamp) if stamp else _open_store(path)


def _read_meta(group, path: str) -> dict:
    meta = dict(group.attrs).get("daskjoin")
    if not isinstance(meta, dict) or meta.get("kind") != "sets":
        raise InputError(
            f"{path!r} is a Zarr group but not a set store (its attrs lack daskjoin.kind == 'sets'); "
            "create one with daskjoin.io.sets_in.import_sets_text, import_sets_parquet or write_sets"
        )
    if meta.get("version") != FORMAT_VERSION:
        raise InputError(
            f"set store {path!r} has layout version {meta.get('version')!r}; this daskjoin reads version "
            f"{FORMAT_VERSION}: re-import the sets"
        )
    for key in ("n_sets", "n_tokens"):
        value = meta.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"set store {path!r}: attrs daskjoin.{key} must be a non-negative integer, got {value!r}")
    if meta.get("vocab_kind") not in VOCAB_KINDS:
        raise InputError(
            f"set store {path!r}: attrs daskjoin.vocab_kind must be 'int' or 'str', got {meta.get('vocab_kind')!r}"
        )
    return meta


def _open_store(path: str):
    """(meta, arrays by name) of the set store at ``path``, checked for attrs, shapes and dtypes."""
    import zarr

    if not os.path.isdir(path):
        what = "is a file, not a Zarr store" if os.path.exists(path) else "does not exist"
        raise InputError(
            f"no set store at {path!r}: the path {what}; create one with daskjoin.io.sets_in.import_sets_text, "
            "import_sets_parquet or write_sets"
        )
    try:
        group = zarr.open_group(store=path, mode="r")
    except Exception as exc:  # zarr raises several types for unreadable or non-group stores
        raise InputError(f"cannot read a set store (a Zarr group) at {path!r} ({type(exc).__name__}: {exc})") from exc
    meta = _read_meta(group, path)
    n, t = meta["n_sets"], meta["n_tokens"]
    expected = {"tokens": ("int32", t), "offsets": ("int64", n + 1), "ids": ("int64", n), "freq": ("int64", None),
                "vocab": ("int64" if meta["vocab_kind"] == "int" else "str", None)}
    arrays = {}
    for name, (dtype, length) in expected.items():
        try:
            arr = group[name]
        except KeyError:
            raise InputError(
                f"set store {path!r} lacks its {name!r} array; the store is damaged, re-import it"
            ) from None
        if not isinstance(arr, zarr.Array) or len(arr.shape) != 1:
            raise InputError(f"set store {path!r}: {name!r} must be a 1-D array")
        got = np.dtype(arr.dtype)
        ok = got.kind in "OUT" if dtype == "str" else got == np.dtype(dtype)
        if not ok:
            raise InputError(f"set store {path!r}: {name!r} must have dtype {dtype}, got {got}")
        if length is not None and arr.shape[0] != length:
            raise InputError(
                f"set store {path!r}: {name!r} has {arr.shape[0]} entries but the attrs say {length} "
                f"(n_sets={n}, n_tokens={t}); the store is damaged, re-import it"
            )
        arrays[name] = arr
    if arrays["vocab"].shape[0] != arrays["freq"].shape[0]:
        raise InputError(f"set store {path!r}: vocab and freq differ in length; the store is damaged, re-import it")
    return meta, arrays


def _open_store_cached(path: str, stamp: tuple):
    """The store's (meta, arrays), opened once per (path, ``stamp``) in this process."""
    return CACHE.get_or_build("set-stores", (path, stamp), lambda: _open_store(path))


def _unwritten_zero_chunk(path: str, meta: dict, arrays: dict, name: str):
    """Which missing chunks of array ``name`` may be ones zarr never wrote because they were all 0.

    :func:`write_sets` writes every chunk now; stores of earlier versions were written with
    zarr's ``write_empty_chunks=False``, where a chunk all equal to the fill value 0 was not written.  The layout's invariants say when that can be: ids and vocab are
    unique (a 1-entry chunk at most), rank 0 is held by ``freq[0]`` sets (at most that many
    0 tokens), offsets and freq are non-decreasing from >= 0 (all earlier chunks are 0 too)
    and end at, or sum to, n_tokens.  Any other missing chunk is damage.
    """
    from .zarr_in import chunk_grid

    grid = chunk_grid(os.path.join(path, name))

    def allowed(index) -> bool:
        lo, hi = grid.rows(index)
        if name in ("ids", "vocab"):
            return hi - lo <= 1
        if name == "tokens":
            freq = arrays["freq"]
            return freq.shape[0] > 0 and hi - lo <= int(np.asarray(freq[0:1])[0])
        # offsets, freq: non-decreasing from >= 0, so a chunk can be all 0 only if the first entry
        # after it, read from a chunk that is on disk, is 0 too; and both end at or sum to
        # n_tokens, so a last chunk of 0s means no tokens at all
        if hi == arrays[name].shape[0]:
            return meta["n_tokens"] == 0
        following = grid.covering(hi, hi + 1)
        if not following or not os.path.exists(grid.path(following[0])):
            return False
        return int(np.asarray(arrays[name][hi:hi + 1])[0]) == 0

    return None if grid is None else allowed


def _read_array(path: str, meta: dict, arrays: dict, name: str, lo: int, hi: int, missing_chunks: str) -> np.ndarray:
    """Entries ``[lo, hi)`` of one array of the store; a missing or undecodable chunk is a DamagedStoreError.

    Straight from the chunk files where the array is stored plain (as :func:`write_sets` writes it), else
    through zarr."""
    from .zarr_in import read_raw_entries, read_rows

    allow_missing = _unwritten_zero_chunk(path, meta, arrays, name)
    got = read_raw_entries(path, name, lo, hi, missing_chunks, allow_missing)
    if got is not None:
        return got
    return read_rows(arrays[name], path, name, lo, hi, missing_chunks, allow_missing=allow_missing)


def _mode(missing_chunks: str | None) -> str:
    from .zarr_in import MISSING_CHUNKS, missing_chunks_mode

    if missing_chunks is None:
        return missing_chunks_mode()
    if missing_chunks not in MISSING_CHUNKS:
        raise InputError(f"missing_chunks must be 'error' or 'fill', got {missing_chunks!r}")
    return missing_chunks


def _as_vocab(data, kind: str) -> np.ndarray:
    data = np.asarray(data)
    return data.astype(object) if kind == "str" else data.astype(np.int64, copy=False)


def open_sets(path, *, missing_chunks: str | None = None) -> SetCollection:
    """Read a whole set store into memory, checking its layout.

    ``missing_chunks``: what a missing chunk file means, ``"error"`` or ``"fill"`` (zarr's
    fill value); default the dask config ``daskjoin.missing-chunks`` (``"error"``).

    Raises
    ------
    InputError
        A missing path, a Zarr group that is not a set store, or a damaged
        store (wrong dtypes, lengths, offsets, ranks or order).
    DamagedStoreError
        A chunk file that is missing or cannot be decoded (an InputError too).

    Examples
    --------
    >>> import os, tempfile
    >>> from daskjoin.io.sets_in import prepare_sets
    >>> path = write_sets(prepare_sets([["a", "b"], ["b"]]), os.path.join(tempfile.mkdtemp(), "s.zarr"))
    >>> c = open_sets(path)
    >>> len(c), c.vocab.tolist(), c.path == path
    (2, ['a', 'b'], True)
    """
    path = os.path.abspath(os.fspath(path))
    mode = _mode(missing_chunks)
    meta, arrays = _open_store(path)
    data = {name: _read_array(path, meta, arrays, name, 0, arr.shape[0], mode) for name, arr in arrays.items()}
    coll = SetCollection(
        tokens=data["tokens"],
        offsets=data["offsets"],
        ids=data["ids"],
        vocab=_as_vocab(data["vocab"], meta["vocab_kind"]),
        freq=data["freq"],
        path=path,
    )
    check_collection(coll, f"set store {path!r}")
    return coll


def is_set_store(path) -> bool:
    """Whether ``path`` is a Zarr group whose attrs mark it as a set store (contents are not checked)."""
    try:
        import zarr

        path = os.fspath(path)
        if not os.path.isdir(path):
            return False
        group = zarr.open_group(store=path, mode="r")
        _read_meta(group, path)
        return True
    except Exception:  # noqa: BLE001 - any failure means "no"
        return False


def read_sets_range(path, lo: int, hi: int, *, missing_chunks: str | None = None) -> SetCollection:
    """Read stored sets ``lo .. hi-1`` only: the needed slices of ``tokens``, ``offsets`` and ``ids``.

    For tasks that each handle a range of sets. The vocabulary is *not* read:
    ``vocab`` and ``freq`` of the result are empty arrays (``original_tokens``
    is then unavailable). The opened store is cached per process. A missing chunk
    file is a :class:`~daskjoin.validation.DamagedStoreError` unless ``missing_chunks``
    (default: this process's dask config ``daskjoin.missing-chunks``) is ``"fill"``.

    Examples
    --------
    >>> import os, tempfile
    >>> from daskjoin.io.sets_in import prepare_sets
    >>> path = write_sets(prepare_sets([[1], [1, 2], [1, 2, 3]]), os.path.join(tempfile.mkdtemp(), "s.zarr"))
    >>> part = read_sets_range(path, 1, 3)
    >>> part.offsets.tolist(), part.tokens.tolist(), part.ids.tolist(), part.vocab.shape
    ([0, 2, 5], [1, 2, 0, 1, 2], [1, 2], (0,))
    """
    path = os.path.abspath(os.fspath(path))
    mode = _mode(missing_chunks)
    meta, arrays = _opened(path)
    n = meta["n_sets"]
    for name, value in (("lo", lo), ("hi", hi)):
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise InputError(f"{name} must be an integer, got {value!r}")
    if not 0 <= lo <= hi <= n:
        raise InputError(f"need 0 <= lo <= hi <= {n} (the sets of {path!r}), got lo={lo}, hi={hi}")
    offsets = np.asarray(_read_array(path, meta, arrays, "offsets", lo, hi + 1, mode), dtype=np.int64)
    a, b = int(offsets[0]), int(offsets[-1])
    if not 0 <= a <= b <= meta["n_tokens"]:
        raise InputError(
            f"set store {path!r}: offsets[{lo}:{hi + 1}] run from {a} to {b}, outside 0 .. n_tokens "
            f"({meta['n_tokens']}) or decreasing; the store is damaged, re-import it"
        )
    tokens = (np.asarray(_read_array(path, meta, arrays, "tokens", a, b, mode), dtype=np.int32) if b > a
              else np.empty(0, np.int32))
    ids = (np.asarray(_read_array(path, meta, arrays, "ids", lo, hi, mode), dtype=np.int64) if hi > lo
           else np.empty(0, np.int64))
    return SetCollection(
        tokens=tokens,
        offsets=offsets - a,
        ids=ids,
        vocab=_empty_vocab(meta["vocab_kind"]),
        freq=np.empty(0, dtype=np.int64),
        path=path,
    )


def read_offsets(path, *, missing_chunks: str | None = None) -> np.ndarray:
    """The ``offsets`` array of the set store at ``path`` (int64, n_sets + 1 entries), read with the chunk checks."""
    path = os.path.abspath(os.fspath(path))
    mode = _mode(missing_chunks)
    meta, arrays = _opened(path)
    return np.asarray(_read_array(path, meta, arrays, "offsets", 0, arrays["offsets"].shape[0], mode), np.int64)


def read_freq(path, *, missing_chunks: str | None = None) -> np.ndarray:
    """The ``freq`` array of the set store at ``path`` (sets holding each rank), without its vocabulary."""
    path = os.path.abspath(os.fspath(path))
    meta, arrays = _opened(path)
    return np.asarray(_read_array(path, meta, arrays, "freq", 0, arrays["freq"].shape[0], _mode(missing_chunks)),
                      np.int64)


def store_state(path) -> tuple | None:
    """What identifies the set store at ``path`` as it is now (its ``zarr.json``'s inode, time and size), or None."""
    try:
        return _store_stamp(os.path.abspath(os.fspath(path)))
    except OSError:
        return None


def read_vocab(path, *, missing_chunks: str | None = None) -> tuple[np.ndarray, np.ndarray, str]:
    """(vocab, freq, vocab kind) of the set store at ``path``, without reading its sets.

    What aligning a store for an R x S join needs (:func:`daskjoin.io.sets_prepare.common_ranking`).

    Examples
    --------
    >>> import os, tempfile
    >>> from daskjoin.io.sets_in import prepare_sets
    >>> path = write_sets(prepare_sets([["a", "b"], ["b"]]), os.path.join(tempfile.mkdtemp(), "s.zarr"))
    >>> vocab, freq, kind = read_vocab(path)
    >>> vocab.tolist(), freq.tolist(), kind
    (['a', 'b'], [1, 2], 'str')
    """
    path = os.path.abspath(os.fspath(path))
    mode = _mode(missing_chunks)
    meta, arrays = _open_store(path)
    freq = np.asarray(_read_array(path, meta, arrays, "freq", 0, arrays["freq"].shape[0], mode), dtype=np.int64)
    vocab = _as_vocab(_read_array(path, meta, arrays, "vocab", 0, arrays["vocab"].shape[0], mode), meta["vocab_kind"])
    if vocab.shape != freq.shape or np.any(np.diff(freq) < 0):
        raise InputError(f"set store {path!r}: vocab and freq must be of one length, freq non-decreasing")
    return vocab, freq, meta["vocab_kind"]


__all__ = ["SetCollection", "check_collection", "is_set_store", "open_sets", "read_freq", "read_offsets",
           "read_sets_range", "read_vocab", "store_state", "write_sets"]
