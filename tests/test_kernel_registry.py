"""One kernel registry, one driver protocol: every registered driver against the oracles.

For every (kind, method, backend) of :mod:`daskjoin.kernels.registry` (GPU drivers marked
``gpu``, skipped where CuPy sees no device), on random and adversarial small inputs:
``count() == len(pairs()[0])``, ``pairs()`` equal to the float64 (or exact-integer) oracle,
the concatenated ``batches(max_pairs)`` the same pairs once each, and every batch of at most
``max_pairs`` pairs.  Also: lookups import lazily, unknown keys fail clearly.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from daskjoin.io.sets_in import align, prepare_sets
from daskjoin.kernels import BACKENDS, METHODS, registry
from daskjoin.kernels.gpu_common import gpu_available
from daskjoin.kernels.sets.local import Flat
from daskjoin.planning.set_threshold import parse_threshold

from oracle import assert_same_pairs, oracle_cross_pairs, oracle_self_pairs
from set_oracle import oracle_join

GPU = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy")]


def _keys(kind):
    return [pytest.param(m, b, id=f"{m}-{b}", marks=GPU if b == "gpu" else ()) for _, m, b in registry.registered(kind)]


MAX_PAIRS = [1, 7, 10**9]


# ------------------------------------------------------------------ the registry itself


def test_registry_lists_every_driver():
    assert set(registry.registered("epsilon")) == {("epsilon", m, b) for m in ("grid", "brute", "szl", "nlj", "directory") for b in ("cpu", "gpu")}
    assert set(registry.registered("sets")) == {("sets", m, b) for m in ("ppjoin", "allpairs") for b in ("cpu", "gpu")}
    assert registry.methods("sets") == ("ppjoin", "allpairs")
    assert METHODS == registry.methods("epsilon") == ("grid", "brute", "szl", "nlj", "directory")
    assert BACKENDS == registry.backends("epsilon") == ("cpu", "gpu")


@pytest.mark.parametrize("key", [("epsilon", "kdtree", "cpu"), ("epsilon", "grid", "tpu"), ("sets", "grid", "cpu")])
def test_unknown_key_names_the_allowed_pairs(key):
    with pytest.raises(ValueError) as info:
        registry.driver_class(*key)
    message = str(info.value)
    assert repr(key[1]) in message and repr(key[2]) in message
    for _, method, backend in registry.registered(key[0]):
        assert f"({method!r}, {backend!r})" in message
    with pytest.raises(ValueError, match="registered kinds"):
        registry.driver_class("nosuchkind", "grid", "cpu")


def test_bad_path_is_refused():
    with pytest.raises(ValueError, match="module:ClassName"):
        registry.register("epsilon", "x", "cpu", "daskjoin.kernels.grid.GridJoin")
    assert ("epsilon", "x", "cpu") not in registry.registered()


def test_lookups_import_lazily():
    """Importing the registry imports no driver of a GPU and no CuPy; a lookup imports only its module."""
    code = r"""
import sys
import daskjoin.kernels.registry as registry
gpu = ["daskjoin.kernels.grid_gpu", "daskjoin.kernels.brute_gpu", "daskjoin.kernels.knn_gpu", "daskjoin.kernels.szl_gpu", "daskjoin.kernels.nlj_gpu", "daskjoin.kernels.directory_gpu", "cupy"]
assert len(registry.registered()) == 20
assert not [m for m in gpu if m in sys.modules], [m for m in gpu if m in sys.modules]
registry.driver_class("epsilon", "grid", "cpu")
assert "daskjoin.kernels.grid" in sys.modules
assert not [m for m in gpu if m in sys.modules], [m for m in gpu if m in sys.modules]
registry.driver_class("epsilon", "brute", "gpu")  # importable without CuPy: CuPy is imported when used
assert "daskjoin.kernels.brute_gpu" in sys.modules and "cupy" not in sys.modules
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_third_party_registration(monkeypatch):
    monkeypatch.setattr(registry, "_ENTRIES", dict(registry._ENTRIES))
    monkeypatch.setattr(registry, "_CLASSES", dict(registry._CLASSES))
    registry.register("epsilon", "again", "cpu", "daskjoin.kernels.brute:BruteJoin")
    assert "again" in registry.methods("epsilon")
    x = np.random.default_rng(0).random((40, 2))
    d = registry.make("epsilon", "again", "cpu", x, None, 0.2)
    assert d.count() == len(oracle_self_pairs(x, 0.2)[0])


