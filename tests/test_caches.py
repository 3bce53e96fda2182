"""The one in-process cache: LRU order, caps per namespace, clearing, threads, and ``daskjoin.clear_cache``."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import daskjoin as dj
from daskjoin.caches import CACHE, CAPS, ProcessCache, clear_cache
from daskjoin.io.zarr_out import ZarrPointsWriter


def test_lru_order_and_cap_per_namespace():
    cache = ProcessCache({"a": 3, "b": 2})
    for k in range(3):
        cache.put("a", k, f"a{k}")
    assert cache.get("a", 0) == "a0"  # 0 is now the most recently used: 1 goes first
    cache.put("a", 3, "a3")
    assert cache.get("a", 1) is None and cache.get("a", 1, "gone") == "gone"
    assert [cache.get("a", k) for k in (0, 2, 3)] == ["a0", "a2", "a3"]
    cache.put("a", 2, "A2")  # replacing a key keeps the count and makes it the most recent
    assert cache.info() == {"a": 3, "b": 0}
    for k in range(10):  # another namespace filling up never evicts "a"
        cache.put("b", k, k)
    assert cache.info() == {"a": 3, "b": 2} and len(cache) == 5
    assert cache.get("b", 8) == 8 and cache.get("b", 9) == 9 and cache.get("b", 7) is None
    cache.put("a", 4, "a4")
    assert cache.get("a", 0) is None and cache.get("a", 2) == "A2"
    cache.put("c", 1, None)  # a namespace without a cap gets the default; None is a value like any
    assert cache.get("c", 1, "missing") is None and cache.cap("c") == 64
    cache.set_cap("a", 1)
    assert cache.info()["a"] == 1 and cache.get("a", 2) == "A2"  # the most recently used stays
    with pytest.raises(ValueError):
        cache.set_cap("a", 0)


def test_get_or_build_builds_once():
    cache = ProcessCache()
    calls = []

    def build():
        calls.append(1)
        return object()

    first = cache.get_or_build("x", "k", build)
    assert cache.get_or_build("x", "k", build) is first and len(calls) == 1
    assert cache.pop("x", "k") is first and cache.pop("x", "k", "no") == "no"
    assert cache.get_or_build("x", "k", build) is not first and len(calls) == 2
    assert cache.info()["x"] == 1


def test_clear_one_namespace_or_all():
    cache = ProcessCache({"a": 4, "b": 4})
    for ns in "ab":
        for k in range(3):
            cache.put(ns, k, k)
    cache.clear("a")
    assert cache.info() == {"a": 0, "b": 3} and cache.get("a", 0) is None and cache.get("b", 0) == 0
    cache.put("a", 9, 9)
    cache.clear("nothing-there")
    assert cache.info() == {"a": 1, "b": 3}
    cache.clear()
    assert len(cache) == 0 and cache.info() == {"a": 0, "b": 0}
    assert "0 entries" in repr(cache)


def test_threads_share_it_safely():
    cache = ProcessCache({"even": 50, "odd": 20})
    errors = []
    barrier = threading.Barrier(8)

    def work(seed):
        try:
            barrier.wait()
            rng = np.random.default_rng(seed)
            for _ in range(3000):
                k = int(rng.integers(200))
                ns = "even" if k % 2 == 0 else "odd"
                op = rng.integers(10)
                if op < 5:
                    got = cache.get(ns, k)
                    assert got is None or got == k
                elif op < 9:
                    cache.put(ns, k, k)
                elif op == 9 and seed == 0:
                    cache.clear(ns)
                else:
                    assert cache.get_or_build(ns, k, lambda: k) == k
        except Exception as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    info = cache.info()
    assert info["even"] <= 50 and info["odd"] <= 20
    assert len(cache) == info["even"] + info["odd"] == len(cache._entries)
    for (ns, k), value in list(cache._entries.items()):
        assert value == k and ns == ("even" if k % 2 == 0 else "odd")


def test_process_cache_caps_keep_todays_sizes():
    assert CAPS["plans"] == CAPS["estimates"] == 64 and CAPS["frames"] == 16 and CAPS["opened"] == 256
    assert CAPS["gpu-seen"] == 64 and CAPS["plan-options"] == 16
    assert dj.clear_cache is clear_cache and "clear_cache" in dj.__all__


def test_clear_cache_gives_a_new_plan(client, tmp_path):
    x = np.random.default_rng(12).random((400, 2)).astype(np.float32)
    path = str(tmp_path / "x.zarr")
    with ZarrPointsWriter(path, d=2, dtype=x.dtype, chunk_rows=100) as w:
        w.append(x)
    first = dj.plan_join(path, eps=0.05, client=client)
    assert dj.plan_join(path, eps=0.05, client=client) is first
    kept = CACHE.info()
    assert kept["plans"] >= 1 and kept["opened"] >= 1 and kept["stats"] >= 1 and kept["fingerprints"] >= 1
    dj.clear_cache()
    assert len(CACHE) == 0 and not any(CACHE.info().values())
    again = dj.plan_join(path, eps=0.05, client=client)
    assert again is not first
    assert again.partitions == first.partitions and again.estimate == first.estimate  # same plan, planned anew
    assert dj.plan_join(path, eps=0.05, client=client) is again
