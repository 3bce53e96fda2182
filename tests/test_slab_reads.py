"""What a slab task reads: a count needs the sorted copy's points only, never its id array."""
from __future__ import annotations

import numpy as np
import pytest

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
