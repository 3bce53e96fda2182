"""Tests of daskjoin.io.synth: chunk-invariant generators, streamed synth, benchmark recipes."""
import math

import numpy as np
import pytest
import zarr

from daskjoin.io import synth as synth_mod
from daskjoin.io.synth import (
    block_rows,
    design_clusters_64d,
    eps_for_neighbours,
    generate,
    n_centers,
    n_topics,
    synth,
)
from daskjoin.validation import InputError

KINDS = ["uniform", "expo", "clusters", "embeddings"]


@pytest.fixture
def small_blocks(monkeypatch):
    """Shrink the internal block so that block boundaries are cheap to cross in tests."""
    monkeypatch.setattr(synth_mod, "block_rows", lambda d: 100)
    return 100


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "cuts",
    [[0, 1000], [0, 100, 1000], [0, 7, 99, 100, 101, 350, 999, 1000], list(range(0, 1001, 37)) + [1000]],
    ids=str,
)
def test_generate_is_chunk_invariant(kind, cuts, small_blocks):
    whole = generate(kind, 1000, 3, seed=5)
    parts = [generate(kind, 1000, 3, seed=5, start=a, stop=b) for a, b in zip(cuts, cuts[1:])]
    np.testing.assert_array_equal(np.concatenate(parts), whole)


@pytest.mark.parametrize("kind", KINDS)
def test_generate_invariant_across_real_block_boundary(kind):
    size = block_rows(2)
    n = size + 500
    whole = generate(kind, n, 2, seed=1)
    a = generate(kind, n, 2, seed=1, start=size - 10, stop=size + 10)
    np.testing.assert_array_equal(a, whole[size - 10 : size + 10])


@pytest.mark.parametrize("kind", KINDS)
def test_generate_shape_dtype_and_determinism(kind):
    x = generate(kind, 500, 4, seed=3)
    assert x.shape == (500, 4) and x.dtype == np.float32
    np.testing.assert_array_equal(x, generate(kind, 500, 4, seed=3))
    assert not np.array_equal(x, generate(kind, 500, 4, seed=4))
    assert np.isfinite(x).all()


def test_kinds_differ_for_same_seed():
    u = generate("uniform", 100, 2)
    e = generate("expo", 100, 2)
    assert not np.array_equal(u, e)


def test_uniform_distribution():
    x = generate("uniform", 50_000, 2, seed=0)
    assert x.min() >= 0 and x.max() < 1
    np.testing.assert_allclose(x.mean(axis=0), 0.5, atol=0.01)
    np.testing.assert_allclose(x.var(axis=0), 1 / 12, rtol=0.03)


def test_expo_distribution():
    x = generate("expo", 50_000, 2, seed=0)
    assert x.min() >= 0
    np.testing.assert_allclose(x.mean(axis=0), 1 / 40, rtol=0.03)
    np.testing.assert_allclose(x.std(axis=0), 1 / 40, rtol=0.03)


def test_clusters_distribution():
    n, d = 20_000, 3
    x = generate("clusters", n, d, seed=2)
    centers = synth_mod._centers(2, n, d)
    assert centers.shape == (n_centers(n), d) == (200, d)
    # every point lies near some centre: distance to the nearest centre ~ 0.05 * chi_3
    dist = np.sqrt(((x[:, None, :] - centers[None, :, :]) ** 2).sum(-1)).min(axis=1)
    assert np.median(dist) < 0.1
    assert dist.max() < 0.5
    assert x.std() > 0.2  # spread over the cube, not a single blob


def test_embeddings_look_like_embeddings():
    """Unit rows in topics of low intrinsic dimension, with near duplicates: a few neighbours at a
    small radius, far more at the typical within-topic distance, none of it uniform."""
    n, d = 20_000, 128
    x = generate("embeddings", n, d, seed=0).astype(np.float64)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    dist = np.sqrt(np.maximum(2 - 2 * x[:400] @ x.T, 0))
    dist[np.arange(400), np.arange(400)] = np.inf
    nearest = dist.min(axis=1)
    assert np.mean(nearest < 0.01) > 0.005  # near duplicates (2% of rows are copies with noise 0.002)
    k64 = np.sort(dist, axis=1)[:, 63]
    assert np.median(k64) < 0.6 < np.median(dist)  # topics: 64 neighbours far closer than a typical row
    svals = np.linalg.svd(x[:2000] - x[:2000].mean(0), compute_uv=False)
    assert n_topics(n) == 40 and svals[0] > 2 * svals[-1]


