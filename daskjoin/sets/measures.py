"""Set-similarity measures as exact integer overlap bounds.

Every normalised threshold becomes a rational ``p/q`` (the decimal the float
prints as: 0.8 -> 4/5), and every decision "sim(r, s) >= t" is made on
integers, so pairs exactly on the threshold are decided the same way on every
backend.  The Numba functions below are the single source of truth; the CUDA
verifier (``kernels/cuda/setverify.cu``) mirrors ``meets``.

Sizes are bounded by 2**31 and ``q`` by 2**30, so the jaccard/dice/overlap
products fit int64; cosine squares both sides and compares 128-bit products.
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
MAX_DENOMINATOR = 1 << 30
NO_LIMIT = np.int64(1 << 62)


@dataclass(frozen=True)
class Threshold:
    """A measure and its threshold as the exact rational ``p / q``."""

    measure: str
    p: int
    q: int

    @property
    def code(self) -> int:
        return MEASURES.index(self.measure)

    @property
    def value(self) -> float:
        return self.p / self.q

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


def parse_threshold(measure: str, threshold) -> Threshold:
    """Validate ``measure`` and ``threshold``; raises :class:`InputError` with the reason."""
    if measure not in MEASURES:
        raise InputError(f"measure must be one of {MEASURES}, got {measure!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, Fraction, np.integer, np.floating)):
        raise InputError(f"threshold must be a number, got {threshold!r}")
    if measure == "overlap":
        if float(threshold) != math.floor(float(threshold)) or threshold < 1 or threshold >= 1 << 31:
            raise InputError(f"the overlap threshold is a number of shared tokens: a positive integer, got {threshold!r}")
        return Threshold(measure, int(threshold), 1)
    if not math.isfinite(float(threshold)) or not 0 < threshold <= 1:
        raise InputError(f"the {measure} threshold must be in (0, 1], got {threshold!r}")
    exact = threshold if isinstance(threshold, Fraction) else Fraction(str(float(threshold)))
    if exact.denominator > MAX_DENOMINATOR:
        raise InputError(
            f"threshold {threshold!r} has too many decimal digits to be decided exactly "
            f"(denominator {exact.denominator} > 2**30); round it to 9 significant digits"
        )
    return Threshold(measure, exact.numerator, exact.denominator)


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


@njit(cache=True)
def meets(o, nr, ns, code, p, q):
    """Exactly: do sets of sizes nr, ns sharing o tokens reach the threshold? (o >= 1 required)."""
    if o < 1 or nr < 1 or ns < 1:
        return False
    if code == JACCARD:
        return o * (p + q) >= p * (nr + ns)
    if code == DICE:
        return 2 * o * q >= p * (nr + ns)
    if code == OVERLAP:
        return o >= p
    oq = np.uint64(o * q)
    lh_hi, lh_lo = _mul128(oq, oq)
    rh_hi, rh_lo = _mul128(np.uint64(p * p), np.uint64(nr * ns))
    return lh_hi > rh_hi or (lh_hi == rh_hi and lh_lo >= rh_lo)


@njit(cache=True)
def required_overlap(nr, ns, code, p, q):
    """The least overlap that reaches the threshold for sizes nr, ns (may exceed min(nr, ns))."""
    if code == OVERLAP:
        return p
    if code == JACCARD:
        o = (p * (nr + ns) + p + q - 1) // (p + q)
    elif code == DICE:
        o = (p * (nr + ns) + 2 * q - 1) // (2 * q)
    else:
        o = np.int64(math.ceil(p / q * math.sqrt(float(nr) * float(ns))))
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
    t = p / q
    if code == JACCARD:
        guess = t * n
    elif code == DICE:
        guess = t * n / (2.0 - t)
    else:
        guess = t * t * n
    m = min(n, max(1, np.int64(math.floor(guess))))
    while m > 1 and _possible(n, m - 1, code, p, q):
        m -= 1
    while not _possible(n, m, code, p, q):
        m += 1
    return m


@njit(cache=True)
def max_partner(n, code, p, q):
    """The largest partner size a set of size n can match (``NO_LIMIT`` for overlap; 0 when none)."""
    if n < 1:
        return 0
    if code == OVERLAP:
        return NO_LIMIT if p <= n else 0
    if not _possible(n, n, code, p, q):
        return 0
    t = p / q
    if code == JACCARD:
        guess = n / t
    elif code == DICE:
        guess = n * (2.0 - t) / t
    else:
        guess = n / (t * t)
    m = max(n, np.int64(math.ceil(guess)))
    while not _possible(n, m, code, p, q):
        m -= 1
    while _possible(n, m + 1, code, p, q):
        m += 1
    return m


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
