"""Build :class:`~daskjoin.io.sets_store.SetCollection` objects from raw sets, and re-rank two of them.

:func:`prepare_flat` is the vectorised core (factorize the tokens, count the
sets containing each, rank by that count, sort inside sets, order the sets);
:func:`prepare_sets` flattens any iterable of iterables and calls it;
:func:`align` gives two collections one common ranking for an R x S join.
"""
from __future__ import annotations

import numpy as np

from ..validation import InputError
from .sets_store import MAX_VOCAB, SetCollection, _check_ids, _check_offsets

def _sort_within(values: np.ndarray, seg: np.ndarray, width: int, unique: bool = False):
    """Sort ``values`` (all in ``[0, width)``) inside each run of the non-decreasing run labels ``seg``.

    Returns ``(seg, values)`` reordered; with ``unique`` repeated values inside a run are dropped.
    """
    n_seg = int(seg[-1]) + 1 if seg.size else 0
    if seg.size == 0:
        return seg, values
    if n_seg * width < 2**62:  # one int64 key: a single sort
        key = seg * np.int64(width) + values
        key.sort()
        if unique:
            key = key[np.concatenate(([True], key[1:] != key[:-1]))]
        seg_out = key // width
        return seg_out, key - seg_out * width
    order = np.lexsort((values, seg))
    seg_out, val_out = seg[order], values[order]
    if unique:
        keep = np.concatenate(([True], (seg_out[1:] != seg_out[:-1]) | (val_out[1:] != val_out[:-1])))
        seg_out, val_out = seg_out[keep], val_out[keep]
    return seg_out, val_out


