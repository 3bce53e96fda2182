"""The set-similarity oracle itself: hand-computed answers, the exact predicate against
60-digit decimal arithmetic, the brute-force and vectorised oracles against each other,
and both against SetSimilaritySearch (an independent implementation) away from ties.
"""
from __future__ import annotations

import decimal
import math
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from set_cases import SET_CASES, THRESHOLDS, case_params, zipf_sets
from set_oracle import (
    exact_similarity,
    exact_threshold,
    normalize_sets,
    oracle_count,
    oracle_join,
    oracle_join_fast,
    passes,
    similarity,
)

# --------------------------------------------------------------------------- hand-computed answers


def test_jaccard_on_threshold_is_included():
    a = [[1, 2, 3, 4], [1, 2, 3, 4, 5], [1, 2, 3, 6, 7], [9]]
    # (0,1): 4/5; (0,2): 3/6; (1,2): 3/7
    assert oracle_join(a, threshold=0.8, measure="jaccard") == {(0, 1): 0.8}
    assert oracle_join(a, threshold=0.5, measure="jaccard") == {(0, 1): 0.8, (0, 2): 0.5}
    assert oracle_join(a, threshold=0.8000001, measure="jaccard") == {}


def test_every_measure_by_hand():
    a = [[1, 2, 3, 4], [1, 2, 5, 6], [1, 2], [3]]
    # sizes 4, 4, 2, 1; overlaps: (0,1)=2, (0,2)=2, (0,3)=1, (1,2)=2, (1,3)=0, (2,3)=0
    assert oracle_join(a, threshold=0.5, measure="cosine") == {
        (0, 1): 0.5, (0, 2): 2 / math.sqrt(8), (0, 3): 0.5, (1, 2): 2 / math.sqrt(8)}
    assert oracle_join(a, threshold=0.5, measure="dice") == {
        (0, 1): 0.5, (0, 2): 2 * 2 / 6, (1, 2): 2 * 2 / 6}
    assert oracle_join(a, threshold=2, measure="overlap") == {(0, 1): 2.0, (0, 2): 2.0, (1, 2): 2.0}
    assert oracle_join(a, threshold=1, measure="overlap") == {
        (0, 1): 2.0, (0, 2): 2.0, (0, 3): 1.0, (1, 2): 2.0}
    assert oracle_join(a, threshold=1 / 3, measure="jaccard") == {(0, 1): 1 / 3, (0, 2): 0.5, (1, 2): 0.5}


def test_cross_join_orientation_and_identical_sets():
    a = [[1, 2], [3]]
    b = [[3], [1, 2], [2, 1, 1]]
    assert oracle_join(a, b, threshold=1.0, measure="jaccard") == {(0, 1): 1.0, (0, 2): 1.0, (1, 0): 1.0}
    assert oracle_join(a, a, threshold=1.0, measure="jaccard") == {(0, 0): 1.0, (1, 1): 1.0}


def test_sets_are_sets_and_empty_sets_never_match():
    a = [[1, 1, 1, 2], [2, 1, 2], [], [], [7, 7]]
    assert normalize_sets(a)[0] == frozenset({1, 2})
    for measure, t in (("jaccard", 1.0), ("cosine", 1.0), ("dice", 1.0), ("overlap", 2)):
        assert oracle_join(a, threshold=t, measure=measure) == {(0, 1): float(2 if measure == "overlap" else 1)}
    assert oracle_join([[], []], threshold=1e-6, measure="jaccard") == {}
    assert oracle_join([[]], [[]], threshold=1e-6, measure="jaccard") == {}
    assert oracle_join_fast([[], []], threshold=1e-6, measure="jaccard") == {}
    assert oracle_join([], threshold=0.5) == {} and oracle_join([[1]], threshold=0.5) == {}
    assert oracle_join([], [[1]], threshold=0.5) == {} and oracle_join([[1]], [], threshold=0.5) == {}


def test_string_and_huge_tokens():
    a = [["a", "b"], ["b", "a", "a"], ["héllo", ""], ["", "héllo", "x"]]
    assert oracle_join(a, threshold=0.6, measure="jaccard") == {(0, 1): 1.0, (2, 3): 2 / 3}
    big = [[2**62, 2**40], [2**40, 2**62 + 1], [2**62]]
    assert oracle_join(big, threshold=1, measure="overlap") == {(0, 1): 1.0, (0, 2): 1.0}


# --------------------------------------------------------------------------- the threshold reading


def test_threshold_is_the_printed_decimal():
    assert exact_threshold(0.8, "jaccard") == Fraction(4, 5)
    assert Fraction(0.8) > Fraction(4, 5)  # the binary value is above 4/5: a binary comparison would drop ties
    assert exact_threshold(2 / 3, "dice") == Fraction(3333333333333333, 5000000000000000)
    assert exact_threshold(2 / 3, "dice") < Fraction(2, 3)  # so dice == 2/3 passes 0.6666666666666666
    assert exact_threshold(5 / 6, "dice") > Fraction(5, 6)  # 0.8333333333333334: dice == 5/6 does not pass
    assert exact_threshold(1e-6, "cosine") == Fraction(1, 10**6)
    assert exact_threshold(1, "jaccard") == 1 and exact_threshold(Fraction(2, 3), "jaccard") == Fraction(2, 3)
    assert exact_threshold(3, "overlap") == 3


