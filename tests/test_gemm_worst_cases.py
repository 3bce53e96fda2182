"""Constructed worst cases for the CPU float32 GEMM filters (kernels/brute_gemm.py, kernels/knn_gemm.py).

Each filter may rule out a pair only where its proven bound shows that the pair's float64 decision value
is over eps^2 (for the kNN-join, over the k-th distance). Every other pair is decided by the exact rule
(kernels/within.py). Random data seldom comes near that bound, so these tests build the cases where the
bound is tightest or where float32 is most wrong:

- **ulp ladders.** From one row p, rows q whose exact-rule s(p, q) is eps^2 one float64 ulp below,
  exactly eps^2, and one ulp above. The rows come from integer vectors whose squares sum exactly, so
  every value is exact in storage and in the rule. float32 rows sit at common offsets of 0, 1e4 and
  1e6. float64 rows also sit far from the box centre, held there by frame rows; there
  |x|^2 + |y|^2 - 2 x.y cancels catastrophically in float32, and the float32 copies of the rows lose
  the sub-ulp steps (2^-26-sized) that decide each pair.
- **Rounding away.** Pairs p, -p of float64 rows that lie just inside the float32 rounding midpoint.
  Their float32 copies (+-2^m, equal magnitudes with alternating signs) are exactly 2^-24 farther
  apart, relatively, than the stored rows, and the float32 arithmetic on them is exact. So the
  filter's own estimate for a pair at exactly eps is above eps^2 on every BLAS. With the filter's
  margins removed (monkeypatched), the pair is lost: the tests check this too.
- **Dimensions.** d from 3 to 1000, with equal magnitudes and alternating signs.
- **Mixed norms.** Huge, eps-sized and tiny norms in one block, and in tiles of a few rows.
  Zeroing the filter's norms loses pairs; a test checks this.
- **Error terms.** The accumulation term (exact duplicates of equal-magnitude rows, which float32's
  n2 and dot product round differently) and the underflow term (rows near 2^-70, whose float32
  products are subnormal). Without NORM_FLOOR the filter loses pairs; a test checks this.
- **Default tiles.** About 4,200 rows (several blocks, on threads), with ladders astride the tile
  edges.
- **Duplicates and near-duplicates.** Exact duplicates; copies 1 float64 ulp and 1 float32 ulp away;
  differences whose squares underflow to 0. eps is 0, below every spacing, at the 1-ulp spacing, at
  the diameter, or large enough that eps^2 overflows.
- **A hypothesis property.** Ladders at random scales (float32 subnormal to 2^12 units), offsets,
  distances from the centre and dimensions.
- **The kNN filter.** Ties at the k-th distance with lists carried over from a block of later rows,
  and ladders far from the centre.

Every join must run the GEMM filter. This is asserted: ``filter == "fp32"``, and ``decided`` is at
least the pair count. Every join must also give the float64 oracle's pairs (tests/oracle.py) with
bit-identical distances, and the nested loop's arrays byte for byte; counts and bounded batches
must agree. The tests also assert what the constructions claim: s exactly at eps^2 or one ulp
either side, and the float32 estimate on the wrong side.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from daskjoin.kernels import brute_gemm, get_kernel, knn_gemm
from daskjoin.kernels.brute import BruteJoin
from daskjoin.kernels.brute_gemm import GemmBruteJoin
from daskjoin.kernels.exact import NORM_FLOOR, error_constants
from daskjoin.kernels.knn import KnnBrute, _brute, empty_lists, finish

from oracle import assert_same_pairs, oracle_cross_pairs, oracle_self_pairs, squared_distances

MAX_NORM = knn_gemm.MAX_NORM


# --------------------------------------------------------------------------- exact arithmetic helpers


def alternating(d: int) -> np.ndarray:
    return np.where(np.arange(d) % 2 == 0, 1, -1).astype(np.int64)


def sum_of_three_squares(n: int) -> bool:
    """Legendre: n is a sum of three squares unless it is 4^a (8b + 7)."""
    while n and n % 4 == 0:
        n //= 4
    return n % 8 != 7


def represent(total: int, d: int, rng, cap: int | None = None) -> list[int]:
    """``d`` (>= 3) non-negative integers whose squares sum to ``total`` exactly, all below ``cap``. The
    head is spread evenly; the last three entries are found exactly (three-square theorem, then a
    two-square search)."""
    c = math.isqrt(int(total / (d - 1.5)))
    for _ in range(10_000):
        head = [int(c * (1.0 + 0.05 * r)) for r in rng.uniform(-1.0, 1.0, d - 3)]
        left = total - sum(v * v for v in head)
        if left < 0 or not sum_of_three_squares(left):
            continue
        x = math.isqrt(left)
        for _ in range(100_000):
            r = left - x * x
            a = np.arange(0, math.isqrt(r // 2) + 1, dtype=np.int64)
            b2 = r - a * a
            b = np.rint(np.sqrt(b2.astype(np.float64))).astype(np.int64)
            hit = np.flatnonzero(b * b == b2)
            if hit.size:
                aa = int(a[hit[-1]])
                v = head + [x, aa, math.isqrt(r - aa * aa)]
                break
            x -= 1
        else:
            continue
        assert sum(t * t for t in v) == total
        if cap is None or max(v) < cap:
            return [v[k] for k in rng.permutation(d)]
    raise RuntimeError(f"no representation of {total} in {d} squares below {cap}")


def rule_s(p: np.ndarray, q: np.ndarray) -> float:
    """The exact rule's s for two float64 rows (ufunc accumulate adds strictly left to right, as the oracle's
    loop does); only for searches, every claim is checked with the oracle's ``squared_distances``."""
    return float(np.add.accumulate((p - q) * (p - q))[-1])


def eps_with_square(s: float) -> float | None:
    """A float eps with ``eps * eps == s`` in float64 (about half of all floats are such squares), or None."""
    e = math.sqrt(s)
    lo = hi = e
    cands = [e]
    for _ in range(3):
        lo, hi = math.nextafter(lo, 0.0), math.nextafter(hi, math.inf)
        cands += [lo, hi]
    for c in cands:
        if c * c == s:
            return c
    return None