def _set_order(ranks: np.ndarray, offsets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Permutation of the sets: by size, then lexicographically by ranks, then by id, then input position."""
    sizes = np.diff(offsets)
    base = np.lexsort((ids, sizes))  # stable: equal ids keep their input order
    sorted_sizes = sizes[base]
    bounds = np.flatnonzero(np.diff(sorted_sizes)) + 1
    starts = np.concatenate(([0], bounds))
    stops = np.concatenate((bounds, [sizes.shape[0]]))
    for lo, hi in zip(starts.tolist(), stops.tolist()):
        s = int(sorted_sizes[lo]) if hi > lo else 0
        if hi - lo < 2 or s == 0:
            continue
        members = base[lo:hi]
        rows = ranks[offsets[members][:, None] + np.arange(s)]
        base[lo:hi] = members[np.lexsort(rows.T[::-1])]  # lexsort is stable: ties keep the (id, position) order
    return base


def _prepare_codes(codes: np.ndarray, offsets: np.ndarray, values: np.ndarray, ids=None) -> SetCollection:
    """Build a collection from integer codes ``codes`` into the distinct token values ``values`` (any order)."""
    n = offsets.shape[0] - 1
    ids = _check_ids(ids, n)
    kind = "str" if values.dtype.kind in "OUST" else "int"
    if values.shape[0] > MAX_VOCAB:
        raise InputError(f"at most {MAX_VOCAB} distinct tokens are supported (ranks are int32), got {values.shape[0]}")
    by_value = np.argsort(values, kind="stable")
    position = np.empty(values.shape[0], dtype=np.int64)
    position[by_value] = np.arange(values.shape[0])
    values = values[by_value]
    codes = position[codes] if codes.size else codes.astype(np.int64)
    width = values.shape[0]
    seg = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    seg, code = _sort_within(codes, seg, width, unique=True)  # deduplicated per set
    counts = np.bincount(code, minlength=width).astype(np.int64)
    by_freq = np.argsort(counts, kind="stable")  # codes are in value order, so ties go by value
    rank_of = np.empty(width, dtype=np.int64)
    rank_of[by_freq] = np.arange(width)
    seg, ranks = _sort_within(rank_of[code], seg, width)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(seg, minlength=n), out=offsets[1:])
    order = _set_order(ranks, offsets, ids)
    sizes = np.diff(offsets)[order]
    new_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=new_offsets[1:])
    gather = np.repeat(offsets[:-1][order] - new_offsets[:-1], sizes) + np.arange(new_offsets[-1])
    vocab = values[by_freq]
    if kind == "str":
        vocab = vocab.astype(object)
    return SetCollection(
        tokens=ranks[gather].astype(np.int32),
        offsets=new_offsets,
        ids=ids[order],
        vocab=vocab,
        freq=counts[by_freq],
    )


def _first_bad_token(flat, offsets: np.ndarray, allowed) -> tuple[int, object]:
    for pos, tok in enumerate(flat):
        if not allowed(tok):
            return int(np.searchsorted(offsets, pos, side="right")) - 1, tok
    raise AssertionError("no bad token found")


def _is_int_token(tok) -> bool:
    return isinstance(tok, (int, np.integer)) and not isinstance(tok, (bool, np.bool_))


def _encode(flat, offsets: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Factorize a sequence of tokens that must be all integers or all strings: (codes, distinct values)."""
    import pandas as pd

    if len(flat) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    types = set(map(type, flat))
    if all(issubclass(t, str) for t in types):
        arr = np.empty(len(flat), dtype=object)
        arr[:] = flat
        codes, values = pd.factorize(arr)
        return codes.astype(np.int64), np.asarray(values, dtype=object)
    if all(issubclass(t, (int, np.integer)) and not issubclass(t, (bool, np.bool_)) for t in types):
        try:
            arr = np.fromiter(flat, dtype=np.int64, count=len(flat))
        except OverflowError:
            k, tok = _first_bad_token(flat, offsets, lambda t: -(2**63) <= int(t) < 2**63)
            raise InputError(f"{what}: set {k} holds token {tok!r}, which does not fit in int64") from None
        codes, values = pd.factorize(arr)
        return codes.astype(np.int64), np.asarray(values, dtype=np.int64)
    first = flat[0]
    if isinstance(first, str):
        kind, allowed = "strings", (lambda t: isinstance(t, str))
    elif _is_int_token(first):
        kind, allowed = "integers", _is_int_token
    else:
        kind, allowed = None, (lambda t: False)
    k, tok = _first_bad_token(flat, offsets, allowed)
    if kind is None or not (isinstance(tok, str) or _is_int_token(tok)):
        raise InputError(
            f"{what}: set {k} holds token {tok!r} of type {type(tok).__name__}; tokens must be integers or "
            "strings (convert them, e.g. with str(token))"
        )
    raise InputError(
        f"{what}: set {k} holds token {tok!r} of type {type(tok).__name__}, but the first tokens are {kind}; "
        "all tokens must be of one kind: convert them all to str or all to int"
    )


def prepare_flat(tokens, offsets, ids=None) -> SetCollection:
    """Build a :class:`SetCollection` from sets given flat: ``tokens`` cut by ``offsets``.

    Parameters
    ----------
    tokens : array-like
        All tokens, set after set: integers, or strings (``str``/``U`` or an
        object array of ``str``). Duplicates inside a set are dropped.
    offsets : array-like of int
        ``N + 1`` boundaries: set ``k`` is ``tokens[offsets[k]:offsets[k + 1]]``;
        ``offsets[0] == 0``, non-decreasing, ``offsets[N] == len(tokens)``.
    ids : array-like of int, optional
        Unique id of each input set; default its position ``0..N-1``.

    Returns
    -------
    SetCollection
        Ranks by ascending document frequency (ties by token value), sets
        sorted by size, then by ranks, then by id.

    Raises
    ------
    InputError
        Tokens that are neither integers nor strings, inconsistent offsets, bad ids.

    Examples
    --------
    >>> import numpy as np
    >>> c = prepare_flat(np.array([7, 5, 5, 7, 9]), np.array([0, 3, 5]))
    >>> c.vocab.tolist(), c.freq.tolist(), c.offsets.tolist(), c.tokens.tolist()
    ([5, 9, 7], [1, 1, 2], [0, 2, 4], [0, 2, 1, 2])
    >>> c.ids.tolist()
    [0, 1]
    """
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise InputError(f"tokens must be a 1-D array, got shape {arr.shape}")
    offsets = _check_offsets(offsets, arr.shape[0], "prepare_flat")
    if arr.dtype.kind in "iu":
        if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
            raise InputError("integer tokens must fit in int64, got a uint64 value above 2**63 - 1")
        import pandas as pd

        codes, values = pd.factorize(arr.astype(np.int64))
        return _prepare_codes(codes.astype(np.int64), offsets, np.asarray(values, np.int64), ids)
    if arr.dtype.kind in "UT":
        if arr.size == 0:  # no tokens, but string-typed: keep the kind
            return _prepare_codes(np.empty(0, np.int64), offsets, np.empty(0, dtype=object), ids)
        arr = arr.astype(object)
    elif arr.dtype.kind == "S":
        raise InputError("tokens must be integers or str, got bytes; decode them first, e.g. tokens.astype(str)")
    elif arr.dtype.kind != "O" and arr.size:
        raise InputError(
            f"tokens must be integers or strings, got dtype {arr.dtype}; "
            "map other values to integer or string tokens first"
        )
    codes, values = _encode(arr, offsets, "prepare_flat")
    return _prepare_codes(codes, offsets, values, ids)


def prepare_sets(sets, ids=None) -> SetCollection:
    """Build a :class:`SetCollection` from any iterable of iterables of tokens.

    Parameters
    ----------
    sets : iterable of iterables
        Each inner iterable is one set; its tokens are all integers (Python or
        numpy) or all strings, the same kind for every set. Duplicate tokens
        inside a set are dropped; empty sets are kept.
    ids : array-like of int, optional
        Unique id of each set; default its position ``0..N-1``.

    Returns
    -------
    SetCollection

    Raises
    ------
    InputError
        A set that is a string or not iterable, a token that is neither int nor
        str, or a mix of both (the message names the set).

    Examples
    --------
    >>> c = prepare_sets([[3, 1], [1, 2, 3], [1]], ids=[10, 20, 30])
    >>> c.ids.tolist(), c.sizes.tolist(), [c.original_tokens(k).tolist() for k in range(3)]
    ([30, 10, 20], [1, 2, 3], [[1], [3, 1], [2, 3, 1]])
    """
    if isinstance(sets, (str, bytes)) or not hasattr(sets, "__iter__"):
        raise InputError(f"sets must be an iterable of sets (e.g. a list of lists), got {type(sets).__name__}")
    flat: list = []
    sizes: list[int] = []
    for k, s in enumerate(sets):
        if isinstance(s, (str, bytes, bytearray)):
            raise InputError(
                f"set {k} is a {type(s).__name__} ({s[:40]!r}), not a collection of tokens; "
                "pass e.g. text.split() for word tokens"
            )
        before = len(flat)
        try:
            flat.extend(s)
        except TypeError:
            raise InputError(
                f"set {k} is a {type(s).__name__}, not an iterable of tokens; wrap a single token as [token]"
            ) from None
        sizes.append(len(flat) - before)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(np.asarray(sizes, dtype=np.int64), out=offsets[1:])
    codes, values = _encode(flat, offsets, "prepare_sets")
    del flat
    return _prepare_codes(codes, offsets, values, ids)


# -- re-ranking two collections ---------------------------------------------------
def token_counts(c: SetCollection, name: str) -> np.ndarray:
    """How many sets of ``c`` hold each rank (recomputed from the tokens)."""
    if c.n_tokens and c.vocab.shape[0] == 0:
        raise InputError(
            f"{name} has no vocabulary (collections from read_sets_range do not load it); "
            "align collections opened with open_sets or built with prepare_sets"
        )
    return np.bincount(c.tokens, minlength=c.vocab.shape[0]).astype(np.int64)


def rerank_tokens(tokens: np.ndarray, offsets: np.ndarray, new_rank: np.ndarray) -> np.ndarray:
    """Each set's ranks mapped through ``new_rank`` and re-sorted inside the set (int32)."""
    width = int(new_rank.max()) + 1 if new_rank.shape[0] else 1
    seg = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    _, ranks = _sort_within(new_rank[tokens], seg, width)
    return ranks.astype(np.int32)


def reranked(c: SetCollection, new_rank: np.ndarray, vocab, freq) -> SetCollection:
    """``c`` with its ranks mapped through ``new_rank`` (in memory only: ``path=None``)."""
    return SetCollection(rerank_tokens(c.tokens, c.offsets, new_rank), c.offsets.copy(), c.ids.copy(), vocab, freq,
                         path=None)


def common_ranking(vocab_a, count_a, kind_a: str, vocab_b, count_b, kind_b: str):
    """One token order for two vocabularies: (new rank of each rank of a, of b, union vocab, union counts).

    A token's common rank orders by its two counts added, ties by token value; only the
    vocabularies are needed, so stores can be aligned without reading their tokens.
    """
    kinds = {kind for kind, vocab in ((kind_a, vocab_a), (kind_b, vocab_b)) if vocab.shape[0]}
    if len(kinds) > 1:
        raise InputError(
            f"cannot align a collection of {kind_a} tokens with one of {kind_b} tokens; "
            "import both with the same token kind (e.g. both as strings)"
        )
    kind = kinds.pop() if kinds else kind_a
    if kind == "str":
        values = np.concatenate([vocab_a.astype(object), vocab_b.astype(object)])
    else:
        values = np.concatenate([vocab_a.astype(np.int64), vocab_b.astype(np.int64)])
    union, inverse = np.unique(values, return_inverse=True)
    inverse = inverse.reshape(-1)
    va = vocab_a.shape[0]
    counts = np.zeros(union.shape[0], dtype=np.int64)
    counts[inverse[:va]] += count_a
    counts[inverse[va:]] += count_b
    by_freq = np.argsort(counts, kind="stable")
    rank_of = np.empty(union.shape[0], dtype=np.int64)
    rank_of[by_freq] = np.arange(union.shape[0])
    vocab = union[by_freq].astype(object if kind == "str" else np.int64)
    return rank_of[inverse[:va]], rank_of[inverse[va:]], vocab, counts[by_freq]


def align(a: SetCollection, b: SetCollection) -> tuple[SetCollection, SetCollection]:
    """Re-rank two collections to one common ranking, as an R x S join needs.

    The common rank of a token orders by the number of sets of ``a`` and
    ``b`` together that contain it, ties by token value. Both results share
    ``vocab`` (the union of the vocabularies) and ``freq`` (those combined
    counts, recomputed from the tokens, so it is non-decreasing). The ranks
    inside every set are re-sorted; the stored set order (by size) and ids are
    unchanged, but within one size the sets are no longer in lexicographic
    rank order. The results are in memory only (``path=None``): their ranks
    differ from those of the stores ``a`` and ``b`` came from.

    Examples
    --------
    >>> a = prepare_sets([["x", "y"], ["y"]])
    >>> b = prepare_sets([["x"], ["x", "z"]])
    >>> a2, b2 = align(a, b)
    >>> a2.vocab.tolist(), a2.freq.tolist()
    (['z', 'y', 'x'], [1, 2, 3])
    >>> [a2.original_tokens(k).tolist() for k in range(2)], b2.original_tokens(1).tolist()
    ([['y'], ['y', 'x']], ['z', 'x'])
    """
    for name, c in (("a", a), ("b", b)):
        if not isinstance(c, SetCollection):
            raise InputError(f"{name} must be a SetCollection, got {type(c).__name__}; build one with prepare_sets")
    count_a, count_b = token_counts(a, "a"), token_counts(b, "b")
    rank_a, rank_b, vocab, freq = common_ranking(a.vocab, count_a, a.vocab_kind, b.vocab, count_b, b.vocab_kind)
    return reranked(a, rank_a, vocab, freq), reranked(b, rank_b, vocab, freq)


__all__ = ["align", "common_ranking", "prepare_flat", "prepare_sets", "rerank_tokens"]
