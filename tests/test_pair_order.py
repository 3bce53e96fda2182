"""Part files depend only on the pair set: rows sorted by (i, j), fixed row groups, spilled runs merged.

A task's batches come in an order and sizes of the kernel's own (backend, method, batch bound);
whatever they are, the task writes the same rows in the same row groups, so a retried task on
another kind of worker, a different batch size or a spilled sort gives identical bytes.
"""
from __future__ import annotations

import dask
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import daskjoin as dj
from daskjoin.execution.pair_order import sorted_pieces
from joinhelpers import write_zarr
from oracle import oracle_self_count


@st.composite
def _batched_pairs(draw):
    """Distinct (i, j) pairs (small or beyond 2**32 ids), a value column or none, cut into batches."""
    wide = draw(st.booleans())
    hi = (1 << 40) if wide else 60
    keys = draw(st.lists(st.tuples(st.integers(0, hi), st.integers(0, hi)), unique=True, max_size=300))
    with_value = draw(st.booleans())
    cuts = sorted(draw(st.lists(st.integers(0, len(keys)), max_size=6)))
    return keys, with_value, cuts, draw(st.sampled_from([0, 1, 2]))


@settings(max_examples=150, deadline=None)
@given(_batched_pairs(), st.integers(1, 40), st.integers(1, 80))
def test_sorted_pieces_are_the_sorted_pairs_in_fixed_pieces(data, rows, sort_rows):
    keys, with_value, cuts, presorted = data
    if presorted:  # batches in sequence (a device-sorted kernel), the last one possibly breaking it
        keys = sorted(keys)
        if presorted == 2 and len(keys) > 2:
            keys = keys[1:] + keys[:1]
    i = np.array([k[0] for k in keys], np.int64)
    j = np.array([k[1] for k in keys], np.int64)
    v = (i * 3 + j).astype(np.float64) if with_value else None
    bounds = [0, *cuts, len(i)]
    # copies: the task's batches are its own, and the sort may take their arrays as its outputs
    batches = [(i[a:b].copy(), j[a:b].copy(), None if v is None else v[a:b].copy()) for a, b in zip(bounds[:-1], bounds[1:])]
    out = list(sorted_pieces(iter(batches), rows, sort_rows))
    assert [len(p[0]) for p in out[:-1]] == [rows] * (len(out) - 1)
    assert not out or 0 < len(out[-1][0]) <= rows
    order = np.lexsort((j, i))
    got_i = np.concatenate([p[0] for p in out]) if out else np.zeros(0, np.int64)
    got_j = np.concatenate([p[1] for p in out]) if out else np.zeros(0, np.int64)
    assert np.array_equal(got_i, i[order]) and np.array_equal(got_j, j[order])
    if with_value and out:
        assert np.array_equal(np.concatenate([p[2] for p in out]), v[order])


def test_sort_pairs_negative_and_wide_ids():
    """Ids spanning far more values than there are pairs take the fallback; negative ids sort too."""
    from daskjoin.kernels.pair_sort import sort_pairs

    i = np.array([5, -1, 5, 1 << 35], np.int64)
    j = np.array([2, 7, 1, 0], np.int64)
    oi, oj, ov = sort_pairs(i, j, np.arange(4.0))
    assert oi.tolist() == [-1, 5, 5, 1 << 35] and oj.tolist() == [7, 1, 2, 0] and ov.tolist() == [1, 2, 0, 3]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 10**6), st.integers(0, 10**12)), unique=True, max_size=400),
       st.booleans(), st.sampled_from([np.float32, np.float64]))