@pytest.mark.parametrize("max_pairs", [1, 3, 5, 100])
def test_bounded_ranges_and_split_batch(max_pairs):
    counts = np.array([0, 2, 0, 9, 1, 1, 1, 0, 4, 4, 0], np.int64)
    ranges = list(registry.bounded_ranges(counts, max_pairs))
    assert ranges[0][0] == 0 and ranges[-1][1] == len(counts)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    for lo, hi in ranges:
        assert hi > lo
        assert counts[lo:hi].sum() <= max_pairs or hi - lo == 1
    batch = (np.arange(11), np.arange(11) + 1, None)
    pieces = list(registry.split_batch(batch, max_pairs))
    assert all(len(p[0]) <= max_pairs and p[2] is None for p in pieces)
    assert np.array_equal(np.concatenate([p[1] for p in pieces]), batch[1])


# ------------------------------------------------------------------ the ε-join drivers


def _grid(shape, step=1.0, offset=0.0):
    axes = np.meshgrid(*[np.arange(n) * step + offset for n in shape], indexing="ij")
    return np.stack([a.ravel() for a in axes], axis=1).astype(np.float64)


def _epsilon_cases():
    rng = np.random.default_rng(12)
    dup = np.concatenate([np.repeat(rng.random((1, 2)), 30, axis=0), rng.random((40, 2))])
    clustered = np.concatenate([rng.normal(c, 0.02, size=(60, 3)) for c in rng.random((4, 3))])
    return [
        ("uniform-2d", rng.random((200, 2)), rng.random((90, 2)), 0.1),
        ("int-grid-2d-eps1", _grid((7, 7)), _grid((4, 5), offset=0.5), 1.0),
        ("int-grid-3d-eps1", _grid((4, 4, 4)), _grid((3, 3, 3), offset=1.0), 1.0),
        ("duplicates", dup, dup[:35].copy(), 0.05),
        ("clustered-3d", clustered, clustered[::3].copy(), 0.05),
        ("one-point", np.array([[0.5, 0.5]]), np.array([[0.5, 1.5]]), 1.0),
        ("empty", np.zeros((0, 2)), rng.random((5, 2)), 0.3),
        ("d1-integers", rng.integers(0, 20, size=(60, 1)).astype(np.float64),
         rng.integers(0, 20, size=(25, 1)).astype(np.float64), 1.0),
        ("d8", rng.random((120, 8)), rng.random((40, 8)), 0.6),
    ]


EPSILON_CASES = _epsilon_cases()


def _drive(method, backend, a, b, eps, **options):
    return registry.make("epsilon", method, backend, a, b, eps, **options)


def _check_sorted_runs(batches, context):
    """A driver that yields ``SortedRun`` batches yields only those, all of them one run sorted by (i, j)."""
    from daskjoin.kernels.registry import SortedRun

    runs = [isinstance(p, SortedRun) for p in batches if len(p[0])]
    if not any(runs):
        return
    assert all(runs), (context, "plain batches mixed into a sorted run")
    i = np.concatenate([np.asarray(p[0]) for p in batches])
    j = np.concatenate([np.asarray(p[1]) for p in batches])
    assert np.all((i[1:] > i[:-1]) | ((i[1:] == i[:-1]) & (j[1:] > j[:-1]))), (context, "sorted run out of order")


def _check_protocol(make, expected, max_pairs, context, *, a=None, b=None, eps=None):
    """count, pairs and batches of fresh drivers from ``make()`` against ``expected`` (i, j, value)."""
    n = len(expected[0])
    assert make().count() == n, context
    got = make().pairs()
    assert len(got[0]) == n, context
    assert_same_pairs(got, expected, context=context, a=a, b=b, eps=eps)
    batches = list(make().batches(max_pairs))
    assert all(len(p[0]) <= max_pairs for p in batches), (context, [len(p[0]) for p in batches])
    _check_sorted_runs(batches, context)
    if batches:
        joined = tuple(np.concatenate([np.asarray(p[t]) for p in batches]) for t in range(3))
    else:
        joined = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, expected[2].dtype))
    assert_same_pairs(joined, expected, context=f"{context} batches({max_pairs})", a=a, b=b, eps=eps)
    bare = list(make().batches(max_pairs, with_distance=False))
    assert all(p[2] is None and len(p[0]) <= max_pairs for p in bare), context
    assert sum(len(p[0]) for p in bare) == n, context
    assert make().pairs(with_distance=False)[2] is None, context


