"""Rows quantised to small integers for the tensor-core filter of ``brute`` (``cuda/brute_tc.cu``).

The filter needs a bound on the error of a low-precision distance.  Instead of modelling how the
tensor cores round (undocumented for fp16 accumulation), the rows are put on an integer grid where
the products are *exact*, so the only error left is the quantisation, measured per row:

- ``y = fl(x - c)`` for a centre ``c`` common to both sides, ``S = R / L`` (``R = max |y_k|``, ``L``
  the grid's level count), ``z = fl(y / S)``, ``q = clip(rint(z), -L, L)`` (integers);
- ``u >= |(x - c) / S - q|``, the row's residual in units of ``S``, computed as
  ``fl(|z - q|) (1 + 1e-9) + 1e-9 (fl(|z|) + 1)``: ``fl(x - c)`` and ``fl(y / S)`` are each within
  one rounding (``2^-53`` relative) of the exact values, the norm within ``(d + 3) 2^-53``, all far
  below the 1e-9 margins for the dimensionalities allowed here;
- ``G = q_a . q_b`` exactly: int8 ``mma`` accumulates in int32 (integer arithmetic; ``d L^2 <= 2^28``, so
  the thresholds too fit int32, :func:`thresholds`),
  and the fp16 grid keeps ``d L^2 <= 2^24`` and ``L <= 2048``, so every product and every partial
  sum, in any order, is an integer of at most 24 bits, exact in the fp32 accumulator (the tests
  check both on the device, ``tests/test_brute_tc_gpu.py``);
- so ``|q_a - q_b|^2 = |q_a|^2 + |q_b|^2 - 2 G`` exactly (integers below 2^53 in float64).

For a true pair (float64 ``s <= eps^2``, so the exact distance ``D <= eps (1 + 1e-9)`` plus a term
for underflow, see :func:`reach0`), ``(x_a - c)/S - (x_b - c)/S = (q_a - q_b) + (e_a - e_b)`` gives,
by the triangle inequality, ``|q_a - q_b| <= D / S + u_a + u_b <= reach0 + u_a + u_b``.
With ``r_a >= reach0 + u_a`` and ``r_b >= u_b`` (float32, rounded up: :func:`row_reach`), and any ``c``
and ``lam > 0``, ``2 r_a (r_b - c) <= lam r_a^2 + (r_b - c)^2 / lam`` (the square of
``sqrt(lam) r_a - (r_b - c) / sqrt(lam)`` is not negative), so

    |q_a - q_b|^2 <= (r_a + r_b)^2 = r_a^2 + 2 r_a c + 2 r_a (r_b - c) + r_b^2 <= F_a + H_b,
    F_a = r_a ((1 + lam) r_a + 2 c),   H_b = r_b^2 + (r_b - c)^2 / lam,

and ``|q_a - q_b|^2 = |q_a|^2 + |q_b|^2 - 2 G``, so ``G >= x_a + y_b`` with ``x_a = (|q_a|^2 - F_a) / 2``
and ``y_b = (|q_b|^2 - H_b) / 2``.  The kernel keeps a pair when ``G - Y_b >= X_a``, ``X <= x`` and
``Y <= y`` rounded down (:func:`thresholds`): one subtraction and one comparison a product (a per-row
maximum and one comparison in the common case), where the test ``|q_a|^2 + |q_b|^2 - 2 G <= (r_a + r_b)^2``
in float32 with directed rounding took about ten instructions a product and the filter nearly twice its
time.  The separable form is looser by ``(sqrt(lam) r_a - (r_b - c) / sqrt(lam))^2``: with ``c`` the mean
``r_b`` and ``lam`` its mean deviation over the mean ``r_a``, nothing where both are typical, and little
elsewhere, since ``r_b`` is a residual (about ``sqrt(d / 12)``, at most ``sqrt(d) / 2``) whose spread is
small.  Then each candidate is decided exactly in float64.  No true pair is filtered out.

The bound is tight when ``u`` is small against ``eps / S``: ``u`` is about ``sqrt(d / 12)`` (at
most ``sqrt(d) / 2``), so the filter passes pairs up to about ``eps + 2 sqrt(d / 12) R / L``.
A per-dimension scale would break the exact products (the GEMM needs one scale for the metric),
so the scale is global and the centre is the box centre, which halves ``R``.
"""
from __future__ import annotations

import math

import numpy as np

#: the tensor-core filters: name -> (bytes per coordinate, largest level count, exact while d L^2 <= this)
FORMATS = {"int8": (1, 127, 2 ** 28), "fp16": (2, 2048, 2 ** 24)}
#: no filter for data whose spread leaves the normal float64 range on the grid (the fp32 filter takes it)
SCALE_RANGE = (2.0 ** -1000, 2.0 ** 1000)
ROW_ALIGN = 32  # bytes: one k-step of the mma instructions


