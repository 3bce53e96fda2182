"""The brute-force oracle itself: checked against scipy's cKDTree and a pure-Python loop.

scipy's kd-tree does not promise our summation order (it unrolls its loops and
includes whole node pairs by bounding-box bounds), so it is compared only where
the order cannot matter: random data (ties have probability ~0) and lattices of
small dyadic values, where every partial sum is exact.  The order itself is
checked against a pure-Python float loop (Python floats are IEEE float64).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial import cKDTree

sys.path.insert(0, str(Path(__file__).resolve().parent))

import oracle  # noqa: E402
from cases import CASES, Case, build_cases  # noqa: E402
from oracle import (  # noqa: E402
    assert_same_pairs,
    oracle_cross_pairs,
    oracle_self_pairs,
    pair_set,
    squared_distances,
)


# --------------------------------------------------------------------------- references


def _kdtree_self(x, eps):
    x64 = np.asarray(x, np.float64)
    pairs = cKDTree(x64).query_pairs(eps, output_type="ndarray").astype(np.int64).reshape(-1, 2)
    return pair_set(pairs[:, 0], pairs[:, 1])


def _kdtree_cross_ball(a, b, eps):
    lists = cKDTree(np.asarray(a, np.float64)).query_ball_tree(cKDTree(np.asarray(b, np.float64)), eps)
    i = np.repeat(np.arange(len(lists), dtype=np.int64), [len(l) for l in lists])
    j = np.array([k for l in lists for k in l], dtype=np.int64)
    return pair_set(i, j)


def _kdtree_cross_sparse(a, b, eps):
    m = cKDTree(np.asarray(a, np.float64)).sparse_distance_matrix(
        cKDTree(np.asarray(b, np.float64)), eps, output_type="ndarray"
    )
    order = np.lexsort((m["j"], m["i"]))
    return m["i"][order].astype(np.int64), m["j"][order].astype(np.int64), m["v"][order]


def _python_pairs(a, b, eps, self_join):
    """Pure-Python float loop: the definition, written out literally."""
    a = np.asarray(a, np.float64).tolist()
    b = a if b is None else np.asarray(b, np.float64).tolist()
    e = float(eps)
    eps2 = e * e
    out = []
    for i, p in enumerate(a):
        for j in range(i + 1 if self_join else 0, len(b)):
            q = b[j]
            s = 0.0
            for k in range(len(p)):
                t = p[k] - q[k]
                s += t * t
            if s <= eps2:
                out.append((i, j, s))
    return out


def _random(n, d, seed, dtype=np.float64, scale=1.0):
    return (np.random.default_rng(seed).uniform(-scale, scale, (n, d))).astype(dtype)


def _lattice(counts, spacing, start):
    idx = np.indices(counts).reshape(len(counts), -1).T
    return start + spacing * idx.astype(np.float64)


# eps giving a handful of neighbours per point for n points in [-1, 1]^d
def _eps_for(n, d, k=4.0):
    return 2.0 * (k / n / math.pi ** (d / 2) * math.gamma(d / 2 + 1)) ** (1.0 / d)


# --------------------------------------------------------------------------- vs scipy, self


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 2, 3, 5, 8, 16])
@pytest.mark.parametrize("seed", [0, 1])
def test_self_random_matches_query_pairs(d, dtype, seed):
    x = _random(700, d, seed, dtype)
    eps = _eps_for(700, d)
    i, j, dist = oracle_self_pairs(x, eps)
    assert len(i) > 0
    np.testing.assert_array_equal(pair_set(i, j), _kdtree_self(x, eps))


@pytest.mark.parametrize(
    "counts, spacing, start, eps",
    [
        ((40,), 1.0, -20.0, 1.0),
        ((40,), 0.5, -7.0, 1.0),
        ((12, 12), 1.0, -6.0, 1.0),
        ((12, 12), 1.0, -6.0, 2.0),
        ((12, 12), 0.5, 3.0, 0.5),
        ((12, 12), 0.25, -1.0, 0.75),
        ((6, 6, 6), 1.0, -3.0, 1.0),
        ((6, 6, 6), 0.5, -1.5, 1.0),
        ((6, 6, 6), 1.0, 1e6, 2.0),
        ((3, 3, 3, 3), 1.0, 0.0, 2.0),
    ],
)
def test_self_lattice_matches_query_pairs(counts, spacing, start, eps):
    x = _lattice(counts, spacing, start)
    i, j, dist = oracle_self_pairs(x, eps)
    expected = _kdtree_self(x, eps)
    assert len(expected) > 0
    np.testing.assert_array_equal(pair_set(i, j), expected)
    # every exact tie is in: count pairs at distance exactly eps along one axis
    assert np.any(dist == np.float32(eps))


# --------------------------------------------------------------------------- vs scipy, A x B


def _assert_cross_like_kdtree(a, b, eps):
    """The oracle's A×B pairs equal scipy's (ball tree and sparse matrix), distances within 1 float32 ulp."""
    i, j, dist = oracle_cross_pairs(a, b, eps)
    assert len(i) > 0
    np.testing.assert_array_equal(pair_set(i, j), _kdtree_cross_ball(a, b, eps))
    si, sj, sv = _kdtree_cross_sparse(a, b, eps)
    np.testing.assert_array_equal(pair_set(i, j), np.stack([si, sj], 1))
    # scipy computes sqrt of its own sum; allow 1 float32 ulp
    np.testing.assert_array_max_ulp(dist, sv.astype(np.float32), maxulp=1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 2, 3, 8])
def test_cross_random_matches_kdtree(d, dtype):
    a = _random(500, d, 10 + d, dtype)
    b = np.concatenate([_random(400, d, 20 + d, dtype), a[:30]])
    eps = _eps_for(450, d)
    _assert_cross_like_kdtree(a, b, eps)


@pytest.mark.parametrize(
    "counts_a, counts_b, spacing, eps",
    [((30,), (25,), 1.0, 1.0), ((10, 10), (7, 9), 1.0, 1.0), ((10, 10), (8, 8), 0.5, 1.0), ((5, 5, 5), (4, 6, 3), 1.0, 2.0)],
)
def test_cross_lattice_matches_kdtree(counts_a, counts_b, spacing, eps):
    a = _lattice(counts_a, spacing, -2.0)
    b = _lattice(counts_b, spacing, -1.0 + spacing / 2)
    b = np.concatenate([b, a[::5]])  # some shared rows
    _assert_cross_like_kdtree(a, b, eps)


# --------------------------------------------------------------------------- edge sizes


@pytest.mark.parametrize("d", [1, 3])
def test_empty_and_single(d):
    def check_empty(res):
        i, j, dist = res
        assert i.dtype == np.int64 and j.dtype == np.int64 and dist.dtype == np.float32
        assert i.shape == j.shape == dist.shape == (0,)

    check_empty(oracle_self_pairs(np.empty((0, d)), 1.0))
    check_empty(oracle_self_pairs(np.zeros((1, d), np.float32), 1.0))
    check_empty(oracle_cross_pairs(np.empty((0, d)), np.zeros((4, d)), 1.0))
    check_empty(oracle_cross_pairs(np.zeros((4, d)), np.empty((0, d)), 1.0))
    check_empty(oracle_cross_pairs(np.empty((0, d)), np.empty((0, d)), 1.0))
    i, j, dist = oracle_cross_pairs(np.zeros((1, d)), np.zeros((1, d)), 1.0)
    assert i.tolist() == [0] and j.tolist() == [0] and dist.tolist() == [0.0]
    assert _kdtree_self(np.zeros((1, d)), 1.0).shape == (0, 2)


def test_two_points_tie_and_just_outside():
    i, j, dist = oracle_self_pairs(np.array([[0.0, 0.0], [3.0, 4.0]]), 5.0)
    assert (i.tolist(), j.tolist(), dist.tolist()) == ([0], [1], [5.0])
    x = np.array([[0.0], [np.nextafter(1.0, 2.0)]])
    assert oracle_self_pairs(x, 1.0)[0].size == 0
    assert oracle_self_pairs(x, np.nextafter(1.0, 2.0))[0].size == 1


def test_eps_squared_in_float64():
    x = np.array([[0.0, 0.0], [1.0, 1.0]], np.float32)
    assert oracle_self_pairs(x, float(np.sqrt(2.0)))[0].size == 1  # 2 <= 2.0000000000000004
    assert oracle_self_pairs(x, np.float32(np.sqrt(2.0)))[0].size == 0  # 2 > 1.9999999...
    assert oracle_self_pairs(x, 1e-200)[0].size == 0
    assert oracle_self_pairs(np.zeros((2, 2)), 1e-200)[0].size == 1  # eps^2 underflows to 0; s == 0


# --------------------------------------------------------------------------- summation order


def test_sequential_order_not_pairwise():
    # t = (1, 2^-54, 2^-54, 2^-54): sequentially each 1 + 2^-54 rounds back to 1.0, so s == 1.0;
    # summing the small terms first gives 1 + 1.5 * 2^-53, which rounds up to 1 + 2^-52.
    h = 2.0**-27
    p = np.zeros((1, 4))
    q = np.array([[1.0, h, h, h]])
    assert squared_distances(p, q)[0] == 1.0
    assert 1.0 + (h * h + h * h + h * h) > 1.0
    assert oracle_cross_pairs(p, q, 1.0)[0].size == 1
    assert oracle_self_pairs(np.concatenate([p, q]), 1.0)[0].size == 1
    # reversed dimension order gives s > 1: excluded
    assert oracle_cross_pairs(p[:, ::-1], q[:, ::-1], 1.0)[0].size == 0


_SMALL = [c for c in CASES if len(c.a) * max(len(c.a), len(c.cross_b())) * c.d <= 500_000]


@pytest.mark.parametrize("case", _SMALL, ids=lambda c: c.name)
def test_matches_pure_python_on_small_cases(case: Case):
    got = oracle_self_pairs(case.a, case.eps)
    ref = _python_pairs(case.a, None, case.eps, self_join=True)
    expected = (
        np.array([r[0] for r in ref], np.int64),
        np.array([r[1] for r in ref], np.int64),
        np.sqrt(np.array([r[2] for r in ref], np.float64)).astype(np.float32),
    )
    assert_same_pairs(got, expected, context=case.name + "/self", a=case.a, eps=case.eps)
    assert np.array_equal(got[2], expected[2])  # bit-identical distances
    b = case.cross_b()
    got = oracle_cross_pairs(case.a, b, case.eps)
    ref = _python_pairs(case.a, b, case.eps, self_join=False)
    expected = (
        np.array([r[0] for r in ref], np.int64),
        np.array([r[1] for r in ref], np.int64),
        np.sqrt(np.array([r[2] for r in ref], np.float64)).astype(np.float32),
    )
    assert_same_pairs(got, expected, context=case.name + "/cross", a=case.a, b=b, eps=case.eps)
    assert np.array_equal(got[2], expected[2])


# --------------------------------------------------------------------------- blocking, sorting


def test_blocking_does_not_change_results(monkeypatch):
    x = _random(600, 3, 7)
    b = _random(350, 3, 8)
    eps = 0.2
    full_self = oracle_self_pairs(x, eps)
    full_cross = oracle_cross_pairs(x, b, eps)
    monkeypatch.setattr(oracle, "_BLOCK_ELEMENTS", 1000)  # blocks of 1-2 rows
    for got, exp in [(oracle_self_pairs(x, eps), full_self), (oracle_cross_pairs(x, b, eps), full_cross)]:
        for g, e in zip(got, exp):
            np.testing.assert_array_equal(g, e)


def test_results_sorted_and_self_i_lt_j():
    x = np.concatenate([_random(400, 2, 3), _random(400, 2, 3)])  # every row duplicated
    i, j, dist = oracle_self_pairs(x, 0.1)
    assert np.all(i < j)
    assert np.all((np.diff(i) > 0) | ((np.diff(i) == 0) & (np.diff(j) > 0)))
    i, j, dist = oracle_cross_pairs(x, x[::-1], 0.1)
    assert np.all((np.diff(i) > 0) | ((np.diff(i) == 0) & (np.diff(j) > 0)))


# --------------------------------------------------------------------------- assert_same_pairs


def test_assert_same_pairs_accepts_permutation_and_1ulp():
    x = _random(300, 2, 4)
    exp = oracle_self_pairs(x, 0.2)
    perm = np.random.default_rng(0).permutation(len(exp[0]))
    d = exp[2][perm].copy()
    d[::2] = np.nextafter(d[::2], np.float32(np.inf))
    assert_same_pairs((exp[0][perm], exp[1][perm], d), exp)
    assert_same_pairs((exp[0][perm], exp[1][perm], None), exp)


def test_assert_same_pairs_reports_differences():
    x = _random(300, 2, 4)
    exp = oracle_self_pairs(x, 0.2)
    i, j, d = (v.copy() for v in exp)
    # one missing, one extra
    got = (np.append(i[1:], 0), np.append(j[1:], 299), np.append(d[1:], np.float32(9)))
    with pytest.raises(AssertionError, match=r"1 missing, 1 extra") as info:
        assert_same_pairs(got, exp, context="demo", a=x, eps=0.2)
    msg = str(info.value)
    assert "[demo]" in msg and f"({i[0]}, {j[0]})" in msg and "(0, 299)" in msg and "s-eps^2" in msg
    # duplicates
    with pytest.raises(AssertionError, match="1 duplicated"):
        assert_same_pairs((np.append(i, i[0]), np.append(j, j[0]), np.append(d, d[0])), exp)
    # dtypes
    with pytest.raises(AssertionError, match="int64"):
        assert_same_pairs((i.astype(np.int32), j, d), exp)
    with pytest.raises(AssertionError, match="float32"):
        assert_same_pairs((i, j, d.astype(np.float64)), exp)
    # distance 2 ulps off
    d2 = d.copy()
    d2[3] = np.nextafter(np.nextafter(d2[3], np.float32(1)), np.float32(1))
    with pytest.raises(AssertionError, match="ulp"):
        assert_same_pairs((i, j, d2), exp)


# --------------------------------------------------------------------------- cases


def test_cases_are_deterministic_and_well_formed():
    again = build_cases()
    assert [c.name for c in again] == [c.name for c in CASES]
    for c, c2 in zip(CASES, again):
        assert c.a.ndim == 2 and c.a.dtype in (np.float32, np.float64), c.name
        assert c.cross_b().ndim == 2 and c.cross_b().shape[1] == c.d, c.name
        assert np.all(np.isfinite(c.a)) and np.all(np.isfinite(c.cross_b())), c.name
        assert c.eps > 0 and math.isfinite(c.eps), c.name
        np.testing.assert_array_equal(c.a, c2.a)
        np.testing.assert_array_equal(c.cross_b(), c2.cross_b())
    assert {c.d for c in CASES} >= {1, 2, 3, 8, 64}
    assert {len(c.a) for c in CASES} >= {0, 1, 2}