def test_sort_pairs_matches_lexsort(keys, with_value, dtype):
    """The counting sort (narrow i), its runs (many j per i, long and short) and the wide-span fallback."""
    from daskjoin.kernels.pair_sort import is_sorted, sort_pairs

    i = np.array([k[0] for k in keys], np.int64)
    j = np.array([k[1] for k in keys], np.int64)
    if len(i) > 3:  # long runs of one i as well
        i[: len(i) // 2] = i[0]
        keep = np.unique(np.stack([i, j], 1), axis=0, return_index=True)[1]
        i, j = i[np.sort(keep)], j[np.sort(keep)]
    v = np.arange(len(i), dtype=dtype) if with_value else None
    oi, oj, ov = sort_pairs(i, j, v)
    order = np.lexsort((j, i))
    assert np.array_equal(oi, i[order]) and np.array_equal(oj, j[order])
    assert is_sorted(oi, oj)
    if with_value:
        assert np.array_equal(ov, v[order]) and ov.dtype == dtype


def test_sort_pairs_runs_of_every_length_around_the_rank_sorts_limit():
    """Runs of 0 to 3 x RANK_MAX pairs (ranked up to RANK_MAX, numpy's sort beyond), j in every order, and
    identical pairs (which the kernels never give) kept, not lost to an equal rank."""
    from daskjoin.kernels.pair_sort import RANK_MAX, sort_pairs

    rng = np.random.default_rng(11)
    lengths = list(range(0, 3 * RANK_MAX + 2)) + [RANK_MAX - 1, RANK_MAX, RANK_MAX + 1] * 3
    i = np.repeat(np.arange(len(lengths)), lengths)
    j = np.concatenate([rng.permutation(10 * m)[:m] for m in lengths]) - 7
    dup = rng.choice(len(i), 40, replace=False)
    i, j = np.concatenate([i, i[dup]]), np.concatenate([j, j[dup]])
    shuffle = rng.permutation(len(i))
    i, j = i[shuffle], j[shuffle]
    value = rng.random(len(i)).astype(np.float32)
    value[np.isin(shuffle, np.arange(len(i) - 40, len(i)))] = 0.5  # duplicates: the same pair, the same value
    value[np.isin(shuffle, dup)] = 0.5
    oi, oj, ov = sort_pairs(i, j, value)
    order = np.lexsort((value, j, i))
    assert np.array_equal(oi, i[order]) and np.array_equal(oj, j[order]) and np.array_equal(ov, value[order])


@pytest.mark.parametrize("passes", ["one", "two"])
def test_sort_pairs_equal_j_in_a_run_falls_back_to_whole_words(passes, monkeypatch):
    """The rank sort ranks a run by ``j`` alone (distinct pairs never repeat a ``j`` in a run); pairs that do,
    with different values, collide in rank and are placed by whole words instead: none lost, none doubled,
    ordered by (i, j, value bits) as before; in the one-pass and the two-pass scatter."""
    from daskjoin.kernels import pair_sort

    if passes == "two":
        monkeypatch.setattr(pair_sort, "ONE_PASS_CURSOR_BYTES", 0)
        monkeypatch.setattr(pair_sort, "BUCKET_MIN_PAIRS", 1)
    rng = np.random.default_rng(5)
    n = 40_000
    i = rng.integers(0, 3000, n)  # runs of ~13, and over 2**BUCKET_BITS rows for the two passes
    j = rng.integers(0, 1 << 20, n)
    dup = rng.choice(n, 500, replace=False)
    i, j = np.concatenate([i, i[dup]]), np.concatenate([j, j[dup]])
    value = rng.random(len(i)).astype(np.float32)  # positive: their order is their bits' order
    keep = np.unique(np.stack([i, j, value.view(np.uint32)], 1), axis=0, return_index=True)[1]
    i, j, value = i[keep], j[keep], value[keep]
    shuffle = rng.permutation(len(i))
    i, j, value = i[shuffle], j[shuffle], value[shuffle]
    oi, oj, ov = pair_sort.sort_pairs(i, j, value)
    order = np.lexsort((value, j, i))
    assert np.array_equal(oi, i[order]) and np.array_equal(oj, j[order]) and np.array_equal(ov, value[order])


@pytest.mark.parametrize("value_dtype", [None, np.float32, np.int32, np.uint32, np.dtype([("a", "<i2"), ("b", "<u2")])])
@pytest.mark.parametrize("j_span", [1, 1000, (1 << 31) - 1, 1 << 31])
def test_sort_pairs_packed_words_keep_values_bit_for_bit(value_dtype, j_span):
    """Pairs moved as one (j, value) word where j spans < 2^31 (else the two-array path): every value's
    bits come back (-0.0, NaN payloads, subnormals, negative ints), negative j, runs long and short."""
    from daskjoin.kernels.pair_sort import sort_pairs

    rng = np.random.default_rng(j_span)
    n = 3000
    i = rng.integers(-3, 200, n)  # runs of ~15: the rank sort's
    i[:200] = 7  # and one run longer than the rank sort takes
    j = rng.integers(0, j_span + 1, n) - 5
    j[:2] = [-5, j_span - 5]  # the span's ends
    keep = np.unique(np.stack([i, j], 1), axis=0, return_index=True)[1]
    i, j = i[np.sort(keep)], j[np.sort(keep)]
    value = None
    if value_dtype is not None:
        bits = rng.integers(0, 1 << 32, len(i), dtype=np.uint64).astype(np.uint32)
        bits[:4] = [0x80000000, 0x7FC00001, 0x00000001, 0xFFFFFFFF]  # -0.0, a NaN payload, a subnormal, -1 / NaN
        value = bits.view(value_dtype)
    oi, oj, ov = sort_pairs(i, j, value)
    order = np.lexsort((j, i))
    assert np.array_equal(oi, i[order]) and np.array_equal(oj, j[order])
    if value_dtype is None:
        assert ov is None
    else:
        assert ov.dtype == np.dtype(value_dtype) and np.array_equal(ov.view(np.uint32), value.view(np.uint32)[order])


def test_spilled_runs_are_removed(tmp_path):
    rng = np.random.default_rng(0)
    keys = rng.choice(10**6, 5000, replace=False)
    i, j = keys // 1000, keys % 1000
    batches = [(i[k:k + 700], j[k:k + 700], None) for k in range(0, 5000, 700)]
    out = list(sorted_pieces(iter(batches), 512, 1000, spill_dir=str(tmp_path)))
    assert sum(len(p[0]) for p in out) == 5000
    assert list(tmp_path.iterdir()) == []


def _parts(path):
    return {p.name: p.read_bytes() for p in sorted(path.glob("part-*.parquet"))}


@pytest.fixture(scope="module")
def threaded_client():
    from distributed import Client

    with Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as c:
        yield c


@pytest.mark.parametrize("method", ["grid", "brute"])
def test_same_bytes_whatever_the_batching_and_spilling(tmp_path, threaded_client, method):
    """Batch bounds and in-memory sort sizes change how a task works, never what it writes."""
    x = np.random.default_rng(3).random((3000, 3))
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=500)
    eps = 0.08
    outputs = []
    for k, (group_bytes, sort_bytes) in enumerate([("128MiB", "1GiB"), (20 * 997, 20 * 4000), (20 * 64, 20 * 300)]):
        with dask.config.set({"daskjoin.row-group-bytes": group_bytes, "daskjoin.sort-bytes": sort_bytes}):
            out = tmp_path / f"out{k}.parquet"
            res = dj.similarity_join(path, eps=eps, method=method, backend="cpu", memory_budget="64MB",
                                     partitioning="chunk_pairs", client=threaded_client, out=out)
        assert res.pairs == oracle_self_count(x, eps)
        outputs.append(out)
    # pieces (files) differ in size between settings; rows and their order do not
    def rows(out):
        return pd.concat([pq.read_table(out / name).to_pandas() for name in _parts(out)], ignore_index=True)

    first = rows(outputs[0])
    assert len(first) == res.pairs
    for other in outputs[1:]:
        assert rows(other).equals(first)
    # with the same row-group size, the same bytes
    with dask.config.set({"daskjoin.sort-bytes": 20 * 300}):
        again = tmp_path / "again.parquet"
        dj.similarity_join(path, eps=eps, method=method, backend="cpu", memory_budget="64MB",
                           partitioning="chunk_pairs", client=threaded_client, out=again)
    assert _parts(again) == _parts(outputs[0])


