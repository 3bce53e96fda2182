"""The filtering work a set self-join's plan is cut by (planning/set_work.py, planning/sets.partition_count): the
sampled postings bound against the sum it samples, the cut each size of work gets, and the plan that shows it."""
from __future__ import annotations

import numpy as np
import pytest

import daskjoin as dj
from daskjoin.io.sets_in import prepare_sets, write_sets
from daskjoin.kernels.sets.measures import probe_prefix
from daskjoin.planning.set_threshold import parse_threshold
from daskjoin.planning.set_work import postings_bound
from daskjoin.planning.sets import LARGE_WORK, SMALL_WORK, matchable_from, partition_count


def _collection(n=300, seed=4):
    rng = np.random.default_rng(seed)
    return prepare_sets([list(rng.choice(80, rng.integers(1, 15), replace=False)) for _ in range(n)])


@pytest.mark.parametrize("t", [0.3, 0.6, 0.9])
def test_a_sample_of_every_set_gives_the_sum_it_bounds(t):
    coll = _collection()
    thr = parse_threshold("jaccard", t)
    code, p, q = thr.args()
    sizes = coll.sizes
    start = matchable_from(sizes, thr)
    want = 0
    for s in range(start, len(sizes)):
        toks = coll.tokens[coll.offsets[s]:coll.offsets[s + 1]]
        want += int(coll.freq[toks[:probe_prefix(np.int64(sizes[s]), code, p, q)]].sum())

    def read(lo, hi):
        part = coll.slice(lo, hi)
        return part.tokens, part.offsets

    got, sampled = postings_bound(sizes, coll.freq, read, thr, start)  # 16 x 64 cover these 300 sets: read whole
    assert sampled == len(sizes) - start and got == pytest.approx(want)
    some, few = postings_bound(sizes, coll.freq, read, thr, start, ranges=4, per=10)
    assert few == 40 and want / 2 < some < 2 * want  # a sample scaled to the matchable sets


def test_nothing_to_match_is_no_work_and_no_frequencies_no_estimate():
    coll = _collection(20)
    thr = parse_threshold("jaccard", 0.5)
    assert postings_bound(coll.sizes, coll.freq, lambda lo, hi: (None, None), thr, len(coll.sizes)) == (0.0, 0)
    assert postings_bound(coll.sizes, np.zeros(0, np.int64), lambda lo, hi: (None, None), thr, 0) == (None, 0)


def test_a_damaged_freq_leaves_the_plan_unestimated_and_the_join_whole(tmp_path):
    """Tasks never read ``freq``: its damage must not stop a join that never needed it."""
    import os

    coll = _collection()
    want = dj.set_similarity_join(write_sets(coll, tmp_path / "whole.zarr"), threshold=0.5, backend="cpu",
                                  output="count")
    path = write_sets(coll, tmp_path / "s.zarr")
    os.remove(os.path.join(path, "freq", "c", "0"))  # before any plan: an estimate is kept per store state
    plan = dj.plan_set_join(path, threshold=0.5, backend="cpu")
    assert plan.work is None and "filtering work" not in plan.explain()
    assert dj.set_similarity_join(path, threshold=0.5, backend="cpu", output="count") == want


def test_the_cut_follows_the_work():
    mb = 1 << 20
    assert partition_count(1000, 100, 1 << 30, 8, None, SMALL_WORK / 2) == 1
    assert partition_count(1000, 100, 1 << 30, 8, None, SMALL_WORK * 2) == 4  # ceil(sqrt(2 x 8))
    assert partition_count(1000, 100, 1 << 30, 8, None, None) == 4  # not estimated: as before
    assert partition_count(1000, 100, 1 << 30, 8, None, LARGE_WORK) == 12  # ceil(sqrt(2 x 9 x 8)): ~9 blocks a thread
    assert partition_count(1000, 100, 1 << 30, 2, None, LARGE_WORK) == 6
    assert partition_count(1000, 100, 1 << 30, 1, None, LARGE_WORK) == 1  # one task thread: no cut for threads
    assert partition_count(1000, 100, 1 << 30, 8, 3, LARGE_WORK) == 3  # asked for
    assert partition_count(10**8, 100, 64 * mb, 8, None, SMALL_WORK / 2) > 1  # the memory budget still cuts


def test_a_cpu_self_join_plan_shows_its_work_once_per_store_state(tmp_path, monkeypatch):
    from daskjoin.io import sets_store

    path = write_sets(_collection(), tmp_path / "s.zarr")
    reads = []
    real = sets_store.read_freq
    monkeypatch.setattr(sets_store, "read_freq", lambda *a, **k: reads.append(1) or real(*a, **k))
    plan = dj.plan_set_join(path, threshold=0.5, backend="cpu")
    assert plan.work is not None and plan.work > 0 and plan.work_sample > 0
    assert "filtering work: at most" in plan.explain()
    again = dj.plan_set_join(path, threshold=0.5, backend="cpu")
    assert again.work == plan.work and len(reads) == 1  # kept while the store is unchanged
    assert dj.plan_set_join(path, threshold=0.5, backend="cpu", partitions=2).work is None  # a cut asked for
    rs = dj.plan_set_join(path, path, threshold=0.5, backend="cpu")
    assert rs.work is None and "filtering work" not in rs.explain()  # R x S: not estimated
    mem = dj.plan_set_join(_collection(), threshold=0.5, backend="cpu")
    assert mem.work == pytest.approx(plan.work)  # the same sets in memory
