"""CPU verification of candidate chunks: merge intersection with early exit (Numba, parallel)."""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..parallel_guard import serialised
from .measures import required_overlap


@njit(cache=True, inline="always")
def overlap_at_least(a_tokens, a_lo, a_hi, b_tokens, b_lo, b_hi, need):
    """|a ∩ b| of two sorted token runs, or a smaller number once ``need`` is out of reach."""
    i, j, o = a_lo, b_lo, 0
    while i < a_hi and j < b_hi:
        if o + min(a_hi - i, b_hi - j) < need:
            return o
        x, y = a_tokens[i], b_tokens[j]
        if x == y:
            o += 1
            i += 1
            j += 1
        elif x < y:
            i += 1
        else:
            j += 1
    return o


@njit(cache=True, parallel=True)
def verify_chunk(r_tokens, r_offsets, s_tokens, s_offsets, probes, offsets, cands, code, p, q, overlaps):
    """``overlaps[c]`` = the overlap of candidate c when it reaches the threshold, else 0."""
    for g in prange(len(probes)):
        r = probes[g]
        r_lo, r_hi = r_offsets[r], r_offsets[r + 1]
        last_size, need = -1, 0
        for c in range(offsets[g], offsets[g + 1]):
            s = cands[c]
            s_lo, s_hi = s_offsets[s], s_offsets[s + 1]
            if s_hi - s_lo != last_size:  # a probe's candidates come mostly in size order
                last_size = s_hi - s_lo
                need = required_overlap(r_hi - r_lo, last_size, code, p, q)
            o = overlap_at_least(r_tokens, r_lo, r_hi, s_tokens, s_lo, s_hi, need)
            overlaps[c] = o if o >= need else 0


class CpuVerifier:
    """Verifies each chunk at once on this worker's cores."""

    name = "cpu"
    host_empty = staticmethod(np.empty)  # chunk buffers: plain memory

    def __init__(self, r, s, threshold, count_only: bool = False):
        self.r, self.s = r, s
        self.args = threshold.args()
        self.count_only = count_only
        self.matches = 0

    def submit(self, probes, offsets, cands):
        """Verify one chunk now; returns its matches (probe positions, candidate positions, overlaps)."""
        overlaps = np.zeros(len(cands), np.int32)
        with serialised():
            verify_chunk(self.r.tokens, self.r.offsets, self.s.tokens, self.s.offsets, probes, offsets, cands,
                         *self.args, overlaps)
        hits = np.flatnonzero(overlaps)
        if self.count_only:
            self.matches += len(hits)
            return None
        group = np.searchsorted(offsets, hits, side="right") - 1
        return probes[group].astype(np.int64), cands[hits].astype(np.int64), overlaps[hits]

    @staticmethod
    def collect(handle):
        return 0 if handle is None else handle

    def total(self) -> int:
        return self.matches

    def close(self):
        pass
