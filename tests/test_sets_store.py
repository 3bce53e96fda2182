"""Tests of the set-join storage layer (daskjoin.io.sets_in): preparation, the Zarr store, align, importers."""
import doctest
import importlib
import os

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskjoin.io import sets_store
from daskjoin.io.sets_in import (
    SetCollection,
    align,
    import_sets,
    import_sets_parquet,
    import_sets_text,
    is_set_store,
    open_sets,
    prepare_flat,
    prepare_sets,
    read_sets_range,
    write_sets,
)
from daskjoin.validation import InputError

INT_SETS = [[5, 3, 3, 9], [], [3], [9, 5, 3], [7], [3, 5, 9], [], [1, 2, 3, 4, 5, 6, 7, 8, 9], [3]]
STR_SETS = [["b", "a"], ["a"], [], ["c", "a", "b", "a"], ["zz"], ["a", "b"], ["é", "a"]]


def _siblings(path):
    return sorted(p.name for p in path.iterdir())


def assert_invariants(c: SetCollection, sets, ids=None):
    """Every invariant of the layout, and that stored set k holds exactly the tokens of input set ids[k]."""
    n = len(sets)
    assert len(c) == n
    assert c.tokens.dtype == np.int32 and c.offsets.dtype == np.int64
    assert c.ids.dtype == np.int64 and c.freq.dtype == np.int64
    assert c.offsets[0] == 0 and c.offsets[-1] == c.n_tokens == c.tokens.shape[0]
    sizes = c.sizes
    assert np.all(sizes >= 0) and np.all(np.diff(sizes) >= 0)
    runs = [c.set(k).tolist() for k in range(n)]
    for r in runs:
        assert all(x < y for x, y in zip(r, r[1:]))  # strictly increasing
    # same size: lexicographic by ranks, then by id
    for k in range(n - 1):
        if sizes[k] == sizes[k + 1]:
            assert (runs[k], int(c.ids[k])) < (runs[k + 1], int(c.ids[k + 1]))
    # freq: the recomputed counts, non-decreasing; ties by token value
    counts = np.bincount(c.tokens, minlength=c.vocab.shape[0])
    np.testing.assert_array_equal(c.freq, counts)
    assert np.all(np.diff(c.freq) >= 0)
    vocab = c.vocab.tolist()
    assert len(set(vocab)) == len(vocab)
    for r in range(len(vocab) - 1):
        if c.freq[r] == c.freq[r + 1]:
            assert vocab[r] < vocab[r + 1]
    # content
    ids = list(range(n)) if ids is None else list(ids)
    position = {i: p for p, i in enumerate(ids)}
    assert sorted(c.ids.tolist()) == sorted(ids)
    for k in range(n):
        expected = set(sets[position[int(c.ids[k])]])
        got = c.original_tokens(k).tolist()
        assert len(got) == len(expected) and set(got) == expected
    assert set(vocab) == set().union(*map(set, sets)) if sets else not vocab