def attainable_square(rng, d: int) -> tuple[int, float]:
    """(T, e): e * e == T exactly, T an integer in [2^52, 2^53) (one ulp = 1), and T - 1, T, T + 1 all sums of
    d squares."""
    while True:
        e = 2.0 ** 26 * (1.0 + 0.4 * rng.random())
        t = e * e
        assert t == int(t) and 2 ** 52 < t < 2 ** 53 - 2
        T = int(t)
        if d > 3 or all(sum_of_three_squares(T + k) for k in (-1, 0, 1)):
            return T, e


def ladder_ints(d: int, T: int, rng, origin: np.ndarray, ties: int = 1, cap: int | None = None) -> np.ndarray:
    """Integer rows (in units): p = origin, then p + sigma*W with |W|^2 = T - 1, T (``ties`` rows), T + 1;
    sigma alternating signs."""
    sigma = alternating(d)
    rows = [np.asarray(origin, np.int64)]
    for t in [T - 1] + [T] * ties + [T + 1]:
        rows.append(rows[0] + sigma * np.array(represent(t, d, rng, cap), np.int64))
    return np.array(rows)


def check_ladder(x: np.ndarray, p: int, qs, T: int, unit: float, eps: float, dtype=None) -> None:
    """The construction's own claims: rows exact in ``dtype``; s(p, q) exactly (T-1, T.., T+1) unit^2 under the
    rule; eps^2 == T unit^2; T +- 1 are the float64 neighbours of eps^2 (one ulp below and above)."""
    if dtype is not None:
        assert np.array_equal(x.astype(dtype).astype(np.float64), x), "rows must be exact in their storage dtype"
    eps2 = eps * eps
    assert eps2 == T * unit * unit
    assert math.nextafter(eps2, 0.0) == (T - 1) * unit * unit
    assert math.nextafter(eps2, math.inf) == (T + 1) * unit * unit
    s = [float(squared_distances(x[p], x[q])[0]) for q in qs]
    assert s[0] == math.nextafter(eps2, 0.0) and s[-1] == math.nextafter(eps2, math.inf)
    assert all(v == eps2 for v in s[1:-1])


def rounding_away(d: int, m: int, active: int | None = None, nudge: int = 0, accept=None):
    """Row p (float64) with p_k = sigma_k (2^m - h) in the first ``active`` dims (0 elsewhere), h just under
    the float32 rounding midpoint 2^(m-25), so p's float32 copy is sigma 2^m. The pair (p, -p) then has
    float32 copies 2^-24 (relatively) farther apart than its stored rows, and the float32 arithmetic on
    them is exact. ``nudge`` != 0 moves dimension 0 until s(p, -p) is that many float64 ulps from the
    ``nudge = 0`` pair; ``accept(s)`` may refuse a pair. Returns (p, s(p, -p))."""
    active = d if active is None else active
    sigma = np.zeros(d)
    sigma[:active] = alternating(active)
    base = 2.0 ** m
    for j in range(64):  # a pair whose s has a float64 square root (eps * eps == s)
        h = 2.0 ** (m - 25) - 2.0 ** (m - 40) - j * 2.0 ** (m - 52)
        p = sigma * (base - h)
        s = rule_s(p, -p)
        if eps_with_square(s) is not None and (accept is None or accept(s)):
            break
    else:
        raise RuntimeError("no pair with an exact eps")
    if nudge:
        want = s
        for _ in range(abs(nudge)):
            want = math.nextafter(want, math.inf if nudge > 0 else 0.0)
        step = 2.0 ** (m - 53) * (1 if nudge > 0 else -1)  # one ulp of |p_k| (in [2^(m-1), 2^m))
        for dim in range(active):  # one dimension moved by whole ulps until s is the wanted float
            q = p.copy()
            for k in range(1, 1 << 12):
                q[dim] = p[dim] + sigma[dim] * k * step
                got = rule_s(q, -q)
                if got == want or (got > want) == (nudge > 0):
                    break
            if got == want:
                p, s = q, got
                break
        else:
            raise RuntimeError("no nudge gives the wanted ulp")
    assert float(squared_distances(p, -p)[0]) == s
    assert np.array_equal(p.astype(np.float32), (sigma * base).astype(np.float32)), "float32 copy is +-2^m"
    return p, s


# --------------------------------------------------------------------------- running the GEMM join


def gemm_driver(a, b, eps) -> GemmBruteJoin:
    join = get_kernel("brute", "cpu").driver(a, b, eps)
    assert type(join) is GemmBruteJoin
    assert join.filter == "fp32", "the float32 GEMM filter must be the path taken (not the nested loop)"
    return join


def assert_same_arrays(got, want):
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if g is not None:
            assert g.dtype == w.dtype and np.array_equal(g, w), (g[:10], w[:10])


def run_gemm(a, b, eps, *, batch: int = 7):
    """The GEMM-filtered join of a (and b; None: self-join) against the oracle (pairs, bitwise distances), the
    nested loop (arrays byte for byte), its count and its bounded batches. Returns (join, {(i, j): s})."""
    join = gemm_driver(a, b, eps)
    got = join.pairs()
    want = oracle_self_pairs(a, eps) if b is None else oracle_cross_pairs(a, b, eps)
    assert_same_pairs(got, want, a=a, b=b, eps=eps)
    order = np.lexsort((got[1], got[0]))
    assert np.array_equal(got[2][order].view(np.int32), want[2].view(np.int32)), "distances not bit for bit"
    assert_same_arrays(got, BruteJoin(a, b, eps).pairs())
    n, m = len(a), len(a) if b is None else len(b)
    total = n * (n - 1) // 2 if b is None else n * m
    assert len(want[0]) <= join.decided <= total  # only the products' survivors were decided in float64
    again = gemm_driver(a, b, eps)
    assert again.count() == len(want[0])
    parts = list(gemm_driver(a, b, eps).batches(batch))
    assert all(0 < len(p[0]) <= batch for p in parts)
    joined = tuple(np.concatenate(x) for x in zip(*parts)) if parts else got
    assert_same_arrays(joined, got)
    other = a if b is None else b
    s = {(int(i), int(j)): float(squared_distances(a[i], other[j])[0]) for i, j in zip(want[0], want[1])}
    return join, s


