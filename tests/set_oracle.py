"""Brute-force reference ("oracle") for exact set-similarity joins.

Exactness definition (the contract of ``daskjoin.set_similarity_join``)
-----------------------------------------------------------------------
Sets are sets: tokens repeated inside one input set count once.  For two sets
``r`` and ``s`` with ``o = |r ∩ s|``:

* jaccard ``o / |r ∪ s|``   = ``o / (|r| + |s| - o)``
* cosine  ``o / sqrt(|r| |s|)``
* dice    ``2 o / (|r| + |s|)``
* overlap ``o``

A pair is in the result iff ``sim(r, s) >= threshold`` evaluated **exactly**:
a float threshold ``t`` is read as the decimal it prints as,
``Fraction(str(t)) = p / q``, and the comparison is done in integers:

* jaccard ``o q >= p (|r| + |s| - o)``
* dice    ``2 o q >= p (|r| + |s|)``
* cosine  ``o² q² >= p² |r| |s|``   (both sides non-negative, so squaring is exact)
* overlap ``o >= t`` (``t`` a positive integer)

Empty sets never match anything, not even another empty set (every threshold is
positive, so ``o >= 1`` is required anyway; the guard matters only for jaccard
of two empty sets, whose union is empty).

* Self-join (``b is None``): pairs ``(i, j)`` with ``i < j``, each once, never ``(i, i)``.
* R x S: ``i`` indexes ``a``, ``j`` indexes ``b``; identical sets (even at the same position) match.
* ``sim`` is the float64 value of the similarity: ``o / u`` and ``2 o / (|r| + |s|)``
  as a correctly rounded division of integers, ``o / sqrt(|r| |s|)`` for cosine
  (within an ulp or two), ``float(o)`` for overlap.

Two implementations, deliberately different, cross-checked in
``tests/test_set_oracle.py``:

* :func:`oracle_join` - every pair, Python ``set`` intersections and Python
  integers (the definition, nothing more);
* :func:`oracle_join_fast` - a sparse incidence-matrix product for all
  intersection sizes at once, a float64 pre-decision with a wide safety band and
  the exact integer test for every pair inside the band.
"""
from __future__ import annotations

import math
from fractions import Fraction
from numbers import Integral

import numpy as np

__all__ = [
    "MEASURES",
    "normalize_sets",
    "exact_threshold",
    "passes",
    "similarity",
    "exact_similarity",
    "oracle_join",
    "oracle_join_fast",
    "oracle_count",
    "assert_same_set_pairs",
]

MEASURES = ("jaccard", "cosine", "dice", "overlap")


# --------------------------------------------------------------------------- inputs


def normalize_sets(sets) -> list[frozenset]:
    """Each input set as a ``frozenset`` (tokens deduplicated); ``None`` stays ``None``."""
    if sets is None:
        return None
    return [frozenset(s) for s in sets]


def exact_threshold(threshold, measure: str):
    """The threshold as the oracle compares with it.

    * jaccard / cosine / dice: ``Fraction(str(t))`` for a float (the decimal it prints
      as), the value itself for an ``int`` or a ``Fraction``; must lie in ``(0, 1]``.
    * overlap: a positive ``int``.
    """
    if measure not in MEASURES:
        raise ValueError(f"unknown measure {measure!r}")
    if measure == "overlap":
        if isinstance(threshold, bool) or not isinstance(threshold, Integral) or threshold < 1:
            raise ValueError(f"overlap threshold must be a positive integer, got {threshold!r}")
        return int(threshold)
    if isinstance(threshold, Fraction):
        t = threshold
    elif isinstance(threshold, Integral) and not isinstance(threshold, bool):
        t = Fraction(int(threshold))
    elif isinstance(threshold, float):
        if not math.isfinite(threshold):
            raise ValueError(f"threshold must be finite, got {threshold!r}")
        t = Fraction(str(threshold))  # the decimal it prints as, not its binary value
    else:
        raise ValueError(f"threshold must be a float, int or Fraction, got {threshold!r}")
    if not 0 < t <= 1:
        raise ValueError(f"{measure} threshold must be in (0, 1], got {threshold!r}")
    return t


# --------------------------------------------------------------------------- the predicate