def assert_same(a: SetCollection, b: SetCollection):
    for name in ("tokens", "offsets", "ids", "vocab", "freq"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape, name
        assert x.tolist() == y.tolist(), name
    assert a.vocab_kind == b.vocab_kind


# -- preparation ---------------------------------------------------------------
@pytest.mark.parametrize("sets", [INT_SETS, STR_SETS], ids=["int", "str"])
def test_prepare_sets_invariants(sets):
    c = prepare_sets(sets)
    assert_invariants(c, sets)
    assert c.vocab_kind == ("str" if isinstance(sets[0][0], str) else "int")
    assert c.vocab.dtype == (object if c.vocab_kind == "str" else np.int64)


def test_prepare_sets_known_answer():
    c = prepare_sets([[5, 3, 3, 9], [], [3], [9, 5, 3], [7]])
    # counts: 3 -> 3 sets, 5 -> 2, 9 -> 2, 7 -> 1; ties by value
    assert c.vocab.tolist() == [7, 5, 9, 3]
    assert c.freq.tolist() == [1, 2, 2, 3]
    assert c.ids.tolist() == [1, 4, 2, 0, 3]  # sizes 0, 1 ([7] -> rank 0 before [3] -> rank 3), then two equal sets
    assert c.offsets.tolist() == [0, 0, 1, 2, 5, 8]
    assert c.tokens.tolist() == [0, 3, 1, 2, 3, 1, 2, 3]


def test_prepare_sets_explicit_ids_and_duplicate_sets():
    sets = [["x", "y"], ["y", "x"], ["x"]]
    c = prepare_sets(sets, ids=[30, 10, 20])
    assert c.ids.tolist() == [20, 10, 30]  # equal sets ordered by id
    assert_invariants(c, sets, ids=[30, 10, 20])


@pytest.mark.parametrize(
    "sets",
    [[], [[]], [[], []], [[4]], [["only"]], [[1, 1, 1]], [np.array([3, 2]), (2,), {9}]],
    ids=["zero-sets", "one-empty", "two-empty", "one-int", "one-str", "one-token-repeated", "mixed-containers"],
)
def test_prepare_sets_edge_cases(sets):
    c = prepare_sets(sets)
    assert_invariants(c, [list(s) for s in sets])


def test_zero_sets_layout():
    c = prepare_sets([])
    assert len(c) == 0 and c.offsets.tolist() == [0] and c.tokens.shape == (0,)
    assert c.ids.shape == (0,) and c.vocab.shape == (0,) and c.freq.shape == (0,)


@pytest.mark.parametrize("kind", ["int", "str"])
def test_prepare_flat_matches_prepare_sets(kind):
    sets = INT_SETS if kind == "int" else STR_SETS
    tokens = np.array([t for s in sets for t in s])
    offsets = np.cumsum([0] + [len(s) for s in sets])
    assert_same(prepare_flat(tokens, offsets), prepare_sets(sets))
    assert_same(prepare_flat(tokens.astype(object), offsets), prepare_sets(sets))


def test_prepare_flat_other_integer_dtypes():
    tokens = np.array([300, 7, 7, 300, 2], dtype=np.uint16)
    c = prepare_flat(tokens, np.array([0, 2, 5], dtype=np.int32), ids=np.array([8, 9], dtype=np.uint8))
    assert_invariants(c, [[300, 7], [7, 300, 2]], ids=[8, 9])
    assert c.vocab.dtype == np.int64


def test_numpy_integer_tokens_are_ints():
    c = prepare_sets([[np.int32(4), 5], [np.uint64(5)]])
    assert c.vocab_kind == "int" and sorted(c.vocab.tolist()) == [4, 5]


@pytest.mark.parametrize(
    "sets, match",
    [
        ([[1, 2], [3, "a"]], r"set 1 holds token 'a' of type str, but the first tokens are integers"),
        ([["a"], [], ["b", 3]], r"set 2 holds token 3 of type int, but the first tokens are strings"),
        ([[1], [2.5]], r"set 1 holds token 2.5 of type float; tokens must be integers or strings"),
        ([[None]], r"set 0 holds token None of type NoneType"),
        ([["a"], [("a", "b")]], r"set 1 holds token \('a', 'b'\) of type tuple"),
        ([[1], [True]], r"set 1 holds token True of type bool"),
        (["abc", "de"], r"set 0 is a str \('abc'\), not a collection of tokens"),
        ([[1], 5], r"set 1 is a int, not an iterable of tokens"),
        ([[2**70]], r"set 0 holds token 1180591620717411303424, which does not fit in int64"),
        ("abc", r"sets must be an iterable of sets"),
    ],
    ids=["int-then-str", "str-then-int", "float", "none", "tuple", "bool", "str-set", "scalar-set", "too-big", "str"],
)
def test_prepare_sets_rejects_bad_tokens(sets, match):
    with pytest.raises(InputError, match=match):
        prepare_sets(sets)


@pytest.mark.parametrize(
    "ids, match",
    [
        ([1, 2], "one id per set"),
        ([1, 1, 2], "ids must be unique, got id 1 more than once"),
        (["a", "b", "c"], "integers"),
    ],
)
def test_prepare_sets_rejects_bad_ids(ids, match):
    with pytest.raises(InputError, match=match):
        prepare_sets([[1], [2], [3]], ids=ids)


@pytest.mark.parametrize(
    "tokens, offsets, match",
    [
        (np.array([1, 2, 3]), np.array([0, 2]), "end at the number of tokens"),
        (np.array([1, 2, 3]), np.array([1, 3]), "start at 0"),
        (np.array([1, 2, 3]), np.array([0, 2, 1, 3]), r"non-decreasing, but offsets\[2\] < offsets\[1\]"),
        (np.array([1, 2, 3]), np.array([], dtype=np.int64), "at least \\[0\\]"),
        (np.array([1.0, 2.0]), np.array([0, 2]), "dtype float64"),
        (np.array([b"a"]), np.array([0, 1]), "got bytes"),
        (np.array([[1, 2]]), np.array([0, 2]), "1-D"),
        (np.array([1, "a"], dtype=object), np.array([0, 1, 2]), "set 1 holds token 'a'"),
    ],
    ids=["short-offsets", "offset0", "decreasing", "no-offsets", "floats", "bytes", "2d", "mixed-object"],
)
def test_prepare_flat_rejects_bad_input(tokens, offsets, match):
    with pytest.raises(InputError, match=match):
        prepare_flat(tokens, offsets)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.lists(st.lists(st.integers(-5, 12), max_size=7), max_size=12),
        st.lists(st.lists(st.sampled_from(["a", "b", "c", "dd", "é", "", "Z"]), max_size=6), max_size=12),
    )
)
def test_prepare_sets_preserves_content(sets):
    c = prepare_sets(sets)
    assert_invariants(c, sets)
    tokens = np.array([t for s in sets for t in s], dtype=object if sets and any(
        isinstance(t, str) for s in sets for t in s) else np.int64)
    assert_same(c, prepare_flat(tokens, np.cumsum([0] + [len(s) for s in sets])))


