"""The blocked order of the GPU brute filter's tile pairs (brute_gpu.block_key): a bijection that lists blocks of
PAIR_BLOCK x PAIR_BLOCK pairs, and the pairs within each, in row-major order.  Plain arithmetic, so numpy checks it
here; tests/test_brute_tc_gpu.py checks the device's lists against it."""
import numpy as np
import pytest

from daskjoin.kernels import brute_gpu


@pytest.mark.parametrize("na, nb, w", [(1, 1, 64), (130, 70, 64), (7, 9, 2), (9, 7, 3), (64, 64, 64), (5, 200, 4)])
def test_block_key_orders_blocks_then_rows_and_inverts(na, nb, w, monkeypatch):
    monkeypatch.setattr(brute_gpu, "PAIR_BLOCK", w)
    p, q = (v.astype(np.int64) for v in np.nonzero(np.ones((na, nb), bool)))
    key = brute_gpu.block_key(p, q, nb)
    assert len(np.unique(key)) == len(key)
    back = brute_gpu.from_block_key(key, nb)
    assert np.array_equal(back[0], p) and np.array_equal(back[1], q)
    order = np.argsort(key)
    bp, bq = p[order], q[order]
    # the expected order: blocks row-major, then the block's pairs row-major
    want = sorted(zip(p.tolist(), q.tolist()), key=lambda t: (t[0] // w, t[1] // w, t[0], t[1]))
    assert list(zip(bp.tolist(), bq.tolist())) == want


def test_block_key_keeps_runs_of_one_tile_of_p():
    """Within a block, each tile of P is a run of up to PAIR_BLOCK pairs (the filter stages its A tile once a run)."""
    w = brute_gpu.PAIR_BLOCK
    p, q = (v.astype(np.int64) for v in np.nonzero(np.triu(np.ones((3 * w + 5, 3 * w + 5), bool))))
    bp = p[np.argsort(brute_gpu.block_key(p, q, 3 * w + 5))]
    runs = np.diff(np.flatnonzero(np.r_[True, bp[1:] != bp[:-1], True]))
    assert runs.max() == w and (runs == w).sum() * w > len(bp) / 2  # (the diagonal's blocks: shorter runs)