def passes(measure: str, o: int, r: int, s: int, t) -> bool:
    """Exact ``sim >= t`` for overlap ``o`` of sets of sizes ``r``, ``s`` (``t`` from :func:`exact_threshold`)."""
    o, r, s = int(o), int(r), int(s)
    if o <= 0 or r <= 0 or s <= 0:
        return False  # empty sets never match; every threshold is positive
    if measure == "overlap":
        return o >= t
    p, q = t.numerator, t.denominator
    if measure == "jaccard":
        return o * q >= p * (r + s - o)
    if measure == "dice":
        return 2 * o * q >= p * (r + s)
    if measure == "cosine":
        return o * o * q * q >= p * p * r * s
    raise ValueError(f"unknown measure {measure!r}")


def exact_similarity(measure: str, o: int, r: int, s: int):
    """The similarity as an exact number: ``Fraction`` (jaccard, dice), ``int`` (overlap), or
    for cosine the exact ``Fraction`` of its square (``o² / (|r||s|)``)."""
    if measure == "jaccard":
        return Fraction(o, r + s - o) if r + s - o else Fraction(0)
    if measure == "dice":
        return Fraction(2 * o, r + s) if r + s else Fraction(0)
    if measure == "cosine":
        return Fraction(o * o, r * s) if r * s else Fraction(0)
    if measure == "overlap":
        return o
    raise ValueError(f"unknown measure {measure!r}")


def similarity(measure: str, o: int, r: int, s: int) -> float:
    """The float64 similarity reported for a pair (see the module docstring)."""
    if measure == "jaccard":
        return o / (r + s - o)
    if measure == "dice":
        return 2 * o / (r + s)
    if measure == "cosine":
        return o / math.sqrt(r * s)
    if measure == "overlap":
        return float(o)
    raise ValueError(f"unknown measure {measure!r}")


# --------------------------------------------------------------------------- brute force


def oracle_join(a, b=None, *, threshold, measure: str = "jaccard") -> dict:
    """Every matching pair: ``{(i, j): sim}`` (self-join ``i < j`` when ``b is None``).

    Each pair's overlap is a Python ``set`` intersection; the decision is
    :func:`passes` in Python integers.  O(n m) pairs: keep inputs small.
    """
    t = exact_threshold(threshold, measure)
    ra = normalize_sets(a)
    rb = normalize_sets(b)
    out = {}
    for i, r in enumerate(ra):
        if not r:
            continue
        others = enumerate(rb) if rb is not None else ((j, ra[j]) for j in range(i + 1, len(ra)))
        for j, s in others:
            if not s:
                continue
            o = len(r & s)
            if passes(measure, o, len(r), len(s), t):
                out[(i, j)] = similarity(measure, o, len(r), len(s))
    return out


def oracle_count(a, b=None, *, threshold, measure: str = "jaccard") -> int:
    return len(oracle_join(a, b, threshold=threshold, measure=measure))


# --------------------------------------------------------------------------- vectorised


def _incidence(sets, vocab):
    """CSR (n x V) 0/1 matrix of ``sets`` over ``vocab`` (token -> column), plus the set sizes."""
    from scipy import sparse

    rows, cols = [], []
    sizes = np.zeros(len(sets), np.int64)
    for i, s in enumerate(sets):
        sizes[i] = len(s)
        for tok in s:
            rows.append(i)
            cols.append(vocab[tok])
    data = np.ones(len(rows), np.int64)
    m = sparse.csr_matrix((data, (np.asarray(rows, np.int64), np.asarray(cols, np.int64))),
                          shape=(len(sets), max(1, len(vocab))), dtype=np.int64)
    return m, sizes


#: Relative width of the band around the threshold where the float64 pre-decision is
#: not trusted and the exact integer test decides (the float error is ~1e-15 at most).
_BAND = 1e-9