def filter_estimate(join: GemmBruteJoin, i: int, j: int) -> float:
    """The filter's float32 value |a~|^2 + |b~|^2 - 2 a~.b~ for one pair (as _screen forms it, in float64 from
    the float32 parts)."""
    g = np.float32(np.dot(join.A.x32[i], join.B.x32[j]))
    return float(join.A.n2[i]) + float(join.B.n2[j]) - 2.0 * float(g)


def small_tiles(monkeypatch, a_tile=5, b_tile=3, gather=None):
    monkeypatch.setattr(brute_gemm, "A_TILE", a_tile)
    monkeypatch.setattr(brute_gemm, "B_TILE", b_tile)
    if gather is not None:
        monkeypatch.setattr(brute_gemm, "GATHER_PAIRS", gather)


# --------------------------------------------------------------------------- ulp ladders, float32 rows


@pytest.mark.parametrize("d", [64, 257, 1000])
@pytest.mark.parametrize("offset", [0, 10_000, 1_000_000])
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_ulp_ladder_of_float32_rows(d, offset, mode):
    """float32 rows (integers below 2^24, so exact) at a common offset. From p: one row at eps^2 - 1 ulp, two at
    exactly eps^2 and one at eps^2 + 1 ulp (float64 ulps, eps ~ 7e7-9e7). Also duplicates, 1-unit
    neighbours and rows scattered over the box. The float32 filter cannot resolve 1 ulp of s; the rule
    must keep the first three and drop the last."""
    rng = np.random.default_rng(d * 7 + offset)
    T, e = attainable_square(rng, d)
    sigma = alternating(d)
    origin = offset - sigma * (1 << 23)
    lad = ladder_ints(d, T, rng, origin, ties=2, cap=1 << 24)
    extra = [lad[1] + sigma * rng.integers(-3, 4, d), lad[4].copy(), lad[0].copy(),
             origin + sigma * rng.integers(0, 1 << 24, d), origin + sigma * rng.integers(0, 1 << 24, d)]
    ints = np.vstack([lad, extra])
    x = ints.astype(np.float32)
    eps = e  # unit 1
    check_ladder(ints.astype(np.float64), 0, [1, 2, 3, 4], T, 1.0, eps, dtype=np.float32)
    if mode == "self":
        _, s = run_gemm(x, None, eps)
        assert {(0, 1), (0, 2), (0, 3)} <= s.keys() and (0, 4) not in s
        assert (0, 7) in s  # p's duplicate
    else:
        a, b = x[[0, 6, 7, 8]], x[[1, 2, 3, 4, 5, 7, 9]]
        _, s = run_gemm(a, b, eps)
        assert {(0, 0), (0, 1), (0, 2)} <= s.keys() and (0, 3) not in s
        _, s = run_gemm(b, a, eps)  # B x A: the ladder seen from the other side
        assert {(0, 0), (1, 0), (2, 0)} <= s.keys() and (3, 0) not in s


# --------------------------------------------------------------------------- ulp ladders far from the centre


def far_ladder_rows(d, rng, *, unit_exp, far_exp, offset_units, ties=2):
    """float64 rows in units of 2^unit_exp: frame rows at offset +- 2^(far_exp+1) (all dimensions, so the box
    centre is exactly the offset); a ladder around p = offset + sigma 2^far_exp (far from the centre); a
    second ladder around p2 = offset + sigma 2^20 (near it); rows near p; tiny rows at the centre. Returns
    (x, T, unit, eps, ladder row numbers)."""
    T, e = attainable_square(rng, d)
    unit = 2.0 ** unit_exp
    sigma = alternating(d)
    off = np.full(d, offset_units, np.int64)
    far = ladder_ints(d, T, rng, off + sigma * (1 << far_exp), ties=ties)
    near = ladder_ints(d, T, rng, off + sigma * (1 << 20), ties=1)
    frame = np.stack([off + (1 << (far_exp + 1)), off - (1 << (far_exp + 1))])
    # rows beside p, each coordinate 2^26 units or more away (farther than eps: p's nearest stay the ladder's)
    around = far[0] + rng.choice([-1, 1], (4, d)) * rng.integers(1 << 26, 3 << 25, (4, d))
    tiny = np.repeat(off[None, :], 3, axis=0) + rng.integers(-2, 3, (3, d))
    ints = np.vstack([far, near, frame, around, tiny])
    assert np.abs(ints).max() < 2 ** 53
    x = ints.astype(np.float64) * unit
    assert np.array_equal(x / unit, ints.astype(np.float64))
    eps = e * unit
    nf = len(far)
    check_ladder(x, 0, list(range(1, nf)), T, unit, eps)
    check_ladder(x, nf, list(range(nf + 1, nf + len(near))), T, unit, eps)
    return x, T, unit, eps, nf, len(near)