@pytest.mark.parametrize("max_pairs", MAX_PAIRS)
@pytest.mark.parametrize("case", EPSILON_CASES, ids=[c[0] for c in EPSILON_CASES])
@pytest.mark.parametrize("method, backend", _keys("epsilon"))
def test_epsilon_driver_protocol(method, backend, case, max_pairs):
    name, a, b, eps = case
    ctx = f"{method}/{backend} {name}"
    _check_protocol(lambda: _drive(method, backend, a, None, eps), oracle_self_pairs(a, eps), max_pairs,
                    f"{ctx} self", a=a, eps=eps)
    _check_protocol(lambda: _drive(method, backend, a, b, eps), oracle_cross_pairs(a, b, eps), max_pairs,
                    f"{ctx} cross", a=a, b=b, eps=eps)


@pytest.mark.parametrize("method", ["grid", "brute"])
def test_one_row_with_more_neighbours_than_a_batch_is_cut(method):
    """200 copies of a point: one cell (grid) / one row (brute) holds far more pairs than a batch."""
    x = np.concatenate([np.full((200, 2), 0.25), np.random.default_rng(3).random((30, 2))])
    expected = oracle_self_pairs(x, 0.01)
    for max_pairs in (1, 13, 150, 5000):
        _check_protocol(lambda: _drive(method, "cpu", x, None, 0.01), expected, max_pairs, f"{method} {max_pairs}")
    expected = oracle_cross_pairs(x[:1], x, 0.01)  # one query row with 200 partners
    _check_protocol(lambda: _drive(method, "cpu", x[:1], x, 0.01), expected, 17, f"{method} one row")


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy")
@pytest.mark.parametrize("capacity", [None, 3])
@pytest.mark.parametrize("max_pairs", [1, 7, 100, 5000, 10**9])
def test_gpu_brute_batches_are_bounded(max_pairs, capacity):
    """Small tiles and GEMM batches, many pairs per tile pair; ``capacity`` forces the overflow paths."""
    rng = np.random.default_rng(21)
    x = np.concatenate([np.full((70, 3), 0.5), rng.normal(0.5, 0.03, size=(300, 3)), rng.random((100, 3))])
    b = rng.normal(0.5, 0.03, size=(150, 3))
    for other, expected in ((None, oracle_self_pairs(x, 0.05)), (b, oracle_cross_pairs(x, b, 0.05))):
        def make():
            d = _drive("brute", "gpu", x, other, 0.05, tile=16, batch_bytes=4 * 16 * 16 * 5)
            if capacity is not None:
                d._capacity = capacity  # the first range's first launch overflows even with large max_pairs
            return d
        _check_protocol(make, expected, max_pairs, f"brute/gpu tile=16 cap={capacity}", a=x, b=other, eps=0.05)


# ------------------------------------------------------------------ the set-join drivers


def _copies(seed, n_distinct, copies_max, vocab=12):
    rng = np.random.default_rng(seed)
    base = [list(rng.choice(vocab, rng.integers(0, 6), replace=False)) for _ in range(n_distinct)]
    return [s for s in base for _ in range(int(rng.integers(1, copies_max + 1)))]


def _set_cases():
    rng = np.random.default_rng(5)
    rand = [list(rng.choice(30, rng.integers(1, 8), replace=False)) for _ in range(80)]
    return [
        ("random", rand, [list(rng.choice(30, rng.integers(1, 8), replace=False)) for _ in range(40)]),
        ("copies", _copies(1, 25, 9), _copies(2, 15, 5)),
        ("one-big-run", [[1, 2, 3]] * 40 + [[1, 2, 3, 4]] * 10, [[1, 2, 3]] * 12 + [[2, 3]] * 3),
        ("with-empty-sets", [[], [1], [1], [], [1, 2], [2, 1], [3]], [[], [1], [2, 1]]),
        ("one-set", [[4, 5]], [[4, 5]]),
        ("empty", [], [[1, 2]]),
    ]


