"""Tensor maps of the Hopper filter's rows (kernels/tensor_map.py): what the encoder refuses before it calls the
driver.  The maps themselves are read on a GPU by every wgmma test of tests/test_brute_tc_gpu.py (marked gpu)."""
from __future__ import annotations

import pytest

from daskjoin.kernels import tensor_map


@pytest.mark.parametrize("nrows, rowbytes, address", [
    (128, 24, 0x1000),    # a row not a multiple of 16 bytes
    (128, 0, 0x1000),     # no bytes
    (100, 128, 0x1000),   # not whole tiles of 128 rows
    (0, 128, 0x1000),     # no rows
    (256, 128, 0x1008),   # an address not 16-byte aligned
])
def test_encode_refuses_what_the_boxes_cannot_read(nrows, rowbytes, address):
    with pytest.raises(ValueError, match="tensor map"):
        tensor_map.encode(address, nrows, rowbytes)


def test_tile_map_takes_contiguous_bytes_only():
    import numpy as np

    with pytest.raises(ValueError, match="uint8"):
        tensor_map.tile_map(np.zeros((128, 16), np.int8))
    with pytest.raises(ValueError, match="uint8"):
        tensor_map.tile_map(np.zeros((256, 32), np.uint8)[::2])
