"""The set-similarity join end to end on the session's real multi-process LocalCluster.

Text and Parquet files on disk -> the importer's Zarr set stores -> the join,
run as tasks on two worker processes that read the stores themselves ->
Parquet part files with a ``_SUCCESS`` manifest -> read back and compared with
the exact oracle (computed from the original files, parsed independently of
daskjoin).
"""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import get_task_stream

import daskjoin as dj
from set_cases import zipf_sets
from set_oracle import assert_same_set_pairs, oracle_join, oracle_join_fast

pytestmark = pytest.mark.integration


def _words(sets):
    """Integer sets as word tokens (``w17``), with a repeated token in every third set."""
    out = []
    for k, s in enumerate(sets):
        words = [f"w{t}" for t in s]
        if k % 3 == 0 and words:
            words.append(words[0])
        out.append(words)
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Real files on disk and the stores the importer wrote from them."""
    from daskjoin.io.sets_in import import_sets_parquet, import_sets_text

    d = tmp_path_factory.mktemp("setstores")
    docs = _words(zipf_sets(3000, seed=81, vocab=2500, max_size=40, exponent=1.15))
    docs[5] = []  # blank lines are empty sets
    docs[17] = []
    text = d / "docs.txt"
    text.write_text("".join(" ".join(ws) + "\n" for ws in docs), encoding="utf-8")
    queries = _words(zipf_sets(800, seed=82, vocab=2500, max_size=40, exponent=1.15)) + docs[:50:7]
    csv = d / "queries.csv"
    csv.write_text("".join(", ".join(ws) + "\n" for ws in queries), encoding="utf-8")
    ints = zipf_sets(1200, seed=83, vocab=900, max_size=30)
    ids = np.arange(len(ints), dtype=np.int64) * 10 + 5
    table = pa.table({"id": pa.array(ids), "tokens": pa.array(ints, type=pa.list_(pa.int64()))})
    pq.write_table(table, d / "ints.parquet", row_group_size=250)  # several row groups
    return {
        "dir": d,
        "docs": str(import_sets_text(text, d / "docs.zarr")),
        "queries": str(import_sets_text(csv, d / "queries.zarr", sep=",")),
        "ints": str(import_sets_parquet(d / "ints.parquet", d / "ints.zarr", column="tokens", id_column="id")),
        "docs_text": text, "queries_text": csv, "ids": ids.tolist(), "ints_sets": ints,
    }


def _parse_text(path, sep=None):
    """The sets of a text file, read here without daskjoin: one set per line."""
    lines = open(path, encoding="utf-8").read().split("\n")[:-1]
    if sep is None:
        return [line.split() for line in lines]
    return [[t.strip() for t in line.split(sep) if t.strip()] for line in lines]


def _read_parts(path):
    names = sorted(n for n in os.listdir(path) if n.startswith("part-") and n.endswith(".parquet"))
    frames = [pq.read_table(os.path.join(path, n)).to_pandas() for n in names]
    if not frames:
        return pd.DataFrame({"i": np.empty(0, np.int64), "j": np.empty(0, np.int64), "sim": np.empty(0)}), names
    df = pd.concat(frames, ignore_index=True)
    return df, names


def _check_manifest(out, names, rows):
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert manifest["rows"] == rows
    assert sorted(e["file"] for e in manifest["files"]) == names
    assert not [p for p in os.listdir(out) if ".tmp" in p], os.listdir(out)


@pytest.mark.parametrize("measure, t", [("jaccard", 0.3), ("cosine", 0.45), ("dice", 0.4), ("overlap", 8)])
def test_text_store_self_join_to_parquet(client, stores, tmp_path, measure, t):
    docs = _parse_text(stores["docs_text"])
    expected = oracle_join_fast(docs, threshold=t, measure=measure)
    assert len(expected) > 200
    out = tmp_path / "pairs.parquet"
    with get_task_stream(client=client) as ts:
        res = dj.set_similarity_join(stores["docs"], threshold=t, measure=measure, client=client, out=str(out),
                                     partitions=4, progress=False)
    workers = {task["worker"] for task in ts.data}
    assert len(workers) == 2, f"the join ran on {workers}; expected both worker processes"
    assert res.pairs == len(expected)
    got, names = _read_parts(out)
    assert names and res.files == len(names)
    _check_manifest(out, names, len(expected))
    assert_same_set_pairs(got, expected, selfjoin=True, context=f"parts {measure}")
    assert_same_set_pairs(res.read().compute(), expected, selfjoin=True, context=f"read() {measure}")


def test_text_stores_cross_join_and_count(client, stores, tmp_path):
    docs = _parse_text(stores["docs_text"])
    queries = _parse_text(stores["queries_text"], ",")
    expected = oracle_join_fast(docs, queries, threshold=0.5, measure="jaccard")
    assert len(expected) >= 7  # the copied queries at least
    for k, q in enumerate(docs[:50:7]):  # queries 800.. are copies of docs 0, 7, 14, ...
        if q:
            assert (7 * k, 800 + k) in expected
    out = tmp_path / "cross.parquet"
    res = dj.set_similarity_join(stores["docs"], stores["queries"], threshold=0.5, client=client, out=str(out),
                                 progress=False, method="allpairs")
    got, names = _read_parts(out)
    _check_manifest(out, names, len(expected))
    assert_same_set_pairs(got, expected, context="cross parts")
    assert res.pairs == len(expected)
    n = dj.set_similarity_join(stores["docs"], stores["queries"], threshold=0.5, client=client, output="count",
                               progress=False, partitions=6)
    assert type(n) is int and n == len(expected)
    lazy = dj.set_similarity_join(stores["queries"], stores["docs"], threshold=0.5, client=client, progress=False)
    flipped = {(j, i): v for (i, j), v in expected.items()}
    assert_same_set_pairs(lazy.compute(), flipped, context="S x R")


def test_parquet_store_with_ids(client, stores, tmp_path):
    """Ids from the Parquet id column come out as i and j (self-join: the smaller id first)."""
    ints, ids = stores["ints_sets"], stores["ids"]
    pos = oracle_join(ints, threshold=0.5, measure="cosine")
    assert len(pos) > 50
    expected = {(ids[i], ids[j]): v for (i, j), v in pos.items()}  # ids increase with the position
    out = tmp_path / "ids.parquet"
    res = dj.set_similarity_join(stores["ints"], threshold=0.5, measure="cosine", client=client, out=str(out),
                                 partitions=3, progress=False)
    got, names = _read_parts(out)
    _check_manifest(out, names, len(expected))
    assert_same_set_pairs(got, expected, selfjoin=True)
    assert res.pairs == len(expected)


def test_overwrite_and_refusals_leave_outputs_intact(client, stores, tmp_path):
    out = tmp_path / "p.parquet"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    with pytest.raises(dj.InputError, match="exists"):
        dj.set_similarity_join(stores["docs"], threshold=0.9, client=client, out=str(out), progress=False)
    with pytest.raises(dj.InputError):
        dj.set_similarity_join(stores["docs"], threshold=1.5, client=client, out=str(tmp_path / "new.parquet"),
                               progress=False)
    assert (out / "keep.txt").read_text() == "precious"
    assert not (tmp_path / "new.parquet").exists()
    # overwrite replaces only a daskjoin output: a directory holding other files is refused, untouched
    with pytest.raises(dj.InputError, match="not a daskjoin output"):
        dj.set_similarity_join(stores["docs"], threshold=0.9, client=client, out=str(out), overwrite=True,
                               progress=False)
    assert (out / "keep.txt").read_text() == "precious"
    (out / "keep.txt").unlink()
    (out / "part-00007.parquet").write_text("an old part")
    docs = _parse_text(stores["docs_text"])
    res = dj.set_similarity_join(stores["docs"], threshold=0.9, client=client, out=str(out), overwrite=True,
                                 progress=False)
    assert not (out / "part-00007.parquet").exists() or res.files > 7
    got, names = _read_parts(out)
    expected = oracle_join_fast(docs, threshold=0.9, measure="jaccard")
    _check_manifest(out, names, len(expected))
    assert len(expected) > 0
    assert_same_set_pairs(got, expected, selfjoin=True)
    assert res.pairs == len(expected)


def test_no_pairs_still_commits(client, stores, tmp_path):
    """A join with no result pairs writes a valid, empty result (manifest with 0 rows)."""
    out = tmp_path / "none.parquet"
    res = dj.set_similarity_join(stores["docs"], threshold=10_000, measure="overlap", client=client, out=str(out),
                                 progress=False)
    assert res.pairs == 0
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert manifest["rows"] == 0
    assert len(res.read().compute()) == 0
