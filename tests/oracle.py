"""Brute-force reference ("oracle") for exact epsilon-similarity joins.

Exactness definition (DESIGN.md section 3, made bit-precise)
------------------------------------------------------------
A pair ``(p, q)`` is in the result iff ``s <= eps * eps`` where

* ``s`` is the float64 sum over dimensions ``k = 0 .. d-1``, accumulated
  sequentially **in that order** (``s = ((0 + t_0) + t_1) + ... + t_{d-1}``), of
  ``t_k = (float64(p_k) - float64(q_k)) ** 2``, every operation rounded to float64;
* ``eps * eps`` is computed in float64 (``float64(eps) * float64(eps)``).

The ``<=`` comparison of squared distances is ``scipy.spatial.cKDTree.query_pairs``';
the dimension-order sum is daskjoin's own (cKDTree sums in four lanes from d = 8 on,
docs/exactness.md); fixing the summation order makes every backend, method and
partitioning bit-identical on boundary cases (pairs whose distance is exactly,
or within rounding of, eps).

* Self-join: pairs ``(i, j)`` with ``i < j``, each exactly once, never ``(i, i)``.
* A x B: ``i`` indexes A, ``j`` indexes B.
* Ids are int64 row numbers; distances are ``float32(sqrt(s))``.

The oracle is deliberately naive: it is float64 throughout and vectorised over
blocks of rows only (so memory stays bounded), with the per-dimension
accumulation written out as an explicit Python loop over ``k``: numpy's
``.sum(axis=...)`` uses pairwise summation, which changes the order of the
additions and hence the rounding.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "oracle_self_pairs",
    "oracle_cross_pairs",
    "oracle_self_count",
    "oracle_cross_count",
    "squared_distances",
    "pair_set",
    "assert_same_pairs",
]

# Elements of the (rows x m) float64 accumulator per block: 4M doubles = 32 MiB.
_BLOCK_ELEMENTS = 1 << 22


def _as_points(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (n, d) array, got shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.float64)


def _eps2(eps) -> np.float64:
    e = np.float64(eps)
    return e * e


def _block_rows(m: int) -> int:
    return max(1, min(1024, _BLOCK_ELEMENTS // max(m, 1)))


def _accumulate(a_blk: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sequentially accumulated float64 squared distances, shape (len(a_blk), len(b))."""
    acc = np.zeros((a_blk.shape[0], b.shape[0]), dtype=np.float64)
    for k in range(a_blk.shape[1]):
        diff = a_blk[:, k, None] - b[None, :, k]
        acc += diff * diff  # one rounding for the square, one for the add: k-order kept
    return acc


