"""Every CPU kernel against the float64 brute-force oracle, pair for pair.

The exactness contract (DESIGN.md section 3, made bit-precise in
``tests/oracle.py``): same pair set as the oracle on every case, including
exact ties at eps, ulp-level near misses and summation-order-sensitive pairs;
``i, j`` int64, ``dist`` float32 within 1 ulp of ``float32(sqrt(s))``; counts
equal to the number of pairs; inputs left unchanged.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import CASES, LATTICE_EPS, Case, lattice_points  # noqa: E402
from oracle import assert_same_pairs, oracle_cross_pairs, oracle_self_pairs, pair_set  # noqa: E402

from daskjoin.kernels import get_kernel  # noqa: E402

#: (nlj's CPU driver is brute's, so it is not run twice here; its GPU driver is in test_gpu.py)
METHODS = ["grid", "brute", "szl", "directory"]


@functools.lru_cache(maxsize=None)
def _expected(name: str, mode: str):
    case = _BY_NAME[name]
    if mode == "self":
        return oracle_self_pairs(case.a, case.eps)
    return oracle_cross_pairs(case.a, case.cross_b(), case.eps)


_BY_NAME = {c.name: c for c in CASES}
_B = {c.name: c.cross_b() for c in CASES}  # stable B object per case (a copy when b is None)


def _params():
    for method in METHODS:
        for case in CASES:
            for mode in ("self", "cross"):
                yield pytest.param(method, case, mode, id=f"{method}-{case.name}-{mode}")


def _check_kernel(method, a, b, eps, expected, context):
    """Run join (with and without distances) and count; compare with ``expected``."""
    k = get_kernel(method, "cpu")
    a_before = a.copy()
    b_before = None if b is None else b.copy()
    if b is None:
        got = k.self_join(a, eps, with_distance=True)
        got_nodist = k.self_join(a, eps, with_distance=False)
        count = k.self_count(a, eps)
    else:
        got = k.cross_join(a, b, eps, with_distance=True)
        got_nodist = k.cross_join(a, b, eps, with_distance=False)
        count = k.cross_count(a, b, eps)
    assert_same_pairs(got, expected, context=context, a=a, b=b, eps=eps)
    if got[2] is None:
        raise AssertionError(f"[{context}] with_distance=True returned dist=None")
    assert_same_pairs(got_nodist, expected, context=context + " (with_distance=False)", a=a, b=b, eps=eps)
    if got_nodist[2] is not None:
        raise AssertionError(f"[{context}] with_distance=False returned distances")
    if int(count) != len(expected[0]):
        raise AssertionError(f"[{context}] count {int(count)} != {len(expected[0])} pairs (oracle)")
    np.testing.assert_array_equal(a, a_before, err_msg=f"[{context}] kernel modified its input A")
    if b is not None:
        np.testing.assert_array_equal(b, b_before, err_msg=f"[{context}] kernel modified its input B")


@pytest.mark.parametrize("method, case, mode", list(_params()))
def test_kernel_matches_oracle(method: str, case: Case, mode: str):
    b = None if mode == "self" else _B[case.name]
    _check_kernel(method, case.a, b, case.eps, _expected(case.name, mode), f"{method}/{case.name}/{mode}")


# --------------------------------------------------------------------------- properties

# Coordinates are small integers divided by a power of two, plus an offset: with
# dyadic offsets the arithmetic is exact and ties at eps are frequent; with the
# arbitrary float offsets the differences round and near-ties appear instead.
_OFFSETS = st.one_of(
    st.sampled_from([0.0, 0.5, -3.25, 1024.0, 1e6, -1e6]),
    st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32),
)
_DTYPES = st.sampled_from([np.float32, np.float64])
_PROPS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _grid_points(d, max_n=60):
    return hnp.arrays(np.int64, st.tuples(st.integers(0, max_n), st.just(d)), elements=st.integers(-6, 6))


@st.composite
def _self_inputs(draw):
    d = draw(st.integers(1, 5))
    ints = draw(_grid_points(d))
    shift = draw(st.integers(0, 3))
    offset = draw(_OFFSETS)
    dtype = draw(_DTYPES)
    x = (ints.astype(np.float64) / 2.0**shift + offset).astype(dtype)
    eps = draw(st.integers(1, 12)) / 2.0 ** draw(st.integers(0, 3))
    return x, float(eps)


@st.composite
def _cross_inputs(draw):
    d = draw(st.integers(1, 5))
    shift = draw(st.integers(0, 3))
    offset = draw(_OFFSETS)
    dtype_a, dtype_b = draw(_DTYPES), draw(_DTYPES)
    if draw(st.booleans()):
        dtype_b = dtype_a  # mostly same dtype, sometimes mixed
    a = (draw(_grid_points(d)).astype(np.float64) / 2.0**shift + offset).astype(dtype_a)
    b = (draw(_grid_points(d)).astype(np.float64) / 2.0**shift + offset).astype(dtype_b)
    n_shared = draw(st.integers(0, len(a)))
    if n_shared:
        b = np.concatenate([b, a[:n_shared].astype(dtype_b)])
        b = b[np.random.default_rng(n_shared).permutation(len(b))]
    eps = draw(st.integers(1, 12)) / 2.0 ** draw(st.integers(0, 3))
    return a, b, float(eps)


@pytest.mark.parametrize("method", METHODS)
@_PROPS
@given(data=_self_inputs())
def test_property_self_join(method, data):
    x, eps = data
    _check_kernel(method, x, None, eps, oracle_self_pairs(x, eps), f"{method}/hypothesis/self")


@pytest.mark.parametrize("method", METHODS)
@_PROPS
@given(data=_cross_inputs())
def test_property_cross_join(method, data):
    a, b, eps = data
    _check_kernel(method, a, b, eps, oracle_cross_pairs(a, b, eps), f"{method}/hypothesis/cross")


@pytest.mark.parametrize("method", METHODS)
def test_methods_agree_on_self_and_swapped_cross(method):
    """A x A contains each self pair in both orders plus the diagonal; B x A is A x B swapped."""
    case = _BY_NAME["uniform_d2_straddle_zero_f64"]
    k = get_kernel(method, "cpu")
    i, j, _ = k.self_join(case.a, case.eps, with_distance=False)
    ci, cj, _ = k.cross_join(case.a, case.a, case.eps, with_distance=False)
    n = len(case.a)
    sym = pair_set(np.concatenate([i, j, np.arange(n)]), np.concatenate([j, i, np.arange(n)]))
    np.testing.assert_array_equal(pair_set(ci, cj), sym)
    b = _B[case.name]
    ai, aj, _ = k.cross_join(case.a, b, case.eps, with_distance=False)
    bi, bj, _ = k.cross_join(b, case.a, case.eps, with_distance=False)
    np.testing.assert_array_equal(pair_set(ai, aj), pair_set(bj, bi))


# ------------------------------------------------------------------ grid, szl and directory: their options change the work, never the pairs

#: options that change only the work: the grid's cell access pattern, lists and translations of szl, levels,
#: fanout and rotation of the directory
METHOD_OPTIONS = [("grid", {"pattern": "unicomp"}), ("grid", {"pattern": "unicomp", "max_dims": 2}),
                  ("szl", {"shifts": "uniform-logd"}), ("szl", {"shifts": "random"}), ("szl", {"lists": 1}),
                  ("szl", {"lists": 8}), ("directory", {"pca": True}), ("directory", {"levels": 1, "fanout": 2}),
                  ("directory", {"levels": 4, "fanout": 3}), ("directory", {"levels": 2, "fanout": 64})]


@pytest.mark.parametrize("method, options", METHOD_OPTIONS,
                         ids=lambda o: o if isinstance(o, str) else "-".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("case", CASES[::4], ids=lambda c: c.name)
def test_method_options_match_oracle(method, options, case):
    for mode in ("self", "cross"):
        b = None if mode == "self" else _B[case.name]
        k = get_kernel(method, "cpu", **options)
        got = k.self_join(case.a, case.eps) if b is None else k.cross_join(case.a, b, case.eps)
        assert_same_pairs(got, _expected(case.name, mode), context=f"{method} {options} {case.name} {mode}",
                          a=case.a, b=b, eps=case.eps)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=lattice_points(),
    eps=st.sampled_from(LATTICE_EPS),
    max_dims=st.integers(1, 5),
)
def test_grid_unicomp_property_lattices(data, eps, max_dims):
    """UNICOMP's odd-coordinate rule reports each pair of a self-join once, whatever the cells' parities,
    the indexed dimensions and the pairs at exactly eps across cell faces."""
    k = get_kernel("grid", "cpu", pattern="unicomp", max_dims=max_dims)
    assert_same_pairs(k.self_join(data, eps), oracle_self_pairs(data, eps), context="self", a=data, eps=eps)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=hnp.arrays(np.float64, st.tuples(st.integers(0, 60), st.integers(1, 5)),
                    elements=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 1.0 + 2 ** -52, 3.0, -1e6])),
    split=st.integers(0, 60),
    eps=st.sampled_from([0.25, 0.5, 1.0, 1e-9]),
    lists=st.integers(1, 8),
)
def test_szl_property_lattices(data, split, eps, lists):
    """Lattice points (duplicates, pairs at exactly eps, far outliers), any split into A and B, any list count:
    the self-join rule reports each pair once, and the cross join finds every pair from either side."""
    k = get_kernel("szl", "cpu", lists=lists)
    assert_same_pairs(k.self_join(data, eps), oracle_self_pairs(data, eps), context="self", a=data, eps=eps)
    a, b = data[:split], data[split:]
    assert_same_pairs(k.cross_join(a, b, eps), oracle_cross_pairs(a, b, eps), context="cross", a=a, b=b, eps=eps)


# ------------------------------------------------------------------ directory: rotated or not, the same pairs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=hnp.arrays(np.float64, st.tuples(st.integers(0, 80), st.integers(1, 5)),
                    elements=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 1.0 + 2 ** -52, 3.0, -1e6])),
    split=st.integers(0, 80),
    eps=st.sampled_from([0.25, 0.5, 1.0, 1e-9]),
    pca=st.booleans(),
)
def test_directory_property_lattices(data, split, eps, pca):
    """Lattice points (duplicates, pairs at exactly eps, far outliers), rotated or not: the oracle's pairs."""
    k = get_kernel("directory", "cpu", pca=pca, levels=2, fanout=3)
    assert_same_pairs(k.self_join(data, eps), oracle_self_pairs(data, eps), context="self", a=data, eps=eps)
    a, b = data[:split], data[split:]
    assert_same_pairs(k.cross_join(a, b, eps), oracle_cross_pairs(a, b, eps), context="cross", a=a, b=b, eps=eps)
