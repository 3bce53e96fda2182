"""``directory`` method, GPU driver: the CPU driver's directory (:mod:`.directory_index`, built on the device
with CuPy sorts) walked by one thread group per query group in ``cuda/directory.cu``; a count pass, then
fills placed by the counts (:mod:`.gpu_slots`)."""
from __future__ import annotations

import numpy as np

from .directory_index import (FANOUT, GROUP, LEVELS, check_shape, directory_dims, fractionated_order, group_boxes, node_boxes,
                              principal_axes, rotated_limit)
from .exact import eps_squared
from .gpu_common import cupy, kernel, output_args, output_by_counts
from .gpu_slots import all_pairs, device_runs, slot_batches
from .grid_gpu import device_bounds, to_device64

#: shared memory a block stages (48 KiB, the default limit without opting in)
SHARED_BYTES = 48 << 10
MAX_STACK = 64  # cuda/directory.cu (and at most 8 levels)


class _Side:
    def __init__(self, rows, bounds, dims, fanout: int):
        cp = cupy()
        order, leaf, nleaves = fractionated_order(bounds, dims, fanout, cp)
        self.ids, self.leaf, self.nleaves = order, leaf, nleaves
        self.rows = cp.ascontiguousarray(rows[order])
        self.bounds = self.rows if bounds is rows else cp.ascontiguousarray(bounds[order])


class GpuDirectoryJoin:
    """A prepared directory join on the GPU: count, pairs or batches, pairs on the host in original row ids."""

    def __init__(self, a, b, eps: float, *, levels: int = LEVELS, fanout: int = FANOUT, pca: bool = False):
        cp = cupy()
        self.selfjoin = b is None
        a = to_device64(a)
        b = None if b is None else to_device64(b)
        data = a if b is None else b
        self.eps2 = eps_squared(eps)
        d = int(a.shape[1])
        self.d = d
        levels, fanout = check_shape(levels, fanout)
        if pca:
            rot = principal_axes(data, cp)
            bx = rot.apply(data, cp)
            ba = bx if b is None else rot.apply(a, cp)
            radius = max(float(cp.sqrt((bx * bx).sum(axis=1)).max()) if bx.shape[0] else 0.0,
                         float(cp.sqrt((ba * ba).sum(axis=1)).max()) if ba.shape[0] else 0.0)
            self.limit = rotated_limit(self.eps2, d, radius)
            dims = np.arange(min(levels, d), dtype=np.int64)
        else:
            bx, ba = data, a
            self.limit = self.eps2  # exact by monotonicity (directory_index)
            dims = directory_dims(*device_bounds(data), min(levels, d))
        dims = dims if len(dims) else np.zeros(1, np.int64)
        if len(dims) * fanout >= MAX_STACK or len(dims) > 8:
            raise ValueError(f"the GPU directory takes at most 8 levels and levels x fanout below {MAX_STACK}, "
                             f"got {len(dims)} levels of {fanout}")
        self.levels, self.fanout = len(dims), fanout
        self.x = _Side(data, bx, dims, fanout)
        self.q = self.x if b is None else _Side(a, ba, dims, fanout)
        boxes = node_boxes(self.x.bounds, self.x.leaf, self.x.nleaves, fanout, len(dims), cp)
        self.leaf_start = boxes[-1][0]
        self.nlo = cp.ascontiguousarray(cp.concatenate([lo for _, lo, _ in boxes]))
        self.nhi = cp.ascontiguousarray(cp.concatenate([hi for _, _, hi in boxes]))
        self.level_at = cp.asarray(np.cumsum([0] + [fanout ** (k + 1) for k in range(len(dims) - 1)]), cp.int64)
        glo, ghi = group_boxes(self.q.bounds, GROUP, cp)
        self.glo, self.ghi = cp.ascontiguousarray(glo), cp.ascontiguousarray(ghi)
        self.m = int(self.q.rows.shape[0])
        self.ngroups = int(glo.shape[0])
        fit = SHARED_BYTES // (8 * max(d, 1))
        self.staged = fit >= 1  # rows wider than shared memory are read from global memory
        self.tile_rows = int(max(1, min(256, fit)))
        self._counts = None

    def _launch(self, mode: int, g0: int, g1: int, offsets=None, out=(None, None, None)):
        cp = cupy()
        u0, u1 = g0 * GROUP, min(self.m, g1 * GROUP)
        counts = cp.zeros(max(u1 - u0, 1), cp.int32)
        if g1 > g0 and self.x.rows.shape[0]:
            kernel("directory.cu", "directory_join")((g1 - g0,), (GROUP,), (
                self.q.rows, self.q.bounds, self.q.ids, np.int64(self.m), self.glo, self.ghi, np.int32(GROUP),
                np.int64(g0), self.x.rows, self.x.ids, self.leaf_start, self.nlo, self.nhi, self.level_at,
                np.int32(self.levels), np.int32(self.fanout), np.int32(self.d), np.int32(self.tile_rows),
                np.int32(self.staged), np.int32(self.selfjoin), np.float64(self.eps2), np.float64(self.limit),
                np.int32(mode), counts, *output_args(offsets, out)),
                shared_mem=8 * self.tile_rows * self.d if self.staged else 0)
        return counts[: u1 - u0]

    def counts(self):
        """Pairs of every query, in the queries' directory order (device array)."""
        if self._counts is None:
            self._counts = self._launch(0, 0, self.ngroups)
        return self._counts

    def count(self) -> int:
        return int(self.counts().sum(dtype=cupy().int64))

    def _fill(self, u0: int, u1: int, with_distance: bool):
        """Pairs of the queries [u0, u1), u0 a group's first query (runs of slots are cut at groups)."""
        # whole groups only: a group's queries all run, so each must have its room
        assert u0 % GROUP == 0 and (u1 % GROUP == 0 or u1 == self.m), (u0, u1)
        g0, g1 = u0 // GROUP, -(-u1 // GROUP)
        offsets, out = output_by_counts(self.counts()[u0:u1])
        if out[0].shape[0]:
            self._launch(1, g0, g1, offsets, out)
        return out[0], out[1], (out[2] if with_distance else None)

    def _group_room(self):
        """Room per group (its queries' pairs): slots are groups, so a fill never splits one."""
        cp = cupy()
        counts = self.counts().astype(cp.int64)
        pad = self.ngroups * GROUP - self.m
        return cp.concatenate([counts, cp.zeros(pad, cp.int64)]).reshape(self.ngroups, GROUP).sum(axis=1)

    def _fill_groups(self, g0: int, g1: int, with_distance: bool):
        return self._fill(g0 * GROUP, min(self.m, g1 * GROUP), with_distance)

    def pairs(self, with_distance: bool = True, device: bool = False):
        if device:
            runs = device_runs(lambda g0, g1: self._fill_groups(g0, g1, with_distance), self._group_room())
            return all_pairs(runs, with_distance, cupy())
        return all_pairs(self.batches(1 << 62, with_distance), with_distance)

    def batches(self, max_pairs: int, with_distance: bool = True):
        """Batches of at most ``max_pairs`` pairs; sorted by (i, j) on the device where they all fit it."""
        if not self.m:
            return
        yield from slot_batches(lambda g0, g1: self._fill_groups(g0, g1, with_distance), self._group_room(), max_pairs)