def test_rows_sorted_in_every_part_and_frame(tmp_path, threaded_client):
    x = np.random.default_rng(4).random((2000, 2))
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=300)
    frame = dj.similarity_join(path, eps=0.05, memory_budget="64MB", partitioning="chunk_pairs",
                               client=threaded_client)
    for part in frame.to_delayed():
        df = part.compute()
        assert df.equals(df.sort_values(["i", "j"]).reset_index(drop=True))
    sets = [[1, 2, 3], [1, 2, 3, 4], [2, 3, 4], [9], [1, 2, 3]]
    frame = dj.set_similarity_join(sets, threshold=0.5, client=threaded_client, partitions=2)
    assert frame.npartitions > 1
    for part in frame.to_delayed():
        df = part.compute()
        assert df.equals(df.sort_values(["i", "j"]).reset_index(drop=True))


def test_threaded_scheduler_without_client_is_exact(tmp_path):
    """The no-client path: a lazy frame computed by the threaded scheduler runs Numba kernels safely."""
    x = np.random.default_rng(5).random((4000, 2))
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=400)
    from distributed import Client

    with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as c:
        frame = dj.similarity_join(path, eps=0.03, memory_budget="64MB", partitioning="chunk_pairs", client=c)
    got = frame.compute(scheduler="threads", num_workers=4)
    assert len(got) == oracle_self_count(x, 0.03)
    assert not got.duplicated(["i", "j"]).any()