# -- the collection ------------------------------------------------------------
def test_slice_and_set_access():
    c = prepare_sets(INT_SETS)
    part = c.slice(2, 6)
    assert len(part) == 4 and part.offsets[0] == 0
    for k in range(4):
        assert part.set(k).tolist() == c.set(k + 2).tolist()
        assert part.original_tokens(k).tolist() == c.original_tokens(k + 2).tolist()
    assert part.ids.tolist() == c.ids[2:6].tolist()
    assert part.vocab is c.vocab and part.freq is c.freq
    assert len(c.slice(3, 3)) == 0 and c.slice(3, 3).offsets.tolist() == [0]
    assert c.set(-1).tolist() == c.set(len(c) - 1).tolist()
    with pytest.raises(IndexError, match="out of range"):
        c.set(len(c))
    with pytest.raises(InputError, match="0 <= lo <= hi"):
        c.slice(4, 2)


# -- the store ------------------------------------------------------------------
@pytest.mark.parametrize(
    "sets", [INT_SETS, STR_SETS, [], [[]], [["x"]], [[1, 1], [1]]],
    ids=["int", "str", "zero-sets", "one-empty", "one-str", "duplicates"],
)
def test_write_open_round_trip(tmp_path, sets):
    c = prepare_sets(sets)
    path = write_sets(c, tmp_path / "s.zarr")
    assert path == str(tmp_path / "s.zarr")
    back = open_sets(path)
    assert_same(back, c)
    assert back.path == path
    assert_invariants(back, sets)
    assert _siblings(tmp_path) == ["s.zarr"]
    meta = zarr.open_group(path, mode="r").attrs["daskjoin"]
    assert {k: meta[k] for k in ("kind", "version", "n_sets", "n_tokens", "vocab_kind")} == {
        "kind": "sets", "version": 1, "n_sets": len(c), "n_tokens": c.n_tokens, "vocab_kind": c.vocab_kind,
    }
    assert is_set_store(path)