@pytest.mark.parametrize("n, expected", [(0, 1), (1, 1), (99, 1), (150, 1), (250, 2), (20_000, 200), (10**7, 200)])
def test_n_centers(n, expected):
    assert n_centers(n) == expected


def test_generate_empty_ranges():
    assert generate("uniform", 0, 3).shape == (0, 3)
    assert generate("clusters", 10, 3, start=4, stop=4).shape == (0, 3)


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        (("gauss", 10, 2), {}, "unknown synthetic data kind 'gauss'"),
        (("uniform", -1, 2), {}, "n \\(number of points\\) must be an integer >= 0"),
        (("uniform", 10, 0), {}, "d \\(number of dimensions\\) must be an integer >= 1"),
        (("uniform", 10.0, 2), {}, "n \\(number"),
        (("uniform", 10, 2), {"seed": -3}, "seed"),
        (("uniform", 10, 2), {"start": 5, "stop": 3}, "start <= stop"),
        (("uniform", 10, 2), {"stop": 11}, "stop <= n"),
    ],
)
def test_generate_errors(args, kwargs, match):
    with pytest.raises(InputError, match=match):
        generate(*args, **kwargs)


@pytest.mark.parametrize("kind", KINDS)
def test_synth_matches_generate_and_streams(tmp_path, kind, small_blocks, monkeypatch):
    appended = []
    original = synth_mod.ZarrPointsWriter.append

    def spy(self, block):
        appended.append(len(block))
        return original(self, block)

    monkeypatch.setattr(synth_mod.ZarrPointsWriter, "append", spy)
    path = synth(kind, 1234, 3, tmp_path / "s.zarr", seed=9, chunk_rows=64)
    assert max(appended) <= small_blocks and sum(appended) == 1234  # never the whole array at once
    arr = zarr.open_array(path, mode="r")
    assert arr.shape == (1234, 3) and arr.chunks == (64, 3) and arr.dtype == np.float32
    np.testing.assert_array_equal(arr[:], generate(kind, 1234, 3, seed=9))
    meta = arr.attrs["daskjoin"]
    assert meta["kind"] == "points" and meta["generator"] == kind and meta["seed"] == 9 and meta["n"] == 1234


def test_synth_existing_path_and_overwrite(tmp_path):
    out = tmp_path / "s.zarr"
    synth("uniform", 10, 2, out)
    with pytest.raises(InputError, match="already exists"):
        synth("uniform", 20, 2, out)
    assert zarr.open_array(str(out), mode="r").shape == (10, 2)
    synth("uniform", 20, 2, out, overwrite=True)
    assert zarr.open_array(str(out), mode="r").shape == (20, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


def test_synth_bad_kind_leaves_nothing(tmp_path):
    with pytest.raises(InputError, match="unknown synthetic data kind"):
        synth("normal", 10, 2, tmp_path / "s.zarr")
    assert list(tmp_path.iterdir()) == []


def test_design_clusters_64d_recipe():
    x = design_clusters_64d(1000)
    rng = np.random.default_rng(1)
    centers = rng.random((200, 64), np.float32)
    expected = (centers[rng.integers(0, 200, 1000)] + 0.05 * rng.standard_normal((1000, 64))).astype(np.float32)
    assert x.dtype == np.float32 and x.shape == (1000, 64)
    np.testing.assert_array_equal(x, expected)


@pytest.mark.parametrize("d", [1, 2, 3, 6, 64, 500])
def test_eps_for_neighbours(d):
    n, k = 1_000_000, 32
    eps = eps_for_neighbours(n, d, k)
    volume = math.pi ** (d / 2) / math.gamma(d / 2 + 1) if d < 300 else None
    if volume is not None:
        assert n * volume * eps**d == pytest.approx(k, rel=1e-9)
    assert eps > 0 and math.isfinite(eps)


def test_eps_for_neighbours_known_values():
    assert eps_for_neighbours(2_000_000, 2) == pytest.approx(math.sqrt(32 / (2e6 * math.pi)))
    assert eps_for_neighbours(100, 1, k=2) == pytest.approx(0.01)


@pytest.mark.parametrize("args", [(0, 2), (10, 0), (10, 2, 0), (10, 2, float("nan"))])
def test_eps_for_neighbours_errors(args):
    with pytest.raises(InputError):
        eps_for_neighbours(*args)