@pytest.mark.parametrize("measure, t", [
    ("jaccard", 0.0), ("jaccard", -0.5), ("cosine", 1.5), ("dice", float("nan")), ("dice", float("inf")),
    ("overlap", 0), ("overlap", -2), ("overlap", 2.5), ("overlap", True), ("tanimoto", 0.5),
])
def test_threshold_refused(measure, t):
    with pytest.raises(ValueError):
        exact_threshold(t, measure)


ON_THRESHOLD = [
    # (measure, o, |r|, |s|, threshold, in?)
    ("jaccard", 4, 4, 5, 0.8, True),
    ("jaccard", 4, 5, 5, 0.8, False),  # 4/6
    ("jaccard", 1, 1, 1000, 0.001, True),
    ("jaccard", 1, 1, 10, 0.1, True),
    ("jaccard", 7, 7, 11, 7 / 11, False),  # prints 0.6363636363636364 > 7/11
    ("jaccard", 5, 5, 6, 5 / 6, False),
    ("jaccard", 2, 2, 3, 2 / 3, True),
    ("dice", 2, 2, 4, 2 / 3, True),  # 0.6666666666666666 < 2/3
    ("dice", 5, 5, 7, 5 / 6, False),  # 10/12 == 5/6 < 0.8333333333333334
    ("dice", 2, 2, 3, 0.8, True),
    ("dice", 1, 1, 999, 0.002, True),
    ("dice", 1, 1, 1000, 0.002, False),
    ("cosine", 2, 4, 4, 0.5, True),
    ("cosine", 2, 2, 8, 0.5, True),
    ("cosine", 1, 1, 4, 0.5, True),
    ("cosine", 16, 16, 25, 0.8, True),
    ("cosine", 3, 3, 6, 0.7071067811865476, False),  # 1/sqrt(2) < t, though 3/sqrt(18) rounds to t
    ("cosine", 3, 3, 6, 0.7071067811865475, True),
    ("cosine", 1, 1, 3, 0.5773502691896258, False),  # 1/sqrt(3) rounds to t but is below it
    ("cosine", 25, 25, 36, 5 / 6, False),
    ("cosine", 1, 1, 1, 1.0, True),
    ("overlap", 3, 3, 9, 3, True),
    ("overlap", 2, 3, 9, 3, False),
    ("overlap", 0, 0, 0, 1, False),
    ("jaccard", 0, 0, 0, 1e-6, False),  # two empty sets
    ("dice", 0, 0, 5, 1e-6, False),
]


@pytest.mark.parametrize("measure, o, r, s, t, expected", ON_THRESHOLD)
def test_on_threshold_decisions(measure, o, r, s, t, expected):
    assert passes(measure, o, r, s, exact_threshold(t, measure)) is expected


def test_cosine_float_evaluation_is_wrong_where_the_oracle_is_not():
    """Why the oracle squares: in float64, k / sqrt(2k*k) >= 0.7071067811865476 for some k."""
    t = 0.7071067811865476
    wrong = [k for k in range(1, 41) if similarity("cosine", k, k, 2 * k) >= t]
    assert wrong, "the adversarial case lost its point"
    assert not any(passes("cosine", k, k, 2 * k, exact_threshold(t, "cosine")) for k in range(1, 41))


def _decimal_sim(measure, o, r, s):
    ctx = decimal.Context(prec=60)
    o, r, s = decimal.Decimal(o), decimal.Decimal(r), decimal.Decimal(s)
    if measure == "jaccard":
        return ctx.divide(o, r + s - o)
    if measure == "dice":
        return ctx.divide(2 * o, r + s)
    if measure == "cosine":
        return ctx.divide(o, ctx.sqrt(r * s))
    return o


@settings(max_examples=400, deadline=None)
@given(measure=st.sampled_from(["jaccard", "cosine", "dice"]), r=st.integers(1, 5000), s=st.integers(1, 5000),
       data=st.data())
def test_predicate_matches_60_digit_decimals(measure, r, s, data):
    o = data.draw(st.integers(1, min(r, s)))
    t = data.draw(st.one_of(st.floats(1e-9, 1.0), st.just(similarity(measure, o, r, s))))
    if not 0 < t <= 1:
        return
    exact = passes(measure, o, r, s, exact_threshold(t, measure))
    sim = _decimal_sim(measure, o, r, s)
    tdec = decimal.Decimal(str(t))
    if abs(sim - tdec) > decimal.Decimal("1e-50"):  # 60 digits decide everything but exact rational ties
        assert exact == (sim >= tdec), (measure, o, r, s, t, sim)
    else:
        assert measure != "cosine" or Fraction(o * o, r * s) == exact_threshold(t, measure) ** 2
        assert exact
    ex = exact_similarity(measure, o, r, s)
    assert abs(float(ex) - (similarity(measure, o, r, s) ** (2 if measure == "cosine" else 1))) <= 1e-12