def test_empty_string_collection_keeps_its_kind(tmp_path):
    c = prepare_flat(np.array([], dtype=str), np.array([0, 0]))
    assert c.vocab_kind == "str"
    assert open_sets(write_sets(c, tmp_path / "s.zarr")).vocab_kind == "str"


def test_store_arrays_and_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(sets_store, "TOKENS_CHUNK", 5)
    monkeypatch.setattr(sets_store, "ROWS_CHUNK", 3)
    c = prepare_sets(INT_SETS)
    path = write_sets(c, tmp_path / "s.zarr")
    g = zarr.open_group(path, mode="r")
    assert g["tokens"].dtype == np.int32 and g["tokens"].chunks == (5,)
    assert g["offsets"].dtype == np.int64 and g["offsets"].chunks == (3,)
    assert g["ids"].dtype == np.int64 and g["vocab"].dtype == np.int64 and g["freq"].dtype == np.int64
    assert_same(open_sets(path), c)
    for lo, hi in [(0, len(c)), (0, 0), (2, 5), (4, 9), (8, 9), (9, 9)]:
        part = read_sets_range(path, lo, hi)
        expected = c.slice(lo, hi)
        for name in ("tokens", "offsets", "ids"):
            assert getattr(part, name).tolist() == getattr(expected, name).tolist(), (lo, hi, name)
        assert part.tokens.dtype == np.int32 and part.offsets.dtype == np.int64
        assert part.vocab.shape == (0,) and part.freq.shape == (0,) and part.path == path


def test_default_chunks_are_capped_by_length(tmp_path):
    path = write_sets(prepare_sets(STR_SETS), tmp_path / "s.zarr")
    g = zarr.open_group(path, mode="r")
    assert g["tokens"].chunks == (g["tokens"].shape[0],) and g["vocab"].shape == (5,)


def test_write_refuses_existing_path_and_overwrites_atomically(tmp_path):
    out = tmp_path / "s.zarr"
    write_sets(prepare_sets([[1, 2]]), out)
    with pytest.raises(InputError, match="already exists"):
        write_sets(prepare_sets([[3]]), out)
    assert open_sets(out).vocab.tolist() == [1, 2]
    write_sets(prepare_sets([["q"]]), out, overwrite=True)
    assert open_sets(out).vocab.tolist() == ["q"]
    assert _siblings(tmp_path) == ["s.zarr"]


def test_write_rejects_a_broken_collection_and_leaves_nothing(tmp_path):
    c = prepare_sets(INT_SETS)
    bad = SetCollection(c.tokens[::-1].copy(), c.offsets, c.ids, c.vocab, c.freq)
    with pytest.raises(InputError, match="not strictly increasing"):
        write_sets(bad, tmp_path / "s.zarr")
    with pytest.raises(InputError, match="needs a SetCollection"):
        write_sets([[1]], tmp_path / "s.zarr")
    assert _siblings(tmp_path) == []


def test_read_range_sees_an_overwritten_store(tmp_path):
    out = tmp_path / "s.zarr"
    write_sets(prepare_sets([[1], [1, 2]]), out)
    assert read_sets_range(out, 0, 2).tokens.tolist() == [1, 0, 1]
    write_sets(prepare_sets([[5, 6, 7], [5], [8]]), out, overwrite=True)
    part = read_sets_range(out, 0, 3)
    assert part.offsets.tolist() == [0, 1, 2, 5] and len(part) == 3


def test_read_range_errors(tmp_path):
    path = write_sets(prepare_sets([[1], [2]]), tmp_path / "s.zarr")
    with pytest.raises(InputError, match=r"need 0 <= lo <= hi <= 2"):
        read_sets_range(path, 1, 3)
    with pytest.raises(InputError, match="no set store"):
        read_sets_range(tmp_path / "nope.zarr", 0, 1)
    part = read_sets_range(path, 0, 1)
    with pytest.raises(InputError, match="no vocabulary"):
        part.original_tokens(0)


def _damage(path, name, data):
    g = zarr.open_group(path, mode="r+")
    g[name][:] = data