#: the 1e-9 margins of the residual and of reach0 hold for (d + 3) 2^-53 < 1e-9: far above this
MAX_D = 1_000_000
#: ``filter="auto"`` of GPU brute (why: planning/cost.py, which mirrors these and gives the reasons)
TC_FROM_D = 64
FP16_TO_D = 260


#: Where ``auto`` gives fp16, a join of at least this many pairs samples whether int8 is faster
#: (:func:`prefer_int8`).  int8's filter saves about 5e-15 s a pair and dimension against fp16's (H200, 1M x 128,
#: the filter with its lists: uniform 0.38 against 0.70 s, exponential 0.51 against 0.82 s), but its coarser grid
#: passes more candidates, each decided in float64 at 1.4e-12 (clustered) to 2.7e-12 (scattered) s a dimension
#: (the same runs: 2.8e9 candidates in 0.49 s, 5.2e7 in 0.018 s).  Break-even: int8 passing 1.9e-3 to 3.6e-3 of
#: all pairs beyond fp16; it is taken below 1.5e-3, where it wins whatever its candidates' spread: uniform 1M x 128
#: 2.9e-5 (bench_highd.py: count 0.59 s against fp16's 0.85 s), embedding-like 10M x 128 5.8e-6 (2.83 against
#: 4.00 s).  Exponential 1M x 128, 3.3e-3, sits at break-even and keeps fp16 (1.15 s, int8's 1.16 s).
INT8_EXTRA_SHARE = 1.5e-3
SAMPLE_FROM_PAIRS = 1 << 32
#: rows of A and of B whose pairs the choice counts (a 1024 x 16384 float64 product: 128 MiB, milliseconds)
SAMPLE_ROWS = (1024, 16384)


def sampled_candidates(a_rows, b_rows, eps: float, centre, spread: float, fmt: str, xp=np):
    """How many pairs of ``a_rows`` x ``b_rows`` (float64) the ``fmt`` filter passes, on the grid the join would
    use (its centre and spread); None where that grid cannot hold the data."""
    d = int(a_rows.shape[1])
    L = levels(fmt, d)
    S = scale(spread, L)
    if S is None:
        return None
    qa, na, ua = quantise(a_rows - centre, S, L, xp)
    qb, nb, ub = quantise(b_rows - centre, S, L, xp)
    G = qa @ qb.T  # integers below 2^53 in every partial sum: exact in float64
    X, Y = thresholds(na, row_reach(ua, reach0(eps, S, d), xp), nb, row_reach(ub, 0.0, xp), fmt, len(na), len(nb),
                      xp)
    return int(((G - Y.astype(xp.float64)[None, :]) >= X.astype(xp.float64)[:, None]).sum())


def prefer_int8(a, b, eps: float, centre, spread: float, xp=np) -> tuple[bool, float | None]:
    """Whether the int8 filter is faster than fp16 on this join, and the share of all pairs int8 passes beyond
    fp16's (:data:`INT8_EXTRA_SHARE`), from evenly spaced rows of ``a`` and ``b`` (``b`` None: a self-join)."""
    b = a if b is None else b
    rows_a = a[xp.linspace(0, a.shape[0] - 1, min(SAMPLE_ROWS[0], a.shape[0])).astype(xp.int64)]
    rows_b = b[xp.linspace(0, b.shape[0] - 1, min(SAMPLE_ROWS[1], b.shape[0])).astype(xp.int64)]
    int8 = sampled_candidates(rows_a, rows_b, eps, centre, spread, "int8", xp)
    fp16 = sampled_candidates(rows_a, rows_b, eps, centre, spread, "fp16", xp)
    if int8 is None or fp16 is None:
        return False, None
    extra = (int8 - fp16) / float(rows_a.shape[0] * rows_b.shape[0])
    return extra < INT8_EXTRA_SHARE, extra


def auto_filter(d: int, tile: int | None = None) -> str:
    """fp32 below ``TC_FROM_D`` dimensions or for a tile size other than 128, fp16 up to ``FP16_TO_D`` (where a large
    join may take int8 instead: :func:`prefer_int8`), int8 beyond."""
    if d < TC_FROM_D or (tile is not None and int(tile) != 128):
        return "fp32"
    return "fp16" if d <= FP16_TO_D else "int8"


