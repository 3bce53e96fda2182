"""One block of a set join on one worker: index, filter windows in parallel, verify chunks.

The host filters the next chunk while the verifier (GPU: asynchronous) checks
the last one, as in Bellas & Gounaris' three-thread framework; here the
overlap comes from the GPU queue's asynchrony instead of extra host threads.
"""
from __future__ import annotations

import functools

from dataclasses import dataclass

import numba
import numpy as np

from ..parallel_guard import serialised
from ..registry import split_batch
from .filtering import build_index, filter_window, prefix_lengths
from . import groups
from .measures import meets
from .verify_cpu import CpuVerifier

DEFAULT_CHUNK = 1 << 22
_MIN_WINDOW, _MAX_WINDOW = 16, 1 << 15


@dataclass(frozen=True)
class Flat:
    """Token sets in the flat layout: ranks (int32) and offsets (int64), sorted by size."""

    tokens: np.ndarray
    offsets: np.ndarray

    @classmethod
    def of(cls, tokens, offsets) -> "Flat":
        return cls(np.ascontiguousarray(tokens, np.int32), np.ascontiguousarray(offsets, np.int64))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @functools.cached_property
    def sizes(self) -> np.ndarray:
        """Each set's size (worked out once: a block asks for them several times, 0.4 ms each for 600k sets)."""
        return np.diff(self.offsets)


def _n_vocab(*flats: Flat) -> int:
    return int(max((f.tokens.max() + 1 if len(f.tokens) else 0) for f in flats))


