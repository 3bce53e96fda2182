"""Named adversarial datasets for exact epsilon-join tests.

Every case is deterministic (fixed seeds) and small enough for the float64
brute-force oracle in ``tests/oracle.py`` to run in well under a second.  Each
case is used both as a self-join of ``a`` and as ``a x b``; ``b`` is a different
array (sometimes sharing rows with ``a``), or ``None`` for "join ``a`` with a
copy of itself" (see :meth:`Case.cross_b`).

Themes: exact ties at eps on lattices (spacing and eps exactly representable),
duplicates, coordinates offset by +-1e6, n in {0, 1, 2}, d in {1, 2, 3, 8, 64},
float32 and float64, eps larger than the data (all pairs) or far smaller than
any spacing (no pairs), points on multiples of eps (grid-cell boundaries),
negative coordinates and -0.0, pairs within a few ulps of eps, and pairs whose
membership depends on the order of the per-dimension summation.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Case", "CASES", "build_cases", "case_by_name"]


@dataclass(frozen=True, eq=False)
class Case:
    name: str
    a: np.ndarray
    b: np.ndarray | None
    eps: float

    @property
    def d(self) -> int:
        return int(self.a.shape[1])

    def cross_b(self) -> np.ndarray:
        """The B side of the A x B variant (a copy of ``a`` when ``b`` is None)."""
        return self.a.copy() if self.b is None else self.b

    def __repr__(self) -> str:  # short, for pytest output
        b = "None" if self.b is None else f"{self.b.shape}{self.b.dtype}"
        return f"Case({self.name!r}, a={self.a.shape}{self.a.dtype}, b={b}, eps={self.eps!r})"


# --------------------------------------------------------------------------- helpers


def _lattice(counts, spacing=1.0, start=0.0, dtype=np.float64) -> np.ndarray:
    """Points ``start + spacing * k`` for integer multi-indices ``0 <= k < counts``."""
    counts = tuple(counts)
    idx = np.indices(counts).reshape(len(counts), -1).T.astype(np.float64)
    return (np.float64(start) + np.float64(spacing) * idx).astype(dtype)


def _share(a: np.ndarray, fresh: np.ndarray, n_shared: int, seed: int) -> np.ndarray:
    """``fresh`` plus ``n_shared`` rows copied from ``a``, shuffled deterministically."""
    rng = np.random.default_rng(seed)
    n_shared = min(n_shared, len(a))
    shared = a[rng.choice(len(a), n_shared, replace=False)] if n_shared else a[:0]
    out = np.concatenate([fresh.astype(a.dtype), shared])
    return out[rng.permutation(len(out))]


def _clusters(n, d, k, sigma, seed, dtype, center_seed=0):
    centers = np.random.default_rng(center_seed).uniform(-1.0, 1.0, (k, d))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    return (centers[labels] + rng.normal(0.0, sigma, (n, d))).astype(dtype)


def _near_eps_pairs(d, n_pairs, seed, dtype, spread=1.0, offset=0.0, eps=1.0):
    """``n_pairs`` pairs ``(p, q)`` with ``|p - q|`` within rounding of ``eps``.

    ``q = dtype(p + eps * u)`` for random unit ``u``, so ``s`` straddles
    ``eps*eps`` by a few ulps of ``dtype``.  The p's are spread apart
    (10 eps per row index) so that the designed pairs dominate.
    """
    rng = np.random.default_rng(seed)
    p = rng.uniform(-spread, spread, (n_pairs, d)) + offset
    p[:, 0] += 10.0 * eps * np.arange(n_pairs)
    p = p.astype(dtype)
    u = rng.normal(size=(n_pairs, d))
    u /= np.sqrt((u * u).sum(axis=1, keepdims=True))
    q = (p.astype(np.float64) + eps * u).astype(dtype)
    return p, q


def _order_sensitive_pairs(d, n_pairs, seed):
    """float64 pairs, within an ulp or two of distance 1, whose ``s <= 1`` verdict
    differs between sequential summation and reversed-order or numpy pairwise
    summation (or with ``s == 1.0`` exactly), plus a few where the
    ``|p|^2 + |q|^2 - 2 p.q`` form gets it wrong."""
    rng = np.random.default_rng(seed)
    order_p, order_q, gemm_p, gemm_q = [], [], [], []
    n_order = n_gemm = 0
    for _ in range(100):
        m = 20000
        p = rng.uniform(-1.0, 1.0, (m, d))
        p[:, 0] += 4.0 * rng.integers(0, 1000, m)  # spread the pairs apart
        u = rng.normal(size=(m, d))
        u /= np.sqrt((u * u).sum(axis=1, keepdims=True))
        q = p + u
        diff = p - q
        sq = diff * diff
        s_seq = np.zeros(m)
        for k in range(d):
            s_seq += sq[:, k]
        s_rev = np.zeros(m)
        for k in reversed(range(d)):
            s_rev += sq[:, k]
        s_pair = sq.sum(axis=1)
        s_gemm = (p * p).sum(axis=1) + (q * q).sum(axis=1) - 2.0 * (p * q).sum(axis=1)
        inside = s_seq <= 1.0
        by_order = (inside != (s_rev <= 1.0)) | (inside != (s_pair <= 1.0)) | (s_seq == 1.0)
        idx = np.flatnonzero(by_order)[: n_pairs - n_order]
        order_p.append(p[idx])
        order_q.append(q[idx])
        n_order += idx.size
        idx = np.flatnonzero(~by_order & (inside != (s_gemm <= 1.0)))[: n_pairs // 4 - n_gemm]
        gemm_p.append(p[idx])
        gemm_q.append(q[idx])
        n_gemm += idx.size
        if n_order >= n_pairs and n_gemm >= n_pairs // 4:
            break
    return np.concatenate(order_p + gemm_p), np.concatenate(order_q + gemm_q)


def _interleave(p, q):
    """Self-join variant of designed pairs: rows p_0, q_0, p_1, q_1, ..."""
    out = np.empty((2 * len(p), p.shape[1]), dtype=np.result_type(p, q))
    out[0::2] = p
    out[1::2] = q
    return out


# --------------------------------------------------------------------------- cases


def build_cases() -> list[Case]:
    C = []
    add = lambda name, a, b, eps: C.append(Case(name, a, b, eps))  # noqa: E731
    f32, f64 = np.float32, np.float64

    # ---- integer / dyadic lattices: many pairs at exactly eps ----------------------------
    a = np.arange(-30, 31, dtype=f64)[:, None]
    b = np.concatenate([np.arange(-5, 45), np.arange(-5, 45) + 0.5])[:, None].astype(f64)
    add("lattice_d1_unit_f64", a, b, 1.0)

    a = _lattice((15, 15), 1.0, -7.0, f64)
    b = _share(a, _lattice((10, 10), 1.0, -3.5, f64), 30, seed=1)
    add("lattice_d2_unit_f64", a, b, 1.0)
    add("lattice_d2_unit_f32", a.astype(f32), b.astype(f32), 1.0)

    # eps = sqrt(2) in float64: eps*eps = 2.0000000000000004 > 2, so diagonals are in.
    add("lattice_d2_diag_sqrt2_f64", a, b, float(np.sqrt(2.0)))
    # eps = float32(sqrt(2)): eps*eps (float64) = 1.99999997 < 2, so diagonals are out;
    # a kernel that squares eps in float32 (giving 2.0f) would wrongly include them.
    add("lattice_d2_diag_sqrt2f32_f32", a.astype(f32), b.astype(f32), float(np.float32(np.sqrt(2.0))))

    a = _lattice((7, 7, 7), 1.0, -3.0, f32)
    b = _share(a, _lattice((5, 5, 5), 1.0, 0.5, f32), 40, seed=2)
    add("lattice_d3_unit_f32", a, b, 1.0)

    a = _lattice((8, 8, 8), 0.5, -2.0, f64)
    b = _share(a, _lattice((6, 6, 6), 0.5, -1.25, f64), 50, seed=3)
    add("lattice_d3_half_f64", a, b, 0.5)

    a = _lattice((20, 20), 0.5, -5.0, f32)
    b = _share(a, _lattice((12, 12), 0.5, -2.25, f32), 50, seed=4)
    add("lattice_d2_half_f32", a, b, 0.5)

    a = _lattice((7, 7, 7), 1.0, -3.0, f64)
    b = _lattice((6, 6, 6), 1.0, -1.0, f64)
    add("lattice_d3_eps2_f64", a, b, 2.0)

    a = _lattice((2,) * 8, 1.0, 0.0, f64)  # hypercube corners: s = Hamming distance
    b = a[::3].copy()
    b[:, 0] += 1.0  # first coordinate in {1, 2}
    add("hypercube_d8_eps1_f64", a, b, 1.0)
    add("hypercube_d8_eps2_f32", a.astype(f32), b.astype(f32), 2.0)

    rng = np.random.default_rng(5)
    a = rng.integers(0, 2, (300, 64)).astype(f64)
    b = _share(a, rng.integers(0, 2, (200, 64)).astype(f64), 20, seed=6)
    add("binary_d64_eps5_f64", a, b, 5.0)  # s is a Hamming distance: ties at s == 25
    add("binary_d64_eps5_f32", a.astype(f32), b.astype(f32), 5.0)

    # ---- large offsets -------------------------------------------------------------------
    a = _lattice((15, 15), 1.0, 1e6, f64)
    b = _share(a, _lattice((10, 10), 1.0, 1e6 + 2.5, f64), 30, seed=7)
    add("lattice_d2_offset1e6_f64", a, b, 1.0)

    a = _lattice((20, 20), 0.5, 1e6, f32)  # ulp(1e6) in float32 is 0.0625: exact
    b = _share(a, _lattice((12, 12), 0.5, 1e6 + 1.25, f32), 30, seed=8)
    add("lattice_d2_offset1e6_half_f32", a, b, 0.5)

    a = _lattice((7, 7, 7), 1.0, -1e6, f32)
    b = _share(a, _lattice((5, 5, 5), 1.0, -1e6 + 2.0, f32), 30, seed=9)
    add("lattice_d3_offset_neg1e6_f32", a, b, 1.0)

    rng = np.random.default_rng(10)
    a = (1e6 + rng.uniform(0, 4, (600, 2))).astype(f32)  # quantised to 1/16
    b = _share(a, (1e6 + rng.uniform(0, 4, (400, 2))).astype(f32), 40, seed=11)
    add("uniform_d2_offset1e6_f32", a, b, 0.125)

    rng = np.random.default_rng(12)
    a = (1e6 + rng.uniform(0, 1, (500, 3))).astype(f64)
    b = (1e6 + rng.uniform(0, 1, (400, 3))).astype(f64)
    add("uniform_d3_offset1e6_f64", a, b, 0.07)

    rng = np.random.default_rng(13)
    a = (1e3 + _clusters(300, 8, 6, 0.05, seed=14, dtype=f64)).astype(f32)
    b = _share(a, (1e3 + _clusters(200, 8, 6, 0.05, seed=19, dtype=f64)).astype(f32), 20, seed=15)
    add("clustered_d8_offset1e3_f32", a, b, 0.2)

    # ---- duplicates ----------------------------------------------------------------------
    rng = np.random.default_rng(16)
    base = np.array([[0.1, 0.2, 0.3]])
    a = np.concatenate([np.repeat(base, 40, 0), np.repeat(base + [0, 0, 0.05], 20, 0),
                        rng.uniform(-1, 1, (100, 3))])[rng.permutation(160)]
    b = np.concatenate([np.repeat(base, 30, 0), rng.uniform(-1, 1, (50, 3))])
    add("duplicates_d3_f64", a, b, 0.05)

    a = np.full((120, 2), 0.75, dtype=f32)
    b = np.full((50, 2), 0.75, dtype=f32)
    add("all_identical_d2_f32", a, b, 1e-3)

    rng = np.random.default_rng(17)
    a = (1e6 + rng.integers(0, 4, (200, 2))).astype(f32)  # 16 distinct points, many copies
    b = (1e6 + rng.integers(0, 4, (80, 2))).astype(f32)
    add("duplicates_offset1e6_d2_f32", a, b, 1.0)

    rng = np.random.default_rng(18)
    a = np.repeat(rng.uniform(-1, 1, (10, 64)), 8, axis=0)
    b = np.repeat(a[::16], 3, axis=0)
    add("duplicates_d64_f64", a, b, 1e-9)

    # ---- n in {0, 1, 2} ------------------------------------------------------------------
    add("empty_a_d3_f64", np.empty((0, 3), f64), np.zeros((5, 3), f64), 1.0)
    add("empty_b_d2_f32", np.zeros((5, 2), f32), np.empty((0, 2), f32), 1.0)
    add("empty_both_d1_f64", np.empty((0, 1), f64), np.empty((0, 1), f64), 1.0)
    add("single_d1_f64", np.array([[2.0]]), np.array([[3.0]]), 1.0)
    add("single_d64_f32", np.ones((1, 64), f32), np.concatenate([np.ones((1, 64)), np.zeros((2, 64))]).astype(f32), 8.0)
    add("two_at_eps_d2_f64", np.array([[0.0, 0.0], [3.0, 4.0]]), np.array([[3.0, 4.0], [0.0, -5.0], [-3.0, 4.0]]), 5.0)
    nx = np.nextafter(1.0, 2.0)
    add("two_just_outside_d1_f64", np.array([[0.0], [nx]]), np.array([[nx], [-nx], [1.0]]), 1.0)
    nx32 = np.nextafter(f32(1.0), f32(2.0))
    add("two_just_outside_d3_f32", np.array([[0, 0, 0], [nx32, 0, 0]], f32), np.array([[0, nx32, 0], [0, 0, 1]], f32), 1.0)

    # ---- random data in each d -----------------------------------------------------------
    rng = np.random.default_rng(20)
    a = rng.uniform(-1, 1, (800, 1))
    b = _share(a, rng.uniform(-1, 1, (500, 1)), 50, seed=21)
    add("uniform_d1_f64", a, b, 0.002)

    rng = np.random.default_rng(22)
    a = rng.uniform(0, 1, (3000, 2))
    b = _share(a, rng.uniform(0, 1, (2000, 2)), 100, seed=23)
    add("uniform_d2_f64", a, b, 0.02)
    add("uniform_d2_f32", a.astype(f32), b.astype(f32), 0.02)

    rng = np.random.default_rng(24)
    a = rng.uniform(0, 1, (2000, 3)).astype(f32)
    b = _share(a, rng.uniform(0, 1, (1500, 3)), 100, seed=25)
    add("uniform_d3_f32", a, b, 0.05)
    add("uniform_d3_f64", a.astype(f64) * 3 - 1.5, b.astype(f64) * 3 - 1.5, 0.15)

    rng = np.random.default_rng(26)
    a = rng.uniform(-1, 1, (1500, 2))
    a[:5] = [[-0.0, 0.0], [0.0, -0.0], [-0.025, 0.0], [0.025, 0.0], [0.0, -0.05]]
    b = _share(a, rng.uniform(-1, 1, (800, 2)), 50, seed=27)
    add("uniform_d2_straddle_zero_f64", a, b, 0.05)

    add("clustered_d8_f32", _clusters(600, 8, 10, 0.05, 30, f32), _clusters(400, 8, 10, 0.05, 31, f32), 0.2)
    add("clustered_d8_f64", _clusters(600, 8, 10, 0.05, 32, f64), _clusters(400, 8, 10, 0.05, 33, f64), 0.2)
    s64 = 0.05 * np.sqrt(2 * 64)  # about the median within-cluster distance
    add("clustered_d64_f32", _clusters(400, 64, 8, 0.05, 34, f32), _clusters(300, 64, 8, 0.05, 35, f32), float(s64))
    a = _clusters(400, 64, 8, 0.05, 36, f64)
    add("clustered_d64_f64", a, _share(a, _clusters(300, 64, 8, 0.05, 37, f64), 30, seed=38), float(s64))

    # ---- eps extremes --------------------------------------------------------------------
    rng = np.random.default_rng(40)
    add("eps_huge_all_pairs_d3_f64", rng.uniform(-1, 1, (300, 3)), rng.uniform(-1, 1, (200, 3)), 100.0)
    add("eps_huge_all_pairs_d8_f32", rng.uniform(0, 5, (200, 8)).astype(f32), rng.uniform(0, 5, (150, 8)).astype(f32), 1e3)
    add("eps_huge_all_pairs_d64_f64", rng.uniform(-1, 1, (150, 64)), rng.uniform(-1, 1, (100, 64)), 1e4)
    a = _lattice((15, 15), 1.0, -7.0, f64)
    add("eps_tiny_no_pairs_d2_f64", a, a[::2] + 0.5, 1e-9)
    a = rng.uniform(0, 1, (1000, 3)).astype(f32)
    add("eps_tiny_no_pairs_d3_f32", a, rng.uniform(0, 1, (500, 3)).astype(f32), 1e-7)
    # eps*eps underflows to 0.0 in float64: only exact duplicates (s == 0) qualify.
    a = np.concatenate([rng.uniform(0, 1, (50, 2)), np.repeat([[0.5, 0.25]], 5, 0)])
    add("eps_underflow_duplicates_d2_f64", a, np.repeat([[0.5, 0.25], [0.1, 0.1]], 3, 0), 1e-200)

    # ---- points on multiples of eps (grid-cell boundaries) --------------------------------
    # k * 0.1 is not exact; whether adjacent points are within eps=0.1 is decided by rounding.
    a = (np.arange(-50, 51) * 0.1)[:, None]
    add("multiples_of_eps_0.1_d1_f64", a, (np.arange(-20, 80) * 0.1 + 0.05)[:, None], 0.1)
    g = np.indices((20, 20)).reshape(2, -1).T - 10
    add("multiples_of_eps_0.1_d2_f32", (g * 0.1).astype(f32), (g[::3] * 0.1 + 0.1).astype(f32), 0.1)
    g = np.indices((8, 8, 8)).reshape(3, -1).T - 4
    add("multiples_of_eps_third_d3_f64", g / 3.0, (g[::2] + 1) / 3.0, 1.0 / 3.0)
    g = np.indices((25, 25)).reshape(2, -1).T - 12
    add("multiples_of_eps_0.3_d2_f64", g * 0.3, g[1::4] * 0.3 + 0.15, 0.3)
    rng = np.random.default_rng(41)
    snapped = rng.integers(-40, 40, (400, 2)) * 0.25
    a = np.concatenate([snapped, rng.uniform(-10, 10, (400, 2))])
    add("cell_boundaries_mixed_d2_f64", a, np.concatenate([snapped[::4] + 0.25, rng.uniform(-10, 10, (200, 2))]), 0.25)
    a = np.array([[-0.25], [0.25], [-0.0], [0.0], [-0.5], [0.5], [-0.75], [0.75]])
    add("straddle_zero_d1_f64", a, np.array([[0.0], [-0.5], [1.0]]), 0.5)

    # ---- distances within a few ulps of eps ----------------------------------------------
    ks = np.arange(-4, 5)
    vals = 1.0 + ks * np.finfo(f64).eps
    add("ulp_ladder_d1_f64", np.array([[0.0], [-0.0]]), np.concatenate([vals, -vals])[:, None], 1.0)
    vals32 = (1.0 + ks * np.finfo(f32).eps).astype(f32)
    add("ulp_ladder_d1_f32", np.array([[0.0]], f32), np.concatenate([vals32, -vals32])[:, None], 1.0)
    # (64 and 96: either side of within.WHOLE_ROWS, the CPU kernels' whole sum and early exit)
    for d, dtype, name in [(3, f64, "f64"), (3, f32, "f32"), (8, f32, "f32"), (64, f32, "f32"), (96, f32, "f32")]:
        p, q = _near_eps_pairs(d, 150, seed=50 + d, dtype=dtype)
        add(f"near_eps_d{d}_{name}", _interleave(p, q), q[::-1].copy(), 1.0)
    p, q = _near_eps_pairs(8, 150, seed=60, dtype=f32, offset=1e3)
    add("near_eps_offset1e3_d8_f32", _interleave(p, q), q.copy(), 1.0)
    p, q = _near_eps_pairs(2, 150, seed=61, dtype=f64, offset=1e6, eps=0.01)
    add("near_eps_offset1e6_d2_f64", _interleave(p, q), q.copy(), 0.01)

    # ---- verdict depends on summation order ----------------------------------------------
    for d in (3, 8, 64, 96):
        p, q = _order_sensitive_pairs(d, 40, seed=70 + d)
        add(f"summation_order_d{d}_f64", _interleave(p, q), q.copy(), 1.0)

    # ---- mixed input dtypes (A float32, B float64): decided on the stored values ------------
    rng = np.random.default_rng(80)
    a = rng.uniform(0, 1, (500, 3)).astype(f32)
    b = _share(a.astype(f64), rng.uniform(0, 1, (300, 3)), 30, seed=81) + 1e-9
    add("mixed_dtype_f32_f64_d3", a, b, 0.08)

    names = [c.name for c in C]
    assert len(names) == len(set(names)), "case names must be unique"
    return C


CASES: list[Case] = build_cases()


def case_by_name(name: str) -> Case:
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(name)


#: radii of the lattice property tests: the lattice's own spacings, so pairs fall at exactly eps across cell faces
LATTICE_EPS = (0.25, 0.5, 1e-9)


def lattice_points(max_rows: int = 80, max_d: int = 5):
    """A hypothesis strategy: up to ``max_rows`` points of 1 to ``max_d`` dims on a coarse lattice (duplicates,
    coordinates on cell faces, one ulp above 1)."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    return hnp.arrays(np.float64, st.tuples(st.integers(0, max_rows), st.integers(1, max_d)),
                      elements=st.sampled_from([0.0, 0.2, 0.25, 0.5, 0.7, 0.75, 1.0, 1.0 + 2 ** -52, 1.5, 3.0]))
