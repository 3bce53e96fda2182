"""Sorting a partition's pairs by ``(i, j)`` in linear time (Numba): a counting sort on ``i``, then each ``i``'s few ``j``.

Why not ``np.lexsort``: pairs of one partition have ``i`` in a narrow range (a block or slab of
rows) and a few dozen ``j`` per ``i``, so a counting sort on ``i`` (one histogram, one stable
scatter of the three columns) and a rank sort of each ``i``'s run beat a comparison sort
by 10-30x, and the columns are written once instead of gathered through a permutation.
Where ``i`` spans far more values than there are pairs (a slab's rows come from all over the input
through its sorted copy's ids) the counting array would not pay; ``sort_pairs`` then packs
``(i - min i, j - min j)`` into one 64-bit key and sorts key and value by a least-significant-digit
radix sort (11 bits a pass, passes only over the bits that vary, chunks of the input in parallel):
860k pairs of a 2M-row input in 53 ms on 2 cores (75 ms serial) where numpy's argsort and three
gathers took 175 ms.  Wider keys still fall back to numpy.

Where ``j`` spans less than 2^32 and the value is 4 bytes (the ε-join's float32 distance) or
absent, each pair moves as one 8-byte word, ``(j - min j) << 32 | value bits``: the scatter makes
one random write a pair instead of two, and each run is sorted as one array of words (the ``j``
are distinct within a run, so the words order by ``j``) and unpacked while it is in cache.  The
word is built in the ``j`` output array itself, so this needs no memory beyond the output (the two-pass
sort of many pairs over many rows, :func:`_two_pass_sort`, takes the ``i`` and value outputs as its
scratch; without values, 4 bytes a pair besides).  An 8-byte value (the set join's float64 similarity, the
kNN-join's record) does not fit the word: for many pairs its word carries the pair's slot in a scratch array
of values instead (:func:`_two_pass_wide`), and the value is copied from there as its run is unpacked.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from .array_pool import empty as pooled_empty
from .parallel_guard import serialised

#: counting sort when the span of i is at most this many times the number of pairs (plus a constant):
#: its counting arrays then cost at most 8 bytes per pair per chunk, less than the 20 of the pair itself
SPAN_PER_PAIR = 1
_SPAN_SLACK = 1 << 20
_INSERTION_MAX = 48


def contiguous(n: int, nchunks: int):
    """The segments (:func:`_cursors`) of ``n`` pairs in one array, one a chunk."""
    first = np.array([n * c // nchunks for c in range(nchunks)], np.int64)
    return first, np.diff(np.r_[first, n]).astype(np.int64), np.arange(nchunks + 1, dtype=np.int64)


def in_lanes(cap: int, used: np.ndarray, nchunks: int):
    """The segments of pairs held in lanes (lane ``l``'s ``used[l]`` pairs from ``l * cap``), whole lanes a chunk."""
    lanes = used.shape[0]
    return (np.arange(lanes, dtype=np.int64) * cap, used.astype(np.int64),
            np.array([lanes * c // nchunks for c in range(nchunks + 1)], np.int64))


@njit(cache=True, parallel=True)
def _cursors(i, lo, span, starts, seg, counts):
    """Per-chunk histograms of ``i``, scanned in (value, chunk) order: each chunk's first slot for each value
    (so a scatter of the chunks in parallel is stable); ``starts[s]``: the first slot of value ``lo + s``.
    ``seg`` = (first, length, chunk): the pairs lie in segments (``first[g]`` to ``first[g] + length[g]``), chunk
    ``c`` taking segments ``chunk[c]`` to ``chunk[c + 1]`` (:func:`contiguous`, :func:`in_lanes`)."""
    first, length, chunk = seg
    nchunks = chunk.shape[0] - 1
    for c in prange(nchunks):
        counts[c, :] = 0
        for g in range(chunk[c], chunk[c + 1]):
            for k in range(first[g], first[g] + length[g]):
                counts[c, i[k] - lo] += 1
    _scan_cursors(counts, starts)
    return counts


def cursors(i, lo: int, span: int, seg):
    """``(starts, cursor)`` of :func:`_cursors`, their arrays from the pool (:mod:`.array_pool`)."""
    starts = pooled_empty(span + 1, np.int64)
    return starts, _cursors(i, lo, span, starts, seg, pooled_empty((seg[2].shape[0] - 1, span), np.int64))


@njit(cache=True, nogil=True)
def _scan_cursors(counts, starts):
    """Per-chunk counts (chunks x values) become each chunk's first slot for each value, scanned in (value,
    chunk) order so that chunks scattered in parallel keep their order; ``starts[v]``: value v's first slot,
    ``starts[-1]``: the total."""
    total = 0
    for s in range(counts.shape[1]):
        starts[s] = total
        for c in range(counts.shape[0]):
            here = counts[c, s]
            counts[c, s] = total
            total += here
    starts[counts.shape[1]] = total


@njit(cache=True, parallel=True)
def _scatter(i, j, v, lo, jlo, has_value, packed, oj, ov, cursor, seg):
    """Stable counting sort on ``i``, chunks (of segments ``seg``, as :func:`_cursors`) scattered in parallel from
    their ``cursor`` rows: ``j`` and the value into ``oj`` and ``ov``, or where ``packed``,
    ``(j - jlo) << 32 | value bits`` (``v``: the values' uint32 view) as one word into ``oj``."""
    first, length, chunk = seg
    for c in prange(chunk.shape[0] - 1):
        for g in range(chunk[c], chunk[c + 1]):
            for k in range(first[g], first[g] + length[g]):
                s = i[k] - lo
                at = cursor[c, s]
                cursor[c, s] = at + 1
                if packed:
                    oj[at] = ((j[k] - jlo) << 32) | (np.int64(v[k]) if has_value else np.int64(0))
                else:
                    oj[at] = j[k]
                    if has_value:
                        ov[at] = v[k]


@njit(cache=True, parallel=True)
def _sort_runs(oi, oj, ov, starts, has_value, lo):
    """Write each run's ``i`` (a run of one value: not scattered) and sort the run by ``j``
    (insertion sort for short runs, argsort for long ones)."""
    span = starts.shape[0] - 1
    for s in prange(span):
        a, b = starts[s], starts[s + 1]
        oi[a:b] = lo + s
        if b - a < 2:
            continue
        if b - a <= _INSERTION_MAX:
            for k in range(a + 1, b):
                key = oj[k]
                val = ov[k] if has_value else ov[0]
                m = k - 1
                while m >= a and oj[m] > key:
                    oj[m + 1] = oj[m]
                    if has_value:
                        ov[m + 1] = ov[m]
                    m -= 1
                oj[m + 1] = key
                if has_value:
                    ov[m + 1] = val
        else:
            order = np.argsort(oj[a:b])
            js = oj[a:b][order]
            oj[a:b] = js
            if has_value:
                vs = ov[a:b][order]
                ov[a:b] = vs


#: runs (one ``i``'s pairs) of up to this many pairs are sorted by rank, longer ones by numpy's sort
RANK_MAX = 64
#: runs a parallel iteration of :func:`_sort_runs_packed` takes (fewer scheduling steps than one a run)
RUNS_PER_STEP = 256


@njit(cache=True, parallel=True)
def _sort_runs_packed(oi, packed, vbits, starts, has_value, lo, jlo):
    """Each run's words sorted, then unpacked in place (:func:`_sort_run`); runs in parallel steps."""
    span = starts.shape[0] - 1
    for step in prange((span + RUNS_PER_STEP - 1) // RUNS_PER_STEP):
        held = np.empty(RANK_MAX, np.int64)
        keys = np.empty(RANK_MAX, np.int32)
        for s in range(step * RUNS_PER_STEP, min(span, (step + 1) * RUNS_PER_STEP)):
            _sort_run(oi, packed, vbits, starts[s], starts[s + 1], lo + s, has_value, jlo, held, keys, False, held,
                      held)


@njit(cache=True, nogil=True, inline="always")
def _sort_run(oi, packed, vbits, a, b, row, has_value, jlo, held, keys, wide, vals, ov64):
    """Run ``[a, b)`` (one ``i``, ``row``) of words sorted, then unpacked in place: ``packed`` becomes the ``j``
    column, the value bits go to ``vbits``, ``oi`` gets ``row``; ``held`` (int64) and ``keys`` (int32): RANK_MAX
    slots of scratch.  ``wide`` (8-byte values): a word's low half is the slot of its value in ``vals``, copied
    to ``ov64``.

    A short run is sorted by rank: each word's place is the number of words below it, m^2 comparisons without
    a branch, which the compiler vectorises: on the 2-core VM 2x faster than an insertion sort of the same runs
    (16M pairs, ~16 a run: 0.14 s against 0.30 s), whose every step is an unpredictable branch.  The ranks
    compare the words' ``j - jlo`` as int32 (below 2**31 on this path), distinct within a run of distinct
    pairs, with one comparison each: eight to a vector where the words' two comparisons (and the tie-break
    by position) took four, 30% faster (3.2M grid pairs of 200k rows on the VM: 25.8 -> 18.0 ms; 31M of 2M
    rows: 0.253 -> 0.176 s).  Ranks that collide (equal ``j`` in a run: pairs that were not distinct) do not
    sum to m(m-1)/2; the run is then placed by whole words with ties broken by position, as before.
    """
    m = b - a
    if m > RANK_MAX:
        packed[a:b].sort()
    elif m > 1:
        for t in range(m):
            held[t] = packed[a + t]
            keys[t] = np.int32(held[t] >> 32)
        total = 0
        for t in range(m):
            key = keys[t]
            below = 0
            for u in range(m):
                below += np.int32(keys[u] < key)
            packed[a + below] = held[t]
            total += below
        if total != m * (m - 1) // 2:
            for t in range(m):
                word = held[t]
                below = 0
                for u in range(m):
                    below += np.int64(held[u] < word) + np.int64((held[u] == word) & (u < t))
                packed[a + below] = word
    for k in range(a, b):
        word = packed[k]
        oi[k] = row
        if wide:
            ov64[k] = vals[word & 0xFFFFFFFF]
        elif has_value:
            vbits[k] = np.uint32(word & 0xFFFFFFFF)
        packed[k] = (word >> 32) + jlo


#: pairs from which the packed path sorts in two passes (:func:`_bucket_scatter`, :func:`_place_buckets`)
#: instead of one: below, the one pass's random writes stay in cache anyway
BUCKET_MIN_PAIRS = 1 << 16
#: the first pass groups rows into at most 2**BUCKET_BITS buckets of consecutive ``i``
BUCKET_BITS = 10
#: and only where the one pass's cursors (8 bytes a row a chunk) would outgrow this: while they stay in cache,
#: one pass beats two (grid pairs of uniform points, 2-core VM, two-pass / one-pass: 200k rows and 3.2M pairs
#: 0.061 / 0.047-0.051 s, 100k rows 0.027-0.033 / 0.020 s; 500k rows 0.136 / 0.129-0.134 s; 1M rows 0.28 / 0.29 s,
#: 2M rows 0.54-0.55 / 0.59-0.62 s)
ONE_PASS_CURSOR_BYTES = 4 << 20


def _two_passes(n: int, span: int, nchunks: int) -> bool:
    """Whether ``n`` packed pairs (4-byte values or none) over ``span`` rows sort in two passes
    (:data:`BUCKET_MIN_PAIRS`, :data:`ONE_PASS_CURSOR_BYTES`)."""
    return (n >= BUCKET_MIN_PAIRS and (1 << BUCKET_BITS) < span < (1 << 32)
            and 8 * span * nchunks > ONE_PASS_CURSOR_BYTES)


@njit(cache=True, parallel=True)
def _bucket_scatter(i, j, vbits, lo, jlo, has_value, shift, nbuckets, words, rows, bstart, seg, wide, v64, vals):
    """First pass of the two-pass sort: each pair's word ``(j - jlo) << 32 | value bits`` into ``words`` and its
    row ``i - lo`` into ``rows``, grouped by bucket ``(i - lo) >> shift`` (bucket b at ``bstart[b]`` to
    ``bstart[b + 1]``); chunks of the input (of segments ``seg``, as :func:`_cursors`) in parallel, each with its
    own cursors (the order within a bucket does not matter: the second pass and the runs' sort order it).
    ``wide`` (8-byte values ``v64``): the word's low half is the pair's slot instead, and the value goes to that
    slot of ``vals``."""
    first, length, chunk = seg
    nchunks = chunk.shape[0] - 1
    counts = np.zeros((nchunks, nbuckets), np.int64)
    for c in prange(nchunks):
        for g in range(chunk[c], chunk[c + 1]):
            for k in range(first[g], first[g] + length[g]):
                counts[c, (i[k] - lo) >> shift] += 1
    _scan_cursors(counts, bstart)
    for c in prange(nchunks):
        for g in range(chunk[c], chunk[c + 1]):
            for k in range(first[g], first[g] + length[g]):
                r = i[k] - lo
                b = r >> shift
                at = counts[c, b]
                counts[c, b] = at + 1
                if wide:
                    words[at] = ((j[k] - jlo) << 32) | at
                    vals[at] = v64[k]
                else:
                    words[at] = ((j[k] - jlo) << 32) | (np.int64(vbits[k]) if has_value else np.int64(0))
                rows[at] = np.uint32(r)
    return 0


@njit(cache=True, parallel=True)
def _place_buckets(words, rows, bstart, shift, span, out, oi, vbits, has_value, lo, jlo, wide, vals, ov64):
    """Second pass, buckets in parallel, each in cache: a counting sort of the bucket's few rows writes its words
    to their rows' runs in ``out``, and each run is then sorted and unpacked there (:func:`_sort_run`) into
    ``out`` (``j``), ``oi`` and ``vbits``.  A bucket's scratch (``words``, ``rows``) and its output share one
    range of positions, ``bstart[b]`` to ``bstart[b + 1]``, and nothing else reads it: the scratch may be the
    outputs themselves, overwritten once the bucket has read it (not ``vals``, the 8-byte values, read by slot
    while the bucket's outputs are written)."""
    nbuckets = bstart.shape[0] - 1
    for b in prange(nbuckets):
        a0, a1 = bstart[b], bstart[b + 1]
        r0 = np.int64(b) << shift
        r1 = min(span, r0 + (np.int64(1) << shift))
        cursor = np.zeros(r1 - r0 + 1, np.int64)
        for k in range(a0, a1):
            cursor[np.int64(rows[k]) - r0 + 1] += 1
        cursor[0] = a0
        for t in range(r1 - r0):
            cursor[t + 1] += cursor[t]  # cursor[t]: where row r0 + t's run starts
        fill = cursor[:-1].copy()
        for k in range(a0, a1):
            t = np.int64(rows[k]) - r0
            out[fill[t]] = words[k]
            fill[t] += 1
        held = np.empty(RANK_MAX, np.int64)
        keys = np.empty(RANK_MAX, np.int32)
        for t in range(r1 - r0):
            _sort_run(oi, out, vbits, cursor[t], cursor[t + 1], lo + r0 + t, has_value, jlo, held, keys, wide, vals,
                      ov64)
    return 0


def _two_pass_sort(i, j, vbits, lo, jlo, has_value, span, words, rows, oi, oj, obits, wide=None, seg=None):
    """The packed path in two passes, for many pairs: buckets of consecutive ``i`` first (a few hundred write
    streams), then each bucket's rows placed and their runs sorted while the bucket is in cache; one pass's
    random write a pair missed the cache (16M pairs of 1M rows on the 2-core VM: 0.33-0.53 s and a 0.1 s
    histogram of every row, against two streaming passes).  ``words`` (int64) and ``rows`` (uint32) hold the
    first pass's words and rows for the second, which writes ``oi``, ``oj`` and ``obits``."""
    n = i.shape[0] if seg is None else int(seg[1].sum())
    shift = max(0, (span - 1).bit_length() - BUCKET_BITS)
    nbuckets = ((span - 1) >> shift) + 1
    bstart = np.empty(nbuckets + 1, np.int64)
    if seg is None:  # the pairs in one array (``seg``: where they lie, :func:`_cursors`)
        seg = contiguous(n, max(1, min(numba.get_num_threads(), n // RADIX_CHUNK_MIN)))
    # wide: (the 8-byte values, their scratch, their output); else placeholders Numba types alike
    v64, vals, ov64 = wide if wide is not None else (_NO_WIDE, _NO_WIDE, _NO_WIDE)
    _bucket_scatter(i, j, vbits, lo, jlo, has_value, shift, nbuckets, words, rows, bstart, seg, wide is not None,
                    v64, vals)
    _place_buckets(words, rows, bstart, shift, span, oj, oi, obits, has_value, lo, jlo, wide is not None, vals, ov64)


_NO_WIDE = np.zeros(1, np.uint64)


RADIX_BITS = 11


#: pairs a thread takes at least in one radix pass (fewer: fewer chunks; one chunk: a serial pass)
RADIX_CHUNK_MIN = 1 << 16


@njit(cache=True, parallel=True)
def _radix_pass(src_k, src_p, dst_k, dst_p, has_payload, shift, nchunks):
    """One stable LSD pass on the RADIX_BITS digit at ``shift``, ``nchunks`` chunks of the input in parallel
    (each its own histogram and cursors, in chunk order within a bucket); False where every key has the
    same digit (nothing moved)."""
    n = src_k.shape[0]
    buckets = 1 << RADIX_BITS
    mask = np.uint64(buckets - 1)
    ushift = np.uint64(shift)
    counts = np.zeros((nchunks, buckets), np.int64)
    for c in prange(nchunks):
        for t in range(n * c // nchunks, n * (c + 1) // nchunks):
            counts[c, np.int64((src_k[t] >> ushift) & mask)] += 1
    total = 0
    for b in range(buckets):
        in_bucket = 0
        for c in range(nchunks):
            in_bucket += counts[c, b]
        if in_bucket == n:
            return False
        for c in range(nchunks):
            here = counts[c, b]
            counts[c, b] = total
            total += here
    for c in prange(nchunks):
        for t in range(n * c // nchunks, n * (c + 1) // nchunks):
            d = np.int64((src_k[t] >> ushift) & mask)
            pos = counts[c, d]
            counts[c, d] = pos + 1
            dst_k[pos] = src_k[t]
            if has_payload:
                dst_p[pos] = src_p[t]
    return True


def _radix_sort(keys, payload, has_payload: bool, total_bits: int):
    """``keys`` (uint64, distinct) ascending, ``payload`` moved with them: LSD passes of RADIX_BITS over the
    ``total_bits`` that vary, a pass whose digit is the same for every key skipped.  Returns the sorted
    (keys, payload); the inputs are reused as buffers."""
    nchunks = max(1, min(numba.get_num_threads(), len(keys) // RADIX_CHUNK_MIN))
    src_k, dst_k = keys, np.empty_like(keys)
    src_p, dst_p = payload, (np.empty_like(payload) if has_payload else payload)
    for shift in range(0, total_bits, RADIX_BITS):
        with serialised():
            moved = _radix_pass(src_k, src_p, dst_k, dst_p, has_payload, shift, nchunks)
        if moved:
            src_k, dst_k = dst_k, src_k
            src_p, dst_p = dst_p, src_p
    return src_k, src_p


@njit(cache=True, parallel=True)
def _extremes(i, j, nchunks):
    """(min i, max i, min j, max j) in one parallel pass (four numpy reductions read the pairs four times)."""
    n = i.shape[0]
    out = np.empty((nchunks, 4), np.int64)
    for c in prange(nchunks):
        a, b = n * c // nchunks, n * (c + 1) // nchunks
        ilo, ihi, jlo, jhi = i[a], i[a], j[a], j[a]
        for k in range(a + 1, b):
            ilo, ihi = min(ilo, i[k]), max(ihi, i[k])
            jlo, jhi = min(jlo, j[k]), max(jhi, j[k])
        out[c, 0], out[c, 1], out[c, 2], out[c, 3] = ilo, ihi, jlo, jhi
    return out[:, 0].min(), out[:, 1].max(), out[:, 2].min(), out[:, 3].max()


def _sort_wide(i: np.ndarray, j: np.ndarray, value, lo: int, span: int, jlo: int, jhi: int):
    """The radix path of :func:`sort_pairs` (``i`` spanning more values than there are pairs); None where
    ``(i, j)`` do not pack into 64 bits."""
    bits_j = max(1, (jhi - jlo).bit_length())
    bits = max(1, (span - 1).bit_length()) + bits_j
    if bits > 64:
        return None
    key = (i - lo).astype(np.uint64) << np.uint64(bits_j)
    key |= (j - jlo).astype(np.uint64)
    n = len(i)
    if value is None:
        key, _ = _radix_sort(key, np.zeros(1, np.uint32), False, bits)
        ov = None
    elif value.dtype.itemsize == 4:
        key, bits32 = _radix_sort(key, np.ascontiguousarray(value).view(np.uint32).copy(), True, bits)
        ov = bits32.view(value.dtype)
    else:  # another width: the order, then one gather
        key, order = _radix_sort(key, np.arange(n, dtype=np.int64), True, bits)
        ov = value[order]
    oi = (key >> np.uint64(bits_j)).astype(np.int64)
    oi += lo
    oj = (key & np.uint64((1 << bits_j) - 1)).astype(np.int64)
    oj += jlo
    return oi, oj, ov


def sort_pairs(i: np.ndarray, j: np.ndarray, value: np.ndarray | None, consume: bool = False):
    """``(i, j, value)`` sorted by ``(i, j)`` (new arrays; pairs are distinct, so the order is total).

    A record ``value`` (the kNN-join's dist and rank) of 4 or 8 bytes is moved as one unsigned integer.
    ``consume``: the caller is done with the inputs, which may then be overwritten and returned as the
    outputs (where many pairs take the two-pass scatter: its scratch is then the only fresh memory,
    12 bytes a pair instead of 20, or with 8-byte values 20 instead of 36; first touches of fresh pages
    cost ~1 s per GiB on the 2-core VM).
    """
    record = None if value is None or value.dtype.names is None else value.dtype
    if record is not None:
        if record.itemsize not in (4, 8):
            order = np.lexsort((j, i))
            return i[order], j[order], value[order]
        oi, oj, ov = sort_pairs(i, j, np.ascontiguousarray(value).view(np.uint64 if record.itemsize == 8 else np.uint32),
                                consume)
        return oi, oj, ov.view(record)
    n = len(i)
    if n < 2:
        return i, j, value
    i = np.ascontiguousarray(i, np.int64)
    j = np.ascontiguousarray(j, np.int64)
    with serialised():
        lo, hi, jlo, jhi = (int(x) for x in _extremes(i, j, max(1, min(numba.get_num_threads(), n // RADIX_CHUNK_MIN))))
    span = hi - lo + 1
    if span > SPAN_PER_PAIR * n + _SPAN_SLACK:
        wide = _sort_wide(i, j, value, lo, span, jlo, jhi)
        if wide is not None:
            return wide
        key = (i.astype(np.uint64) << np.uint64(32)) | j.astype(np.uint64) \
            if lo >= 0 and hi < (1 << 32) and jlo >= 0 and jhi < (1 << 32) else None
        order = np.argsort(key, kind="stable") if key is not None else np.lexsort((j, i))
        return i[order], j[order], (None if value is None else value[order])
    has_value = value is not None
    v = np.ascontiguousarray(value) if has_value else np.zeros(1, np.float32)
    # one chunk per thread, fewer where the per-chunk histograms would outweigh the pairs
    nchunks = max(1, min(numba.get_num_threads(), n // max(1, 2 * span)))
    if v.dtype.itemsize == 4 and jhi - jlo < (1 << 31):
        two_pass = _two_passes(n, span, nchunks)  # few rows: one pass stays in cache
        reuse = consume and _reusable(i, j, v if has_value else None)
        if two_pass and reuse:
            oi, oj, ov = i, j, v  # read by the first pass only: then the second pass's and the runs' outputs
            words, rows = pooled_empty(n, np.int64), pooled_empty(n, np.uint32)
        elif reuse:  # one pass: its words go to a fresh j column; i and the values, read by the scatter only, take
            # the runs' rows and values (8 fresh bytes a pair instead of 20: fresh pages cost ~1 s a GiB on the VM)
            oi, oj, ov = i, pooled_empty(n, np.int64), v
            words, rows = oi, pooled_empty(0, np.uint32)
        else:
            oi, oj = pooled_empty(n, np.int64), pooled_empty(n, np.int64)
            ov = pooled_empty(n, v.dtype) if has_value else v
            # the i and value outputs are the first pass's scratch until the runs' sort writes them
            words, rows = oi, (ov.view(np.uint32) if has_value else pooled_empty(n if two_pass else 0, np.uint32))
        vbits, obits = v.view(np.uint32), ov.view(np.uint32)
        with serialised():
            if two_pass:
                _two_pass_sort(i, j, vbits, lo, jlo, has_value, span, words, rows, oi, oj, obits)
            else:
                seg = contiguous(n, nchunks)
                starts, cursor = cursors(i, lo, span, seg)
                _scatter(i, j, vbits, lo, jlo, has_value, True, oj, obits, cursor, seg)
                _sort_runs_packed(oi, oj, obits, starts, has_value, lo, jlo)
        return oi, oj, (ov if has_value else None)
    # (8-byte values: their one pass scatters two columns, and only the two passes were measured on them)
    if (has_value and v.dtype.itemsize == 8 and jhi - jlo < (1 << 31) and n < (1 << 32)
            and n >= BUCKET_MIN_PAIRS and (1 << BUCKET_BITS) < span < (1 << 32)):
        return _two_pass_wide(i, j, v, lo, jlo, span, consume)
    oi, oj = pooled_empty(n, np.int64), pooled_empty(n, np.int64)
    ov = pooled_empty(n, v.dtype) if has_value else v
    with serialised():
        seg = contiguous(n, nchunks)
        starts, cursor = cursors(i, lo, span, seg)
        _scatter(i, j, v, lo, 0, has_value, False, oj, ov, cursor, seg)
        _sort_runs(oi, oj, ov, starts, has_value, lo)
    return oi, oj, (ov if has_value else None)


def sort_lanes(i: np.ndarray, j: np.ndarray, value: np.ndarray | None, cap: int, used: np.ndarray, rows: int,
               cols: int):
    """Pairs held in lanes, as a kernel's one pass leaves them (lane ``l``'s ``used[l]`` pairs from ``l * cap``; rows
    ``0 <= i < rows``, columns ``0 <= j < cols``), sorted by ``(i, j)`` without first moving them together: the
    packed sort of :func:`sort_pairs` (one pass or two, as it would choose for ``rows``) reading the lanes, the
    known spans in place of its pass for the extremes.  ``(i[:n], j', value[:n])``: the lanes' i and value arrays
    are outputs, and j' a new array (one pass) or ``j[:n]`` (two passes, whose first pass reads the lanes into
    scratch); ``value`` 4-byte or None.  None where that sort does not fit: 8-byte values, columns past 2^31, fewer
    than two pairs, rows far more than pairs (then move and sort as usual)."""
    n = int(used.sum())
    if value is not None and value.dtype.itemsize != 4:
        return None
    nchunks = max(1, min(numba.get_num_threads(), n // max(1, 2 * rows)))
    if n < 2 or cols >= (1 << 31) or rows > SPAN_PER_PAIR * n + _SPAN_SLACK:
        return None
    has_value = value is not None
    vbits = value.view(np.uint32) if has_value else np.zeros(1, np.uint32)
    oi, obits = i[:n], vbits[:n]  # each read in full by the first pass before the last pass writes it
    with serialised():
        if _two_passes(n, rows, nchunks):
            oj = j[:n]
            seg = in_lanes(cap, used, max(1, min(numba.get_num_threads(), n // RADIX_CHUNK_MIN)))
            _two_pass_sort(i, j, vbits, 0, 0, has_value, rows, pooled_empty(n, np.int64), pooled_empty(n, np.uint32), oi, oj,
                           obits, seg=seg)
        else:
            oj = pooled_empty(n, np.int64)
            seg = in_lanes(cap, used, nchunks)
            starts, cursor = cursors(i, 0, rows, seg)
            _scatter(i, j, vbits, 0, 0, has_value, True, oj, vbits, cursor, seg)
            _sort_runs_packed(oi, oj, obits, starts, has_value, 0, 0)
    return oi, oj, (value[:n] if has_value else None)


def _two_pass_wide(i, j, v, lo, jlo, span, consume):
    """The two-pass sort for 8-byte values (the set join's float64 similarity, the kNN-join's dist and rank): a
    pair's word carries its slot, and its value waits in a scratch array at that slot for its run's sort
    (8.8M pairs of 600k rows on the 2-core VM: 0.32-0.36 s in one pass, 0.13-0.17 s for 4-byte values)."""
    n = len(i)
    if consume and _reusable(i, j, v):
        oi, oj, ov = i, j, v  # read by the first pass only
        words = pooled_empty(n, np.int64)
    else:
        oi, oj, ov = pooled_empty(n, np.int64), pooled_empty(n, np.int64), pooled_empty(n, v.dtype)
        words = oi  # the i output is the first pass's scratch until the runs' sort writes it
    rows, vals = pooled_empty(n, np.uint32), pooled_empty(n, np.uint64)
    no_bits = np.zeros(1, np.uint32)
    with serialised():
        _two_pass_sort(i, j, no_bits, lo, jlo, True, span, words, rows, oi, oj, no_bits,
                       wide=(v.view(np.uint64), vals, ov.view(np.uint64)))
    return oi, oj, ov


def _reusable(*arrays) -> bool:
    """Whether arrays given for consumption may be written as outputs: writable, and apart from one another."""
    held = [a for a in arrays if a is not None]
    return all(a.flags.writeable and a.flags.c_contiguous for a in held) and not any(
        np.may_share_memory(a, b) for k, a in enumerate(held) for b in held[k + 1:])


@njit(cache=True, parallel=True)
def _unsorted_steps(i, j, nchunks):
    n = i.shape[0]
    step = (n + nchunks - 1) // nchunks
    bad = np.zeros(nchunks, np.int64)
    for c in prange(nchunks):
        for k in range(max(1, c * step), min(n, (c + 1) * step)):
            if i[k] < i[k - 1] or (i[k] == i[k - 1] and j[k] <= j[k - 1]):
                bad[c] = 1
                break
    return bad.sum()


def is_sorted(i: np.ndarray, j: np.ndarray) -> bool:
    """Whether pairs are strictly increasing by ``(i, j)`` (one parallel pass, no sort, no temporaries)."""
    if len(i) < 2:
        return True
    i = np.ascontiguousarray(i, np.int64)
    j = np.ascontiguousarray(j, np.int64)
    with serialised():
        return not _unsorted_steps(i, j, max(1, min(numba.get_num_threads(), len(i) // 4096)))
