"""The ε-join as a join kind: what each of its tasks does with one partition.

:class:`JoinJob` is what every task of one ε-join shares (shipped once with the graph); it
reads a partition's rows, runs the kernel and reports pairs in original row ids.  The
execution layer (:mod:`daskjoin.execution.task`) calls its ``batches`` and ``count``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..kernels import get_kernel, host_allocator, resolve_backend
from ..kernels.registry import SortedRun
from ..planning.plan import Partition, Plan
from ..planning.sorted_copy import SortedCopy

logger = logging.getLogger(__name__)

DISTANCE = ("dist", "float32")


@dataclass(frozen=True, eq=False)
class JoinJob:
    """What every task of one join shares (shipped once with the graph)."""

    reader_a: object
    reader_b: object
    selfjoin: bool
    eps: float
    method: str
    backend: str
    with_distance: bool
    gpu_options: tuple = ()
    inputs_token: str = ""  # fingerprint of Zarr inputs: changed data, new task keys
    memory_budget: int = 0  # the plan's budget per task (bounds the task's in-memory sort); 0: not set
    device_limit: int = 0  # device memory a GPU task sizes its buffers from at most (a budget given); 0: the free

    @classmethod
    def from_plan(cls, plan: Plan, with_distance: bool = True, device_limit: int = 0) -> "JoinJob":
        return cls(plan.reader_a, plan.reader_b, plan.selfjoin, plan.eps, plan.method, plan.backend, with_distance,
                   plan.gpu_options, plan.inputs_token, int(plan.memory_budget), int(device_limit))

    def in_memory_bytes(self) -> int:
        """Bytes of array data the job carries (in-memory inputs, sorted-copy ids and key index)."""
        total = 0
        for reader in (self.reader_a, self.reader_b):
            for obj in (reader, getattr(reader, "points", None)):
                for name in ("data", "ids", "key_index"):
                    arr = getattr(obj, name, None)
                    total += getattr(arr, "nbytes", 0) if arr is not None else 0
        return int(total)

    @property
    def value(self) -> tuple | None:
        """The output's value column (name, dtype), or None without distances."""
        return DISTANCE if self.with_distance else None

    label = "daskjoin-pairs"

    def batches(self, part: Partition, max_pairs: int | None):
        """The partition's (i, j, dist) in original ids, in batches of at most ``max_pairs`` (None: unbounded;
        still several where the partition is two kernel calls or comes sorted from the device)."""
        yield from _Sides(self, part).batches(max_pairs)

    def count(self, part: Partition) -> int:
        return _Sides(self, part, ids=False).count()

    def kernel(self):
        """This worker's kernel: 'auto' resolved here; GPU tuning options only where it runs on a GPU (a method's
        own options, such as szl's ``shifts``, on either backend)."""
        from ..options import METHOD_OPTIONS

        backend = resolve_backend(self.backend)
        own = METHOD_OPTIONS["epsilon"].get(self.method, ())
        options = {k: v for k, v in self.gpu_options if backend == "gpu" or k in own}
        return get_kernel(self.method, backend, **options)


def _read(reader, rows: tuple[int, int], empty=None, ids: bool = True):
    """The rows' points and their original ids: an id array (sorted copies) or the first row's id.

    ``empty(shape, dtype)`` allocates the points read from Zarr (pinned memory for a GPU kernel);
    ``ids=False``: a count's, which never needs a sorted copy's id array (None in its place).
    """
    start, stop = rows
    if isinstance(reader, SortedCopy):
        return reader.read(start, stop, empty) if ids else (reader.points.read(start, stop, empty), None)
    return reader.read(start, stop, empty), start


def _to_original(local: np.ndarray, ids) -> np.ndarray:
    """Local row numbers to original ids: an offset added in place, or a look-up in an id array."""
    if isinstance(ids, (int, np.integer)):
        if ids:
            local += ids
        return local
    return ids[local]


def _id_span(ids_a: np.ndarray, ids_b: np.ndarray | None) -> tuple[int, int]:
    """``(lo, hi)``: the original ids of a partition's rows lie in ``lo .. hi - 1``."""
    sides = [ids for ids in (ids_a, ids_b) if ids is not None and len(ids)]
    if not sides:
        return 0, 1
    return min(int(ids.min()) for ids in sides), max(int(ids.max()) for ids in sides) + 1


