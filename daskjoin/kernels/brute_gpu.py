"""``brute`` method, GPU driver: tiled float32 GEMM as a filter, exact float64 decision (``cuda/brute.cu``).

Rows are shifted to the centre of their common box (which keeps norms small even
for coordinates offset by 1e6) and rounded to float32 x~.  For a true pair
(float64 squared distance <= eps^2, so D = |x - y| <= eps (1 + 1e-9)):

- rounding to float32 moves each coordinate by at most u|x_k| (u = 2^-24), so
  |x~ - y~| <= D + u (|x| + |y|), and |x| <= |x~| / (1 - u);
- the float32 value s = |x~|^2 + |y~|^2 - 2 x~.y~ (norms and dot product by any
  summation order, FMA or not) is within gamma_{d+4} (|x~| + |y~|)^2 of |x~ - y~|^2,
  gamma_m = m u / (1 - m u).

So s <= (eps (1 + 1e-9) + c1 (|x~| + |y~|))^2 + c2 (|x~| + |y~|)^2 with
c1 = 2u and c2 = 2 gamma_{d+4} (both twice the bound) keeps every true pair;
each candidate is then decided exactly in float64.  TF32 would break the bound,
so it is refused (CuPy uses it only when CUPY_TF32=1).
"""
from __future__ import annotations

import os

import numpy as np

from .exact import eps_squared
from .gpu_common import cupy, device_budget_bytes, kernel

U32 = 2.0 ** -24
BLOCK = 256


def error_constants(d: int) -> tuple[float, float]:
    """(c1, c2) of the module docstring for dimensionality d."""
    m = d + 4
    gamma = m * U32 / (1.0 - m * U32)
    return 2.0 * U32, 2.0 * gamma


class GpuBruteJoin:
    """A prepared GPU brute-force join; pairs on the host, in original row ids."""

    def __init__(self, a, b, eps: float, *, tile_bytes: int | None = None):
        if os.environ.get("CUPY_TF32", "0") not in ("", "0"):
            raise RuntimeError("CUPY_TF32 is set: TF32 products break the brute kernel's error bound; unset it")
        cp = cupy()
        self.selfjoin = b is None
        self.A = cp.ascontiguousarray(cp.asarray(a, dtype=cp.float64))
        self.B = self.A if b is None else cp.ascontiguousarray(cp.asarray(b, dtype=cp.float64))
        self.n, self.m = int(self.A.shape[0]), int(self.B.shape[0])
        self.d = int(self.A.shape[1])
        self.eps = float(eps)
        self.eps2 = eps_squared(eps)
        sides = [x for x in (self.A, self.B) if x.shape[0]]
        if sides:
            lo = cp.min(cp.stack([x.min(axis=0) for x in sides]), axis=0)
            hi = cp.max(cp.stack([x.max(axis=0) for x in sides]), axis=0)
            centre = (lo + hi) / 2
        else:
            centre = cp.zeros(self.d)
        self.A32 = cp.ascontiguousarray((self.A - centre).astype(cp.float32))
        self.B32 = self.A32 if b is None else cp.ascontiguousarray((self.B - centre).astype(cp.float32))
        self.na = (self.A32 * self.A32).sum(axis=1)
        self.nb = self.na if b is None else (self.B32 * self.B32).sum(axis=1)
        self.ra = cp.sqrt((self.A32.astype(cp.float64) ** 2).sum(axis=1))
        self.rb = self.ra if b is None else cp.sqrt((self.B32.astype(cp.float64) ** 2).sum(axis=1))
        budget = tile_bytes if tile_bytes is not None else min(8 << 30, device_budget_bytes(0.25))
        self.tile_rows = max(1, min(max(self.n, 1), budget // max(1, 4 * max(self.m, 1))))
        self._capacity = 1 << 16

    def _tile(self, r0: int, r1: int, count_only: bool):
        cp = cupy()
        c0 = r0 if self.selfjoin else 0
        cols = self.m - c0
        if r1 <= r0 or cols <= 0:
            return 0, None
        G = self.A32[r0:r1] @ self.B32[c0:].T
        conv, gamma2 = error_constants(self.d)
        rows = r1 - r0
        grid = (int(max(1, min(-(-cols // BLOCK), 64))), int(min(rows, 65535)))
        counter = cp.zeros(1, cp.uint64)
        capacity = 0 if count_only else self._capacity
        while True:
            oi = cp.empty(max(capacity, 1), cp.int64)
            oj = cp.empty(max(capacity, 1), cp.int64)
            od = cp.empty(max(capacity, 1), cp.float32)
            counter.fill(0)
            kernel("brute.cu", "brute_filter")(grid, (BLOCK,), (
                G, np.int64(rows), np.int64(cols), np.int64(r0), np.int64(c0),
                self.na[r0:r1], self.nb[c0:], self.ra[r0:r1], self.rb[c0:],
                self.A, self.B, np.int32(self.d),
                np.float64(self.eps * (1.0 + 1e-9)), np.float64(self.eps2), np.float64(conv), np.float64(gamma2),
                np.int32(self.selfjoin), counter, np.int64(capacity), oi, oj, od,
            ))
            found = int(counter.get()[0])
            if count_only:
                return found, None
            if found <= capacity:
                break
            capacity = found
        self._capacity = max(1 << 16, int(found * 1.5))
        oi, oj, od = oi[:found], oj[:found], od[:found]
        order = cp.lexsort(cp.stack([oj, oi]))  # deterministic: by (i, j)
        return found, (oi[order], oj[order], od[order])

    def count(self) -> int:
        return sum(self._tile(r0, min(r0 + self.tile_rows, self.n), True)[0] for r0 in range(0, self.n, self.tile_rows))

    def _tiles(self, with_distance: bool):
        for r0 in range(0, self.n, self.tile_rows):
            found, got = self._tile(r0, min(r0 + self.tile_rows, self.n), False)
            if found:
                i, j, d = (x.get() for x in got)
                yield i, j, (d if with_distance else None)

    def pairs(self, with_distance: bool = True):
        parts = list(self._tiles(with_distance))
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), (np.zeros(0, np.float32) if with_distance else None)
        i = np.concatenate([p[0] for p in parts])
        j = np.concatenate([p[1] for p in parts])
        d = np.concatenate([p[2] for p in parts]) if with_distance else None
        return i, j, d

    def batches(self, max_pairs: int, with_distance: bool = True):
        yield from self._tiles(with_distance)