@pytest.mark.parametrize("d", [3, 8, 64, 257])
@pytest.mark.parametrize("scale", [(-26, 45, 1e6), (-26, 45, 1e4), (-90, 45, 0.0), (12, 40, -3e8)],
                         ids=["eps1-off1e6", "eps1-off1e4", "eps2^-64", "eps2^38-off-3e8"])
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_ulp_ladder_far_from_the_centre(d, scale, mode):
    """The ladder 2^14 to 2^19 eps from the box centre (held there by frame rows), under common offsets. The float32
    copies round away the 2^-26 eps steps, and |x|^2 + |y|^2 - 2 x.y cancels catastrophically: the
    filter's error allowance c2 N^2 is thousands to millions of times eps^2. A second ladder sits near the centre,
    and there are tiny rows and far rows. Exact pairs only, and the products rule out the far rows."""
    unit_exp, far_exp, offset = scale
    rng = np.random.default_rng(d + 1000 * far_exp)
    unit = 2.0 ** unit_exp
    x, T, unit, eps, nf, nn = far_ladder_rows(d, rng, unit_exp=unit_exp, far_exp=far_exp,
                                              offset_units=int(round(offset / unit)))
    if mode == "self":
        join, s = run_gemm(x, None, eps)
        above = (0, nf - 1)
        assert {(0, q) for q in range(1, nf - 1)} <= s.keys() and above not in s
        assert {(nf, q) for q in range(nf + 1, nf + nn - 1)} <= s.keys() and (nf, nf + nn - 1) not in s
        c1, c2 = error_constants(d)
        N = 2 * float(join.A.norm[0])
        assert c2 * N * N > 100 * eps * eps, "the far ladder must be where float32 cannot resolve eps at all"
        assert join.decided < len(x) * (len(x) - 1) // 2, "the products must rule out the far pairs"
    else:
        ia = [0, nf, nf + nn, nf + nn + 2, len(x) - 1]
        ib = [i for i in range(len(x)) if i not in (0, nf)]
        join, s = run_gemm(x[ia], x[ib], eps)
        assert {(0, q - 1) for q in range(1, nf - 1)} <= s.keys() and (0, nf - 2) not in s
        assert join.decided < len(ia) * len(ib)


# --------------------------------------------------------------------------- rounding away: float32 overshoots


DIMS = [3, 8, 64, 257, 1000]


def rounding_away_rows(d, m):
    """Rows p, -p (at eps exactly), p_hi, -p_hi (one ulp above), p_lo, -p_lo (one ulp below), symmetric around 0
    (so the centre is 0 and the shifted rows are the stored ones); their float32 copies are all +-2^m."""
    p, s = rounding_away(d, m)
    hi, s_hi = rounding_away(d, m, nudge=1)
    lo, s_lo = rounding_away(d, m, nudge=-1)
    eps = eps_with_square(s)
    assert eps is not None and eps * eps == s
    assert s_hi == math.nextafter(s, math.inf) and s_lo == math.nextafter(s, 0.0)
    x = np.stack([p, -p, hi, -hi, lo, -lo])
    return x, eps


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("m", [-60, -1, 10])
def test_rounding_away_pair_exactly_at_eps(d, m):
    """The six rows' float32 copies are only two distinct rows, +-2^m (equal magnitudes, alternating signs).
    The filter's float32 estimate for each antipodal pair is 4 d 2^2m, exactly, and that is over
    eps^2 (1 + 2e-9). Only the margins keep these pairs. The pair at eps and the pair one ulp below
    must be kept; the pair one ulp above must not."""
    x, eps = rounding_away_rows(d, m)
    eps2 = eps * eps
    join, s = run_gemm(x, None, eps)
    assert (0, 1) in s and (4, 5) in s and (2, 3) not in s
    assert len(np.unique(join.A.x32, axis=0)) == 2
    for i, j in [(0, 1), (2, 3), (4, 5)]:
        est = filter_estimate(join, i, j)
        assert est == 4.0 * d * 4.0 ** m and est > eps2 * (1 + 2e-9), "the float32 value must overshoot eps^2"
    a, b = x[[0, 2, 4]], x[[1, 3, 5]]
    _, s = run_gemm(a, b, eps)
    assert (0, 0) in s and (2, 2) in s and (1, 1) not in s
    _, s = run_gemm(b, a, eps)
    assert (0, 0) in s and (1, 1) not in s


@pytest.mark.parametrize("d", [3, 64, 1000])
def test_without_its_margins_the_filter_would_lose_the_pair(d, monkeypatch):
    """The construction really tests the bound. With c1 = c2 = 0 (the filter trusting float32), the
    pair at exactly eps is ruled out, and the comparison with the oracle fails."""
    x, eps = rounding_away_rows(d, -1)
    run_gemm(x, None, eps)  # correct with the real margins
    monkeypatch.setattr(brute_gemm, "error_constants", lambda d: (0.0, 0.0))
    join = gemm_driver(x, None, eps)
    got = join.pairs()
    assert (0, 1) not in set(zip(got[0].tolist(), got[1].tolist()))
    with pytest.raises(AssertionError, match="missing"):
        assert_same_pairs(got, oracle_self_pairs(x, eps), a=x, eps=eps)


# --------------------------------------------------------------------------- huge, eps-sized and tiny norms