def test_one_and_three_workers_write_the_same_bytes(tmp_path):
    """The same joins (ε and set) on clusters of 1 and 3 worker processes: identical part files;
    with another memory budget (another plan), the same sorted pair set."""
    from distributed import Client, LocalCluster

    rng = np.random.default_rng(9)
    x = rng.random((4000, 2))
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=500)
    sets = [list(rng.choice(40, size=int(rng.integers(1, 10)), replace=False)) for _ in range(2000)]
    files, frames = {}, {}
    for workers in (1, 3):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                          memory_limit=0) as cluster, Client(cluster) as c:
            for name, run in {
                "eps": lambda out: dj.similarity_join(path, eps=0.03, memory_budget="1MB", partitioning="chunk_pairs",
                                                      client=c, out=out),
                "sets": lambda out: dj.set_similarity_join(sets, threshold=0.5, partitions=3, client=c, out=out),
            }.items():
                out = tmp_path / f"{name}-{workers}.parquet"
                run(out)
                files[name, workers] = _parts(out)
            frames[workers] = dj.similarity_join(path, eps=0.03, memory_budget="300KB", partitioning="chunk_pairs",
                                                 client=c).compute()
    for name in ("eps", "sets"):
        assert len(files[name, 1]) > 1 and files[name, 1] == files[name, 3]
    one_plan = pq.read_table(tmp_path / "eps-1.parquet").to_pandas().sort_values(["i", "j"]).reset_index(drop=True)
    for workers in (1, 3):
        other = frames[workers].sort_values(["i", "j"]).reset_index(drop=True)
        assert other.equals(one_plan)


def test_in_memory_sort_bounded_by_the_plan_budget():
    """A task sorts in memory no more than its plan's budget allows (never less than one row group)."""
    import types

    from daskjoin.execution import task

    with dask.config.set({"daskjoin.sort-bytes": "1GiB", "daskjoin.row-group-bytes": 20 * 1000}):
        assert task.sort_rows(None) == (1 << 30) // 20
        assert task.sort_rows(types.SimpleNamespace(memory_budget=60 * 50_000)) == 50_000
        assert task.sort_rows(types.SimpleNamespace(memory_budget=60)) == 1000
        assert task.sort_rows(types.SimpleNamespace(memory_budget=0)) == (1 << 30) // 20
    x = np.random.default_rng(0).random((50, 2))
    job = dj.plan_join(x, eps=0.3, memory_budget="64MB", backend="cpu")
    from daskjoin.kinds.epsilon import JoinJob

    assert JoinJob.from_plan(job).memory_budget == 64 * 10**6
    plan = dj.plan_set_join([[1, 2], [1, 2, 3]], threshold=0.5, memory_budget="32MB", backend="cpu")
    from daskjoin.io.set_inputs import SetSource
    from daskjoin.kinds.sets import SetJob

    assert SetJob.from_plan(plan, SetSource(), None).memory_budget == 32 * 10**6