class _Windows:
    """Probe windows dealt out over threads, with the leftovers of threads whose buffer region filled.

    A window of ``width`` probes per thread is dealt round robin (thread t takes probes
    next + t, next + t + T, ...), not in contiguous ranges: probes come in size order,
    so neighbours cost about the same and every thread gets an equal share of the
    window's work, also in the last, partial window.
    """

    def __init__(self, n_probes: int, n_threads: int, region: int):
        self.n_probes, self.n_threads, self.region = n_probes, n_threads, region
        self.next = 0
        self.width = 64
        self.lo = np.zeros(n_threads, np.int64)
        self.hi = np.zeros(n_threads, np.int64)

    def refill(self) -> bool:
        """New windows when every thread is done with its last one; False when all probes are done."""
        if (self.lo < self.hi).any():
            return True
        if self.next >= self.n_probes:
            return False
        end = min(self.n_probes, self.next + self.n_threads * self.width)
        self.lo[:] = np.minimum(self.next + np.arange(self.n_threads), end)
        self.hi[:] = end
        self.next = end
        return True

    def adapt(self, written: int, overflowed: bool) -> None:
        if overflowed:
            self.width = max(_MIN_WINDOW, self.width // 2)
        elif written * 4 < self.region * self.n_threads:
            self.width = min(_MAX_WINDOW, self.width * 2)


def candidate_chunks(r: Flat, s: Flat | None, threshold: Threshold, algorithm: str = "ppjoin",
                     larger_partners: bool = False, chunk: int = DEFAULT_CHUNK, empty=np.empty):
    """Yield (probes, offsets, cands) chunks of about ``chunk`` candidates (``s=None``: self-join).

    ``empty(shape, dtype)`` allocates each chunk's arrays (the GPU verifier's are pinned).
    ``larger_partners``: every set of ``s`` is no larger than every set of ``r``
    (two size-range partitions of one collection), which allows the shorter
    index prefix.
    """
    selfjoin = s is None
    s = r if selfjoin else s
    code, p, q = threshold.args()
    n_vocab = _n_vocab(r, s)
    index_prefix = prefix_lengths(s.sizes, code, p, q, True, selfjoin or larger_partners)
    starts, post_set, post_pos, post_size = build_index(s.tokens, s.offsets, index_prefix, n_vocab)
    n_threads = numba.get_num_threads()
    region = max(chunk // n_threads, len(s), 1)
    count = np.zeros((n_threads, len(s)), np.int32)
    touched = np.zeros((n_threads, len(s) + 1), np.int32)  # see filtering._probe
    # int32 (a third faster scan than int64): partners in range need at most min(sizes) < 2**31
    need = np.zeros((n_threads, int(s.sizes.max(initial=0)) + 1), np.int32)
    bounds = np.full((n_threads, 4), -1, np.int64)  # see filtering._probe
    cands = np.empty((n_threads, region), np.int32)
    probes = np.empty((n_threads, _MAX_WINDOW), np.int32)
    group_end = np.empty((n_threads, _MAX_WINDOW), np.int64)
    windows = _Windows(len(r), n_threads, region)
    pending, pending_cands = [], 0
    while windows.refill():
        before = windows.hi - windows.lo
        with serialised():  # released before this generator yields
            done = filter_window(r.tokens, r.offsets, starts, post_set, post_pos, post_size, selfjoin,
                                 algorithm == "ppjoin", code, p, q, windows.lo, windows.hi, count, touched, need,
                                 bounds, probes, group_end, cands, region)
        for t in range(n_threads):
            n_groups, n_cands = int(done[t, 0]), int(done[t, 1])
            if n_groups:
                pending.append((probes[t, :n_groups].copy(), group_end[t, :n_groups].copy(),
                                cands[t, :n_cands].copy()))
                pending_cands += n_cands
        windows.adapt(int(done[:, 1].sum()), bool((windows.lo < windows.hi).any() and (before > 0).any()))
        if pending_cands >= chunk:
            yield _flatten(pending, empty)
            pending, pending_cands = [], 0
    if pending:
        yield _flatten(pending, empty)


def _flatten(groups, empty=np.empty):
    """Per-thread pieces to one (probes, offsets, cands) chunk, in arrays from ``empty``."""
    probes = np.concatenate([g[0] for g in groups], out=empty(sum(len(g[0]) for g in groups), np.int32))
    cands = np.concatenate([g[2] for g in groups], out=empty(sum(len(g[2]) for g in groups), np.int32))
    offsets = empty(len(probes) + 1, np.int64)
    offsets[0] = 0
    at, base = 0, 0
    for g_probes, g_ends, g_cands in groups:
        offsets[at + 1: at + 1 + len(g_probes)] = g_ends + base
        at += len(g_probes)
        base += len(g_cands)
    return probes, offsets, cands


def make_verifier(kind: str, r: Flat, s: Flat, threshold: Threshold, count_only: bool, options: dict):
    if kind == "cpu":
        return CpuVerifier(r, s, threshold, count_only)
    from .verify_gpu import GpuVerifier

    return GpuVerifier(r, s, threshold, count_only=count_only, **options)


DEFAULT_MAX_PAIRS = 1 << 24


def _verified(r: Flat, s: Flat | None, threshold: Threshold, algorithm: str, backend: str, count_only: bool,
              larger_partners: bool, options: dict):
    """Matches chunk by chunk: (probe positions, candidate positions, overlaps); for counts one int at the end."""
    options = dict(options)
    chunk = int(options.pop("chunk_candidates", DEFAULT_CHUNK))
    verifier = make_verifier(backend, r, r if s is None else s, threshold, count_only, options)
    try:
        pending = None
        for piece in candidate_chunks(r, s, threshold, algorithm, larger_partners, chunk, verifier.host_empty):
            handle = verifier.submit(*piece)  # the GPU verifies this chunk while the next one is filtered
            if pending is not None and not count_only:
                yield verifier.collect(pending)
            pending = handle
        if count_only:
            yield verifier.total()
        elif pending is not None:
            yield verifier.collect(pending)
    finally:
        verifier.close()


@dataclass(frozen=True)
class _Runs:
    """A side's runs of identical sets and its representatives."""

    starts: np.ndarray
    reps: Flat

    @classmethod
    def of(cls, f: Flat) -> "_Runs":
        starts = groups.duplicate_runs(f.tokens, f.offsets)
        if len(starts) - 1 == len(f):
            return cls(starts, f)
        return cls(starts, Flat.of(*groups.representatives(f.tokens, f.offsets, starts)))

    @property
    def has_copies(self) -> bool:
        return len(self.starts) - 1 < self.starts[-1]


def _qualifying_runs(runs: _Runs, threshold: Threshold) -> np.ndarray:
    """Runs whose copies match each other (identical non-empty sets reach any normalised threshold)."""
    code, p, q = threshold.args()
    return _self_matches(np.ascontiguousarray(runs.reps.sizes, np.int64), code, p, q)


@numba.njit(cache=True, nogil=True)
def _self_matches(sizes, code, p, q):
    """``meets(n, n, n)`` for every size: one compiled loop (a Python loop of calls took 0.27 s for the ~500k
    distinct sets of the KOSARAK-like collection)."""
    out = np.empty(sizes.shape[0], np.bool_)
    last, hit = -1, False
    for k in range(sizes.shape[0]):
        n = sizes[k]
        if n != last:  # sets come in size order: once per run of equal sizes
            last, hit = n, meets(n, n, n, code, p, q)
        out[k] = hit
    return out


def block_batches(r: Flat, s: Flat | None, threshold: Threshold, *, algorithm: str = "ppjoin", backend: str = "cpu",
                  larger_partners: bool = False, options: dict | None = None, max_pairs: int = DEFAULT_MAX_PAIRS,
                  group_copies: bool = True):
    """Yield a block's matches in batches: (r positions, s positions, overlaps).

    Self-join (``s=None``): each pair once, the first array holding the later set.
    Identical sets are joined once and expanded (see :mod:`daskjoin.kernels.sets.groups`).
    Every batch holds at most ``max_pairs`` pairs: a verified chunk (about ``chunk_candidates``
    candidates) or an expansion with more is sliced.
    """
    options = options or {}
    runs_r = _Runs.of(r) if group_copies else None
    runs_s = None if not group_copies else (runs_r if s is None else _Runs.of(s))
    if not group_copies or not (runs_r.has_copies or runs_s.has_copies):
        for got in _verified(r, s, threshold, algorithm, backend, False, larger_partners, options):
            if len(got[0]):
                yield from split_batch(got, max_pairs)
        return
    if s is None:
        for got in groups.within(runs_r.starts, runs_r.reps.sizes, _qualifying_runs(runs_r, threshold), max_pairs):
            yield from split_batch(got, max_pairs)
    reps_s = None if s is None else runs_s.reps
    for gp, gc, ov in _verified(runs_r.reps, reps_s, threshold, algorithm, backend, False, larger_partners, options):
        for got in groups.expand(gp, gc, ov, runs_r.starts, runs_s.starts, max_pairs):
            yield from split_batch(got, max_pairs)


def block_count(r: Flat, s: Flat | None, threshold: Threshold, *, algorithm: str = "ppjoin", backend: str = "cpu",
                larger_partners: bool = False, options: dict | None = None, group_copies: bool = True) -> int:
    """The number of a block's matches; with copies, run pairs weighted by their sizes."""
    options = options or {}
    runs_r = _Runs.of(r) if group_copies else None
    runs_s = None if not group_copies else (runs_r if s is None else _Runs.of(s))
    if not group_copies or not (runs_r.has_copies or runs_s.has_copies):
        return sum(_verified(r, s, threshold, algorithm, backend, True, larger_partners, options))
    total = groups.within_count(runs_r.starts, _qualifying_runs(runs_r, threshold)) if s is None else 0
    n_r, n_s = np.diff(runs_r.starts), np.diff(runs_s.starts)
    reps_s = None if s is None else runs_s.reps
    for gp, gc, _ov in _verified(runs_r.reps, reps_s, threshold, algorithm, backend, False, larger_partners, options):
        total += int((n_r[gp] * n_s[gc]).sum())
    return total


def join_block(r: Flat, s: Flat | None, threshold: Threshold, *, algorithm: str = "ppjoin", backend: str = "cpu",
               count_only: bool = False, larger_partners: bool = False, options: dict | None = None,
               group_copies: bool = True):
    """Every match of one block at once: (r positions, s positions, overlaps), or their number."""
    kw = dict(algorithm=algorithm, backend=backend, larger_partners=larger_partners, options=options,
              group_copies=group_copies)
    if count_only:
        return block_count(r, s, threshold, **kw)
    parts = list(block_batches(r, s, threshold, **kw))
    if not parts:
        empty = np.zeros(0, np.int64)
        return empty, empty.copy(), np.zeros(0, np.int32)
    return tuple(np.concatenate(c) for c in zip(*parts))


class SetBlockJoin:
    """One block of a set join behind the kernel driver protocol (:mod:`daskjoin.kernels.registry`).

    ``count()``, ``pairs(with_distance)`` and ``batches(max_pairs, with_distance)`` give
    (r positions, s positions, overlaps): the "distance" of a set join is the overlap (int32),
    None with ``with_distance=False``.  ``s=None``: a self-join of ``r``.
    """

    def __init__(self, r: Flat, s: Flat | None, threshold: Threshold, *, algorithm: str = "ppjoin",
                 backend: str = "cpu", larger_partners: bool = False, options: dict | None = None,
                 group_copies: bool = True):
        self.r, self.s, self.threshold = r, s, threshold
        self.kw = dict(algorithm=algorithm, backend=backend, larger_partners=larger_partners,
                       options=dict(options or {}), group_copies=group_copies)

    def count(self) -> int:
        return int(block_count(self.r, self.s, self.threshold, **self.kw))

    def pairs(self, with_distance: bool = True):
        i, j, overlap = join_block(self.r, self.s, self.threshold, **self.kw)
        return i, j, (overlap if with_distance else None)

    def batches(self, max_pairs: int = DEFAULT_MAX_PAIRS, with_distance: bool = True):
        for i, j, overlap in block_batches(self.r, self.s, self.threshold, max_pairs=max(1, int(max_pairs)),
                                           **self.kw):
            yield i, j, (overlap if with_distance else None)
