"""What a slab task reads (a count needs the sorted copy's points only, never its id array), and how its pairs
of sorted-copy rows become original ids on the host."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle import oracle_cross_count, oracle_self_count


@pytest.mark.parametrize("mode", ["self", "cross"])
def test_a_slab_count_reads_no_ids(mode, monkeypatch):
    import daskjoin as dj
    from daskjoin.kinds.epsilon import JoinJob
    from daskjoin.planning.sorted_copy import SortedCopy

    rng = np.random.default_rng(3)
    a = rng.random((3000, 3))
    a[:40] = a[0]  # duplicates across slab edges are counted once
    b = None if mode == "self" else rng.random((1500, 3))
    eps = 0.06
    plan = dj.plan_join(a, b, eps=eps, partitioning="slabs", backend="cpu", memory_budget="48kB", output="count")
    assert plan.partitioning == "slabs" and plan.ntasks > 2
    job = JoinJob.from_plan(plan, with_distance=False)

    def no_ids(*args, **kwargs):
        raise AssertionError("a count read the sorted copy's ids")

    monkeypatch.setattr(SortedCopy, "read", no_ids)
    total = sum(job.count(part) for part in plan.partitions)
    assert total == (oracle_self_count(a, eps) if b is None else oracle_cross_count(a, b, eps))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), m=st.integers(0, 500), ordered=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_to_original_is_numpys_lookup_and_order(n, m, ordered, seed):
    from daskjoin.kernels.original_ids import to_original

    rng = np.random.default_rng(seed)
    ids_i = rng.permutation(10 * n)[:n].astype(np.int64)
    ids_j = rng.permutation(10 * n)[:n].astype(np.int64)
    li, lj = rng.integers(0, n, m), rng.integers(0, n, m)
    i, j = to_original(li, lj, ids_i, ids_j, ordered)
    a, b = ids_i[li], ids_j[lj]
    if ordered:
        a, b = np.minimum(a, b), np.maximum(a, b)
    assert i.dtype == j.dtype == np.int64
    assert np.array_equal(i, a) and np.array_equal(j, b)


@pytest.mark.parametrize("rows, side_ids, backend, expected", [
    (2**32, "arrays", "gpu", True),       # ids up to 2^32 - 1 pack into the device's 64-bit key
    (2**32 + 1, "arrays", "gpu", False),  # one more row: the host's way
    (1000, "offsets", "gpu", False),      # rows read by offset (chunk pairs) keep the drivers' own order
    (1000, "mixed", "gpu", False),
    (1000, "arrays", "cpu", False),
])
def test_which_partitions_put_their_pairs_in_original_ids_on_the_device(rows, side_ids, backend, expected):
    from types import SimpleNamespace

    from daskjoin.kernels import get_kernel
    from daskjoin.kinds.epsilon import _Sides

    sides = object.__new__(_Sides)  # no rows read: only the decision
    sides.kernel = get_kernel("grid", backend)
    reader = SimpleNamespace(n=rows)
    sides.job = SimpleNamespace(reader_a=reader, reader_b=None)
    sides.part = SimpleNamespace(b=(0, 5))
    ids = np.arange(5, dtype=np.int64)
    sides.ia, sides.ib = {"arrays": (ids, ids), "offsets": (0, 5), "mixed": (ids, 5)}[side_ids]
    assert sides._ids_on_device() is expected
