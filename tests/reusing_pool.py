"""A host-buffer pool that hands a freed block out again at once (last freed, first reused).

Stands in for CuPy's pinned pool in tests of asynchronous uploads: a caller that lets a buffer
die while a copy from it is still queued gets it overwritten by its next allocation, so the race
shows as wrong data instead of depending on the real pool's timing.  The arena is allocated up
front (pinned, on a GPU), so nothing allocates page-locked memory while a test holds the GPU.
"""
from __future__ import annotations

import ctypes

import numpy as np


class ReusingPool:
    """Fixed-size blocks of ``arena`` (a uint8 array that outlives every buffer handed out)."""

    def __init__(self, arena: np.ndarray, block_bytes: int = 1 << 20):
        self.arena, self.block_bytes = arena, block_bytes
        self.free = list(range(len(arena) // block_bytes))[::-1]
        self.handed_out = 0
        pool = self

        class Block(ctypes.c_ubyte * block_bytes):
            def __del__(self):  # the last array over this block is gone
                pool.free.append(self.index)

        self._block = Block

    def empty(self, shape, dtype, *, any_size: bool = False) -> np.ndarray:  # pinned_empty's signature
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if count * dtype.itemsize > self.block_bytes:
            raise ValueError(f"{count * dtype.itemsize} bytes do not fit a {self.block_bytes}-byte block")
        if not self.free:
            raise MemoryError("every block of the test pool is in use")
        index = self.free.pop()
        block = self._block.from_address(self.arena.ctypes.data + index * self.block_bytes)
        block.index = index
        self.handed_out += 1
        return np.frombuffer(block, dtype, count).reshape(shape)
