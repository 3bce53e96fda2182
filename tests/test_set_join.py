"""``daskjoin.set_similarity_join`` against the exact brute-force oracle (``tests/set_oracle.py``).

Every adversarial case of ``tests/set_cases.py`` x its measures x (self, R x S),
on the session's real multi-process LocalCluster: the pair set must equal the
oracle's, each ``sim`` must equal the exact similarity as float64 (within
1e-12), ``output="count"`` must be the exact count, and neither may change with
the algorithm (ppjoin / allpairs) or the number of size-range partitions
(``partitions`` = None, 1, 3, 7 - including more partitions than sets).  The
default run covers every case and measure once plus a representative slice of
the other axes; ``-m slow`` runs the whole matrix.

Also: a hypothesis property test on small random collections with thresholds on
a grid of exact ties, SetSimilaritySearch (an independent implementation) on
random Zipf data, the input forms (Python lists, ``SetCollection``, Zarr store,
ids given to the store), and the ``InputError`` refusals.  GPU variants (marked
``gpu``) rerun the cases with ``backend="gpu"`` and each verification kernel.
"""
from __future__ import annotations

import math

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskjoin as dj
from set_cases import THRESHOLDS, case_params, set_case_by_name, zipf_sets
from set_oracle import assert_same_set_pairs, normalize_sets, oracle_join, similarity

pytestmark = pytest.mark.integration

ALGORITHMS = ["ppjoin", "allpairs"]
PARTITIONS = [None, 1, 3, 7]
MODES = ["self", "cross"]
OUTPUTS = ["pairs", "count"]

#: Cases whose plain run (ppjoin, pairs, default partitions) is unmarked in both modes: exact ties and
#: float-rounding traps, empties and duplicates.
TIE_CASES = {
    "empty_mixed", "repeated_tokens", "duplicate_sets", "sizes_1_vs_1000", "nested_ties_included",
    "nested_ties_excluded", "nested_ties_9_digits", "nested_ties_9_digits_below", "nested_cosine_sqrt2",
    "cosine_half", "cosine_float_ties", "string_tokens", "large_token_ids",
}


def sjoin(client, a, b=None, **kw):
    """The join on the session cluster (CPU backend unless given, no progress bar)."""
    kw.setdefault("backend", "cpu")
    kw.setdefault("progress", False)
    return dj.set_similarity_join(a, b, client=client, **kw)


def computed(ddf) -> pd.DataFrame:
    assert isinstance(ddf, dd.DataFrame), f"expected a dask DataFrame, got {type(ddf).__name__}"
    assert list(ddf.columns) == ["i", "j", "sim"], list(ddf.columns)
    assert {c: str(t) for c, t in ddf.dtypes.items()} == {"i": "int64", "j": "int64", "sim": "float64"}, \
        f"meta dtypes {dict(ddf.dtypes)}"
    return ddf.compute()


def _b(case, mode):
    return None if mode == "self" else case.cross_b()