def squared_distances(p, q) -> np.ndarray:
    """Float64 ``s`` for row-aligned pairs ``p[r]``, ``q[r]`` (same accumulation order)."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    p = np.atleast_2d(p)
    q = np.atleast_2d(q)
    s = np.zeros(p.shape[0], dtype=np.float64)
    for k in range(p.shape[1]):
        diff = p[:, k] - q[:, k]
        s += diff * diff
    return s


def _finish(i_parts, j_parts, s_parts):
    if i_parts:
        i = np.concatenate(i_parts).astype(np.int64, copy=False)
        j = np.concatenate(j_parts).astype(np.int64, copy=False)
        s = np.concatenate(s_parts)
    else:
        i = np.empty(0, np.int64)
        j = np.empty(0, np.int64)
        s = np.empty(0, np.float64)
    order = np.lexsort((j, i))  # already sorted by construction; cheap insurance
    i, j, s = i[order], j[order], s[order]
    dist = np.sqrt(s).astype(np.float32)
    return i, j, dist


def oracle_cross_pairs(a, b, eps):
    """All ``(i, j)`` with ``s(a[i], b[j]) <= eps*eps``, sorted by ``(i, j)``.

    Returns ``(i: int64, j: int64, dist: float32)``.  See the module docstring
    for the exact definition of ``s``.
    """
    a = _as_points(a, "a")
    b = _as_points(b, "b")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a has {a.shape[1]} columns, b has {b.shape[1]}")
    eps2 = _eps2(eps)
    n, m = a.shape[0], b.shape[0]
    i_parts, j_parts, s_parts = [], [], []
    if n and m:
        step = _block_rows(m)
        for r0 in range(0, n, step):
            acc = _accumulate(a[r0:r0 + step], b)
            ii, jj = np.nonzero(acc <= eps2)
            i_parts.append(ii + r0)
            j_parts.append(jj)
            s_parts.append(acc[ii, jj])
    return _finish(i_parts, j_parts, s_parts)


def oracle_self_pairs(x, eps):
    """All ``(i, j)``, ``i < j``, with ``s(x[i], x[j]) <= eps*eps``, sorted by ``(i, j)``.

    Returns ``(i: int64, j: int64, dist: float32)``.  See the module docstring
    for the exact definition of ``s``.
    """
    x = _as_points(x, "x")
    eps2 = _eps2(eps)
    n = x.shape[0]
    i_parts, j_parts, s_parts = [], [], []
    if n > 1:
        step = _block_rows(n)
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            # rows r0..r1-1 against columns r0..n-1 (columns below r0 can never have j > i)
            acc = _accumulate(x[r0:r1], x[r0:])
            ii, jj = np.nonzero(acc <= eps2)
            keep = jj > ii  # column jj is global row r0 + jj, row ii is global r0 + ii
            ii, jj = ii[keep], jj[keep]
            i_parts.append(ii + r0)
            j_parts.append(jj + r0)
            s_parts.append(acc[ii, jj])
    return _finish(i_parts, j_parts, s_parts)


def oracle_self_count(x, eps) -> int:
    return int(oracle_self_pairs(x, eps)[0].size)


def oracle_cross_count(a, b, eps) -> int:
    return int(oracle_cross_pairs(a, b, eps)[0].size)


# --------------------------------------------------------------------------- comparisons


def pair_set(i, j) -> np.ndarray:
    """``(n, 2)`` int64 array of the pairs, sorted lexicographically by ``(i, j)``.

    Duplicates are kept (so that a comparison can detect them).  Use
    ``set(map(tuple, pair_set(i, j).tolist()))`` where a Python set is wanted.
    """
    i = np.asarray(i).astype(np.int64, copy=False).ravel()
    j = np.asarray(j).astype(np.int64, copy=False).ravel()
    if i.shape != j.shape:
        raise ValueError(f"i and j differ in length: {i.size} vs {j.size}")
    order = np.lexsort((j, i))
    return np.stack([i[order], j[order]], axis=1) if i.size else np.empty((0, 2), np.int64)


def _unpack(result, what):
    try:
        i, j, dist = result
    except (TypeError, ValueError) as exc:
        raise AssertionError(f"{what} is not an (i, j, dist) triple: {type(result).__name__}") from exc
    return i, j, dist


def _describe_pairs(pairs, dist_lookup, a, b, eps2, limit=10):
    lines = []
    for p, q in pairs[:limit]:
        text = f"    ({p}, {q})"
        if a is not None:
            other = a if b is None else b
            s = float(squared_distances(a[p], other[q])[0])
            text += f"  dist64={s ** 0.5!r}  s={s!r}"
            if eps2 is not None:
                text += f"  s-eps^2={s - float(eps2)!r}"
        elif (p, q) in dist_lookup:
            text += f"  dist32={dist_lookup[(p, q)]!r}"
        lines.append(text)
    if len(pairs) > limit:
        lines.append(f"    ... and {len(pairs) - limit} more")
    return lines


def _float32_ulps(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Distance in float32 ulps between non-negative float32 arrays."""
    xi = np.ascontiguousarray(x, np.float32).view(np.int32).astype(np.int64)
    yi = np.ascontiguousarray(y, np.float32).view(np.int32).astype(np.int64)
    return np.abs(xi - yi)


