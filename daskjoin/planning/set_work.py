"""How much filtering a set self-join will do, from a sample of its sets: what the plan's cut is chosen by.

The filter scans, for each probe set, the postings of the tokens in its probe prefix.  A token's
postings are at most the sets that hold it (``freq``, which every collection carries), so

    bound = (sets that can match) x mean over sampled sets of  sum_{k < prefix(s)} freq[token_k(s)]

is an upper bound on the postings scanned, read from a few ranges of stored sets (sets are
stored by size, so ranges spread evenly over the store sample every size).  It orders the
benchmark workloads as their kernels do (2-core VM, Jaccard): KOSARAK-like 600k at 0.9 3.5e8
(kernel 0.09 s), at 0.7 1.1e9, DBLP-like 100k at 0.9 2.2e9 (1.5 s), KOSARAK-like at 0.5 1.2e10
(2.5 s), DBLP-like at 0.5 4.8e10 (340 s).
"""
from __future__ import annotations

import numpy as np

#: ranges of consecutive stored sets read, and sets per range (a few small reads: ~5 ms for a store)
SAMPLE_RANGES = 16
SAMPLE_PER_RANGE = 64


def postings_bound(sizes: np.ndarray, freq: np.ndarray, read, threshold, start: int,
                   ranges: int = SAMPLE_RANGES, per: int = SAMPLE_PER_RANGE) -> tuple[float | None, int]:
    """(bound on the postings the filter scans, sets sampled) for a self-join of the stored sets ``start..n``
    (those that can match); ``read(lo, hi)`` gives stored sets ``[lo, hi)`` as (tokens, offsets).  No more sets
    than the sample would hold are read whole (the exact sum); without token frequencies, (None, 0)."""
    from ..kernels.sets.filtering import prefix_lengths  # Numba: where set plans are made, not `import daskjoin`

    n = len(sizes)
    matchable = n - start
    if matchable <= 0:
        return 0.0, 0
    if len(freq) == 0:
        return None, 0
    code, p, q = threshold.args()
    freq = np.asarray(freq, np.int64)
    if matchable <= ranges * per:  # ranges spread over fewer sets would overlap and count sets twice
        spans = [(start, n)]
    else:
        spans = [(lo, lo + per) for lo in start + np.arange(ranges, dtype=np.int64) * matchable // ranges]
    total, sampled = 0, 0
    for lo, hi in spans:
        lo, hi = int(lo), min(n, int(hi))
        tokens, offsets = read(lo, hi)
        offsets = np.asarray(offsets, np.int64)
        counts = np.diff(offsets)
        prefix = prefix_lengths(counts, code, p, q, False, False)
        # each set's first prefix[k] tokens: positions below their set's start + prefix
        at = np.arange(offsets[-1] - offsets[0], dtype=np.int64)
        first = np.repeat(offsets[:-1] - offsets[0], counts)
        keep = at - first < np.repeat(prefix, counts)
        total += int(freq[np.asarray(tokens)[keep]].sum())
        sampled += hi - lo
    return (total / sampled) * matchable if sampled else 0.0, sampled
