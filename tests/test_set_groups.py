"""Identical sets joined once: expansion in batches gives exactly the pairs of the ungrouped join."""
import numpy as np
import pytest

from daskjoin.io.sets_in import prepare_sets
from daskjoin.kernels.sets.groups import duplicate_runs
from daskjoin.kernels.sets.local import Flat, block_batches, block_count, join_block
from daskjoin.planning.set_threshold import parse_threshold


def _flat(sets):
    c = prepare_sets(sets)
    return Flat.of(c.tokens, c.offsets)


def _with_copies(seed, n_distinct, copies_max, vocab=12):
    rng = np.random.default_rng(seed)
    base = [list(rng.choice(vocab, rng.integers(0, 6), replace=False)) for _ in range(n_distinct)]
    return [s for s in base for _ in range(int(rng.integers(1, copies_max + 1)))]


def _pairs(batches):
    got = [(int(a), int(b), int(o)) for x, y, z in batches for a, b, o in zip(x, y, z)]
    assert len(got) == len(set(got)), "a pair came out twice"
    return set(got)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_pairs", [1, 3, 17, 1 << 20])
@pytest.mark.parametrize("measure,threshold", [("jaccard", 0.5), ("cosine", 0.8), ("overlap", 2), ("dice", 1.0)])
def test_grouped_self_join_equals_ungrouped(seed, max_pairs, measure, threshold):
    f = _flat(_with_copies(seed, 25, 9))
    th = parse_threshold(measure, threshold)
    plain = _pairs([join_block(f, None, th, group_copies=False)])
    grouped = _pairs(block_batches(f, None, th, max_pairs=max_pairs))
    assert grouped == plain
    assert block_count(f, None, th) == len(plain)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("max_pairs", [1, 5, 1 << 20])
def test_grouped_cross_join_equals_ungrouped(seed, max_pairs):
    r, s = _flat(_with_copies(seed, 20, 7)), _flat(_with_copies(seed + 100, 15, 5))
    th = parse_threshold("jaccard", 0.4)
    plain = _pairs([join_block(r, s, th, group_copies=False)])
    assert _pairs(block_batches(r, s, th, max_pairs=max_pairs)) == plain
    assert block_count(r, s, th) == len(plain)


def test_one_big_run_is_split_into_bounded_batches():
    f = _flat([[1, 2, 3]] * 200 + [[1, 2, 3, 4]] * 50)
    th = parse_threshold("jaccard", 0.7)
    batches = list(block_batches(f, None, th, max_pairs=1000))
    assert max(len(b[0]) for b in batches) <= 1000
    n = 250
    assert len(_pairs(batches)) == n * (n - 1) // 2 == block_count(f, None, th)


def test_duplicate_runs_marks_identical_neighbours():
    f = _flat([[1], [1], [2], [1, 2], [1, 2], [1, 2], []])
    starts = duplicate_runs(f.tokens, f.offsets)
    # stored by size, then by rank (token 2 is rarer than token 1): [] ; [2] ; [1] x2 ; [1, 2] x3
    assert np.diff(starts).tolist() == [1, 1, 2, 3]