def levels(fmt: str, d: int) -> int:
    """The grid's level count L for dimensionality d (0, no grid, beyond ``MAX_D``)."""
    _, top, exact = FORMATS[fmt]
    return 0 if d > MAX_D else int(min(top, math.isqrt(exact // max(1, d))))


def padded_dims(fmt: str, d: int) -> int:
    """Coordinates per stored row: d padded with zeros to whole k-steps."""
    per = ROW_ALIGN // FORMATS[fmt][0]
    return max(per, -(-d // per) * per)


def scale(spread: float, L: int) -> float | None:
    """S = R / L, or None when the grid would leave the normal float64 range (or L is 0)."""
    if L <= 0:
        return None
    if spread == 0.0:
        return 1.0
    s = spread / L
    return s if SCALE_RANGE[0] <= s <= SCALE_RANGE[1] and math.isfinite(s) else None


def reach0(eps: float, S: float, d: int) -> float:
    """An upper bound on D / S for any pair the float64 rule accepts, D its exact distance.

    ``s <= fl(eps^2)`` bounds D by eps (1 + 1e-9) while nothing underflows; each square or sum that
    underflows loses at most 2^-1075 absolute, so in all D <= eps (1 + 1e-9) + sqrt(d + 1) 2^-537,
    bounded here by the larger sqrt(2 (d + 1)) 2^-536 (rows 1e-200 apart have s = 0: every pair of
    them is in the result).  Where eps^2 overflows, every pair whose sum overflows is in the result
    too (inf <= inf): no bound, inf (the filter then keeps every pair).
    """
    if not math.isfinite(float(eps) * float(eps)):
        return math.inf
    return float(reach_rows(float(eps), S, d))


def reach_rows(D, S: float, d: int, xp=np):
    """``reach0``'s bound for rows whose exact distance is at most ``D (1 + 1e-9)`` plus the underflow term
    (scalars or arrays, float64; ``D`` inf gives inf): what the kNN filter's reach per query uses."""
    return (D * (1.0 + 1e-9) + math.sqrt(2.0 * (d + 1)) * 2.0 ** -536) / S * (1.0 + 1e-9)


def quantise(y, S: float, L: int, xp=np):
    """(q, |q|^2, u) of centred float64 rows ``y``: integers on the grid, their exact squared norms,
    and each row's residual bound in units of S (see the module docstring)."""
    z = y / S
    q = xp.clip(xp.rint(z), -L, L)
    r = z - q
    u = xp.sqrt((r * r).sum(axis=1)) * (1.0 + 1e-9) + 1e-9 * (xp.sqrt((z * z).sum(axis=1)) + 1.0)
    qn2 = (q * q).sum(axis=1)  # integers below 2^53: exact in any order
    return q, qn2, u


def down32(x, xp=np):
    """float32 values <= x (float64): x rounded towards -inf."""
    y = x.astype(xp.float32)
    with np.errstate(over="ignore"):  # nextafter is computed for every row (overflowing at -FLT_MAX), used where needed
        return xp.where(y.astype(xp.float64) > x, xp.nextafter(y, xp.float32(-xp.inf)), y)


def up32(x, xp=np):
    """float32 values >= x (float64): x rounded towards +inf (inf beyond float32's range)."""
    with np.errstate(over="ignore"):
        y = x.astype(xp.float32)
    return xp.where(y.astype(xp.float64) < x, xp.nextafter(y, xp.float32(xp.inf)), y)


def row_reach(u, r0, xp=np):
    """``r0 + u`` rounded up to float32 (``r0 = 0`` for the B side; an array of per-row reaches for the kNN
    filter).  The 2^-50 factor covers the one float64 rounding of ``r0 + u``."""
    return up32((r0 + u) * (1.0 + 2.0 ** -50), xp)


#: the int8 thresholds: clamped below at -2^29 (see :func:`thresholds`), and past a side's end one no product reaches
INT8_FLOOR, INT8_BEYOND = -(1 << 29), 1 << 30


def thresholds(qn2_a, r_a, qn2_b, r_b, fmt: str, rows_a: int, rows_b: int, xp=np):
    """The kernel's thresholds ``(X, Y)``: per row of A and of B, ``x_a = (|q_a|^2 - F_a) / 2`` and
    ``y_b = (|q_b|^2 - H_b) / 2`` rounded down, int32 for int8 and float32 for fp16, each padded to whole
    tiles (``rows_a``, ``rows_b``) with a threshold no product reaches.

    ``F_a = r_a ((1 + lam) r_a + 2 c)`` and ``H_b = r_b^2 + (r_b - c)^2 / lam`` for any ``c`` and ``lam > 0``
    (module docstring); ``c`` is the mean ``r_b`` and ``lam`` the mean ``|r_b - c|`` over the mean finite
    ``r_a`` (:func:`bound_constants`), which makes the bound tight where ``r_a`` and ``r_b`` are typical.  In
    float64 every term of ``F`` and ``H`` is non-negative and takes at most five roundings, so ``x`` and ``y``
    are within ``(|q|^2 + F) 2^-51`` of their exact values (``|q|^2``, ``r``, ``c`` and ``lam`` are exact
    numbers), and ``x - (|q|^2 + F) 2^-49`` is below the exact threshold; then floor (int8) or rounding down to
    float32.
    int8: ``|G| <= d L^2 <= 2^28`` and ``x <= |q|^2 / 2 <= 2^27``; a threshold below ``-2^29`` is raised to it,
    which keeps every pair (``G - Y >= -2^28 - 2^27 > -2^29`` and ``G + 2^29 > 2^27 >= X``), so ``G - Y`` and
    the thresholds fit int32.  fp16: thresholds at least :data:`FP16_FLOOR` (``-2^64``), which keeps every pair
    (``|G|`` and ``|q|^2 / 2`` are at most ``2^24``) and leaves ``G - Y`` finite, so that a padded row's ``+inf``
    is never reached, and a padded column's ``G - inf`` never passes.  An infinite reach (``eps^2`` overflows)
    gives the lowest threshold: its row, or column, keeps every pair.
    """
    r_a = xp.asarray(r_a).astype(xp.float64)
    r_b = xp.asarray(r_b).astype(xp.float64)
    c, lam = bound_constants(r_a, r_b, xp)
    with np.errstate(invalid="ignore", over="ignore"):
        F = r_a * ((1.0 + lam) * r_a + 2.0 * c)
        H = r_b * r_b + (r_b - c) * (r_b - c) / lam
    return _rounded_down(qn2_a, F, fmt, rows_a, xp), _rounded_down(qn2_b, H, fmt, rows_b, xp)


def bound_constants(r_a, r_b, xp=np) -> tuple[float, float]:
    """``(c, lam)`` of :func:`thresholds`: the mean finite ``r_b``, and its mean deviation over the mean finite
    ``r_a``, kept in ``[2^-40, 1]`` (any ``lam > 0`` is sound: only the bound's tightness depends on these)."""
    finite_b = r_b[xp.isfinite(r_b)]
    c = float(finite_b.mean()) if finite_b.shape[0] else 0.0
    spread = float(xp.abs(finite_b - c).mean()) if finite_b.shape[0] else 0.0
    finite_a = r_a[xp.isfinite(r_a)]
    typical = float(finite_a.mean()) if finite_a.shape[0] else 0.0
    lam = spread / typical if spread > 0.0 and typical > 0.0 else 1.0
    return c, min(max(lam, 2.0 ** -40), 1.0)


#: fp16 thresholds are at least this: a threshold below keeps every pair anyway (|G|, |q|^2 <= 2^24), and with
#: it ``G - Y`` stays finite, so a padded row's ``+inf`` is never reached
FP16_FLOOR = -(2.0 ** 64)


def _rounded_down(qn2, F, fmt: str, rows: int, xp):
    """``(|q|^2 - F) / 2`` below its exact value, in the kernel's type, padded to ``rows`` (:func:`thresholds`)."""
    qn2 = xp.asarray(qn2, xp.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        x = (qn2 - F) / 2.0
        x = x - (qn2 + F) * 2.0 ** -49
    x = xp.where(xp.isnan(x), -xp.inf, x)  # (no reach here is NaN; were one, its row would keep every pair)
    n = int(qn2.shape[0])
    if fmt == "int8":
        out = xp.full(int(rows), INT8_BEYOND, xp.int32)
        out[:n] = xp.clip(xp.floor(x), INT8_FLOOR, 1 << 28).astype(xp.int32)
    else:
        out = xp.full(int(rows), xp.inf, xp.float32)
        out[:n] = down32(xp.maximum(x, FP16_FLOOR), xp)
    return out


def candidates(G, X, Y):
    """Which pairs (rows of a, columns of b) the filter keeps, from the exact integer products G (float64 or
    int64) and the thresholds (:func:`thresholds`, cut to the sides' rows): ``G - Y_b >= X_a``, in float64.

    The int8 kernel computes exactly this; fp16's rounds ``G - Y_b`` up, so it keeps every pair whose exact
    difference reaches ``X_a``.  The tests check on the CPU that this set holds every true pair."""
    return (np.asarray(G, np.float64) - np.asarray(Y, np.float64)[None, :]) >= np.asarray(X, np.float64)[:, None]