def test_a_sorted_run_is_streamed_not_held():
    """SortedRun batches (a driver that sorted on the device) become pieces as they come: the first piece
    is out before the driver made its second batch."""
    from daskjoin.kernels.registry import SortedRun

    made = []

    def batches():
        for k in range(4):
            made.append(k)
            i = np.arange(k * 10, k * 10 + 10, dtype=np.int64)
            yield SortedRun((i, i + 100, np.zeros(10, np.float32)))

    pieces = sorted_pieces(batches(), rows=10, sort_rows=1000)
    first = next(pieces)
    assert made == [0] and list(first[0]) == list(range(10))
    rest = list(pieces)
    assert len(rest) == 3 and made == [0, 1, 2, 3]


@pytest.mark.parametrize("broken", ["unsorted", "overlap", "plain_after"])
def test_a_broken_sorted_run_fails_the_task(broken):
    from daskjoin.kernels.registry import SortedRun

    a = SortedRun((np.array([1, 2]), np.array([5, 6]), None))
    b = {"unsorted": SortedRun((np.array([4, 3]), np.array([5, 6]), None)),
         "overlap": SortedRun((np.array([2, 3]), np.array([6, 7]), None)),
         "plain_after": (np.array([3, 4]), np.array([5, 6]), None)}[broken]
    with pytest.raises(RuntimeError, match="out of order"):
        list(sorted_pieces(iter([a, b]), rows=10, sort_rows=100))


@pytest.mark.parametrize("value_dtype", [None, np.float32, np.float64, np.dtype([("a", "<i2"), ("b", "<u2")]),
                                         np.dtype([("d", "<f4"), ("r", "<i4")])])
@pytest.mark.parametrize("j_span", [1, 5000, 1 << 40])
@pytest.mark.parametrize("chunk_min", [1 << 16, 1000])
def test_sort_pairs_wide_i_radix_path(value_dtype, j_span, chunk_min, monkeypatch):
    """i spread over far more values than there are pairs (a slab's rows through its sorted copy's ids):
    the packed-key radix sort, serial and in parallel chunks (each chunk's cursors within a bucket), every
    value's bits kept, against lexsort; and keys too wide to pack."""
    from daskjoin.kernels import pair_sort
    from daskjoin.kernels.pair_sort import sort_pairs

    monkeypatch.setattr(pair_sort, "RADIX_CHUNK_MIN", chunk_min)

    rng = np.random.default_rng(3)
    n = 20_000
    i = rng.integers(0, 1 << 22, n) - 7
    j = rng.integers(0, j_span + 1, n) - 3
    keep = np.unique(np.stack([i, j], 1), axis=0, return_index=True)[1]
    i, j = i[np.sort(keep)], j[np.sort(keep)]
    value = None
    if value_dtype is not None:
        raw = rng.integers(0, 1 << 62, len(i), dtype=np.int64)
        value = raw.view(np.uint8)[: len(i) * np.dtype(value_dtype).itemsize].view(value_dtype) \
            if np.dtype(value_dtype).itemsize <= 8 else None
    oi, oj, ov = sort_pairs(i, j, value)
    order = np.lexsort((j, i))
    assert np.array_equal(oi, i[order]) and np.array_equal(oj, j[order])
    if value is not None:
        assert ov.dtype == value.dtype and ov.tobytes() == value[order].tobytes()
    wide_i = i.copy()
    wide_i[0] = 1 << 40  # 41 bits of i and 41 of j do not pack: the numpy fallback, the same order
    if j_span == 1 << 40:
        oi, oj, _ = sort_pairs(wide_i, j, None)
        order = np.lexsort((j, wide_i))
        assert np.array_equal(oi, wide_i[order]) and np.array_equal(oj, j[order])


