"""GPU verification of candidate chunks (CuPy RawModule, ``kernels/cuda/setverify.cu``).

Both collections go to the device once; each chunk's flat layout is copied
over and verified asynchronously while the host filters the next chunk.  Only
the matches come back (their candidate slots and overlaps), or, for counts,
one number at the end.
"""
from __future__ import annotations

import numpy as np

from .. import gpu_common

#: verification alternative -> kernel (Bellas & Gounaris: A, B, C)
KERNELS = {"thread": "verify_thread", "block": "verify_block", "intersect_path": "verify_path"}
DEFAULT_VERIFY = "block"
DEFAULT_BLOCK = 32
#: chunks queued on the GPU at most; beyond that the filter waits (bounds pinned and device memory)
MAX_IN_FLIGHT = 4


class _Pending:
    """One submitted chunk: its host arrays, its compacted matches on the device, and their count."""

    __slots__ = ("probes", "offsets", "cands", "hits", "hit_overlaps", "n_hits", "done")

    def __init__(self, probes, offsets, cands, hits, hit_overlaps, n_hits, done):
        self.probes, self.offsets, self.cands = probes, offsets, cands
        self.hits, self.hit_overlaps, self.n_hits, self.done = hits, hit_overlaps, n_hits, done


class GpuVerifier:
    """Verifies chunks on the current CUDA device; ``collect`` waits for one chunk's result.

    Nothing in :meth:`submit` waits for the GPU: uploads run from pinned chunk
    buffers (see :meth:`host_empty`), matches are compacted on the device and
    only their count comes back, asynchronously; :meth:`collect` waits for that
    count and copies the matches on a side stream, since by then the next
    chunk is queued on the main one.
    """

    name = "gpu"

    def __init__(self, r, s, threshold, *, verify: str = DEFAULT_VERIFY, block: int = DEFAULT_BLOCK,
                 count_only: bool = False):
        if verify not in KERNELS:
            raise ValueError(f"gpu_options verify must be one of {sorted(KERNELS)}, got {verify!r}")
        if block % 32 or not 32 <= block <= 1024:
            raise ValueError(f"gpu_options block must be a multiple of 32 in [32, 1024], got {block!r}")
        cp = self.cp = gpu_common.cupy()
        self.kernel = gpu_common.kernel("setverify.cu", KERNELS[verify])
        self.compact = gpu_common.kernel("setverify.cu", "compact_matches")
        self.verify, self.block, self.count_only = verify, block, count_only
        self.r = (cp.asarray(r.tokens), cp.asarray(r.offsets))
        self.s = self.r if s is r else (cp.asarray(s.tokens), cp.asarray(s.offsets))
        self.args = threshold.args()
        self.matches = cp.zeros((), cp.int64)
        # non-blocking: must not wait for the next chunk's kernel on a legacy default stream
        self.copy_stream = cp.cuda.Stream(non_blocking=True)
        self._in_flight = []  # (event, host buffers) pairs whose copies may still use the host memory
        self._stream = None  # the stream chunks were queued on (close() waits for it)

    #: chunk buffers the filter writes into: pinned, so uploads are true asynchronous DMA
    host_empty = staticmethod(gpu_common.pinned_empty)

    def _upload(self, host):
        dev = self.cp.empty(host.shape, host.dtype)
        if host.size:
            dev.set(host, stream=self.cp.cuda.get_current_stream())
        return dev

    def _hold(self, event, chunk) -> None:
        """Keep a chunk's host buffers alive (out of the pinned pool) until its copies are done."""
        self._in_flight = [(e, c) for e, c in self._in_flight if not e.done]
        self._in_flight.append((event, chunk))
        while len(self._in_flight) > MAX_IN_FLIGHT:
            self._in_flight.pop(0)[0].synchronize()

    def submit(self, probes, offsets, cands):
        """Queue one chunk; returns a handle for :meth:`collect` (None for counts)."""
        cp = self.cp
        if len(cands) >= 1 << 31:
            raise ValueError(f"a chunk holds at most 2**31 - 1 candidates, got {len(cands)} (lower chunk_candidates)")
        stream = self._stream = cp.cuda.get_current_stream()
        d_probes, d_offsets, d_cands = (self._upload(a) for a in (probes, offsets, cands))
        m, n = len(cands), len(probes)
        overlaps = cp.zeros(m, cp.int32)
        if n:
            code, p, q = self.args
            grid = (n + self.block - 1) // self.block if self.verify == "thread" else n
            self.kernel((grid,), (self.block,), (*self.r, *self.s, d_probes, d_offsets, d_cands, np.int64(n),
                                                 np.int32(code), np.int64(p), np.int64(q), overlaps))
        if self.count_only:
            self.matches += cp.count_nonzero(overlaps)
            self._hold(stream.record(), (probes, offsets, cands))
            return None
        hits, hit_overlaps = cp.empty(m, cp.int32), cp.empty(m, cp.int32)
        n_hits = gpu_common.pinned_empty(1, np.int32)
        if m:
            rank = cp.cumsum(overlaps != 0, dtype=cp.int32)
            self.compact((min((m + 255) // 256, 1 << 16),), (256,), (overlaps, rank, np.int64(m), hits, hit_overlaps))
            rank[-1:].get(out=n_hits, blocking=False)
        else:
            n_hits[0] = 0
        done = stream.record()
        self._hold(done, (probes, offsets, cands, n_hits))
        return _Pending(probes, offsets, cands, hits, hit_overlaps, n_hits, done)

    def collect(self, handle):
        """(probe positions, candidate positions, overlaps) of one chunk's matches; 0 for counts."""
        if handle is None:
            return 0
        handle.done.synchronize()
        k = int(handle.n_hits[0])
        with self.copy_stream:
            hits, overlaps = gpu_common.to_host(handle.hits[:k], handle.hit_overlaps[:k])
        group = np.searchsorted(handle.offsets, hits, side="right") - 1
        return handle.probes[group].astype(np.int64), handle.cands[hits].astype(np.int64), np.array(overlaps)

    def total(self) -> int:
        return int(self.matches.get())

    def close(self):
        try:
            for stream in (self._stream, self.copy_stream):
                if stream is not None:
                    stream.synchronize()
        finally:
            self._in_flight = []
            self.r = self.s = None
