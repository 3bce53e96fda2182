"""The exact decision every kernel shares.

A pair is in the result iff ``s <= eps * eps``, where ``s`` is the float64 sum,
accumulated over dimensions 0..d-1 in that order, of ``(p_k - q_k) ** 2`` (with
``p``, ``q`` the stored values converted to float64) and ``eps * eps`` is
rounded to float64.  The ``<=`` comparison of squared distances is
``cKDTree.query_pairs``'; the fixed dimension-order sum is daskjoin's own (cKDTree sums
in four lanes from d = 8 on: docs/exactness.md).  Fixing the summation order makes every
kernel, backend and partitioning agree bit for bit on pairs at exactly ``eps``.

The CPU kernels' compiled form of the rule is :func:`.within.within` (Numba, kept apart so
that what plans and runs a GPU join imports no Numba).
"""
from __future__ import annotations


def eps_squared(eps: float) -> float:
    return float(eps) * float(eps)


U32 = 2.0 ** -24


def error_constants(d: int) -> tuple[float, float]:
    """(c1, c2) of the float32 GEMM filters (``brute_gpu``, ``knn_gemm``) for dimensionality d: twice
    the bounds u/(1-u) on a coordinate's rounding and gamma_{d+4} on the error of
    |x~|^2 + |y~|^2 - 2 x~.y~ in float32, relative to (|x~| + |y~|)^2."""
    m = d + 4
    if m * U32 >= 0.5:  # gamma_m needs m u < 1; past 2^23 dimensions the bound would be vacuous or negative
        raise ValueError(f"the float32 filters' error bound holds below 2**23 - 4 dimensions, got d={d}")
    gamma = m * U32 / (1.0 - m * U32)
    return 2.0 * U32, 2.0 * gamma


#: added to every norm in the float32 filters' bounds: covers float32 underflow, gradual or flushed to zero
#: (CuPy compiles its kernels with -ftz=true, cuBLAS may flush, a library may set FTZ/DAZ on the CPU): each
#: product or coordinate below 2^-126 may be lost, at most 2d 2^-126 on |x~|^2 + |y~|^2 - 2 x~.y~, against
#: the at least (d + 4) 2^-123 that the doubled gamma_{d+4} adds on (2 NORM_FLOOR)^2 (found by review: 2^-60
#: covered gradual underflow only)
NORM_FLOOR = 2.0 ** -50
