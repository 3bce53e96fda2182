"""Synthetic point sets, generated block by block so that any chunking gives the same data.

A dataset is defined by ``(kind, n, d, seed)``. Its rows are cut into fixed
internal blocks of :func:`block_rows` ``(d)`` rows; block ``b`` is drawn from
``np.random.default_rng([seed, b, kind_code])``. :func:`generate` returns any row
range ``[start, stop)`` of it, identical whatever ranges are asked for, and
:func:`synth` streams a whole dataset into a Zarr store with memory bounded by
one block and one chunk.
"""
from __future__ import annotations

import collections
import math
import os
from concurrent.futures import ThreadPoolExecutor
from numbers import Integral

import numpy as np

from ..validation import InputError
from .zarr_out import ZarrPointsWriter

KINDS = {"uniform": 1, "expo": 2, "clusters": 3, "embeddings": 4}
EXPO_RATE = 40.0
CLUSTER_NOISE = 0.05
MAX_CENTERS = 200
#: the ``embeddings`` recipe (see :func:`generate`)
EMBED_MAX_TOPICS = 1000
EMBED_RANK = 8          # each topic's own directions of variation
EMBED_SPREAD = 0.35     # total length of a topic's variation before normalising (centres have length 1)
EMBED_NOISE = 0.05      # isotropic noise length
EMBED_DUPLICATES = 0.02  # share of rows that are near-copies of another row of their block
EMBED_DUP_NOISE = 0.002
_CENTERS_TAG = 2**64 - 1  # never a block index: keeps the centres' stream apart from the blocks'
_BLOCK_VALUES = 1 << 22  # at most 4 Mi values (16 MiB of float32) per internal block