SET_CASES = _set_cases()
MEASURES = [("jaccard", 0.5), ("cosine", 0.8), ("dice", 1.0), ("overlap", 2)]


def _flat(c):
    return Flat.of(c.tokens, c.offsets)


def _set_expected(sets_a, sets_b, measure, threshold):
    """Oracle pairs as (i, j, overlap), overlaps from Python sets."""
    got = oracle_join(sets_a, sets_b, threshold=threshold, measure=measure)
    other = sets_a if sets_b is None else sets_b
    keys = sorted(got)
    i = np.array([k[0] for k in keys], np.int64)
    j = np.array([k[1] for k in keys], np.int64)
    ov = np.array([len(set(sets_a[p]) & set(other[q])) for p, q in keys], np.int64)
    return i, j, ov


def _as_ids(batch, ids_r, ids_s, selfjoin):
    i, j = ids_r[np.asarray(batch[0])], ids_s[np.asarray(batch[1])]
    if selfjoin:
        i, j = np.minimum(i, j), np.maximum(i, j)
    return i, j, batch[2]


def _same_set_pairs(got, expected, context):
    gi, gj, go = (np.asarray(a) for a in got)
    order = np.lexsort((gj, gi))
    triples = np.stack([gi[order], gj[order], go[order].astype(np.int64)], axis=1) if len(gi) else np.zeros((0, 3))
    want = np.stack(expected, axis=1) if len(expected[0]) else np.zeros((0, 3))
    assert triples.shape == want.shape and np.array_equal(triples, want), (
        f"[{context}] got {len(triples)} pairs, expected {len(want)}; "
        f"missing {sorted(set(map(tuple, want.tolist())) - set(map(tuple, triples.tolist())))[:10]}, "
        f"extra {sorted(set(map(tuple, triples.tolist())) - set(map(tuple, want.tolist())))[:10]}")


@pytest.mark.parametrize("group_copies", [True, False])
@pytest.mark.parametrize("max_pairs", MAX_PAIRS)
@pytest.mark.parametrize("measure, threshold", MEASURES, ids=[m for m, _ in MEASURES])
@pytest.mark.parametrize("case", SET_CASES, ids=[c[0] for c in SET_CASES])
@pytest.mark.parametrize("method, backend", _keys("sets"))
def test_set_driver_protocol(method, backend, case, measure, threshold, max_pairs, group_copies):
    name, sets_a, sets_b = case
    th = parse_threshold(measure, threshold)
    options = {"chunk_candidates": 5}  # many verified chunks, some with more matches than a batch
    ctx = f"{method}/{backend} {name} {measure}>={threshold} group_copies={group_copies}"
    ca = prepare_sets(sets_a)
    a2, b2 = align(ca, prepare_sets(sets_b))
    sides = [("self", _flat(ca), None, ca.ids, ca.ids, None), ("cross", _flat(a2), _flat(b2), a2.ids, b2.ids, sets_b)]
    for mode, r, s, ids_r, ids_s, other in sides:
        expected = _set_expected(sets_a, other, measure, threshold)

        def make():
            return registry.make("sets", method, backend, r, s, th, options=options, group_copies=group_copies)

        here = f"{ctx} {mode}"
        assert make().count() == len(expected[0]), here
        pairs = make().pairs()
        assert len(pairs[0]) == len(expected[0]), here
        _same_set_pairs(_as_ids(pairs, ids_r, ids_s, s is None), expected, here)
        batches = list(make().batches(max_pairs))
        assert all(len(p[0]) <= max_pairs for p in batches), (here, [len(p[0]) for p in batches])
        joined = tuple(np.concatenate([np.asarray(p[t]) for p in batches]) if batches else np.zeros(0, np.int64)
                       for t in range(3))
        _same_set_pairs(_as_ids(joined, ids_r, ids_s, s is None), expected, f"{here} batches({max_pairs})")
        bare = list(make().batches(max_pairs, with_distance=False))
        assert all(p[2] is None for p in bare) and sum(len(p[0]) for p in bare) == len(expected[0]), here