def assert_same_pairs(got, expected, *, context="", a=None, b=None, eps=None, check_dist=True):
    """Assert that ``got`` and ``expected`` (each ``(i, j, dist)``) hold the same pairs.

    * ``got``'s ``i`` and ``j`` must be int64 and ``dist`` float32 (or ``None``,
      when the kernel was asked for no distances); all three of equal length.
    * The pair sets must be equal and ``got`` must hold no duplicate pair; the
      order of ``got`` is free.
    * Each ``got`` distance must be within 1 float32 ulp of ``expected``'s
      (``float32(sqrt(s))``).

    On failure the message gives the counts and up to 10 missing and 10 extra
    pairs.  Pass the inputs (``a``, and ``b`` for A x B; ``b=None`` means a
    self-join of ``a``) and ``eps`` to see each such pair's float64 distance
    and ``s - eps*eps``.
    """
    where = f"[{context}] " if context else ""
    gi, gj, gd = _unpack(got, "got")
    ei, ej, ed = _unpack(expected, "expected")
    gi, gj = np.asarray(gi), np.asarray(gj)
    problems = []
    if gi.dtype != np.int64:
        problems.append(f"i has dtype {gi.dtype}, expected int64")
    if gj.dtype != np.int64:
        problems.append(f"j has dtype {gj.dtype}, expected int64")
    if gd is not None:
        gd = np.asarray(gd)
        if gd.dtype != np.float32:
            problems.append(f"dist has dtype {gd.dtype}, expected float32")
    if gi.ndim != 1 or gj.ndim != 1 or gi.shape != gj.shape or (gd is not None and gd.shape != gi.shape):
        problems.append(
            f"i, j, dist must be 1-D of equal length, got shapes {gi.shape}, {gj.shape}, "
            f"{None if gd is None else gd.shape}"
        )
    if problems:
        raise AssertionError(where + "; ".join(problems))

    eps2 = None if eps is None else _eps2(eps)
    if a is not None:
        a = np.asarray(a, dtype=np.float64)
        b = None if b is None else np.asarray(b, dtype=np.float64)

    order = np.lexsort((gj, gi))
    g_pairs = np.stack([gi[order], gj[order]], axis=1) if gi.size else np.empty((0, 2), np.int64)
    g_dist = None if gd is None else gd[order]
    e_pairs = pair_set(ei, ej)
    e_order = np.lexsort((np.asarray(ej), np.asarray(ei)))
    e_dist = np.asarray(ed)[e_order]

    dup = np.zeros(len(g_pairs), bool)
    if len(g_pairs) > 1:
        dup[1:] = (g_pairs[1:] == g_pairs[:-1]).all(axis=1)
    if not np.array_equal(g_pairs, e_pairs) or dup.any():
        g_set = set(map(tuple, g_pairs.tolist()))
        e_set = set(map(tuple, e_pairs.tolist()))
        missing = sorted(e_set - g_set)
        extra = sorted(g_set - e_set)
        g_lookup = {} if g_dist is None else dict(zip(map(tuple, g_pairs.tolist()), g_dist.tolist()))
        e_lookup = dict(zip(map(tuple, e_pairs.tolist()), e_dist.tolist()))
        lines = [
            f"{where}pair sets differ: got {len(g_pairs)} pairs ({len(g_set)} distinct), "
            f"expected {len(e_pairs)}; {len(missing)} missing, {len(extra)} extra, "
            f"{int(dup.sum())} duplicated"
            + ("" if eps is None else f"; eps={float(eps)!r} eps^2={float(eps2)!r}")
        ]
        if missing:
            lines.append("  missing (in oracle, not in result):")
            lines += _describe_pairs(missing, e_lookup, a, b, eps2)
        if extra:
            lines.append("  extra (in result, not in oracle):")
            lines += _describe_pairs(extra, g_lookup, a, b, eps2)
        if dup.any():
            dups = [tuple(p) for p in g_pairs[dup].tolist()]
            lines.append(f"  duplicated: {dups[:10]}" + (" ..." if len(dups) > 10 else ""))
        raise AssertionError("\n".join(lines))

    if check_dist and g_dist is not None:
        ulps = _float32_ulps(g_dist, e_dist)
        bad = np.flatnonzero(ulps > 1)
        if bad.size:
            lines = [f"{where}{bad.size} of {len(g_pairs)} distances are more than 1 float32 ulp off:"]
            for r in bad[:10]:
                lines.append(
                    f"    ({g_pairs[r, 0]}, {g_pairs[r, 1]}): got {g_dist[r]!r}, "
                    f"expected {e_dist[r]!r} ({ulps[r]} ulps)"
                )
            raise AssertionError("\n".join(lines))
