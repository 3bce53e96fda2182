"""Tensor maps of quantised rows, read by the Hopper filter's bulk copies (``cuda/brute_tc.cu``, ``BulkStager``).

A tensor map describes a 2-d array in device memory to the tensor memory accelerator: here ``n`` rows of
``rowbytes`` bytes, read as boxes of 128 rows x 128 bytes into shared memory in the 128-byte swizzle that
``wgmma`` reads (a box past a row's end reads zeros).  The driver encodes it on the host
(``cuTensorMapEncodeTiled``, CUDA 12 and later; CuPy wraps none of the tensor-map API, so it is called through
ctypes) and it is copied to device memory, where the kernels read it.  The map holds the rows' address: the rows
must outlive every launch that reads it.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from .gpu_common import cupy

BOX = 128  # rows and bytes of a box: one tile chunk of cuda/brute_tc.cu (TILE x KB)
MAP_BYTES = 128  # sizeof(CUtensorMap), aligned to 64 bytes
# cuda.h's enums
_UINT8 = 0
_INTERLEAVE_NONE = 0
_SWIZZLE_128B = 3
_L2_PROMOTION_256B = 3
_OOB_FILL_ZEROS = 0


@functools.lru_cache(maxsize=1)
def _encode_tiled():
    lib = ctypes.CDLL("libcuda.so.1")
    f = lib.cuTensorMapEncodeTiled
    f.restype = ctypes.c_int
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                  ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return f


def encode(address: int, nrows: int, rowbytes: int) -> np.ndarray:
    """The tensor map (``MAP_BYTES`` bytes) of ``nrows`` rows of ``rowbytes`` bytes at device ``address``."""
    if rowbytes <= 0 or rowbytes % 16 or nrows <= 0 or nrows % BOX or address % 16:
        raise ValueError(f"tensor map: rows must be whole tiles of {BOX} rows of a multiple of 16 bytes at a 16-byte "
                         f"aligned address (got {nrows} rows of {rowbytes} bytes at {address:#x})")
    held = np.zeros(MAP_BYTES + 64, np.uint8)
    start = -held.ctypes.data % 64
    out = held[start:start + MAP_BYTES]
    dims = (ctypes.c_uint64 * 2)(rowbytes, nrows)
    strides = (ctypes.c_uint64 * 1)(rowbytes)
    box = (ctypes.c_uint32 * 2)(BOX, BOX)
    unit = (ctypes.c_uint32 * 2)(1, 1)
    rc = _encode_tiled()(out.ctypes.data, _UINT8, 2, address, dims, strides, box, unit, _INTERLEAVE_NONE,
                         _SWIZZLE_128B, _L2_PROMOTION_256B, _OOB_FILL_ZEROS)
    if rc != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {rc}) for {nrows} rows of {rowbytes} bytes")
    return out.copy()


def tile_map(rows):
    """The tensor map of ``rows`` (a C-contiguous 2-d uint8 CuPy array), in device memory."""
    if rows.ndim != 2 or rows.dtype != np.uint8 or not rows.flags.c_contiguous:
        raise ValueError("tensor map: rows must be a C-contiguous 2-d uint8 array")
    return cupy().asarray(encode(rows.data.ptr, rows.shape[0], rows.shape[1]))