@settings(max_examples=100, deadline=None)
@given(_batched_pairs(), st.booleans())
def test_sorted_whole_trusts_a_drivers_sorted_runs_and_sorts_anything_else(data, break_promise):
    """A frame's partition held whole: batches that are ``SortedRun``s (checked on the device) are not
    checked again pair by pair (Numba's first call costs ~1 s in a notebook's process), only where one
    meets the next; a run that broke its promise, or plain batches, are sorted. The rows are the sorted
    pairs either way."""
    from unittest import mock

    from daskjoin.execution import pair_order
    from daskjoin.kernels.registry import SortedRun

    keys, with_value, cuts, _ = data
    keys = sorted(keys)
    if break_promise and len(keys) > 2:
        keys[0], keys[-1] = keys[-1], keys[0]
    i = np.array([k[0] for k in keys], np.int64)
    j = np.array([k[1] for k in keys], np.int64)
    value = np.arange(len(keys), dtype=np.float32) if with_value else None
    edges = [0, *cuts, len(keys)]
    # copies: a task's batches are its own, and the sort may take their arrays as its outputs
    plain = [(i[a:b].copy(), j[a:b].copy(), None if value is None else value[a:b].copy()) for a, b in zip(edges, edges[1:])]
    batches = [SortedRun(tuple(x if x is None else x.copy() for x in b)) for b in plain]
    with mock.patch.object(pair_order, "is_sorted", side_effect=AssertionError("checked pair by pair")):
        got = pair_order.sorted_whole(batches)
    order = np.lexsort((j, i))
    if not keys:
        assert got is None
        return
    assert np.array_equal(got[0], i[order]) and np.array_equal(got[1], j[order])
    if with_value:
        assert np.array_equal(got[2], value[order])
    got_plain = pair_order.sorted_whole(plain)
    assert np.array_equal(got_plain[0], i[order]) and np.array_equal(got_plain[1], j[order])


WIDE_RECORD = np.dtype([("dist", "<f4"), ("rank", "<i4")])


@pytest.mark.parametrize("bucket_bits", [0, 1, 3, 10])
@pytest.mark.parametrize("wide", [None, np.float64, WIDE_RECORD])
@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.tuples(st.integers(-5, 3000), st.integers(-10, 10**6)), unique=True, max_size=600),
       with_value=st.booleans(), long_run=st.booleans())
def test_sort_pairs_two_pass_scatter_matches_lexsort(bucket_bits, wide, keys, with_value, long_run):
    """The packed path's two-pass scatter (buckets of consecutive i, then each bucket's rows), taken at every
    size here: buckets of one row to buckets of all of them, runs long and short, values bit for bit; 8-byte
    values (``wide``: the set join's float64, the kNN-join's record) wait at their slot."""
    from daskjoin.kernels import pair_sort

    i = np.array([k[0] for k in keys], np.int64)
    j = np.array([k[1] for k in keys], np.int64)
    if long_run and len(i) > 3:  # one run longer than the rank sort takes
        i[: len(i) // 2] = i[0]
        keep = np.sort(np.unique(np.stack([i, j], 1), axis=0, return_index=True)[1])
        i, j = i[keep], j[keep]
    bits = np.random.default_rng(len(i)).integers(0, np.iinfo(np.uint64).max, len(i), dtype=np.uint64,
                                                   endpoint=True)  # the sign bit too: negative values and NaNs
    bits[::7] = np.uint64(0xFFF8_0000_0000_0001)  # a negative float64 NaN with a payload
    bits[3::7] = np.uint64(0x7FF0_0000_0000_0BAD)  # a signalling one
    if not with_value:
        value = None
    elif wide is None:
        value = bits.astype(np.uint32).view(np.float32)
    else:
        value = bits.view(wide)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pair_sort, "BUCKET_MIN_PAIRS", 2)
        mp.setattr(pair_sort, "BUCKET_BITS", bucket_bits)
        mp.setattr(pair_sort, "ONE_PASS_CURSOR_BYTES", 0)
        oi, oj, ov = pair_sort.sort_pairs(i, j, value)
    order = np.lexsort((j, i))
    assert np.array_equal(oi, i[order]) and np.array_equal(oj, j[order])
    if with_value:
        assert ov.dtype == value.dtype
        assert np.array_equal(ov.view(np.uint8), value[order].view(np.uint8))  # bit for bit, NaN payloads too
    else:
        assert ov is None


