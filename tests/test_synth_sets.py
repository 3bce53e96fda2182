"""Tests of daskjoin.io.synth_sets: shapes, determinism, the advertised statistics, and that joins have work to do."""
import doctest

import numpy as np
import pytest
import zarr

from daskjoin.io import synth_sets
from daskjoin.io.sets_in import open_sets
from daskjoin.io.synth_sets import dblp_like, kosarak_like, write_synth_sets, zipf_sets
from daskjoin.validation import InputError


def assert_flat_sets(tokens, offsets, n):
    assert tokens.dtype == np.int64 and offsets.dtype == np.int64
    assert offsets.shape == (n + 1,) and offsets[0] == 0 and offsets[-1] == tokens.shape[0]
    sizes = np.diff(offsets)
    assert np.all(sizes >= 1)
    inside = np.ones(tokens.shape[0] - 1, dtype=bool) if tokens.size else np.zeros(0, bool)
    inside[offsets[1:-1] - 1] = False
    assert np.all(np.diff(tokens)[inside] > 0)  # distinct and ascending inside each set


def similar_pairs(tokens, offsets, thresholds):
    """Exact number of pairs i < j with Jaccard >= t, for each t (sparse products, small inputs only)."""
    import scipy.sparse as sp

    n = offsets.shape[0] - 1
    sizes = np.diff(offsets)
    x = sp.csr_matrix((np.ones(tokens.shape[0], np.float64), tokens, offsets), shape=(n, int(tokens.max()) + 1))
    inter = sp.triu(x @ x.T, k=1).tocoo()
    jac = inter.data / (sizes[inter.row] + sizes[inter.col] - inter.data)
    return [int((jac >= t).sum()) for t in thresholds]


@pytest.mark.parametrize("size_dist", ["lognormal", "poisson", "fixed"])
def test_zipf_sets_shape_and_sizes(size_dist):
    tokens, offsets = zipf_sets(3000, 12, 2000, 1.0, size_dist, seed=5, dup_fraction=0.0)
    assert_flat_sets(tokens, offsets, 3000)
    assert tokens.min() >= 0 and tokens.max() < 2000
    sizes = np.diff(offsets)
    assert abs(sizes.mean() - 12) < 1.0
    if size_dist == "fixed":
        assert np.all(sizes == 12)


def test_zipf_sets_is_seeded():
    a = zipf_sets(500, 6, 300, 1.2, "poisson", 1)
    b = zipf_sets(500, 6, 300, 1.2, "poisson", 1)
    c = zipf_sets(500, 6, 300, 1.2, "poisson", 2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])


def test_zipf_frequencies_are_skewed():
    tokens, offsets = zipf_sets(5000, 5, 1000, 1.0, "fixed", 0, dup_fraction=0.0)
    counts = np.sort(np.bincount(tokens, minlength=1000))[::-1]
    assert counts[0] > 20 * max(1, counts[500])  # the head is far more popular than the middle


def test_zipf_sets_sizes_capped_by_universe():
    tokens, offsets = zipf_sets(50, 30, 10, 0.5, "poisson", 0, dup_fraction=0.0)
    assert_flat_sets(tokens, offsets, 50)
    assert np.diff(offsets).max() <= 10


def test_zipf_unique_sets_are_different():
    tokens, offsets = zipf_sets(3000, 2, 500, 1.0, "poisson", 0, dup_fraction=0.0, unique_sets=True)
    keys = {tuple(tokens[offsets[k] : offsets[k + 1]]) for k in range(3000)}
    assert len(keys) == 3000


def test_zipf_unique_sets_impossible():
    with pytest.raises(InputError, match="cannot draw 100 different sets"):
        zipf_sets(100, 1, 5, 1.0, "fixed", 0, dup_fraction=0.0, unique_sets=True)


