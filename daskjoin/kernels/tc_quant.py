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
- ``G = q_a . q_b`` exactly: int8 ``mma`` accumulates in int32 (integer arithmetic; ``d L^2 < 2^31``),
  and the fp16 grid keeps ``d L^2 <= 2^24`` and ``L <= 2048``, so every product and every partial
  sum, in any order, is an integer of at most 24 bits, exact in the fp32 accumulator (the tests
  check both on the device, ``tests/test_brute_tc_gpu.py``);
- so ``|q_a - q_b|^2 = |q_a|^2 + |q_b|^2 - 2 G`` exactly (integers below 2^53 in float64).

For a true pair (float64 ``s <= eps^2``, so the exact distance ``D <= eps (1 + 1e-9)`` plus a term
for underflow, see :func:`reach0`), ``(x_a - c)/S - (x_b - c)/S = (q_a - q_b) + (e_a - e_b)`` gives,
by the triangle inequality, ``|q_a - q_b| <= D / S + u_a + u_b <= reach0 + u_a + u_b``.
The kernel keeps a pair whenever ``|q_a - q_b|^2 <= (r_a + r_b)^2`` with ``r_a >= reach0 + u_a`` and
``r_b >= u_b`` rounded up to float32, evaluating it in float32 with every step rounded towards keeping
the pair (:func:`kernel_bounds`, :func:`candidates`), then decides it exactly in float64.  No true pair
is filtered out.

The bound is tight when ``u`` is small against ``eps / S``: ``u`` is about ``sqrt(d / 12)`` (at
most ``sqrt(d) / 2``), so the filter passes pairs up to about ``eps + 2 sqrt(d / 12) R / L``.
A per-dimension scale would break the exact products (the GEMM needs one scale for the metric),
so the scale is global and the centre is the box centre, which halves ``R``.
"""
from __future__ import annotations

import math

import numpy as np

#: the tensor-core filters: name -> (bytes per coordinate, largest level count, exact while d L^2 <= this)
FORMATS = {"int8": (1, 127, 2 ** 31 - 1), "fp16": (2, 2048, 2 ** 24)}
#: no filter for data whose spread leaves the normal float64 range on the grid (the fp32 filter takes it)
SCALE_RANGE = (2.0 ** -1000, 2.0 ** 1000)
ROW_ALIGN = 32  # bytes: one k-step of the mma instructions


#: the 1e-9 margins of the residual and of reach0 hold for (d + 3) 2^-53 < 1e-9: far above this
MAX_D = 1_000_000
#: ``filter="auto"`` of GPU brute (why: planning/cost.py, which mirrors these and gives the reasons)
TC_FROM_D = 64
FP16_TO_D = 260


def auto_filter(d: int, tile: int | None = None) -> str:
    """fp32 below ``TC_FROM_D`` dimensions or for a tile size other than 128, fp16 up to ``FP16_TO_D``, int8 beyond."""
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
    return xp.where(y.astype(xp.float64) > x, xp.nextafter(y, xp.float32(-xp.inf)), y)


def up32(x, xp=np):
    """float32 values >= x (float64): x rounded towards +inf (inf beyond float32's range)."""
    with np.errstate(over="ignore"):
        y = x.astype(xp.float32)
    return xp.where(y.astype(xp.float64) < x, xp.nextafter(y, xp.float32(xp.inf)), y)


def kernel_bounds(qn2, u, r0, xp=np):
    """The float32 per-row values the kernel reads: |q|^2 rounded down and ``r0 + u`` rounded up
    (``r0 = 0`` for the B side; an array of per-row reaches for the kNN filter).  The 2^-50 factor covers the one float64 rounding of ``r0 + u``."""
    return down32(qn2, xp), up32((r0 + u) * (1.0 + 2.0 ** -50), xp)


def candidates(q_a, q_b, G, r_a, r_b):
    """Which pairs (rows of a, columns of b) the filter keeps, from the kernel's float32 row values
    (:func:`kernel_bounds`) and the exact integer products G; in float64, in numpy.

    The kernel keeps a superset of these: it rounds ``q_a + q_b - 2 G`` down and ``(r_a + r_b)^2``
    up in float32.  The tests check on the CPU that this set holds every true pair."""
    s = q_a.astype(np.float64)[:, None] + q_b.astype(np.float64)[None, :] - 2.0 * G
    reach = r_a.astype(np.float64)[:, None] + r_b.astype(np.float64)[None, :]
    return s <= reach * reach * (1.0 + 2.0 ** -50)
