"""Set-similarity thresholds as exact rationals (what the set kernels decide with).

A threshold float is read as the decimal it prints as (``Fraction(str(t))``:
0.8 is 4/5).  Every decision "sim(r, s) >= t" compares two rationals: the
measure's value, whose denominator is bounded by the set sizes (< 2**31), and
the threshold.  So ``t`` may be replaced by the smallest fraction >= t whose
denominator stays within that bound, without changing any decision; the
products then fit 128 bits.  For jaccard and dice the values have denominators
<= 2**32 and the stored rational is t itself (or its replacement); for cosine
the comparison is o**2 / (|r||s|) >= t**2 with denominators <= 2**62, so the
stored rational stands for t**2.  The kernels' exact decisions live in
:mod:`daskjoin.kernels.sets.measures`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..validation import InputError

#: The measures, in the order of their codes in the kernels (``kernels/sets/measures.py``, ``setverify.cu``)
MEASURES = ("jaccard", "cosine", "dice", "overlap")
MAX_SET_SIZE = (1 << 31) - 1
#: largest denominator of a measure's value: jaccard/dice o/(sizes), cosine o**2/(|r||s|)
_VALUE_DENOMINATOR = {"jaccard": 1 << 32, "dice": 1 << 32, "cosine": 1 << 62}


@dataclass(frozen=True)
class Threshold:
    """A measure, its threshold as given (exactly), and the rational ``p / q`` the kernels decide with."""

    measure: str
    p: int
    q: int
    exact: Fraction = Fraction(0)

    @property
    def code(self) -> int:
        return MEASURES.index(self.measure)

    @property
    def value(self) -> float:
        return float(self.exact)

    def args(self) -> tuple:
        """What the Numba functions take: (measure code, p, q)."""
        return np.int64(self.code), np.int64(self.p), np.int64(self.q)

    def similarity(self, overlap, size_r, size_s) -> np.ndarray:
        """The measure's value as float64 from integer overlaps and sizes (numpy; the tasks use the one-pass
        ``kernels/sets/measures.matches``, which tests/test_set_matches.py holds to these bits)."""
        o = np.asarray(overlap, np.float64)
        r = np.asarray(size_r, np.float64)
        s = np.asarray(size_s, np.float64)
        if self.measure == "jaccard":
            return o / (r + s - o)
        if self.measure == "cosine":
            return o / np.sqrt(r * s)
        if self.measure == "dice":
            return 2.0 * o / (r + s)
        return o


def smallest_fraction_at_least(t: Fraction, max_denominator: int) -> Fraction:
    """The least fraction >= t with denominator <= max_denominator (t's upper Farey neighbour)."""
    if t.denominator <= max_denominator:
        return t
    p0, q0, p1, q1 = 0, 1, 1, 0
    n, d = t.numerator, t.denominator
    while True:
        a = n // d
        q2 = q0 + a * q1
        if q2 > max_denominator:
            break
        p0, q0, p1, q1 = p1, q1, p0 + a * p1, q2
        n, d = d, n - a * d
    k = (max_denominator - q0) // q1
    below_or_above = (Fraction(p0 + k * p1, q0 + k * q1), Fraction(p1, q1))
    return min(f for f in below_or_above if f >= t)


def parse_threshold(measure: str, threshold) -> Threshold:
    """Validate ``measure`` and ``threshold``; raises :class:`InputError` with the reason."""
    if measure not in MEASURES:
        raise InputError(f"measure must be one of {MEASURES}, got {measure!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, Fraction, np.integer, np.floating)):
        raise InputError(f"threshold must be a number, got {threshold!r}")
    if not math.isfinite(float(threshold)):
        raise InputError(f"the {measure} threshold must be a finite number, got {threshold!r}")
    if measure == "overlap":
        if float(threshold) != math.floor(float(threshold)) or not 1 <= threshold <= MAX_SET_SIZE:
            raise InputError(f"the overlap threshold is a number of shared tokens: a positive integer, got {threshold!r}")
        return Threshold(measure, int(threshold), 1, Fraction(int(threshold)))
    if not 0 < threshold <= 1:
        raise InputError(f"the {measure} threshold must be in (0, 1], got {threshold!r}")
    exact = threshold if isinstance(threshold, Fraction) else Fraction(str(float(threshold)))
    target = exact * exact if measure == "cosine" else exact
    decide = smallest_fraction_at_least(target, _VALUE_DENOMINATOR[measure])
    return Threshold(measure, decide.numerator, decide.denominator, exact)