def oracle_join_fast(a, b=None, *, threshold, measure: str = "jaccard") -> dict:
    """Same result as :func:`oracle_join`, vectorised for a few thousand sets.

    Intersection sizes come from the sparse product ``A Bᵀ`` of 0/1 incidence
    matrices; a float64 estimate of each similarity decides every pair farther
    than ``1e-9`` (relative) from the threshold, and the exact integer test of
    :func:`passes` decides the rest.
    """
    t = exact_threshold(threshold, measure)
    ra = normalize_sets(a)
    rb = ra if b is None else normalize_sets(b)
    vocab = {}
    for s in list(ra) + ([] if b is None else list(rb)):
        for tok in s:
            vocab.setdefault(tok, len(vocab))
    if not ra or not rb or not vocab:
        return {}
    ma, size_a = _incidence(ra, vocab)
    mb, size_b = (ma, size_a) if b is None else _incidence(rb, vocab)
    prod = (ma @ mb.T).tocoo()
    i = prod.row.astype(np.int64)
    j = prod.col.astype(np.int64)
    o = prod.data.astype(np.int64)
    keep = o > 0
    if b is None:
        keep &= i < j
    i, j, o = i[keep], j[keep], o[keep]
    r, s = size_a[i], size_b[j]
    of, rf, sf = o.astype(np.float64), r.astype(np.float64), s.astype(np.float64)
    if measure == "jaccard":
        approx = of / (rf + sf - of)
    elif measure == "dice":
        approx = 2.0 * of / (rf + sf)
    elif measure == "cosine":
        approx = of / np.sqrt(rf * sf)
    else:
        approx = of
    tf = float(t)
    inside = approx >= tf * (1 + _BAND)
    unsure = ~inside & (approx > tf * (1 - _BAND))
    for k in np.flatnonzero(unsure):
        inside[k] = passes(measure, int(o[k]), int(r[k]), int(s[k]), t)
    i, j, o, r, s = i[inside], j[inside], o[inside], r[inside], s[inside]
    return {
        (int(p), int(q)): similarity(measure, int(oo), int(rr), int(ss))
        for p, q, oo, rr, ss in zip(i.tolist(), j.tolist(), o.tolist(), r.tolist(), s.tolist())
    }


# --------------------------------------------------------------------------- comparison


def assert_same_set_pairs(got, expected: dict, *, context: str = "", selfjoin: bool | None = None,
                          sim_tol: float = 1e-12, limit: int = 10) -> None:
    """``got`` (a pandas DataFrame with columns i, j, sim) equals the oracle's ``{(i, j): sim}``.

    Checks the columns and dtypes (int64, int64, float64), no duplicate pair,
    ``i < j`` for a self-join, the pair set, and every sim within ``sim_tol``
    (absolute; relative for overlap counts above 1) of the oracle's.
    """
    where = f"[{context}] " if context else ""
    assert list(got.columns) == ["i", "j", "sim"], f"{where}columns {list(got.columns)}, expected ['i', 'j', 'sim']"
    dtypes = {c: str(got[c].dtype) for c in got.columns}
    assert dtypes == {"i": "int64", "j": "int64", "sim": "float64"}, f"{where}dtypes {dtypes}"
    pairs = list(zip(got["i"].tolist(), got["j"].tolist()))
    sims = got["sim"].tolist()
    seen = {}
    dups = []
    for p, v in zip(pairs, sims):
        if p in seen:
            dups.append(p)
        seen[p] = v
    problems = []
    if dups:
        problems.append(f"{len(dups)} duplicated pairs, e.g. {dups[:limit]}")
    if selfjoin:
        bad = [p for p in pairs if p[0] >= p[1]]
        if bad:
            problems.append(f"{len(bad)} self-join pairs with i >= j, e.g. {bad[:limit]}")
    missing = sorted(set(expected) - set(seen))
    extra = sorted(set(seen) - set(expected))
    if missing or extra:
        problems.append(
            f"pair sets differ: got {len(seen)}, expected {len(expected)}; {len(missing)} missing "
            f"{missing[:limit]}{' ...' if len(missing) > limit else ''}, {len(extra)} extra "
            f"{extra[:limit]}{' ...' if len(extra) > limit else ''}"
        )
    else:
        off = [(p, seen[p], expected[p]) for p in expected
               if not abs(seen[p] - expected[p]) <= sim_tol * max(1.0, abs(expected[p]))]
        if off:
            problems.append(f"{len(off)} sims off (pair, got, expected): {off[:limit]}")
    if problems:
        raise AssertionError(where + "; ".join(problems))