class _Sides:
    """The rows of one partition, read once."""

    def __init__(self, job: JoinJob, part: Partition, ids: bool = True):
        self.job, self.part = job, part
        self.kernel = job.kernel()
        self.share = None
        self._device_ids = None  # the original ids on the device (:meth:`_keys`)
        if part.share is not None:
            k, parts, tag = part.share
            backend, _, signature = tag.partition(":")
            if self.kernel.backend != backend:  # shares are the driver's own: another backend's differ
                raise RuntimeError(f"partition {part.index} is query share {k + 1} of {parts} as the {backend} "
                                   f"driver cuts them, but this worker runs the {self.kernel.backend} driver")
            if signature:  # brute force's tile order comes from cuBLAS products: the same device's bits only
                from ..kernels.gpu_common import device_signature

                if device_signature() != signature:
                    raise RuntimeError(f"partition {part.index} is query share {k + 1} of {parts} as {signature} "
                                       f"cuts them, but this worker's GPU is {device_signature()}")
            self.share = (k, parts)
        empty = host_allocator(self.kernel.backend)
        self.pa, self.ia = _read(job.reader_a, part.a, empty, ids)
        if part.b is not None:
            self.pb, self.ib = _read(job.reader_b if job.reader_b is not None else job.reader_a, part.b, empty, ids)

    def _globalize(self, batch, cross: bool, one_stream: bool = False):
        li, lj, dist = batch
        ids_b = self.ib if cross else self.ia
        if isinstance(self.ia, np.ndarray) and isinstance(ids_b, np.ndarray):  # both sides read through sorted copies
            from ..kernels.original_ids import to_original

            return (*to_original(li, lj, self.ia, ids_b, self.job.selfjoin), dist)
        offsets = isinstance(self.ia, int) and isinstance(ids_b, int)
        i, j = _to_original(li, self.ia), _to_original(lj, ids_b)
        if self.job.selfjoin and not offsets:
            # sorted copies reorder rows: restore i < j (row offsets keep the kernels' order:
            # a chunk-pair task's first block always precedes its second)
            i, j = np.minimum(i, j), np.maximum(i, j)
        if one_stream and offsets and isinstance(batch, SortedRun):
            return SortedRun((i, j, dist))  # offsets keep (i, j) order: still the partition's sorted run
        return i, j, dist

    def batches(self, max_pairs: int | None):
        """(i, j, dist) arrays in global ids; bounded batches when ``max_pairs`` is given.

        A kernel's ``SortedRun`` stays one where the partition is one kernel call (a block, or a
        pair of blocks) read by row offsets: the task then streams it without sorting.  Rows read
        through sorted copies by a GPU driver that gives its pairs on the device (slabs) become one
        ``SortedRun`` there, in original ids (:meth:`_device_batches`).
        """
        if self._ids_on_device():
            yield from self._device_batches(max_pairs)
            return
        if max_pairs is not None and self._one_device_call_by_offsets():
            yield from self._offset_batches(max_pairs)
            return
        kernel = self.kernel
        eps, wd = self.job.eps, self.job.with_distance
        one = not (self.part.self_part and self.part.b is not None)
        if self.part.self_part:
            if max_pairs is None:
                yield self._globalize(kernel.self_join(self.pa, eps, wd, share=self.share), cross=False)
            else:
                for got in kernel.self_batches(self.pa, eps, max_pairs, wd, share=self.share):
                    yield self._globalize(got, cross=False, one_stream=one)
        if self.part.b is not None:
            if max_pairs is None:
                yield self._globalize(kernel.cross_join(self.pa, self.pb, eps, wd, share=self.share), cross=True)
            else:
                for got in kernel.cross_batches(self.pa, self.pb, eps, max_pairs, wd, share=self.share):
                    yield self._globalize(got, cross=True, one_stream=one)

    def _calls(self):
        """The partition's kernel calls: (rows, other rows or None for a self-join, whether the other rows are
        ``pb``, whose ids are ``ib``: B's rows, or a self-join slab's extension)."""
        if self.part.self_part:
            yield self.pa, None, False
        if self.part.b is not None:
            yield self.pa, self.pb, True

    def _ids_on_device(self) -> bool:
        """Rows read through a sorted copy, by a GPU driver that gives its pairs on the device: they are put in
        original ids and sorted there (:mod:`daskjoin.kernels.gpu_ids`), not on the host."""
        sides = [self.ia] + ([self.ib] if self.part.b is not None else [])
        if not self.kernel.device_pairs or not all(isinstance(ids, np.ndarray) for ids in sides):
            return False
        return self._ids_fit_keys()

    def _ids_fit_keys(self) -> bool:
        """Whether the inputs' original ids fit the device's packed pair keys (:data:`~..kernels.gpu_ids.ID_LIMIT`)."""
        from ..kernels.gpu_ids import ID_LIMIT

        readers = [r for r in (self.job.reader_a, self.job.reader_b) if r is not None]
        return max(r.n for r in readers) <= ID_LIMIT  # original ids are below the input's rows

    def _one_device_call_by_offsets(self) -> bool:
        """One kernel call (a block, a block pair or a query share) read by row offsets, by a GPU driver that
        gives its pairs on the device (which sorts them there, in its own row numbers, where they fit) and
        counts them first anyway, so that asking for the count costs nothing."""
        offsets = isinstance(self.ia, int) and (self.part.b is None or isinstance(self.ib, int))
        return (offsets and self.kernel.counts_before_pairs and len(list(self._calls())) == 1
                and self._ids_fit_keys())

    def _offset_batches(self, max_pairs: int):
        """The one call's pairs as its driver sorts them on the device (one ``SortedRun``); where they outgrow
        the device's room, the driver would send them to the host unsorted for the task to sort there: the rows'
        offsets become id arrays instead, and :meth:`_device_batches` sorts the pairs on the device in passes over
        id ranges (the call's index built once more; a partition over the room is the exception)."""
        from ..kernels import gpu_common

        (a, b, cross), = self._calls()
        driver = self._driver((a, b, cross))
        if driver.count() > gpu_common.sort_room():
            del driver
            self.ia = np.arange(self.ia, self.ia + len(self.pa), dtype=np.int64)
            if self.part.b is not None:
                self.ib = np.arange(self.ib, self.ib + len(self.pb), dtype=np.int64)
            yield from self._device_batches(max_pairs)
            return
        for got in driver.batches(max_pairs, self.job.with_distance):
            yield self._globalize(got, cross, one_stream=True)

    def _device_batches(self, max_pairs: int | None):
        """The partition's pairs in original ids, sorted on the device: one ``SortedRun`` stream.  Where they
        outgrow the device's room, sorted there in passes over ranges of the first id (:meth:`_over_room`),
        or, where even that cannot hold them, on the host (plain batches)."""
        from ..kernels import gpu_common, gpu_ids

        total, held = 0, []
        calls = list(self._calls())
        for k, call in enumerate(calls):
            driver = self._driver(call)
            found = driver.count()
            total += found
            # asked once this call's index exists; what is held is counted in the free memory again (safe side)
            room = gpu_common.sort_room()
            if total > room:
                over = self._over_room(held, driver, calls, k, found, room, max_pairs)
                del driver  # the generator holds it only as long as it needs it
                yield from over
                return
            if found:
                held.append(self._keys(driver, call))
            del driver
        yield from gpu_ids.sorted_batches(held, max_pairs or max(1, total))

    def _driver(self, call):
        a, b, _ = call
        return self.kernel.driver(a, b, self.job.eps, self.share)

    def _keys(self, driver, call):
        """A call's pairs as ``(key, d)`` in original ids on the device (:func:`~..kernels.gpu_ids.original_keys`)."""
        from ..kernels import gpu_common, gpu_ids

        cp = gpu_common.cupy()
        if self._device_ids is None:  # both sides' ids on the device once, for every call and pass
            self._device_ids = {False: cp.asarray(self.ia)}
            if self.part.b is not None:
                self._device_ids[True] = cp.asarray(self.ib)
        ids = self._device_ids
        return gpu_ids.original_keys(list(driver.pairs(self.job.with_distance, device=True)), ids[False],
                                     ids[call[2]], self.job.selfjoin)

    def _over_room(self, held: list, driver, calls: list, k: int, found: int, room: int, max_pairs: int | None):
        """Call ``k`` (``driver``, ``found`` pairs) took the partition past the device's ``room``.  The first ids
        of its pairs are counted in a histogram (the held keys of the calls before ``k``, then call ``k``'s and
        the later calls' pairs made once more), cut into ranges of at most ``room`` pairs, and each range is one
        pass that runs every call again and sorts the keys in its range: their sorted runs follow one another.
        On the host (plain batches) where a call's pairs and their keys would not fit beside a range's keys, or
        one bin alone outgrows the room."""
        from ..kernels import gpu_common, gpu_ids
        from ..kernels.grid_gpu import OUTPUT_BYTES_PER_PAIR, SORT_BYTES_PER_PAIR

        counts = [int(key.shape[0]) for key, _ in held] + [int(found)]
        counts += [int(self._driver(call).count()) for call in calls[k + 1:]]  # one index at a time
        total = sum(counts)
        step = max_pairs or max(1, total)
        # every call is run again in each pass: its pairs and their keys (OUTPUT + 12 bytes a pair) beside a
        # range's kept keys (12 a pair), within the room's device bytes (OUTPUT + SORT a pair)
        room_bytes = room * (OUTPUT_BYTES_PER_PAIR + SORT_BYTES_PER_PAIR)
        if max(counts) * (OUTPUT_BYTES_PER_PAIR + 12) + room * 12 > room_bytes:
            logger.info("partition %d: %d pairs outgrow the device's room for %d, a call alone too: "
                        "sorted on the host", self.part.index, total, room)
            yield from self._host_way(held, driver, calls[k:], step)
            return
        # a self-join's first id is the smaller of its rows' ids, from either side; an A x B join's is A's
        sides = (self.ia, self.ib if self.job.selfjoin and self.part.b is not None else None)
        first, width = gpu_ids.id_bins(*_id_span(*sides))
        histogram = gpu_common.cupy().zeros(gpu_ids.RANGE_BINS, np.int64)
        for key, _ in held:
            histogram += gpu_ids.key_histogram(key, first, width)
        held.clear()
        for t, call in enumerate(calls[k:]):
            key = self._keys(driver if t == 0 else self._driver(call), call)[0]
            driver = None  # call k's index freed once its pairs are made
            histogram += gpu_ids.key_histogram(key, first, width)
            del key
        ranges = gpu_ids.key_ranges(histogram.tolist(), room, first, width)
        if ranges is None:  # one bin alone outgrows the room: many pairs of few rows (duplicates)
            logger.info("partition %d: %d pairs outgrow the device's room for %d, one id range alone too: "
                        "sorted on the host", self.part.index, total, room)
            yield from self._host_way([], self._driver(calls[0]), calls, step)
            return
        logger.info("partition %d: %d pairs outgrow the device's room for %d: sorted on the device in %d "
                    "passes over ranges of ids", self.part.index, total, room, len(ranges))
        for lo, hi in ranges:
            kept = [gpu_ids.in_range(self._keys(self._driver(call), call), lo, hi) for call in calls]
            yield from gpu_ids.sorted_batches(kept, step)

    def _host_way(self, held: list, driver, calls: list, step: int):
        """Past the device's room: what ``held`` holds, then ``driver``'s call (the first of ``calls``) and the
        later calls, as plain batches in original ids (the task sorts them)."""
        from ..kernels import gpu_ids

        eps, wd, share = self.job.eps, self.job.with_distance, self.share
        yield from gpu_ids.unsorted_batches(held, step)
        for k, (a, b, cross) in enumerate(calls):
            if k == 0:
                batches = driver.batches(step, wd)
            elif b is None:
                batches = self.kernel.self_batches(a, eps, step, wd, share)
            else:
                batches = self.kernel.cross_batches(a, b, eps, step, wd, share)
            for got in batches:
                yield self._globalize(got, cross)

    def count(self) -> int:
        kernel = self.kernel
        total = kernel.self_count(self.pa, self.job.eps, share=self.share) if self.part.self_part else 0
        if self.part.b is not None:
            total += kernel.cross_count(self.pa, self.pb, self.job.eps, share=self.share)
        return int(total)