def test_open_rejects_missing_and_foreign_stores(tmp_path):
    with pytest.raises(InputError, match=r"no set store at .*nope.zarr.*does not exist"):
        open_sets(tmp_path / "nope.zarr")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(InputError, match="is a file"):
        open_sets(tmp_path / "file.txt")
    arr = zarr.create_array(store=str(tmp_path / "arr.zarr"), shape=(3,), dtype="int32")
    assert arr.shape == (3,)
    with pytest.raises(InputError, match="cannot read a set store"):
        open_sets(tmp_path / "arr.zarr")
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    with pytest.raises(InputError, match="not a set store"):
        open_sets(tmp_path / "g.zarr")
    for p in ("nope.zarr", "file.txt", "arr.zarr", "g.zarr"):
        assert not is_set_store(tmp_path / p)


def test_open_rejects_damaged_stores(tmp_path):
    c = prepare_sets(INT_SETS)
    path = write_sets(c, tmp_path / "s.zarr")
    g = zarr.open_group(path, mode="r+")
    g.attrs["daskjoin"] = {**g.attrs["daskjoin"], "version": 99}
    with pytest.raises(InputError, match="layout version 99"):
        open_sets(path)
    g.attrs["daskjoin"] = {**g.attrs["daskjoin"], "version": 1, "n_sets": 3}
    with pytest.raises(InputError, match="'offsets' has 10 entries but the attrs say 4"):
        open_sets(path)
    g.attrs["daskjoin"] = {**g.attrs["daskjoin"], "n_sets": len(c)}
    assert_same(open_sets(path), c)

    offsets = c.offsets.copy()
    offsets[3] = offsets[4] + 1
    _damage(path, "offsets", offsets)
    with pytest.raises(InputError, match="non-decreasing"):
        open_sets(path)
    _damage(path, "offsets", c.offsets)
    tokens = c.tokens.copy()
    tokens[-1] = 99
    _damage(path, "tokens", tokens)
    with pytest.raises(InputError, match=r"ranks must lie in \[0, 9\)"):
        open_sets(path)
    _damage(path, "tokens", c.tokens)
    _damage(path, "freq", c.freq[::-1].copy())
    with pytest.raises(InputError, match="freq must be"):
        open_sets(path)


def test_open_rejects_wrong_dtype(tmp_path):
    path = write_sets(prepare_sets([[1, 2]]), tmp_path / "s.zarr")
    g = zarr.open_group(path, mode="r+")
    del g["tokens"]
    g.create_array("tokens", shape=(2,), dtype="int64")
    with pytest.raises(InputError, match="'tokens' must have dtype int32, got int64"):
        open_sets(path)
    del g["tokens"]
    with pytest.raises(InputError, match="lacks its 'tokens' array"):
        open_sets(path)


# -- align ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["int", "str"])
def test_align(kind):
    sets_a = INT_SETS if kind == "int" else STR_SETS
    sets_b = [[9, 9, 11], [3], [11, 12, 1]] if kind == "int" else [["a", "q"], ["q"], ["b", "zz", "q"], []]
    a, b = prepare_sets(sets_a), prepare_sets(sets_b)
    a2, b2 = align(a, b)
    assert a2.vocab is b2.vocab and a2.freq is b2.freq
    counts = np.bincount(a2.tokens, minlength=a2.vocab.shape[0]) + np.bincount(b2.tokens, minlength=a2.vocab.shape[0])
    np.testing.assert_array_equal(a2.freq, counts)
    assert np.all(np.diff(a2.freq) >= 0)
    vocab = a2.vocab.tolist()
    assert set(vocab) == set(a.vocab.tolist()) | set(b.vocab.tolist())
    for r in range(len(vocab) - 1):
        if a2.freq[r] == a2.freq[r + 1]:
            assert vocab[r] < vocab[r + 1]
    for before, after in ((a, a2), (b, b2)):
        assert after.tokens.dtype == np.int32 and after.path is None
        np.testing.assert_array_equal(after.offsets, before.offsets)
        np.testing.assert_array_equal(after.ids, before.ids)
        for k in range(len(before)):
            r = after.set(k).tolist()
            assert all(x < y for x, y in zip(r, r[1:]))
            assert sorted(after.original_tokens(k).tolist()) == sorted(before.original_tokens(k).tolist())