def mixed_norm_rows(d, rng):
    """Named groups of rows, all symmetric around 0 (so the box centre is exactly 0):

    - ``sharp``: rounding-away rows p, -p (exactly at eps, norm ~ eps) and hi, -hi (one ulp above);
    - ``tiny``: rows of norm 2^-30 eps (all within eps of each other and of nothing else);
    - ``far``: a ladder at eps 2^20 eps from the centre (p, below, 2 ties, above) and its negation;
    - ``near``: a ladder 2^-2 eps from the centre, and its negation;
    - ``frame``: rows at +-2^21 eps in every dimension.

    Returns (groups, eps)."""
    active = next(k for k in range(d, 0, -1) if math.floor(math.log2(4 * k * (1 - 2 ** -20))) % 2 == 0)

    def ladder_ok(s):  # d = 3: T - 1, T, T + 1 must be sums of three squares
        k = math.floor(math.log2(s))
        T = int(s / 2.0 ** (k - 52))
        return d > 3 or all(sum_of_three_squares(T + i) for i in (-1, 0, 1))

    p, s = rounding_away(d, -1, active=active, accept=ladder_ok)
    hi, _ = rounding_away(d, -1, active=active, nudge=1, accept=ladder_ok)
    eps = eps_with_square(s)
    k = math.floor(math.log2(s))
    assert k % 2 == 0
    unit = 2.0 ** ((k - 52) // 2)  # s = T unit^2 with T an integer in [2^52, 2^53): one ulp of eps^2 is unit^2
    T = int(s / (unit * unit))
    assert T * unit * unit == s and 2 ** 52 <= T < 2 ** 53 - 1
    sigma = alternating(d)
    far = ladder_ints(d, T, rng, sigma * (1 << 46), ties=2).astype(np.float64) * unit
    near = ladder_ints(d, T, rng, sigma * (1 << 24), ties=1).astype(np.float64) * unit
    frame = np.stack([np.full(d, 2.0 ** 47), np.full(d, -2.0 ** 47)]) * unit
    tiny = rng.uniform(-1, 1, (5, d)) * 2.0 ** -30 * eps
    groups = {"sharp": np.stack([p, -p, hi, -hi]), "tiny": np.vstack([tiny, -tiny]), "far": np.vstack([far, -far]),
              "near": np.vstack([near, -near]), "frame": frame}
    x = np.vstack(list(groups.values()))
    assert np.array_equal(x.min(axis=0), -x.max(axis=0)), "symmetric: the box centre is exactly 0"
    check_ladder(far, 0, range(1, len(far)), T, unit, eps)
    return groups, eps


@pytest.mark.parametrize("d", [3, 64, 257])
@pytest.mark.parametrize("tiles", ["default", "small"])
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_huge_eps_sized_and_tiny_norms_in_one_block(d, tiles, mode, monkeypatch):
    """Each row's margin comes from its own norm and its tile's largest column norm. The rounding-away
    pairs (norm ~ eps) have a float32 estimate above eps^2, so only their margin keeps them. In tiles of
    a few rows they share blocks with tiny rows, and their column tiles hold no huge row to widen the
    margin; with the default tiles everything is one block. The huge ladders need their own huge
    margins, and the tiny rows pair among themselves."""
    if tiles == "small":
        small_tiles(monkeypatch, 5, 3, gather=11)
    groups, eps = mixed_norm_rows(d, np.random.default_rng(d))
    sharp, tiny, far, near, frame = (groups[k] for k in ("sharp", "tiny", "far", "near", "frame"))
    nf = len(far) // 2
    if mode == "self":
        # p, tiny, -p, tiny, hi, tiny, -hi, the other tiny rows, then the huge rows mixed with the near ladder
        x = np.vstack([sharp[0], tiny[0], sharp[1], tiny[1], sharp[2], tiny[2], sharp[3], tiny[3:],
                       far[:nf], near[:2], frame[:1], far[nf:], near[2:], frame[1:]])
        at = 4 + len(tiny)
        join, s = run_gemm(x, None, eps)
        assert (0, 2) in s and (4, 6) not in s
        assert {(at, at + q) for q in range(1, nf - 1)} <= s.keys() and (at, at + nf - 1) not in s
        assert join.decided < len(x) * (len(x) - 1) // 2
        for i, j in [(0, 2), (4, 6)]:
            assert filter_estimate(join, i, j) > eps * eps * (1 + 2e-9)
    else:
        half = len(tiny) // 2
        a = np.vstack([sharp[0], tiny[:half], sharp[2], far[:1], near[:1], frame[:1], far[nf:]])
        b = np.vstack([sharp[1], tiny[half:], sharp[3], far[1:nf], near[1:], frame[1:]])
        join, s = run_gemm(a, b, eps)
        ia_hi, ib_hi, ia_far, ib_far = 1 + half, 1 + (len(tiny) - half), 2 + half, 2 + (len(tiny) - half)
        assert (0, 0) in s and (ia_hi, ib_hi) not in s
        assert {(ia_far, ib_far + q) for q in range(nf - 2)} <= s.keys() and (ia_far, ib_far + nf - 2) not in s
        assert filter_estimate(join, 0, 0) > eps * eps * (1 + 2e-9)
        _, s = run_gemm(b, a, eps)
        assert (0, 0) in s and (ib_hi, ia_hi) not in s


def test_per_row_norms_are_what_keeps_the_pairs(monkeypatch):
    """The mixed-norm block in small tiles, with the norms the filter holds zeroed (only NORM_FLOOR left): the
    same filter now loses the rounding-away pair at eps. So the test above depends on each row's own
    margin."""
    small_tiles(monkeypatch, 5, 3)
    groups, eps = mixed_norm_rows(64, np.random.default_rng(64))
    x = np.vstack([groups["sharp"], groups["tiny"], groups["far"], groups["near"], groups["frame"]])
    run_gemm(x, None, eps)
    join = gemm_driver(x, None, eps)
    join.A.norm[:] = NORM_FLOOR  # self-join: B is A
    got = join.pairs()
    assert (0, 1) not in set(zip(got[0].tolist(), got[1].tolist()))


# --------------------------------------------------------------------------- duplicates, near-duplicates, eps extremes


def near_duplicate_rows(d, dtype, rng):
    """Base rows at magnitudes 1, 1e4, 1e6 (offsets), each with an exact duplicate, a copy 1 ulp (of the storage
    dtype) away in one coordinate, a copy 1 ulp away in every coordinate (alternating directions), and, for
    float64, rows 1e-170 apart (their squared difference underflows to 0 in float64)."""
    rows = []
    for mag in (1.0, 1e4, 1e6):
        base = (mag * (1 + rng.random(d)) * alternating(d)).astype(dtype)
        one = base.copy()
        one[d // 2] = np.nextafter(one[d // 2], dtype(np.inf))
        every = np.nextafter(base, (np.where(alternating(d) > 0, np.inf, -np.inf)).astype(dtype))
        rows += [base, base.copy(), one, every]
    if dtype == np.float64:
        tiny = rng.random(d) * 1e-165
        twin = tiny.copy()
        twin[0] += 1e-170
        assert float(squared_distances(tiny, twin)[0]) == 0.0 and twin[0] != tiny[0]
        rows += [tiny, twin]
    return np.array(rows, dtype)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # eps = 1e200: eps^2 is inf
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [3, 64, 257])
@pytest.mark.parametrize("which", ["zero", "min-subnormal", "eps2-underflows", "one-ulp", "diameter", "overflow"])
def test_duplicates_near_duplicates_and_extreme_eps(dtype, d, which):
    """eps = 0, 5e-324 and 1e-170 (eps^2 is 0 in float64): only rows whose rule value is 0 pair. These are exact
    duplicates and, in float64, rows 1e-170 apart, whose squared difference underflows to 0. One ulp:
    eps is the 1-ulp spacing of the magnitude-1 rows exactly (eps^2 exact), so that 1-ulp copy is at eps.
    diameter: eps just covers the largest s, so every pair is in and the farthest is at the boundary.
    overflow: eps^2 is inf."""
    rng = np.random.default_rng(d)
    x = near_duplicate_rows(d, dtype, rng)
    x64 = x.astype(np.float64)
    n = len(x)
    if which == "zero":
        eps = 0.0
    elif which == "min-subnormal":
        eps = 5e-324
    elif which == "eps2-underflows":
        eps = 1e-170
    elif which == "one-ulp":
        eps = float(x64[2, d // 2] - x64[0, d // 2])
        assert eps * eps == float(squared_distances(x64[0], x64[2])[0])
    elif which == "diameter":
        s = max(float(squared_distances(x64[i], x64[j])[0]) for i in range(n) for j in range(i + 1, n))
        eps = math.sqrt(s)
        while eps * eps < s:
            eps = math.nextafter(eps, math.inf)
        while math.nextafter(eps, 0.0) ** 2 >= s:
            eps = math.nextafter(eps, 0.0)
    else:
        eps = 1e200
    join, s = run_gemm(x, None, eps)
    dup = {(4 * g, 4 * g + 1) for g in range(3)}
    assert dup <= s.keys()
    if eps * eps == 0.0:
        twins = {(12, 13)} if dtype == np.float64 else set()
        assert s.keys() == dup | twins
    if which == "one-ulp":
        assert (0, 2) in s and (0, 3) not in s  # 1 ulp in one coordinate: at eps; in every coordinate: beyond
    if which in ("diameter", "overflow"):
        assert len(s) == n * (n - 1) // 2
    a, b = x[::2], x[1::2]
    run_gemm(a, b, eps)


# --------------------------------------------------------------------------- the accumulation and underflow terms


@pytest.mark.parametrize("d, e", [(64, 2.991923508943728e-07), (257, 0.00046506820945069194),
                                  (1000, 6.5494223235873505e-06)])
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_accumulation_error_on_duplicates(d, e, mode):
    """float32 rows of equal magnitude 1 + e with alternating signs, their exact duplicates, copies one float32
    ulp off in one coordinate or in all of them, and the negations (centre 0, so the shifted rows are the
    stored ones). Each row's float32 n2 (numpy's pairwise sum of rounded squares) and the BLAS's dot
    product round differently, so a pair of exact duplicates gets a float32 value away from 0. The ``e``
    values gave the largest positive value that a search found, for this join's tile shapes on OpenBLAS
    (Haswell kernels): under 1% of the filter's c2 N^2, since that BLAS accumulates more accurately than
    the bound has to allow for. A BLAS that accumulates sequentially goes further. With eps = 0 only the
    rule's s = 0 pairs may remain; with eps = the 1-ulp spacing, exactly the 1-ulp copies join them."""
    sigma = alternating(d).astype(np.float32)
    v = (np.float32(1) + np.float32(e)) * sigma
    one = v.copy()
    one[d // 3] = np.nextafter(one[d // 3], np.float32(np.inf) * sigma[d // 3])
    every = np.nextafter(v, np.float32(np.inf) * sigma)
    x = np.stack([v, v, one, every, v])
    x = np.vstack([x, -x]).astype(np.float32)
    ulp = float(one[d // 3]) - float(v[d // 3])
    for eps in (0.0, abs(ulp)):
        if mode == "self":
            _, s = run_gemm(x, None, eps)
            assert {(0, 1), (0, 4), (1, 4)} <= s.keys() and ((0, 2) in s) == (eps > 0) and (0, 3) not in s
        else:
            _, s = run_gemm(x[:5], x[[1, 2, 3, 6, 7]], eps)
            assert (0, 0) in s and ((0, 1) in s) == (eps > 0) and (0, 2) not in s


def subnormal_rows(d, mexp, dexp, seed):
    """float64 rows of magnitude 2^mexp (alternating signs) and partners 2^dexp away, with their negations
    (centre 0). The float32 copies are normal, but their products (~2^(2 mexp)) fall below float32's normal
    range: each one is rounded to 2^-149 or flushed. eps is the median partner distance, so about half the
    partners pair."""
    rng = np.random.default_rng(seed)
    sigma = alternating(d).astype(np.float64)
    base = sigma * 2.0 ** mexp * (1 + rng.random((10, d)))
    moved = base + rng.normal(0, 2.0 ** dexp, (10, d))
    x = np.vstack([moved, base, -moved, -base])
    assert (np.abs(x).max() ** 2 < 2.0 ** -126) and np.abs(x).min() > 2.0 ** -126
    eps = float(np.sqrt(np.median(squared_distances(moved, base))))
    return x, eps


@pytest.mark.parametrize("d", [8, 64])
@pytest.mark.parametrize("mexp, dexp", [(-65, -73), (-70, -78), (-70, -82), (-75, -83)])
def test_float32_products_below_the_normal_range(d, mexp, dexp):
    """Rows at 2^-65 to 2^-75. Their float32 squares and products are subnormal, with absolute errors up to
    2^-150 each (2^-126 where flushed), far above c2 N^2 of such small norms. Only the filter's NORM_FLOOR
    term (2^-50 on each norm) covers them."""
    x, eps = subnormal_rows(d, mexp, dexp, seed=1000 * d - mexp)
    _, s = run_gemm(x, None, eps)
    assert 0 < len(s)
    run_gemm(x[:20], x[20:], eps)
    run_gemm(x[::2], x[1::2], eps)
    ids = np.arange(len(x), dtype=np.int64)
    for k in (1, 3):
        want_j, want_s = knn_oracle(x, x, k, exclude_ids=ids)
        assert_lists(knn_search([(x, 0)], x, k, ids, exclude=True), want_j, want_s, k)


def test_without_the_norm_floor_the_filter_would_lose_subnormal_pairs(monkeypatch):
    """With NORM_FLOOR taken out of the filter's norms (monkeypatched), the same rows lose pairs. So the
    test above depends on the floor. This relies on IEEE float32 underflow in the BLAS, gradual or
    flushed; both lose pairs."""
    x, eps = subnormal_rows(8, -70, -82, seed=8070)
    run_gemm(x, None, eps)
    real = knn_gemm.Shifted.__init__

    def no_floor(self, *args, **kwargs):
        real(self, *args, **kwargs)
        self.norm = self.norm - NORM_FLOOR

    monkeypatch.setattr(knn_gemm.Shifted, "__init__", no_floor)
    got = gemm_driver(x, None, eps).pairs()
    assert len(got[0]) < len(oracle_self_pairs(x, eps)[0])


# --------------------------------------------------------------------------- default tiles and many rows


@pytest.mark.parametrize("mode", ["self", "cross"])
def test_ladders_across_the_default_tiles_and_threads(mode):
    """About 4,200 rows with the default tiles (512 x 1024, more than one block a thread, past Shifted's 4,096-row
    step). Ladders (below, at, above eps^2), duplicates and far rows sit astride the tile edges. The
    float64 rows are 2^19 eps from the centre in 8 dimensions."""
    d = 8
    rng = np.random.default_rng(4200)
    T, e = attainable_square(rng, d)
    unit = 2.0 ** -26
    sigma = alternating(d)
    n = 4200
    ints = (sigma * (1 << 45))[None, :] + sigma * rng.integers(0, 1 << 40, (n, d))  # sparse: few pairs
    ints[:2] = [np.full(d, 1 << 46), np.full(d, -(1 << 46))]  # frame: centre 0
    where = {}
    for at in (510, 1022, 2046, 4094, 4150):
        lad = ladder_ints(d, T, rng, ints[at], ties=1)
        ints[at:at + 4] = lad
        where[at] = lad
    ints[1500] = ints[1023]  # a duplicate across tiles
    x = ints.astype(np.float64) * unit
    eps = e * unit
    for at in where:
        check_ladder(x, at, [at + 1, at + 2, at + 3], T, unit, eps)
    if mode == "self":
        _, s = run_gemm(x, None, eps, batch=5)
        for at in where:
            assert {(at, at + 1), (at, at + 2)} <= s.keys() and (at, at + 3) not in s
        assert (1023, 1500) in s
    else:
        _, s = run_gemm(x[2100:], x, eps, batch=5)
        assert {(4094 - 2100, 4095), (4094 - 2100, 4096)} <= s.keys() and (4094 - 2100, 4097) not in s


# --------------------------------------------------------------------------- hypothesis: ladders anywhere


@given(d=st.integers(3, 40), unit_exp=st.sampled_from([-160, -140, -120, -70, -26, 0, 12]),
       far_exp=st.sampled_from([None, 0, 20, 40, 47]), offset_exp=st.sampled_from([None, 10, 30, 45]),
       ties=st.integers(1, 3), extra=st.integers(0, 10), selfjoin=st.booleans(), f32=st.booleans(),
       tiles=st.booleans(), seed=st.integers(0, 2 ** 32 - 1))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_ladders_at_any_scale_offset_and_distance_from_the_centre(d, unit_exp, far_exp, offset_exp, ties, extra,
                                                                  selfjoin, f32, tiles, seed):
    """A ladder (eps^2 - 1 ulp, ``ties`` rows at eps^2, eps^2 + 1 ulp) around p. p is ``2^far_exp`` units from
    the box centre (frame rows hold the centre there), under a common offset of ``2^offset_exp`` units. The
    unit ranges from float32's subnormal range (2^-160: the float32 copies underflow) to 2^12. Extra rows
    are scattered and duplicated. Tiles may be small. float32 storage where the rows are exact in it.
    Always the oracle's pairs, and always the at-eps rows in and the above row out."""
    rng = np.random.default_rng(seed)
    unit = 2.0 ** unit_exp
    T, e = attainable_square(rng, d)
    sigma = alternating(d)
    off = np.full(d, 0 if offset_exp is None else 3 << offset_exp, np.int64)
    origin = off + (0 if far_exp is None else sigma * (1 << far_exp))
    lad = ladder_ints(d, T, rng, origin, ties=ties)
    parts = [lad]
    if far_exp is not None:
        parts.append(np.stack([off + (2 << far_exp), off - (2 << far_exp)]))
    if extra:
        parts.append(lad[rng.integers(0, len(lad), extra)] + rng.integers(-(1 << 26), 1 << 26, (extra, d))
                     * rng.integers(0, 2, (extra, 1)))
    ints = np.vstack(parts)
    span = float(np.abs(ints - off).max()) * unit * math.sqrt(d) * 4
    assume(np.abs(ints).max() < 2 ** 53 and span < MAX_NORM)  # else not exact, or the nested loop would run
    x = ints.astype(np.float64) * unit
    eps = e * unit
    nq = len(lad) - 1
    check_ladder(x, 0, list(range(1, nq + 1)), T, unit, eps)
    dtype = np.float32 if f32 and np.array_equal(x.astype(np.float32).astype(np.float64), x) else np.float64
    note(f"dtype={dtype.__name__}")
    x = x.astype(dtype)
    if tiles:
        with pytest.MonkeyPatch.context() as mp:  # hypothesis examples cannot share a function-scoped fixture
            small_tiles(mp, int(rng.integers(1, 6)), int(rng.integers(1, 6)), gather=int(rng.integers(1, 20)))
            _ladder_case(x, eps, nq, selfjoin, rng)
    else:
        _ladder_case(x, eps, nq, selfjoin, rng)


def _ladder_case(x, eps, nq, selfjoin, rng):
    if selfjoin:
        _, s = run_gemm(x, None, eps)
        assert {(0, q) for q in range(1, nq)} <= s.keys() and (0, nq) not in s
    else:
        rest = np.arange(nq + 1, len(x))
        to_a = rest[rng.random(len(rest)) < 0.5]
        ia = np.concatenate([[0], to_a])
        ib = np.concatenate([np.arange(1, nq + 1), np.setdiff1d(rest, to_a)])
        _, s = run_gemm(x[ia], x[ib], eps)
        assert {(0, q) for q in range(nq - 1)} <= s.keys() and (0, nq - 1) not in s


# --------------------------------------------------------------------------- the kNN-join's filter


def knn_oracle(queries, data, k, exclude_ids=None):
    """Each query's k nearest rows of ``data`` by (rule s, j); ``exclude_ids[t]``: a row id query t never takes."""
    q64, x64 = np.asarray(queries, np.float64), np.asarray(data, np.float64)
    s = np.zeros((len(q64), len(x64)))
    for t in range(q64.shape[1]):
        u = q64[:, t][:, None] - x64[:, t][None, :]
        s = s + u * u
    if exclude_ids is not None:
        s[np.arange(len(q64)), exclude_ids] = np.inf
    order = np.argsort(s, axis=1, kind="stable")[:, :k]
    return np.sort(order, axis=1), np.take_along_axis(s, np.sort(order, axis=1), axis=1)


def knn_search(blocks, queries, k, ids=None, exclude=False):
    """Lists after searching ``blocks`` ((rows, first_id), in the order given) through the GEMM form (asserted),
    each block carrying on from the lists of the blocks before."""
    best = empty_lists(len(queries), k)
    ids = np.arange(len(queries), dtype=np.int64) if ids is None else ids
    for rows, first in blocks:
        driver = KnnBrute(rows, k, first)
        assert driver.gemm is not None, "the kNN GEMM filter must be the path taken"
        assert driver.gemm.prepare(queries) is not None, "the rows must be within the float32 filter's range"
        driver.search(queries, ids, *best, exclude)
    return best


def knn_direct(blocks, queries, k, ids=None, exclude=False):
    best = empty_lists(len(queries), k)
    ids = np.arange(len(queries), dtype=np.int64) if ids is None else ids
    for rows, first in blocks:
        _brute(np.ascontiguousarray(queries), ids, exclude, np.ascontiguousarray(rows), first, *best)
    return best


def assert_lists(best, want_j, want_s, k):
    i, j, value = finish(best[0].copy(), best[1].copy(), np.arange(len(best[0]), dtype=np.int64))
    got_j = j.reshape(-1, k)
    assert np.array_equal(got_j, want_j), (got_j, want_j)
    want_dist = np.sqrt(want_s).astype(np.float32)
    assert np.array_equal(value["dist"].reshape(-1, k).view(np.int32), want_dist.view(np.int32))


def tie_blocks(d):
    """Block 1 (ids 0-3): p, -p, -p, -p; block 2 (ids 4-8): p, -p, -p, -p, -p. Each block is symmetric
    around 0, and every (p, -p) is exactly at the same s, whose float32 estimate overshoots (rounding away).
    The query is p. k = 4: ids 0 and 4 (distance 0), then the ties with the smallest ids, 1 and 2."""
    p, _ = rounding_away(d, 3)
    b1 = np.stack([p, -p, -p, -p])
    b2 = np.stack([p, -p, -p, -p, -p])
    return b1, b2, p[None, :]


@pytest.mark.parametrize("d", [4, 64, 257])
def test_knn_ties_at_the_kth_distance_carried_from_a_later_block(d):
    """The later block is searched first: the list is full, and its k-th is a tie at s with a larger id.
    The earlier block's rows at that same s have smaller ids and must displace it. So the filter must
    keep rows exactly at the k-th distance, even where float32 puts them above it."""
    b1, b2, q = tie_blocks(d)
    data = np.vstack([b1, b2])
    want_j, want_s = knn_oracle(q, data, 4)
    assert want_j.tolist() == [[0, 1, 2, 4]]
    got = knn_search([(b2, 4), (b1, 0)], q, 4)
    assert_lists(got, want_j, want_s, 4)
    direct = knn_direct([(b2, 4), (b1, 0)], q, 4)
    assert np.array_equal(got[0], direct[0]) and np.array_equal(got[1], direct[1])


def test_knn_without_its_margins_the_filter_would_lose_the_tie(monkeypatch):
    b1, b2, q = tie_blocks(64)
    monkeypatch.setattr(knn_gemm, "error_constants", lambda d: (0.0, 0.0))
    got = knn_search([(b2, 4), (b1, 0)], q, 4)
    assert sorted(got[1][0].tolist()) != [0, 1, 2, 4]


@pytest.mark.parametrize("d", [4, 64, 257])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_knn_ladder_far_from_the_centre(d, k):
    """A self kNN-join (a row never its own neighbour) over the far-ladder rows, split into two blocks that are
    searched in reverse order. The ladder has p, eps^2 - 1 ulp, three ties at eps^2, eps^2 + 1 ulp; k
    cuts through the ties. p's list must take the below row, then the ties by id."""
    rng = np.random.default_rng(d)
    x, T, unit, eps, nf, nn = far_ladder_rows(d, rng, unit_exp=-26, far_exp=45, offset_units=1_000_000 << 26,
                                              ties=3)
    ids = np.arange(len(x), dtype=np.int64)
    want_j, want_s = knn_oracle(x, x, k, exclude_ids=ids)
    assert want_j[0].tolist() == list(range(1, k + 1))  # below, then ties by id
    half = len(x) // 2
    blocks = [(x[half:], half), (x[:half], 0)]
    got = knn_search(blocks, x, k, ids, exclude=True)
    assert_lists(got, want_j, want_s, k)
    direct = knn_direct(blocks, x, k, ids, exclude=True)
    assert np.array_equal(got[1], direct[1]) and np.array_equal(got[0], direct[0])