# --------------------------------------------------------------------------- the two oracles agree


@pytest.mark.parametrize("case, measure", case_params(), ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_fast_oracle_matches_brute_force_on_cases(case, measure, mode):
    b = None if mode == "self" else case.cross_b()
    t = case.thresholds[measure]
    brute = oracle_join(case.a, b, threshold=t, measure=measure)
    assert oracle_join_fast(case.a, b, threshold=t, measure=measure) == brute
    assert oracle_count(case.a, b, threshold=t, measure=measure) == len(brute)
    if b is None:
        assert all(i < j for i, j in brute)




@st.composite
def small_collections(draw, max_sets=14, max_token=8, max_size=7):
    sets = st.lists(st.integers(0, max_token), max_size=max_size)
    return draw(st.lists(sets, max_size=max_sets))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=small_collections(), b=st.one_of(st.none(), small_collections()), data=st.data())
def test_fast_oracle_matches_brute_force_hypothesis(a, b, data):
    measure = data.draw(st.sampled_from(sorted(THRESHOLDS)))
    t = data.draw(st.sampled_from(THRESHOLDS[measure]))
    assert oracle_join_fast(a, b, threshold=t, measure=measure) == oracle_join(a, b, threshold=t, measure=measure)


@pytest.mark.parametrize("measure, t", [("jaccard", 0.3), ("cosine", 0.45), ("dice", 0.4), ("overlap", 3),
                                        ("jaccard", 0.05)])
def test_fast_oracle_matches_brute_force_medium(measure, t):
    a = zipf_sets(700, seed=31, vocab=400, max_size=40)
    b = zipf_sets(300, seed=32, vocab=400, max_size=40)
    for other in (None, b):
        brute = oracle_join(a, other, threshold=t, measure=measure)
        assert len(brute) > 100
        assert oracle_join_fast(a, other, threshold=t, measure=measure) == brute


# --------------------------------------------------------------------------- an independent implementation


def sss_pairs(sets, measure, t):
    """SetSimilaritySearch.all_pairs as ``{(i, j): sim}`` with ``i < j``.

    It yields ``(larger index, smaller index, sim)``, keeps pairs with
    ``float sim >= t`` (a float64 division, not an exact comparison), needs
    deduplicated tokens, supports jaccard and cosine only (plus containment_min,
    which is not one of ours), and refuses an empty list.
    """
    from SetSimilaritySearch import all_pairs

    sets = [sorted(set(s), key=repr) for s in sets]
    if not sets:
        return {}
    return {(min(x, y), max(x, y)): sim for x, y, sim in all_pairs(sets, similarity_func_name=measure,
                                                                  similarity_threshold=t)}


def tie_free(sets, measure, t, margin=1e-9):
    """True when no pair's exact similarity lies within ``margin`` of ``t`` (then float64 decides right)."""
    rs = normalize_sets(sets)
    for i in range(len(rs)):
        for j in range(i + 1, len(rs)):
            o = len(rs[i] & rs[j])
            if o and abs(similarity(measure, o, len(rs[i]), len(rs[j])) - t) <= margin:
                return False
    return True


@pytest.mark.parametrize("measure", ["jaccard", "cosine"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_oracle_matches_setsimilaritysearch(measure, seed):
    # thresholds with no small-denominator ratio (or its square root) nearby, so float64 and exact agree
    t = {"jaccard": [0.30103, 0.61803, 0.123457][seed], "cosine": [0.41421, 0.57721, 0.271828][seed]}[measure]
    a = zipf_sets(500, seed=40 + seed, vocab=300, max_size=25)
    assert tie_free(a, measure, t)
    expected = oracle_join(a, threshold=t, measure=measure)
    got = sss_pairs(a, measure, t)
    assert len(expected) > 50
    assert set(got) == set(expected)
    assert all(abs(got[p] - expected[p]) <= 1e-12 for p in expected)


def test_setsimilaritysearch_differs_on_ties_as_documented():
    """At t = 0.7071067811865476 SetSimilaritySearch's float comparison keeps pairs the exact rule drops."""
    a = [list(range(k)) for k in range(1, 41)]
    got = set(sss_pairs(a, "cosine", 0.7071067811865476))
    exact = set(oracle_join(a, threshold=0.7071067811865476, measure="cosine"))
    assert exact < got
    assert all(j + 1 == 2 * (i + 1) for i, j in got - exact)  # only the (k, 2k) ties


def test_all_cases_have_known_measures():
    for case in SET_CASES:
        for m, t in case.thresholds.items():
            exact_threshold(t, m)