def test_align_with_empty_and_self():
    a = prepare_sets(STR_SETS)
    a2, e2 = align(a, prepare_sets([]))
    assert_same(a2, a)  # the combined counts are a's own counts
    assert len(e2) == 0
    x, y = align(a, a)
    np.testing.assert_array_equal(x.tokens, a.tokens)
    np.testing.assert_array_equal(x.freq, 2 * a.freq)


def test_align_errors(tmp_path):
    with pytest.raises(InputError, match="cannot align a collection of int tokens with one of str tokens"):
        align(prepare_sets([[1]]), prepare_sets([["1"]]))
    path = write_sets(prepare_sets([[1, 2]]), tmp_path / "s.zarr")
    with pytest.raises(InputError, match="b has no vocabulary"):
        align(prepare_sets([[1]]), read_sets_range(path, 0, 1))
    with pytest.raises(InputError, match="must be a SetCollection"):
        align([[1]], prepare_sets([[1]]))


# -- importers ------------------------------------------------------------------
def test_import_text_whitespace(tmp_path):
    src = tmp_path / "sets.txt"
    src.write_text("\ufeffapple banana\tapple\n\n  cherry  \nbanana apple\n   \nDürer x\n", encoding="utf-8")
    path = import_sets_text(src, tmp_path / "s.zarr")
    c = open_sets(path)
    expected = [["apple", "banana"], [], ["cherry"], ["banana", "apple"], [], ["Dürer", "x"]]
    assert_invariants(c, expected)
    assert c.vocab_kind == "str"
    meta = zarr.open_group(path, mode="r").attrs["daskjoin"]
    assert meta["format"] == "text" and meta["source"] == str(src)


def test_import_text_separator_and_ids(tmp_path):
    src = tmp_path / "sets.csv"
    src.write_bytes(b"a, b ,c\r\n,,\r\nb,a\r\nsome token,a\r\n")
    c = open_sets(import_sets_text(src, tmp_path / "s.zarr", sep=",", ids=[10, 11, 12, 13]))
    assert_invariants(c, [["a", "b", "c"], [], ["b", "a"], ["some token", "a"]], ids=[10, 11, 12, 13])


def test_import_text_empty_file(tmp_path):
    src = tmp_path / "empty.txt"
    src.write_text("")
    c = open_sets(import_sets_text(src, tmp_path / "s.zarr"))
    assert len(c) == 0 and c.vocab_kind == "str"


def test_import_text_errors(tmp_path):
    with pytest.raises(InputError, match=r"input file .*missing.txt.* does not exist"):
        import_sets_text(tmp_path / "missing.txt", tmp_path / "s.zarr")
    with pytest.raises(InputError, match="is a directory"):
        import_sets_text(tmp_path, tmp_path / "s.zarr")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("ok line\nna\xefve caf\xe9\n".encode("utf-8")[:9] + b"caf\xe9\n")
    with pytest.raises(InputError, match=r"is not UTF-8 text: line 2"):
        import_sets_text(bad, tmp_path / "s.zarr")
    good = tmp_path / "good.txt"
    good.write_text("a b\n")
    with pytest.raises(InputError, match="sep must be a non-empty string"):
        import_sets_text(good, tmp_path / "s.zarr", sep="")
    import_sets_text(good, tmp_path / "s.zarr")
    with pytest.raises(InputError, match="already exists"):
        import_sets_text(good, tmp_path / "s.zarr")
    assert sorted(os.listdir(tmp_path)) == ["good.txt", "latin1.txt", "s.zarr"]


def _write_parquet(path, columns, row_group_size=None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)