def test_sort_pairs_two_pass_scatter_in_parallel_chunks():
    """Enough pairs for the first pass's chunks to run in parallel (each its own cursors), over more rows than one
    bucket holds, with a run far longer than the rank sort takes."""
    from daskjoin.kernels import pair_sort

    rng = np.random.default_rng(5)
    n = 4 * pair_sort.RADIX_CHUNK_MIN + 777
    i = rng.integers(-50, 30_000, n)
    i[:5000] = 123
    j = rng.integers(0, 1 << 30, n)
    keep = np.unique(np.stack([i, j], 1), axis=0, return_index=True)[1]
    keep = rng.permutation(keep)
    i, j = i[keep], j[keep]
    value = rng.random(len(i)).astype(np.float32)
    assert len(i) >= pair_sort.BUCKET_MIN_PAIRS
    order = np.lexsort((j, i))
    for cursor_bytes in (0, pair_sort.ONE_PASS_CURSOR_BYTES):  # two passes, and the one pass these rows take
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(pair_sort, "ONE_PASS_CURSOR_BYTES", cursor_bytes)
            oi, oj, ov = pair_sort.sort_pairs(i, j, value)
        assert np.array_equal(oi, i[order]) and np.array_equal(oj, j[order]) and np.array_equal(ov, value[order])


def test_few_rows_sort_in_one_pass_many_in_two():
    """One pass while its cursors stay in cache (uniform 2-d grid pairs of 200k rows: 0.047 s against 0.061 s),
    two beyond (2M rows: 0.54 s against 0.59 s)."""
    from daskjoin.kernels import pair_sort

    assert not pair_sort._two_passes(3_200_000, 200_000, 2)
    assert pair_sort._two_passes(32_000_000, 2_000_000, 2)
    assert pair_sort._two_passes(3_200_000, 200_000, 16)  # sixteen chunks' cursors: 25 MB
    assert not pair_sort._two_passes(1000, 200_000, 2)  # too few pairs to bother


@pytest.mark.parametrize("passes", ["two", "one"])
@pytest.mark.parametrize("with_value", [True, False, "float64"])
def test_sort_pairs_consume_takes_the_inputs_as_outputs_only_where_it_may(with_value, passes, monkeypatch):
    """``consume=True`` (a task's own pairs): the two-pass scatter writes its outputs into the inputs, so only its
    scratch is fresh, and the one pass its rows and 4-byte values (its words become a fresh j column); read-only
    or overlapping inputs are left alone; without ``consume`` nothing is written."""
    from daskjoin.kernels import pair_sort

    # the two passes, or one pass, whatever the rows (8-byte values take their two-pass path either way)
    monkeypatch.setattr(pair_sort, "ONE_PASS_CURSOR_BYTES", 0 if passes == "two" else 1 << 62)

    rng = np.random.default_rng(9)
    n = 3 * pair_sort.RADIX_CHUNK_MIN
    i = rng.integers(0, 50_000, n)
    j = rng.integers(0, 1 << 28, n)
    keep = rng.permutation(np.unique(np.stack([i, j], 1), axis=0, return_index=True)[1])
    i, j = i[keep], j[keep]
    value = rng.random(len(i)).astype(np.float64 if with_value == "float64" else np.float32) if with_value else None
    order = np.lexsort((j, i))
    want = (i[order], j[order], None if value is None else value[order])

    def check(got):
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        assert (got[2] is None) if value is None else np.array_equal(got[2], want[2])

    copies = [x.copy() for x in (i, j) + ((value,) if with_value else ())]
    check(pair_sort.sort_pairs(*copies[:2], copies[2] if with_value else None))  # not consumed: untouched
    assert np.array_equal(copies[0], i) and np.array_equal(copies[1], j)
    frozen = [x.copy() for x in copies]
    for x in frozen:
        x.flags.writeable = False
    check(pair_sort.sort_pairs(*frozen[:2], frozen[2] if with_value else None, consume=True))
    assert np.array_equal(frozen[0], i) and np.array_equal(frozen[1], j)
    got = pair_sort.sort_pairs(*copies[:2], copies[2] if with_value else None, consume=True)
    check(got)
    one_pass_words = passes == "one" and with_value != "float64"
    assert got[0] is copies[0] and (got[1] is copies[1]) != one_pass_words  # the inputs became the outputs
    if with_value:
        assert got[2] is copies[2]
    both = np.stack([i, j])  # rows of one array: apart, so they may be taken; a view of itself may not
    check(pair_sort.sort_pairs(both[0], both[1], None if value is None else value.copy(), consume=True))
    assert not pair_sort._reusable(both[0], both[0])