def block_rows(d: int) -> int:
    """Rows per internal generation block: 65536 for ``d <= 64``, fewer for wider rows (at least 1024).

    Examples
    --------
    >>> block_rows(2), block_rows(64), block_rows(128), block_rows(10_000)
    (65536, 65536, 32768, 1024)
    """
    rows = min(1 << 16, _BLOCK_VALUES // max(1, d))
    return max(1024, 1 << (rows.bit_length() - 1))


def n_centers(n: int) -> int:
    """Number of Gaussian centres of a ``clusters`` dataset of ``n`` points (1 to 200)."""
    return max(1, min(MAX_CENTERS, n // 100 or 1))


def _check_int(value, name: str, minimum: int, hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {value!r}; {hint}")
    return int(value)


def _check_args(kind, n, d, seed) -> tuple[str, int, int, int]:
    if kind not in KINDS:
        raise InputError(
            f"unknown synthetic data kind {kind!r}; choose one of {sorted(KINDS)} "
            "(uniform: unit cube, expo: exponential with rate 40, clusters: Gaussian clusters, "
            "embeddings: unit vectors in topics of low intrinsic dimension, with near duplicates)"
        )
    n = _check_int(n, "n (number of points)", 0, "pass e.g. n=100_000")
    d = _check_int(d, "d (number of dimensions)", 1, "pass e.g. d=2")
    seed = _check_int(seed, "seed", 0, "pass a non-negative integer such as seed=0")
    return kind, n, d, seed


def n_topics(n: int) -> int:
    """Number of topics of an ``embeddings`` dataset of ``n`` points (1 to 1000)."""
    return max(1, min(EMBED_MAX_TOPICS, n // 500 or 1))


def _topics(seed: int, n: int, d: int):
    """Unit topic centres, each topic's orthonormal-ish variation directions (scaled), topic weights."""
    rng = np.random.default_rng([seed, _CENTERS_TAG, KINDS["embeddings"]])
    t = n_topics(n)
    centres = rng.standard_normal((t, d), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    basis = rng.standard_normal((t, EMBED_RANK, d), dtype=np.float32)
    basis *= np.float32(EMBED_SPREAD / np.sqrt(EMBED_RANK * d))
    weights = 1.0 / np.sqrt(np.arange(1, t + 1))  # Zipf-like topic sizes
    return centres, basis, weights / weights.sum()


def _embedding_block(rng, rows: int, d: int, model) -> np.ndarray:
    centres, basis, weights = model
    labels = rng.choice(len(weights), size=rows, p=weights)
    coeff = rng.standard_normal((rows, EMBED_RANK), dtype=np.float32)
    x = centres[labels].copy()
    for k in range(EMBED_RANK):
        x += coeff[:, k:k + 1] * basis[labels, k]
    x += rng.standard_normal((rows, d), dtype=np.float32) * np.float32(EMBED_NOISE / np.sqrt(d))
    dup = np.flatnonzero(rng.random(rows) < EMBED_DUPLICATES)
    src = rng.integers(0, rows, dup.size)
    x[dup] = x[src] + rng.standard_normal((dup.size, d), dtype=np.float32) * np.float32(EMBED_DUP_NOISE / np.sqrt(d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def _centers(seed: int, n: int, d: int) -> np.ndarray:
    rng = np.random.default_rng([seed, _CENTERS_TAG, KINDS["clusters"]])
    return rng.random((n_centers(n), d), dtype=np.float32)


def _block(kind: str, n: int, d: int, seed: int, index: int, centers) -> np.ndarray:
    size = block_rows(d)
    rows = min(size, n - index * size)
    rng = np.random.default_rng([seed, index, KINDS[kind]])
    if kind == "uniform":
        return rng.random((rows, d), dtype=np.float32)
    if kind == "expo":
        x = rng.standard_exponential((rows, d), dtype=np.float32)
        x *= np.float32(1.0 / EXPO_RATE)
        return x
    if kind == "embeddings":
        return _embedding_block(rng, rows, d, centers)
    labels = rng.integers(0, centers.shape[0], rows)
    noise = rng.standard_normal((rows, d), dtype=np.float32)
    noise *= np.float32(CLUSTER_NOISE)
    noise += centers[labels]
    return noise


def generate(kind: str, n: int, d: int, *, seed: int = 0, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Rows ``[start, stop)`` of the synthetic dataset ``(kind, n, d, seed)`` as float32.

    The result does not depend on how the dataset is cut: concatenating
    ``generate(..., start=a, stop=b)`` over any partition of ``[0, n)`` gives
    ``generate(...)``.

    Parameters
    ----------
    kind : {"uniform", "expo", "clusters", "embeddings"}
        ``uniform``: uniform in the unit cube. ``expo``: i.i.d. exponential
        coordinates with rate 40 (mean 1/40), as in Gallet & Gowanlock.
        ``clusters``: ``n_centers(n)`` centres uniform in the unit cube, each point
        a random centre plus ``0.05`` times standard normal noise.
        ``embeddings``: unit vectors shaped like text or image embeddings. ``n_topics(n)``
        unit topic centres (Zipf-like topic sizes, weight ``1/sqrt(rank)``); a row is its topic's
        centre, plus a Gaussian combination of the topic's ``EMBED_RANK`` = 8 own directions
        (total length about ``EMBED_SPREAD`` = 0.35: low intrinsic dimension, as real embeddings
        have), plus isotropic noise of length about ``EMBED_NOISE`` = 0.05; ``EMBED_DUPLICATES``
        = 2% of rows are near-copies (noise 0.002) of another row of their block; every row is
        then normalised to length 1.
    n : int
        Number of points of the whole dataset (>= 0).
    d : int
        Number of dimensions (>= 1).
    seed : int, default 0
        Non-negative seed; the same seed gives the same data.
    start, stop : int
        Row range, ``0 <= start <= stop <= n``; ``stop`` defaults to ``n``.

    Returns
    -------
    numpy.ndarray
        Shape ``(stop - start, d)``, dtype float32.

    Examples
    --------
    >>> import numpy as np
    >>> x = generate("uniform", 1000, 3, seed=7)
    >>> x.shape, x.dtype
    ((1000, 3), dtype('float32'))
    >>> parts = [generate("uniform", 1000, 3, seed=7, start=a, stop=b) for a, b in [(0, 10), (10, 999), (999, 1000)]]
    >>> bool(np.array_equal(np.concatenate(parts), x))
    True
    """
    kind, n, d, seed = _check_args(kind, n, d, seed)
    stop = n if stop is None else stop
    start = _check_int(start, "start", 0, f"pass a row index in [0, {n}]")
    stop = _check_int(stop, "stop", 0, f"pass a row index in [0, {n}]")
    if not start <= stop <= n:
        raise InputError(f"need 0 <= start <= stop <= n, got start={start}, stop={stop}, n={n}")
    out = np.empty((stop - start, d), dtype=np.float32)
    if stop == start:
        return out
    centers = _centers(seed, n, d) if kind == "clusters" else _topics(seed, n, d) if kind == "embeddings" else None
    size = block_rows(d)
    for index in range(start // size, (stop - 1) // size + 1):
        lo = index * size
        block = _block(kind, n, d, seed, index, centers)
        a, b = max(start, lo), min(stop, lo + block.shape[0])
        out[a - start : b - start] = block[a - lo : b - lo]
    return out


def synth(
    kind: str,
    n: int,
    d: int,
    out,
    *,
    seed: int = 0,
    chunk_rows: int | None = None,
    overwrite: bool = False,
) -> str:
    """Write the synthetic dataset ``(kind, n, d, seed)`` to a new Zarr array at ``out``.

    The data are streamed block by block (never materialised whole) and the
    store appears at ``out`` only once complete. Its attrs record the recipe
    under ``attrs["daskjoin"]``.

    Parameters
    ----------
    kind, n, d, seed
        As in :func:`generate`.
    out : str or os.PathLike
        Path of the Zarr store to create; must not exist unless ``overwrite=True``.
    chunk_rows : int, optional
        Rows per Zarr chunk; default about 8 MiB per chunk.
    overwrite : bool, default False
        Replace an existing ``out``.

    Returns
    -------
    str
        The path written.

    Examples
    --------
    >>> import os, tempfile, zarr
    >>> path = synth("clusters", 5000, 4, os.path.join(tempfile.mkdtemp(), "c.zarr"), seed=1)
    >>> arr = zarr.open_array(path, mode="r")
    >>> arr.shape, arr.attrs["daskjoin"]["generator"]
    ((5000, 4), 'clusters')
    >>> bool((arr[:] == generate("clusters", 5000, 4, seed=1)).all())
    True
    """
    kind, n, d, seed = _check_args(kind, n, d, seed)
    attrs = {"source": "synth", "generator": kind, "n": n, "d": d, "seed": seed, "block_rows": block_rows(d)}
    if kind == "clusters":
        attrs.update(n_centers=n_centers(n), noise=CLUSTER_NOISE)
    elif kind == "expo":
        attrs.update(rate=EXPO_RATE)
    elif kind == "embeddings":
        attrs.update(n_topics=n_topics(n), rank=EMBED_RANK, spread=EMBED_SPREAD, noise=EMBED_NOISE,
                     duplicates=EMBED_DUPLICATES)
    step = block_rows(d)

    def block(start):
        return generate(kind, n, d, seed=seed, start=start, stop=min(n, start + step))

    # blocks are generated on every core (numpy's generators and array operations release the GIL; each
    # block has its own generator) and written in order, a bounded number ahead
    workers = max(1, min(os.cpu_count() or 1, 32))
    with ZarrPointsWriter(
        out, d=d, dtype=np.float32, chunk_rows=chunk_rows, overwrite=overwrite, attrs=attrs, expected_rows=n
    ) as writer, ThreadPoolExecutor(workers, thread_name_prefix="daskjoin-synth") as pool:
        pending = collections.deque()
        for start in range(0, n, step):
            pending.append(pool.submit(block, start))
            if len(pending) > 2 * workers:
                writer.append(pending.popleft().result())
        while pending:
            writer.append(pending.popleft().result())
    return writer.path


def design_clusters_64d(n: int = 200_000) -> np.ndarray:
    """The high-dimensional benchmark workload of DESIGN.md section 7: ``n`` x 64 Gaussian clusters.

    Exactly ``rng = default_rng(1)``; ``centers = rng.random((200, 64), float32)``;
    ``x = centers[rng.integers(0, 200, n)] + 0.05 * rng.standard_normal((n, 64))``
    as float32. For ``n = 200_000`` and ``eps = 0.470697`` the self-join has
    2,897,403 pairs (about 16 neighbours per point).

    Examples
    --------
    >>> x = design_clusters_64d(1000)
    >>> x.shape, x.dtype
    ((1000, 64), dtype('float32'))
    """
    n = _check_int(n, "n (number of points)", 0, "pass e.g. n=200_000")
    rng = np.random.default_rng(1)
    centers = rng.random((200, 64), np.float32)
    x = centers[rng.integers(0, 200, n)] + 0.05 * rng.standard_normal((n, 64))
    return x.astype(np.float32)


def eps_for_neighbours(n: int, d: int, k: float = 32) -> float:
    """Radius giving about ``k`` neighbours per point for ``n`` uniform points in the unit ``d``-cube.

    ``eps = (k / (n * V_d)) ** (1 / d)`` with ``V_d = pi**(d/2) / gamma(d/2 + 1)``
    the volume of the unit ``d``-ball (computed in log space, so any ``d`` works).

    Examples
    --------
    >>> round(eps_for_neighbours(2_000_000, 2), 6)
    0.002257
    """
    n = _check_int(n, "n (number of points)", 1, "pass e.g. n=1_000_000")
    d = _check_int(d, "d (number of dimensions)", 1, "pass e.g. d=2")
    if isinstance(k, bool) or not isinstance(k, (int, float, np.integer, np.floating)) or not (
        math.isfinite(k) and k > 0
    ):
        raise InputError(f"k (neighbours per point) must be a positive finite number, got {k!r}")
    log_volume = (d / 2) * math.log(math.pi) - math.lgamma(d / 2 + 1)
    return math.exp((math.log(k) - math.log(n) - log_volume) / d)


__all__ = ["KINDS", "block_rows", "design_clusters_64d", "eps_for_neighbours", "generate", "n_centers", "synth"]
