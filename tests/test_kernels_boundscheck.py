"""The Numba kernels on adversarial cases with bounds checking on, in a fresh process.

Kernels run with bounds checks off, where an out-of-range index reads garbage or
crashes; this re-runs a representative subset with NUMBA_BOUNDSCHECK=1 and a JIT
cache of its own (``build/boundscheck-jit``, ignored by git), which only ever holds code
compiled with checks: nothing compiled without them is reused, and a second run on the
same tree loads what the first compiled (~100 s of compiling on the 2-core VM; Numba
compiles a kernel again when its source file changes).  The subset is of float64
inputs only: the index arithmetic does not depend on the dtype, and each dtype is a
compilation of every kernel with checks (float32 too doubled the test's ~100 s).
"""
import os
import subprocess
import sys

SCRIPT = r"""
import numpy as np
from cases import CASES
from oracle import assert_same_pairs, oracle_cross_pairs, oracle_self_pairs
from daskjoin.kernels import get_kernel
from daskjoin.kernels import grid
grid.SAMPLE_MIN_BLOCKS = 0          # the single-pass path too
grid.CAPACITY_SLACK = 0.05          # with overflowing lanes
for case in [c for c in CASES if c.a.dtype == np.float64 and (c.b is None or c.b.dtype == np.float64)][::2]:
    b = case.b if case.b is not None else case.a
    for method, options in (("grid", {}), ("grid", {"pattern": "unicomp"}), ("brute", {}), ("szl", {}),
                            ("directory", {})):
        k = get_kernel(method, "cpu", **options)
        assert_same_pairs(k.self_join(case.a, case.eps), oracle_self_pairs(case.a, case.eps), context=case.name)
        assert_same_pairs(k.cross_join(case.a, b, case.eps), oracle_cross_pairs(case.a, b, case.eps), context=case.name)
grid.CAPACITY_SLACK = 4.0           # and lanes that hold every pair: sorted from there (pair_sort.sort_lanes)
for case in [c for c in CASES if c.a.dtype == np.float64 and c.b is None][::2]:
    got = [tuple(b) for b in grid.GridJoin(case.a, None, case.eps).batches(1 << 30)]
    want = oracle_self_pairs(case.a, case.eps)
    if got:
        assert_same_pairs(tuple(np.concatenate([b[t] for b in got]) for t in range(3)), want, context=case.name)
    else:
        assert len(want[0]) == 0, case.name
from daskjoin.kernels.original_ids import to_original  # a slab's look-up of original ids
rng = np.random.default_rng(0)
ids_i, ids_j = rng.permutation(50).astype(np.int64), rng.permutation(70).astype(np.int64)
li, lj = rng.integers(0, 50, 300), rng.integers(0, 70, 300)
for ordered in (False, True):
    i, j = to_original(li, lj, ids_i, ids_j, ordered)
    a, b = ids_i[li], ids_j[lj]
    a, b = (np.minimum(a, b), np.maximum(a, b)) if ordered else (a, b)
    assert (i == a).all() and (j == b).all()
print("ok")
"""


JIT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "boundscheck-jit")


def test_kernels_with_bounds_checking():
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=JIT_DIR,
               PYTHONPATH=os.path.dirname(__file__) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-2000:] + proc.stderr[-4000:]
