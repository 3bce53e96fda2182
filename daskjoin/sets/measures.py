"""Set-similarity measures as exact integer overlap bounds.

A threshold float is read as the decimal it prints as (``Fraction(str(t))``:
0.8 is 4/5).  Every decision "sim(r, s) >= t" compares two rationals: the
measure's value, whose denominator is bounded by the set sizes (< 2**31), and
the threshold.  So ``t`` may be replaced by the smallest fraction >= t whose
denominator stays within that bound, without changing any decision; the
products then fit 128 bits.  For jaccard and dice the values have denominators
<= 2**32 and the stored rational is t itself (or its replacement); for cosine
the comparison is o**2 / (|r||s|) >= t**2 with denominators <= 2**62, so the
stored rational stands for t**2.  The Numba functions below are the single
source of truth; the CUDA verifier (``kernels/cuda/setverify.cu``) mirrors
``meets``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numba import njit

from ..validation import InputError

MEASURES = ("jaccard", "cosine", "dice", "overlap")
JACCARD, COSINE, DICE, OVERLAP = range(4)
MAX_SET_SIZE = (1 << 31) - 1
NO_LIMIT = np.int64(1 << 62)
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
        """The measure's value as float64 from integer overlaps and sizes."""
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


@njit(cache=True, inline="always")
def _mul128(a, b):
    """Unsigned 64x64 -> 128-bit product as (high, low) words."""
    mask = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    a0, a1 = a & mask, a >> s32
    b0, b1 = b & mask, b >> s32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> s32) + (p01 & mask) + (p10 & mask)
    low = (p00 & mask) | ((mid & mask) << s32)
    high = p11 + (p01 >> s32) + (p10 >> s32) + (mid >> s32)
    return high, low


@njit(cache=True, inline="always")
def _at_least(a, b, c, d):
    """a * b >= c * d for non-negative integers below 2**64, exactly."""
    lh, ll = _mul128(np.uint64(a), np.uint64(b))
    rh, rl = _mul128(np.uint64(c), np.uint64(d))
    return lh > rh or (lh == rh and ll >= rl)


@njit(cache=True)
def meets(o, nr, ns, code, p, q):
    """Exactly: do sets of sizes nr, ns sharing o tokens reach the threshold? (o >= 1 required)."""
    if o < 1 or nr < 1 or ns < 1:
        return False
    if code == JACCARD:
        return _at_least(o, q, p, nr + ns - o)
    if code == DICE:
        return _at_least(2 * o, q, p, nr + ns)
    if code == OVERLAP:
        return o >= p
    return _at_least(o * o, q, p, nr * ns)


@njit(cache=True)
def required_overlap(nr, ns, code, p, q):
    """The least overlap that reaches the threshold for sizes nr, ns (may exceed min(nr, ns))."""
    if code == OVERLAP:
        return p
    t = p / q
    if code == JACCARD:
        o = np.int64(math.ceil(t * (nr + ns) / (1.0 + t)))
    elif code == DICE:
        o = np.int64(math.ceil(t * (nr + ns) / 2.0))
    else:
        o = np.int64(math.ceil(math.sqrt(t * float(nr) * float(ns))))
    if o < 1:
        o = 1
    while o > 1 and meets(o - 1, nr, ns, code, p, q):
        o -= 1
    while not meets(o, nr, ns, code, p, q):
        o += 1
    return o


@njit(cache=True)
def _possible(n, m, code, p, q):
    """Can a set of size n and one of size m reach the threshold at all?"""
    return required_overlap(n, m, code, p, q) <= min(n, m)


@njit(cache=True)
def min_partner(n, code, p, q):
    """The smallest partner size a set of size n can match (n + 1 when none)."""
    if n < 1:
        return n + 1
    if code == OVERLAP:
        return p if p <= n else n + 1
    if not _possible(n, n, code, p, q):
        return n + 1
    lo, hi = 1, n  # possible(n, m) is monotone in m below n: binary search
    while lo < hi:
        mid = (lo + hi) // 2
        if _possible(n, mid, code, p, q):
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True)
def max_partner(n, code, p, q):
    """The largest partner size a set of size n can match (``NO_LIMIT`` for overlap; 0 when none)."""
    if n < 1:
        return 0
    if code == OVERLAP:
        return NO_LIMIT if p <= n else 0
    if not _possible(n, n, code, p, q):
        return 0
    lo, hi = n, np.int64(MAX_SET_SIZE)
    if _possible(n, hi, code, p, q):
        return hi
    while lo + 1 < hi:  # possible(n, lo) and not possible(n, hi)
        mid = (lo + hi) // 2
        if _possible(n, mid, code, p, q):
            lo = mid
        else:
            hi = mid
    return lo


@njit(cache=True)
def probe_prefix(n, code, p, q):
    """Prefix length that finds every partner of any size (0 when the set can match nothing)."""
    m = min_partner(n, code, p, q)
    if m > n and code != OVERLAP:
        return 0
    if code == OVERLAP:
        return n - p + 1 if p <= n else 0
    return n - required_overlap(n, m, code, p, q) + 1


@njit(cache=True)
def index_prefix(n, code, p, q):
    """Prefix length that finds every partner at least as large (self-join in size order)."""
    if n < 1 or not _possible(n, n, code, p, q):
        return 0
    return n - required_overlap(n, n, code, p, q) + 1