def test_import_parquet_int_lists(tmp_path):
    import pyarrow as pa

    sets = [[4, 2, 2], [], [2], [7, 4], [4, 2], [9]]
    src = tmp_path / "s.parquet"
    _write_parquet(src, {"items": pa.array(sets, type=pa.list_(pa.int64())), "n": list(range(6))}, row_group_size=4)
    c = open_sets(import_sets_parquet(src, tmp_path / "s.zarr", column="items"))
    assert c.vocab_kind == "int"
    assert_invariants(c, sets)


def test_import_parquet_string_lists_with_ids(tmp_path):
    import pyarrow as pa

    sets = [["x", "y"], ["y"], [], ["é", "x", "x"], ["y", "z"]]
    ids = [50, 40, 30, 20, 10]
    src = tmp_path / "s.parquet"
    _write_parquet(
        src, {"toks": pa.array(sets, type=pa.large_list(pa.string())), "key": pa.array(ids, pa.int32())}, 2
    )
    c = open_sets(import_sets_parquet(src, tmp_path / "s.zarr", column="toks", id_column="key"))
    assert c.vocab_kind == "str"
    assert_invariants(c, sets, ids=ids)


def test_import_parquet_dictionary_strings(tmp_path):
    import pyarrow as pa

    values = pa.array(["a", "b", "a", "c"]).dictionary_encode()
    col = pa.ListArray.from_arrays(pa.array([0, 2, 4], pa.int32()), values)
    src = tmp_path / "s.parquet"
    _write_parquet(src, {"toks": col})
    c = open_sets(import_sets_parquet(src, tmp_path / "s.zarr", column="toks"))
    assert_invariants(c, [["a", "b"], ["a", "c"]])


@pytest.mark.parametrize(
    "columns, kwargs, match",
    [
        ({"items": [[1], [2]]}, {"column": "other"}, r"column 'other' is not in Parquet .*columns are \['items'\]"),
        ({"items": [1, 2]}, {"column": "items"}, r"has type int64; a set column must be a list of integers or"),
        ({"items": [[1.5], [2.0]]}, {"column": "items"}, r"has type list<\w+: double>"),
        ({"items": [[1], None]}, {"column": "items"}, r"row 1 has no set \(null\)"),
        ({"items": [["a"], ["b", None]]}, {"column": "items"}, r"row 1 holds a null token"),
        ({"items": [[1], [2]], "k": ["a", "b"]}, {"column": "items", "id_column": "k"}, "ids must be integers"),
        ({"items": [[1], [2]], "k": [1, 1]}, {"column": "items", "id_column": "k"}, "ids must be unique"),
        ({"items": [[1], [2]], "k": [1, None]}, {"column": "items", "id_column": "k"}, "holds nulls"),
    ],
    ids=["missing-column", "not-a-list", "list-of-floats", "null-row", "null-token", "str-ids", "dup-ids", "null-ids"],
)
def test_import_parquet_errors(tmp_path, columns, kwargs, match):
    src = tmp_path / "s.parquet"
    _write_parquet(src, columns)
    with pytest.raises(InputError, match=match):
        import_sets_parquet(src, tmp_path / "s.zarr", **kwargs)
    assert not (tmp_path / "s.zarr").exists()


def test_import_parquet_file_errors(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        import_sets_parquet(tmp_path / "none.parquet", tmp_path / "s.zarr", column="x")
    (tmp_path / "fake.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="cannot read .* as a Parquet file"):
        import_sets_parquet(tmp_path / "fake.parquet", tmp_path / "s.zarr", column="x")


def test_import_sets_iterable(tmp_path):
    gen = (range(k % 4) for k in range(10))
    c = open_sets(import_sets(gen, tmp_path / "s.zarr", ids=range(100, 110)))
    assert_invariants(c, [list(range(k % 4)) for k in range(10)], ids=range(100, 110))
    with pytest.raises(InputError, match="already exists"):
        import_sets([[1]], tmp_path / "s.zarr")


@pytest.mark.parametrize("name", ["daskjoin.io.sets_store", "daskjoin.io.sets_prepare", "daskjoin.io.sets_import"])
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0