def _matrix():
    """(case, measure, mode, algorithm, output, partitions) params.

    Unmarked: one variant of every (case, measure), rotating through the modes,
    algorithms, outputs and partition counts so that each value of every axis
    meets many cases, plus the plain run of the TIE_CASES in both modes.  The
    rest of the full product is marked slow.
    """
    out = []
    for idx, (case, measure) in enumerate(case_params()):
        chosen = (MODES[idx % 2], ALGORITHMS[(idx // 2) % 2], "count" if idx % 5 == 4 else "pairs",
                  PARTITIONS[(idx // 3) % 4])
        for mode in MODES:
            for algorithm in ALGORITHMS:
                for output in OUTPUTS:
                    for k in PARTITIONS:
                        plain = (algorithm, output, k) == ("ppjoin", "pairs", None)
                        default = (mode, algorithm, output, k) == chosen or (plain and case.name in TIE_CASES)
                        pid = f"{case.name}-{measure}-{mode}-{algorithm}-{output}-K{k}"
                        out.append(pytest.param(case, measure, mode, algorithm, output, k, id=pid,
                                                marks=() if default else (pytest.mark.slow,)))
    return out


_EXPECTED = {}


def expected_pairs(case, measure, mode) -> dict:
    key = (case.name, measure, mode)
    if key not in _EXPECTED:
        _EXPECTED[key] = oracle_join(case.a, _b(case, mode), threshold=case.thresholds[measure], measure=measure)
    return _EXPECTED[key]


@pytest.mark.parametrize("case, measure, mode, algorithm, output, partitions", _matrix())
def test_matches_oracle(client, case, measure, mode, algorithm, output, partitions):
    expected = expected_pairs(case, measure, mode)
    kw = dict(threshold=case.thresholds[measure], measure=measure, method=algorithm, partitions=partitions)
    context = f"{case.name} {measure} t={case.thresholds[measure]!r} {mode} {algorithm} K={partitions}"
    if output == "count":
        n = sjoin(client, case.a, _b(case, mode), output="count", **kw)
        assert type(n) is int, f"count is a {type(n).__name__}, expected int"
        assert n == len(expected), f"[{context}] count {n}, expected {len(expected)}"
    else:
        got = computed(sjoin(client, case.a, _b(case, mode), **kw))
        assert_same_set_pairs(got, expected, context=context, selfjoin=(mode == "self"))


# --------------------------------------------------------------------------- hypothesis



@st.composite
def collections(draw, max_sets=12, max_token=9, max_size=8):
    return draw(st.lists(st.lists(st.integers(0, max_token), max_size=max_size), max_size=max_sets))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(a=collections(), b=st.one_of(st.none(), collections()), data=st.data())
def test_matches_oracle_hypothesis(client, a, b, data):
    measure = data.draw(st.sampled_from(sorted(THRESHOLDS)), label="measure")
    t = data.draw(st.sampled_from(THRESHOLDS[measure]), label="threshold")
    algorithm = data.draw(st.sampled_from(ALGORITHMS), label="algorithm")
    partitions = data.draw(st.sampled_from([None, 1, 2, 5, 20]), label="partitions")
    expected = oracle_join(a, b, threshold=t, measure=measure)
    kw = dict(threshold=t, measure=measure, method=algorithm, partitions=partitions)
    if data.draw(st.booleans(), label="count"):
        assert sjoin(client, a, b, output="count", **kw) == len(expected)
    else:
        assert_same_set_pairs(computed(sjoin(client, a, b, **kw)), expected, selfjoin=b is None,
                              context=f"{measure} t={t!r} {algorithm} K={partitions}")


# --------------------------------------------------------------------------- SetSimilaritySearch


def sss_pairs(sets, measure, t) -> dict:
    """SetSimilaritySearch.all_pairs as ``{(i, j): sim}``, ``i < j``.

    Its semantics (read from its source): it keeps a pair iff the float64
    ``sim >= t`` (jaccard ``float(o) / float(|r| + |s| - o)``, cosine
    ``float(o) / sqrt(float(|r| |s|))``), yields ``(larger index, smaller index,
    sim)``, supports jaccard and cosine (and a max-normalised containment that is
    none of ours), expects deduplicated tokens and refuses an empty list.  Its
    float comparison can differ from the exact rule only where a similarity lies
    within rounding of ``t``; the thresholds below are chosen, and checked, to
    have no similarity within 1e-9.
    """
    from SetSimilaritySearch import all_pairs

    dedup = [sorted(set(s)) for s in sets]
    return {(min(x, y), max(x, y)): sim
            for x, y, sim in all_pairs(dedup, similarity_func_name=measure, similarity_threshold=t)}


def _assert_tie_free(a, b, measure, t, margin=1e-9):
    ra, rb = normalize_sets(a), normalize_sets(b if b is not None else a)
    for i, r in enumerate(ra):
        for j, s in enumerate(rb):
            o = len(r & s)
            if o and abs(similarity(measure, o, len(r), len(s)) - t) <= margin:
                raise AssertionError(f"pair ({i}, {j}) ties with t={t}: choose another threshold")


SSS_RUNS = [("jaccard", 0.30103, 0), ("jaccard", 0.0917, 1), ("cosine", 0.41421, 0), ("cosine", 0.777, 1)]


@pytest.mark.parametrize("measure, t, seed", SSS_RUNS)
def test_matches_setsimilaritysearch(client, measure, t, seed):
    a = zipf_sets(400, seed=50 + seed, vocab=300, max_size=30)
    _assert_tie_free(a, None, measure, t)
    expected = sss_pairs(a, measure, t)
    assert len(expected) > 20
    got = computed(sjoin(client, a, threshold=t, measure=measure, partitions=[None, 5][seed]))
    assert_same_set_pairs(got, expected, selfjoin=True, context=f"SetSimilaritySearch {measure} {t}")


def test_setsimilaritysearch_tie_semantics_differ(client):
    """Where SetSimilaritySearch's float comparison keeps (k, 2k) at cosine 0.7071067811865476, we do not."""
    a = [list(range(k)) for k in range(1, 41)]
    t = 0.7071067811865476
    got = computed(sjoin(client, a, threshold=t, measure="cosine"))
    sss = set(sss_pairs(a, "cosine", t))
    ours = set(zip(got["i"].tolist(), got["j"].tolist()))
    assert ours == set(oracle_join(a, threshold=t, measure="cosine"))
    assert ours < sss and all(j + 1 == 2 * (i + 1) for i, j in sss - ours)


# --------------------------------------------------------------------------- input forms and ids


@pytest.fixture(scope="module")
def zipf_pair():
    return zipf_sets(250, seed=61, vocab=200, max_size=20), zipf_sets(90, seed=62, vocab=200, max_size=20)


@pytest.mark.parametrize("form", ["lists", "tuples_and_sets", "generator", "numpy", "collection", "store"])
@pytest.mark.parametrize("mode", MODES)
def test_input_forms(client, tmp_path, zipf_pair, form, mode):
    from daskjoin.io.sets_in import import_sets, prepare_sets

    a, b = zipf_pair
    if mode == "self":
        b = None
    expected = oracle_join(a, b, threshold=0.4, measure="jaccard")

    def convert(sets, name):
        if sets is None:
            return None
        if form == "lists":
            return sets
        if form == "tuples_and_sets":
            return tuple(set(s) if k % 2 else tuple(s) for k, s in enumerate(sets))
        if form == "generator":
            return (iter(s) for s in sets)
        if form == "numpy":
            return [np.asarray(s, dtype=np.int64) for s in sets]
        if form == "collection":
            return prepare_sets(sets)
        return import_sets(sets, str(tmp_path / f"{name}.zarr"))

    got = computed(sjoin(client, convert(a, "a"), convert(b, "b"), threshold=0.4, measure="jaccard"))
    assert_same_set_pairs(got, expected, selfjoin=b is None, context=form)


@pytest.mark.parametrize("mode", MODES)
def test_ids_given_to_the_store(client, tmp_path, zipf_pair, mode):
    """With ids, ``i`` and ``j`` are those ids (self-join: the smaller id first)."""
    from daskjoin.io.sets_in import import_sets

    a, b = zipf_pair
    ids_a = [10_000 - 7 * k for k in range(len(a))]  # decreasing, so the smaller position has the larger id
    ids_b = [2**40 + 3 * k for k in range(len(b))]
    pa = import_sets(a, str(tmp_path / "a.zarr"), ids=ids_a)
    if mode == "self":
        pos = oracle_join(a, threshold=0.35, measure="cosine")
        expected = {(min(ids_a[i], ids_a[j]), max(ids_a[i], ids_a[j])): v for (i, j), v in pos.items()}
        got = computed(sjoin(client, pa, threshold=0.35, measure="cosine"))
    else:
        pb = import_sets(b, str(tmp_path / "b.zarr"), ids=ids_b)
        pos = oracle_join(a, b, threshold=0.35, measure="cosine")
        expected = {(ids_a[i], ids_b[j]): v for (i, j), v in pos.items()}
        got = computed(sjoin(client, pa, pb, threshold=0.35, measure="cosine"))
    assert len(expected) > 20
    assert_same_set_pairs(got, expected, selfjoin=mode == "self")


def test_string_tokens_across_collections(client):
    """R and S with different string vocabularies: tokens match by value, not by rank or code."""
    a = [["x", "y", "z"], ["q"], ["b", "a"]]
    b = [["a", "b"], ["zz", "q"], ["z", "y", "x", "w"], ["only-in-b"]]
    got = computed(sjoin(client, a, b, threshold=0.5, measure="jaccard"))
    assert_same_set_pairs(got, {(0, 2): 0.75, (1, 1): 0.5, (2, 0): 1.0})


@pytest.mark.parametrize("sides", ["store-store", "store-lists", "lists-store"])
def test_cross_join_of_stores_reads_no_sets_on_the_client(client, tmp_path, monkeypatch, sides):
    """R x S of stores with different string vocabularies: the common token order comes from the
    vocabularies, each task re-ranks the ranges it reads, and the client never loads a store's sets
    (``open_sets`` and ``read_sets_range`` fail here; the workers are other processes).  One store was
    written from an aligned collection, so its ``freq`` is not its own token counts: any common
    order is exact."""
    from daskjoin.io import sets_in, sets_store
    from daskjoin.io.sets_in import align, import_sets, prepare_sets, read_vocab, write_sets

    rng = np.random.default_rng(5)
    words = [f"w{k}" for k in range(60)]
    a = [list(rng.choice(words[:45], size=rng.integers(1, 12), replace=False)) for _ in range(220)]
    b = [list(rng.choice(words[15:], size=rng.integers(1, 12), replace=False)) for _ in range(160)]
    b += a[:7]  # identical sets on both sides
    expected = oracle_join(a, b, threshold=0.45, measure="jaccard")
    aligned_a, _ = align(prepare_sets(a), prepare_sets([[w] for w in words[50:]]))
    store_a = write_sets(aligned_a, str(tmp_path / "a.zarr"))
    store_b = import_sets(b, str(tmp_path / "b.zarr"))
    assert not np.array_equal(read_vocab(store_a)[1], np.bincount(aligned_a.tokens, minlength=len(aligned_a.vocab)))
    left, right = {"store-store": (store_a, store_b), "store-lists": (store_a, b),
                   "lists-store": (a, store_b)}[sides]

    def refuse(*args, **kwargs):
        raise AssertionError("the client read a store's sets")

    for module in (sets_in, sets_store):
        monkeypatch.setattr(module, "open_sets", refuse)
        monkeypatch.setattr(module, "read_sets_range", refuse)
    for k in (1, 3):
        got = computed(sjoin(client, left, right, threshold=0.45, measure="jaccard", partitions=k))
        assert len(expected) > 10
        assert_same_set_pairs(got, expected, context=f"{sides} K={k}")


def test_many_partitions_and_defaults(client):
    """``partitions`` far beyond the number of sets; the default backend ('auto') and algorithm."""
    case = set_case_by_name("duplicate_sets")
    expected = oracle_join(case.a, threshold=0.5, measure="dice")
    for k in (len(case.a), 1000):
        got = computed(sjoin(client, case.a, threshold=0.5, measure="dice", partitions=k))
        assert_same_set_pairs(got, expected, selfjoin=True, context=f"K={k}")
    got = computed(dj.set_similarity_join(case.a, threshold=0.5, measure="dice", client=client, progress=False))
    assert_same_set_pairs(got, expected, selfjoin=True, context="defaults")


def test_pairs_frame_is_lazy_and_recomputable(client):
    case = set_case_by_name("zipf_300")
    ddf = sjoin(client, case.a, threshold=0.3, measure="jaccard", partitions=4)
    first, second = computed(ddf), computed(ddf)
    pd.testing.assert_frame_equal(first.sort_values(["i", "j"]).reset_index(drop=True),
                                  second.sort_values(["i", "j"]).reset_index(drop=True))
    assert len(first) == len(oracle_join(case.a, threshold=0.3, measure="jaccard"))


def test_out_parquet(client, tmp_path):
    case = set_case_by_name("frequent_token")
    expected = oracle_join(case.a, case.b, threshold=0.25, measure="jaccard")
    out = tmp_path / "pairs.parquet"
    res = sjoin(client, case.a, case.b, threshold=0.25, measure="jaccard", out=str(out), partitions=3)
    assert res.pairs == len(expected)
    assert (out / "_SUCCESS").exists()
    assert_same_set_pairs(res.read().compute(), expected)
    with pytest.raises(dj.InputError, match="exists"):
        sjoin(client, case.a, case.b, threshold=0.25, measure="jaccard", out=str(out))
    res = sjoin(client, case.a, threshold=0.9, measure="jaccard", out=str(out), overwrite=True)
    assert_same_set_pairs(res.read().compute(), oracle_join(case.a, threshold=0.9, measure="jaccard"),
                          selfjoin=True)


# --------------------------------------------------------------------------- refusals

BAD_THRESHOLDS = [(m, t) for m in ("jaccard", "cosine", "dice") for t in (0, 0.0, -0.5, 1.5, 1.0000001, math.nan,
                                                                          math.inf, "0.5", None)]
BAD_THRESHOLDS += [("overlap", t) for t in (0, -1, 2.5, 0.5, math.nan, math.inf, "3", None)]


@pytest.mark.parametrize("measure, threshold", BAD_THRESHOLDS, ids=lambda v: repr(v))
def test_bad_threshold_refused(client, measure, threshold):
    with pytest.raises(dj.InputError, match="threshold") as info:
        sjoin(client, [[1, 2], [2, 3]], threshold=threshold, measure=measure)
    text = str(info.value)
    assert "\n" not in text.strip()
    assert repr(threshold) in text or str(threshold) in text, text


@pytest.mark.parametrize("kw, words", [
    (dict(measure="tanimoto"), ["measure", "tanimoto", "jaccard"]),
    (dict(method="mpjoin"), ["method", "mpjoin", "ppjoin"]),
    (dict(backend="tpu"), ["backend", "tpu"]),
    (dict(output="list"), ["output", "list"]),
])
def test_bad_option_refused(client, kw, words):
    kw.setdefault("threshold", 0.5)
    with pytest.raises(dj.InputError) as info:
        sjoin(client, [[1, 2], [2, 3]], **kw)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_bad_store_path_refused(client, tmp_path):
    from joinhelpers import write_zarr

    missing = tmp_path / "nope.zarr"
    with pytest.raises(dj.InputError, match="nope.zarr"):
        sjoin(client, str(missing), threshold=0.5)
    points = write_zarr(tmp_path / "points.zarr", np.zeros((4, 2)), 2)  # an ε-join array, not a set store
    with pytest.raises(dj.InputError, match="points.zarr"):
        sjoin(client, points, threshold=0.5)
    f = tmp_path / "file.txt"
    f.write_text("a b\n")
    with pytest.raises(dj.InputError, match="file.txt"):
        sjoin(client, str(f), threshold=0.5)
    import zarr

    zarr.open_group(str(tmp_path / "group.zarr"), mode="w")
    with pytest.raises(dj.InputError, match="group.zarr"):
        sjoin(client, str(tmp_path / "group.zarr"), threshold=0.5)
    good = [[1, 2]]
    with pytest.raises(dj.InputError, match="nope.zarr"):
        sjoin(client, good, str(missing), threshold=0.5)


def test_bad_partitions_refused(client):
    for k in (0, -1, 2.5, "3"):
        with pytest.raises(dj.InputError, match="partitions"):
            sjoin(client, [[1, 2], [2, 3]], threshold=0.5, partitions=k)


def test_count_with_out_refused(client, tmp_path):
    with pytest.raises(dj.InputError):
        sjoin(client, [[1, 2]], threshold=0.5, output="count", out=str(tmp_path / "x.parquet"))
    assert not (tmp_path / "x.parquet").exists()


# --------------------------------------------------------------------------- GPU (skipped without CUDA)


def _gpu_available() -> bool:
    try:
        from daskjoin.kernels.gpu_common import gpu_available

        return bool(gpu_available())
    except Exception:  # noqa: BLE001
        return False


VERIFY = [None, "thread", "block", "intersect_path"]


def _gpu_params():
    out = []
    for case, measure in case_params():
        for mode in MODES:
            for verify in VERIFY:
                out.append(pytest.param(case, measure, mode, verify, id=f"{case.name}-{measure}-{mode}-{verify}"))
    return out


@pytest.mark.parametrize("case, measure, mode, verify", _gpu_params())
@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_available(), reason="no CUDA device visible to CuPy")
def test_gpu_matches_oracle(client, case, measure, mode, verify):
    expected = expected_pairs(case, measure, mode)
    kw = dict(threshold=case.thresholds[measure], measure=measure, backend="gpu")
    if verify is not None:
        kw["gpu_options"] = {"verify": verify}
    context = f"gpu verify={verify} {case.name} {measure} {mode}"
    got = computed(sjoin(client, case.a, _b(case, mode), **kw))
    assert_same_set_pairs(got, expected, context=context, selfjoin=mode == "self")
    n = sjoin(client, case.a, _b(case, mode), output="count", **kw)
    assert n == len(expected), f"[{context}] count {n}, expected {len(expected)}"


@pytest.mark.parametrize("verify", VERIFY)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_available(), reason="no CUDA device visible to CuPy")
def test_gpu_identical_to_cpu_on_larger_data(client, verify, algorithm):
    """Large enough for several GPU verification chunks; every variant gives the CPU's pair set."""
    a = zipf_sets(4000, seed=71, vocab=3000, max_size=60, exponent=1.2)
    b = zipf_sets(1500, seed=72, vocab=3000, max_size=60, exponent=1.2)
    for measure, t in (("jaccard", 0.4), ("cosine", 0.55), ("dice", 0.5), ("overlap", 6)):
        for other in (None, b):
            kw = dict(threshold=t, measure=measure, method=algorithm, partitions=5)
            cpu = computed(sjoin(client, a, other, **kw))
            gkw = dict(kw, backend="gpu")
            if verify is not None:
                gkw["gpu_options"] = {"verify": verify}
            got = computed(sjoin(client, a, other, **gkw))
            expected = dict(zip(zip(cpu["i"].tolist(), cpu["j"].tolist()), cpu["sim"].tolist()))
            assert_same_set_pairs(got, expected, selfjoin=other is None, context=f"{measure} {verify}")


@pytest.mark.parametrize("verify", VERIFY[1:])
@pytest.mark.parametrize("copies", [False, True], ids=["distinct", "copies"])
@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_available(), reason="no CUDA device visible to CuPy")
def test_gpu_verifier_with_many_chunks_in_flight(monkeypatch, request, verify, copies):
    """Chunks of a few hundred candidates queued behind a kernel that waits for the host, so the
    verifier holds as many chunks as it allows; their host buffers come from a pool that reuses a
    freed block at once, so a buffer let go while its upload is queued gets overwritten.  Pairs and
    counts (grouped counts of sets with copies take the pairs path) equal the CPU verifier's.
    The gate opens where the verifier waits: on a collect, a total, or with the queue full."""
    import cupy as cp
    import cupyx
    import numba

    from daskjoin.io.sets_in import prepare_sets
    from daskjoin.kernels import gpu_common
    from daskjoin.kernels.sets import verify_gpu
    from daskjoin.kernels.sets.local import Flat, block_count, join_block
    from daskjoin.planning.set_threshold import parse_threshold
    from reusing_pool import ReusingPool

    # a filter window holds up to one region of candidates per thread, so on a machine of 64 cores one
    # chunk outgrew the pool's 1 MiB blocks and the queue never filled (H200 x4, 2026-11-27): run the
    # filter on the few threads the chunk sizes here were chosen for
    threads = numba.get_num_threads()
    numba.set_num_threads(min(threads, 4))
    request.addfinalizer(lambda: numba.set_num_threads(threads))
    sets = zipf_sets(3000, seed=73, vocab=800, max_size=40, exponent=1.1)
    if copies:
        sets = sets + sets[::3] + sets[::7]
    c = prepare_sets(sets)
    f = Flat.of(c.tokens, c.offsets)
    options = {"verify": verify, "chunk_candidates": 300}
    th = parse_threshold("jaccard", 0.3)
    # warm-up: kernels loaded and the device pool filled before the gate, so nothing in the gated
    # part allocates or loads (which may wait for the device, and so for the gate)
    join_block(f, None, th, backend="gpu", options=options)
    block_count(f, None, th, backend="gpu", options=options, group_copies=False)

    # spins until the host writes the flag (mapped pinned memory: under unified addressing its host
    # pointer works on the device), or about 5 s, so a gate that never opens fails the peak checks
    gate = cp.RawKernel(r"""extern "C" __global__ void gate(const volatile int* flag, long long cycles) {
        long long t0 = clock64(); while (*flag == 0 && clock64() - t0 < cycles) {} }""", "gate")
    flag_memory = cp.cuda.PinnedMemory(4, cp.cuda.runtime.hostAllocMapped)
    flag = np.frombuffer(cp.cuda.PinnedMemoryPointer(flag_memory, 0), np.int32, 1)
    flag[0] = 0
    pool = ReusingPool(cupyx.empty_pinned(64 << 20, np.uint8))
    verifier = verify_gpu.GpuVerifier
    submit, hold, collect, total, peak = verifier.submit, verifier._hold, verifier.collect, verifier.total, [0]

    def gated_start(self, *chunk):
        if not getattr(self, "gated", False):
            flag[0] = 0
            gate((1,), (1,), (np.uint64(flag_memory.ptr), np.int64(10_000_000_000)))
            self.gated = True
        return submit(self, *chunk)

    def tracked_hold(self, event, buffers):
        if sum(not e.done for e, _ in self._in_flight) >= verify_gpu.MAX_IN_FLIGHT:
            flag[0] = 1  # the verifier is about to wait for its oldest chunk
        hold(self, event, buffers)
        peak[0] = max(peak[0], len(self._in_flight))

    def opening_collect(self, handle):
        flag[0] = 1
        return collect(self, handle)

    def opening_total(self):
        flag[0] = 1
        return total(self)

    monkeypatch.setattr(verifier, "submit", gated_start)
    monkeypatch.setattr(verifier, "_hold", tracked_hold)
    monkeypatch.setattr(verifier, "collect", opening_collect)
    monkeypatch.setattr(verifier, "total", opening_total)
    monkeypatch.setattr(verifier, "host_empty", staticmethod(pool.empty))
    monkeypatch.setattr(gpu_common, "pinned_empty", pool.empty)
    key = lambda p: sorted(zip(p[0].tolist(), p[1].tolist(), p[2].tolist()))  # noqa: E731
    for measure, t in (("jaccard", 0.3), ("overlap", 4)):
        th = parse_threshold(measure, t)
        want = join_block(f, None, th)
        peak[0] = 0
        got = join_block(f, None, th, backend="gpu", options=options)
        assert len(want[0]) > 500 and key(got) == key(want), f"{measure} {verify}"
        assert peak[0] >= 2  # the pairs path collects a chunk once the next one is queued
        assert block_count(f, None, th, backend="gpu", options=options) == len(want[0])
        peak[0] = 0  # without grouping, a count holds chunks until the queue is full
        assert block_count(f, None, th, backend="gpu", options=options, group_copies=False) == len(want[0])
        assert peak[0] == verify_gpu.MAX_IN_FLIGHT
    assert pool.handed_out > 100  # the chunks' buffers really came from the reusing pool


def test_algorithm_is_a_deprecated_alias_of_method():
    docs = [["a", "b", "c"], ["a", "b", "c", "d"], ["x", "y"]]
    want = dj.set_similarity_join(docs, threshold=0.75, method="allpairs", backend="cpu").compute()
    with pytest.warns(DeprecationWarning, match="use method="):
        got = dj.set_similarity_join(docs, threshold=0.75, algorithm="allpairs", backend="cpu").compute()
    assert got.values.tolist() == want.values.tolist() == [[0.0, 1.0, 0.75]]
    with pytest.raises(dj.InputError, match="disagree"), pytest.warns(DeprecationWarning):
        dj.set_similarity_join(docs, threshold=0.75, method="allpairs", algorithm="ppjoin")


def test_plan_set_join_explains_without_running(tmp_path):
    from daskjoin.io.sets_in import import_sets

    docs = [["a", "b", "c"], ["a", "b", "c", "d"], ["x", "y"], ["x", "y", "z"]]
    store = import_sets(docs, tmp_path / "d.zarr")
    plan = dj.plan_set_join(store, threshold=0.5, method="allpairs", backend="cpu", partitions=2)
    assert plan.algorithm == "allpairs" and plan.ntasks >= 1
    assert plan.explain().startswith("set-similarity self-join: jaccard >= 1/2")
    assert dj.set_similarity_join(store, threshold=0.5, method="allpairs", backend="cpu", partitions=2,
                                  output="count") == 2


def test_set_plans_split_for_the_task_threads_on_cpus_and_for_the_gpus_on_gpus(monkeypatch):
    """Tasks on one GPU take turns, so a GPU plan splits the sets only for more GPUs; a CPU plan for its
    task threads (the memory budget may ask for more either way)."""
    from daskjoin import api_sets

    rng = np.random.default_rng(3)
    docs = [list(rng.choice(50, rng.integers(1, 12), replace=False)) for _ in range(400)]
    monkeypatch.setattr(api_sets, "cluster_threads", lambda client, workers: 8)
    monkeypatch.setattr(api_sets, "task_slots", lambda client, on_gpu, workers: 1)
    monkeypatch.setattr(api_sets, "worker_info", lambda client: {})
    monkeypatch.setattr(api_sets, "_work", lambda a, threshold, start: (5e9, 100))  # between small and large
    for on_gpu, parts in ((False, 4), (True, 1)):
        monkeypatch.setattr(api_sets, "choose_backend",
                            lambda backend, client, workers, on_gpu=on_gpu: ("gpu" if on_gpu else "cpu", on_gpu))
        plan = dj.plan_set_join(docs, threshold=0.5, memory_budget="1GiB")
        assert len(plan.parts_a) == parts