def test_zero_and_one_set():
    tokens, offsets = zipf_sets(0, 5, 100, 1.0, "poisson", 0)
    assert tokens.shape == (0,) and offsets.tolist() == [0]
    tokens, offsets = zipf_sets(1, 5, 100, 1.0, "poisson", 0)
    assert_flat_sets(tokens, offsets, 1)
    for gen in (kosarak_like, dblp_like):
        tokens, offsets = gen(0)
        assert offsets.tolist() == [0]
        assert_flat_sets(*gen(1), 1)


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((-1, 5, 100), {}, "n_sets must be an integer >= 0"),
        ((10, 0.5, 100), {}, r"avg_size must be a number in \[1.0, inf\]"),
        ((10, 5, 0), {}, "n_tokens_universe must be an integer >= 1"),
        ((10, 5, 100, -1.0), {}, "zipf_a must be a number"),
        ((10, 5, 100, 1.0, "uniform"), {}, "size_dist must be one of"),
        ((10, 5, 100), {"dup_fraction": 1.0}, "dup_fraction must be a number"),
        ((10, 5, 100), {"seed": -1}, "seed must be an integer >= 0"),
    ],
)
def test_zipf_sets_rejects_bad_arguments(args, kwargs, match):
    with pytest.raises(InputError, match=match):
        zipf_sets(*args, **kwargs)


def test_kosarak_like_statistics():
    tokens, offsets = kosarak_like(30_000, seed=0)
    assert_flat_sets(tokens, offsets, 30_000)
    sizes = np.diff(offsets)
    assert tokens.max() < synth_sets.KOSARAK_UNIVERSE
    assert 5 <= sizes.mean() <= 9  # about 8 at the default 600k sets, where more repeats are dropped
    assert np.mean(sizes <= 5) > 0.6 and sizes.max() > 300  # mostly small, heavy tail
    counts = np.sort(np.bincount(tokens))[::-1]
    assert counts[0] > 0.2 * 30_000  # the most popular token is in a large share of the sets
    again = kosarak_like(30_000, seed=0)
    assert np.array_equal(again[0], tokens) and np.array_equal(again[1], offsets)


def test_dblp_like_statistics():
    tokens, offsets = dblp_like(4_000, seed=0)
    assert_flat_sets(tokens, offsets, 4_000)
    sizes = np.diff(offsets)
    assert 80 <= sizes.mean() <= 96
    assert tokens.max() < synth_sets.ALPHABET**2
    assert len(np.unique(tokens)) > 500
    again = dblp_like(4_000, seed=0)
    assert np.array_equal(again[0], tokens) and np.array_equal(again[1], offsets)
    assert not np.array_equal(dblp_like(4_000, seed=1)[0], tokens)


@pytest.mark.parametrize("gen, n", [(kosarak_like, 6_000), (dblp_like, 3_000)], ids=["kosarak", "dblp"])
def test_joins_have_similar_pairs(gen, n):
    tokens, offsets = gen(n, seed=3)
    at_05, at_07, at_09 = similar_pairs(tokens, offsets, [0.5, 0.7, 0.9])
    assert at_05 >= at_07 >= at_09
    assert at_05 >= 0.05 * n  # the perturbed copies and their sources at least
    assert at_07 >= 0.02 * n
    assert at_09 >= 0.005 * n


def test_write_synth_sets(tmp_path):
    path = write_synth_sets("dblp", 500, tmp_path / "d.zarr", seed=2)
    c = open_sets(path)
    assert len(c) == 500 and c.vocab_kind == "int"
    tokens, offsets = dblp_like(500, seed=2)
    assert sorted(c.sizes.tolist()) == sorted(np.diff(offsets).tolist())
    meta = zarr.open_group(path, mode="r").attrs["daskjoin"]
    assert (meta["generator"], meta["n"], meta["seed"]) == ("dblp", 500, 2)
    with pytest.raises(InputError, match="already exists"):
        write_synth_sets("dblp", 500, tmp_path / "d.zarr")
    with pytest.raises(InputError, match=r"unknown synthetic set kind 'orkut'; choose one of \['dblp', 'kosarak'\]"):
        write_synth_sets("orkut", 5, tmp_path / "o.zarr")


def test_docstring_examples(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = doctest.testmod(synth_sets, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0
