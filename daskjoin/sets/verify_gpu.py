"""GPU verification of candidate chunks (CuPy RawModule, ``kernels/cuda/setverify.cu``).

Both collections go to the device once; each chunk's flat layout is copied
over and verified asynchronously while the host filters the next chunk.  Only
the matches come back (their candidate slots and overlaps), or, for counts,
one number at the end.
"""
from __future__ import annotations

import numpy as np

from ..kernels import gpu_common

#: verification alternative -> kernel (Bellas & Gounaris: A, B, C)
KERNELS = {"thread": "verify_thread", "block": "verify_block", "intersect_path": "verify_path"}
DEFAULT_VERIFY = "block"
DEFAULT_BLOCK = 32


class GpuVerifier:
    """Verifies chunks on the current CUDA device; ``collect`` waits for one chunk's result."""

    name = "gpu"

    def __init__(self, r, s, threshold, *, verify: str = DEFAULT_VERIFY, block: int = DEFAULT_BLOCK,
                 count_only: bool = False):
        if verify not in KERNELS:
            raise ValueError(f"gpu_options verify must be one of {sorted(KERNELS)}, got {verify!r}")
        if block % 32 or not 32 <= block <= 1024:
            raise ValueError(f"gpu_options block must be a multiple of 32 in [32, 1024], got {block!r}")
        cp = self.cp = gpu_common.cupy()
        self.kernel = gpu_common.kernel("setverify.cu", KERNELS[verify])
        self.verify, self.block, self.count_only = verify, block, count_only
        self.r = (cp.asarray(r.tokens), cp.asarray(r.offsets))
        self.s = self.r if s is r else (cp.asarray(s.tokens), cp.asarray(s.offsets))
        self.args = threshold.args()
        self.matches = cp.zeros((), cp.int64)

    def submit(self, probes, offsets, cands):
        """Queue one chunk; returns a handle for :meth:`collect`."""
        cp = self.cp
        d_probes, d_offsets, d_cands = cp.asarray(probes), cp.asarray(offsets), cp.asarray(cands)
        overlaps = cp.zeros(len(cands), cp.int32)
        n = len(probes)
        if n:
            code, p, q = self.args
            grid = (n + self.block - 1) // self.block if self.verify == "thread" else n
            self.kernel((grid,), (self.block,), (*self.r, *self.s, d_probes, d_offsets, d_cands, np.int64(n),
                                                 np.int32(code), np.int64(p), np.int64(q), overlaps))
        if self.count_only:
            self.matches += cp.count_nonzero(overlaps)
            return None
        hits = cp.flatnonzero(overlaps)
        return probes, offsets, cands, hits, overlaps[hits]

    def collect(self, handle):
        """(probe positions, candidate positions, overlaps) of one chunk's matches; 0 for counts."""
        if handle is None:
            return 0
        probes, offsets, cands, d_hits, d_overlaps = handle
        hits, overlaps = gpu_common.to_host(d_hits, d_overlaps)
        group = np.searchsorted(offsets, hits, side="right") - 1
        return probes[group].astype(np.int64), cands[hits].astype(np.int64), np.array(overlaps)

    def total(self) -> int:
        return int(self.matches.get())

    def close(self):
        self.r = self.s = None
