"""Synthetic token-set collections for the set-similarity join benchmark.

All generators are vectorised numpy, seeded (``np.random.default_rng(seed)``)
and return sets flat: ``(tokens, offsets)`` int64 arrays, set ``k`` being
``tokens[offsets[k]:offsets[k + 1]]`` with distinct tokens. A share of every
collection (``dup_fraction``, 7% by default) are perturbed copies of other
sets, half of them versions of a few popular sets (groups of about 8), so
that a join at thresholds 0.5-0.9 has real work to do.

- :func:`zipf_sets`: sizes from a chosen distribution, tokens from a Zipf law;
- :func:`kosarak_like`: the shape of the KOSARAK click-stream data (about 8
  tokens per set, sizes heavy-tailed up to about 2,500, a 41k-token universe);
- :func:`dblp_like`: author-and-title-like strings as sets of character
  2-grams (about 88 per set), like the DBLP benchmark.

:func:`write_synth_sets` writes any of them to a set store (for the CLI).
"""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from ..validation import InputError

SIZE_DISTS = ("fixed", "poisson", "lognormal")
LOGNORMAL_SIGMA = 1.3
MAX_PERTURB = 0.3  # a copy drops and adds up to 30% of its tokens: Jaccard to its source >= about 0.5

KOSARAK_UNIVERSE = 41_270
KOSARAK_DRAW_AVG = 3.8  # mean size drawn; dropping repeated small sets lifts it to about 8 at 600k sets
KOSARAK_SIGMA = 1.6
KOSARAK_MAX_SIZE = 2_498
KOSARAK_ZIPF_A = 1.0
DUP_FRACTION = 0.07
POPULAR_SHARE = 0.005  # half of the copies are of this share of the sets: groups of about 8 versions

# relative frequencies of the letters a..z in English text (percent)
_LETTER_FREQ = np.array([
    8.2, 1.5, 2.8, 4.3, 12.7, 2.2, 2.0, 6.1, 7.0, 0.15, 0.77, 4.0, 2.4,
    6.7, 7.5, 1.9, 0.095, 6.0, 6.3, 9.1, 2.8, 0.98, 2.4, 0.15, 2.0, 0.074,
])
# character codes of the dblp-like text: 0 space, 1..26 a..z, 27..52 A..Z, 53..62 0..9, 63 ",", 64 "."
_UPPER, _DIGIT, _COMMA, _DOT = 26, 53, 63, 64
ALPHABET = 65  # a 2-gram "xy" has the token code x * 65 + y
DBLP_WORDS = 30_000
DBLP_NAMES = 20_000
DBLP_NUMERIC = 0.03  # share of the title vocabulary that are numbers
DBLP_TITLE_WORDS = 9.0  # mean number of title words (calibrated for about 88 distinct 2-grams a set)


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_real(value, name: str, low: float, high: float, hint: str) -> float:
    ok = isinstance(value, (Real, np.floating, np.integer)) and not isinstance(value, bool)
    if not ok or not low <= float(value) <= high:
        raise InputError(f"{name} must be a number in [{low}, {high}], got {value!r}; {hint}")
    return float(value)


def _zipf_cdf(universe: int, a: float) -> np.ndarray:
    weights = np.arange(1, universe + 1, dtype=np.float64) ** -a
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def _draw(rng, cdf: np.ndarray, count: int) -> np.ndarray:
    idx = np.searchsorted(cdf, rng.random(count), side="right")
    return np.minimum(idx, cdf.shape[0] - 1).astype(np.int64)


def _offsets(sizes: np.ndarray) -> np.ndarray:
    offsets = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return offsets


def _dedupe(seg: np.ndarray, tok: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    key = seg * np.int64(width) + tok
    key.sort()  # sort + mask: faster than np.unique, whose hash path is slow on big int arrays
    if key.size:
        key = key[np.concatenate(([True], key[1:] != key[:-1]))]
    seg = key // width
    return seg, key - seg * width


def _sizes(rng, n: int, avg: float, dist: str, max_size: int, sigma: float = LOGNORMAL_SIGMA) -> np.ndarray:
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if dist == "fixed":
        return np.full(n, min(max_size, max(1, int(round(avg)))), dtype=np.int64)
    if dist == "poisson":
        return np.minimum(1 + rng.poisson(max(avg - 1.0, 0.0), n), max_size).astype(np.int64)
    z = rng.standard_normal(n)

    def sizes_for(mu: float) -> np.ndarray:
        return np.clip(np.rint(np.exp(mu + sigma * z)), 1, max_size).astype(np.int64)

    lo, hi = -5.0, np.log(max_size) + 1.0  # bisection on mu: the mean of the rounded, clipped sizes is avg
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if sizes_for(mid).mean() < avg else (lo, mid)
    return sizes_for(0.5 * (lo + hi))


def _distinct_sets(rng, cdf: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sets of the given sizes of distinct Zipf-drawn token indices (a few rounds redraw what duplicates cost)."""
    n, width = sizes.shape[0], cdf.shape[0]
    sizes = np.minimum(sizes, width)
    seg = np.repeat(np.arange(n, dtype=np.int64), sizes)
    seg, tok = _dedupe(seg, _draw(rng, cdf, seg.shape[0]), width)
    done_seg, done_tok = [], []
    active = np.ones(n, dtype=bool)
    for _ in range(30):
        missing = np.where(active, sizes - np.bincount(seg, minlength=n), 0)
        active = missing > 0
        short = active[seg]
        done_seg.append(seg[~short])  # complete sets leave the loop
        done_tok.append(tok[~short])
        seg, tok = seg[short], tok[short]
        pending = np.flatnonzero(active)
        if not pending.size:
            break
        extra = np.repeat(pending, 2 * missing[pending] + 1)  # oversample: big sets hit the popular tokens often
        seg, tok = _dedupe(np.concatenate([seg, extra]), np.concatenate([tok, _draw(rng, cdf, extra.shape[0])]), width)
        order = np.argsort((seg << 24) | rng.integers(0, 1 << 24, seg.shape[0]))  # random order inside each set
        seg, tok = seg[order], tok[order]
        start = _offsets(np.bincount(seg, minlength=n))[:-1]
        keep = np.arange(seg.shape[0]) - start[seg] < sizes[seg]  # keep a random `size` of the distinct tokens
        seg, tok = seg[keep], tok[keep]
    seg, tok = _dedupe(np.concatenate(done_seg + [seg]), np.concatenate(done_tok + [tok]), width)
    return tok, _offsets(np.bincount(seg, minlength=n))


def _gather(tokens: np.ndarray, offsets: np.ndarray, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of sets ``which`` (in that order), with their run labels 0..len(which)-1."""
    sizes = np.diff(offsets)[which]
    new = _offsets(sizes)
    idx = np.repeat(offsets[:-1][which] - new[:-1], sizes) + np.arange(new[-1])
    return tokens[idx], np.repeat(np.arange(which.shape[0], dtype=np.int64), sizes)


def _pick_sources(rng, n_base: int, n_copies: int) -> np.ndarray:
    """Sets to copy: half at random, half from the first ``POPULAR_SHARE`` (random) sets, which get several versions."""
    pool = max(1, int(n_base * POPULAR_SHARE))
    popular = rng.random(n_copies) < 0.5
    return np.where(popular, rng.integers(0, pool, n_copies), rng.integers(0, n_base, n_copies))


def _perturbed_copies(rng, tokens, offsets, n_copies: int, cdf, width: int):
    """``n_copies`` copies of sets, each dropping and adding a share ``r ~ U(0, 0.3)`` of its tokens."""
    sources = _pick_sources(rng, offsets.shape[0] - 1, n_copies)
    rate = rng.uniform(0.0, MAX_PERTURB, n_copies)
    tok, seg = _gather(tokens, offsets, sources)
    keep = rng.random(tok.shape[0]) >= rate[seg]
    first = _offsets(np.diff(offsets)[sources])[:-1]
    kept = np.bincount(seg[keep], minlength=n_copies)
    rescue = first[(kept == 0) & (np.diff(offsets)[sources] > 0)]
    keep[rescue] = True  # a copy keeps at least one token of its source
    added = rng.binomial(np.diff(offsets)[sources], rate)
    add_seg = np.repeat(np.arange(n_copies, dtype=np.int64), added)
    seg = np.concatenate([seg[keep], add_seg])
    tok = np.concatenate([tok[keep], _draw(rng, cdf, add_seg.shape[0]) if cdf is not None else
                          rng.integers(0, width, add_seg.shape[0])])
    seg, tok = _dedupe(seg, tok, width)
    return tok, _offsets(np.bincount(seg, minlength=n_copies))


def _with_copies(rng, tokens, offsets, n_sets: int, dup_fraction: float, cdf, width: int):
    """Add ``round(dup_fraction * n_sets)`` perturbed copies to the ``n_sets - copies`` base sets; shuffle the order."""
    n_base = offsets.shape[0] - 1
    n_copies = n_sets - n_base
    if n_copies > 0:
        ctok, coff = _perturbed_copies(rng, tokens, offsets, n_copies, cdf, width)
        tokens = np.concatenate([tokens, ctok])
        offsets = np.concatenate([offsets[:-1], coff + offsets[-1]])
    perm = rng.permutation(n_sets)
    tok, _ = _gather(tokens, offsets, perm)
    return tok, _offsets(np.diff(offsets)[perm])


def _set_keys(tokens: np.ndarray, offsets: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """A 64-bit key per set (non-empty sets of distinct tokens): the wrapping sum of random token weights."""
    sums = np.add.reduceat(weights[tokens], offsets[:-1]) if tokens.size else np.zeros(0, np.uint64)
    return sums + np.diff(offsets).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)


def _unique_sets(rng, cdf: np.ndarray, n: int, avg: float, size_dist: str, max_size: int, sigma: float):
    """``n`` pairwise different sets: draws sets and drops repeats (like the de-duplicated benchmark data)."""
    weights = rng.integers(0, 2**63, cdf.shape[0], dtype=np.int64).astype(np.uint64) * np.uint64(2) + np.uint64(1)
    parts_tok, parts_size, seen = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], np.zeros(0, np.uint64)
    need = n
    for _ in range(50):
        if need == 0:
            break
        tok, off = _distinct_sets(rng, cdf, _sizes(rng, int(need * 1.5) + 16, avg, size_dist, max_size, sigma))
        keys = _set_keys(tok, off, weights)
        order = np.argsort(keys, kind="stable")
        first = np.ones(keys.shape[0], dtype=bool)
        first[order[1:]] = keys[order[1:]] != keys[order[:-1]]
        fresh = np.flatnonzero(first & ~np.isin(keys, seen))[:need]
        picked, _ = _gather(tok, off, fresh)
        parts_tok.append(picked)
        parts_size.append(np.diff(off)[fresh])
        seen = np.concatenate([seen, keys[fresh]])
        need -= fresh.shape[0]
    if need:
        raise InputError(
            f"cannot draw {n} different sets from a universe of {cdf.shape[0]} tokens with these sizes; "
            "use fewer sets, a larger universe or larger sets"
        )
    return np.concatenate(parts_tok), _offsets(np.concatenate(parts_size))


def _n_base(n_sets: int, dup_fraction: float) -> int:
    copies = int(round(dup_fraction * n_sets))
    return n_sets - copies if n_sets - copies >= 1 else n_sets


def zipf_sets(
    n_sets: int,
    avg_size: float,
    n_tokens_universe: int,
    zipf_a: float = 1.0,
    size_dist: str = "lognormal",
    seed: int = 0,
    *,
    dup_fraction: float = DUP_FRACTION,
    max_size: int | None = None,
    unique_sets: bool = False,
    size_sigma: float = LOGNORMAL_SIGMA,
) -> tuple[np.ndarray, np.ndarray]:
    """Sets of distinct tokens drawn from a Zipf law, a share of them perturbed copies of others.

    Parameters
    ----------
    n_sets : int
        Number of sets (>= 0).
    avg_size : float
        Target mean set size (>= 1); met closely unless ``max_size`` or the
        universe cut the sizes.
    n_tokens_universe : int
        Number of possible tokens (>= 1). Token ``t``'s popularity rank is a
        seeded permutation, so token values say nothing about frequency.
    zipf_a : float, default 1.0
        Zipf exponent: the ``i``-th most popular token is drawn with
        probability proportional to ``i ** -zipf_a`` (0 gives uniform tokens).
    size_dist : {"lognormal", "poisson", "fixed"}, default "lognormal"
        ``lognormal``: heavy-tailed (sigma ``size_sigma``), ``poisson``: ``1 + Poisson(avg_size - 1)``,
        ``fixed``: all sets of size ``round(avg_size)``. Sizes are at least 1.
    seed : int, default 0
        Seed of ``numpy.random.default_rng``.
    dup_fraction : float, default 0.07
        Share of the sets that are copies of another set, each dropping and
        adding a random share ``r ~ U(0, 0.3)`` of its tokens (Jaccard to its
        source about ``(1 - r) / (1 + r)``). Half of the copies are of the
        first 0.5% of the sets, which so get groups of about 8 versions.
    max_size : int, optional
        Largest set size; default the universe size.
    unique_sets : bool, default False
        Make the drawn sets pairwise different (repeats are dropped and drawn
        again), as in benchmark data that was de-duplicated. Small sets repeat
        most, so this raises the mean size above ``avg_size``. The perturbed
        copies are added afterwards and may equal their source.

    Returns
    -------
    tokens, offsets : numpy.ndarray of int64
        Set ``k`` is ``tokens[offsets[k]:offsets[k + 1]]`` (distinct, ascending).

    Examples
    --------
    >>> tokens, offsets = zipf_sets(1000, 10, 5000, 1.0, "poisson", seed=3)
    >>> offsets.shape, bool(abs(np.diff(offsets).mean() - 10) < 1)
    ((1001,), True)
    >>> t2, o2 = zipf_sets(1000, 10, 5000, 1.0, "poisson", seed=3)
    >>> bool(np.array_equal(tokens, t2) and np.array_equal(offsets, o2))
    True
    """
    n_sets = _check_int(n_sets, "n_sets", 0)
    universe = _check_int(n_tokens_universe, "n_tokens_universe", 1)
    avg = _check_real(avg_size, "avg_size", 1.0, float("inf"), "pass e.g. avg_size=8")
    a = _check_real(zipf_a, "zipf_a", 0.0, 10.0, "pass e.g. zipf_a=1.0")
    dup = _check_real(dup_fraction, "dup_fraction", 0.0, 0.9, "pass e.g. dup_fraction=0.07")
    seed = _check_int(seed, "seed", 0)
    sigma = _check_real(size_sigma, "size_sigma", 0.0, 4.0, "pass e.g. size_sigma=1.3")
    if size_dist not in SIZE_DISTS:
        raise InputError(f"size_dist must be one of {SIZE_DISTS}, got {size_dist!r}")
    max_size = universe if max_size is None else min(universe, _check_int(max_size, "max_size", 1))
    rng = np.random.default_rng(seed)
    cdf = _zipf_cdf(universe, a)
    n_base = _n_base(n_sets, dup)
    if unique_sets:
        tokens, offsets = _unique_sets(rng, cdf, n_base, avg, size_dist, max_size, sigma)
    else:
        tokens, offsets = _distinct_sets(rng, cdf, _sizes(rng, n_base, avg, size_dist, max_size, sigma))
    tokens, offsets = _with_copies(rng, tokens, offsets, n_sets, dup, cdf, universe)
    token_of_rank = rng.permutation(universe).astype(np.int64)
    tokens = token_of_rank[tokens]
    # sort inside each set again (the permutation reorders the tokens)
    seg = np.repeat(np.arange(n_sets, dtype=np.int64), np.diff(offsets))
    _, tokens = _dedupe(seg, tokens, universe)
    return tokens, offsets


def kosarak_like(n_sets: int = 600_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A click-stream-like collection shaped after KOSARAK: ``(tokens, offsets)``.

    Lognormal (heavy-tailed) sizes from 1 to 2,498 (most sets have 1 to 5
    tokens), a universe of 41,270 tokens with Zipf (a = 1) popularity, drawn
    sets pairwise different (the benchmark data were de-duplicated), and 7%
    perturbed copies of other sets (see :func:`zipf_sets`). Dropping repeated
    small sets lifts the mean size to about 8 at the default 600,000 sets;
    smaller collections repeat less, so their mean is lower (about 6 at 20,000).

    Examples
    --------
    >>> tokens, offsets = kosarak_like(20_000, seed=1)
    >>> sizes = np.diff(offsets)
    >>> bool(5 < sizes.mean() < 9), int(sizes.min()), bool(np.median(sizes) <= 5), bool(sizes.max() > 300)
    (True, 1, True, True)
    """
    n_sets = _check_int(n_sets, "n_sets", 0)
    return zipf_sets(
        n_sets, KOSARAK_DRAW_AVG, KOSARAK_UNIVERSE, KOSARAK_ZIPF_A, "lognormal", seed,
        dup_fraction=DUP_FRACTION, max_size=KOSARAK_MAX_SIZE, unique_sets=True, size_sigma=KOSARAK_SIGMA,
    )


def _random_words(rng, count: int, mean_len: float) -> tuple[np.ndarray, np.ndarray]:
    """``count`` random lowercase words (letters drawn with English frequencies): (char codes, offsets)."""
    lengths = 2 + rng.poisson(mean_len - 2, count)
    p = _LETTER_FREQ / _LETTER_FREQ.sum()
    chars = 1 + np.searchsorted(np.cumsum(p), rng.random(int(lengths.sum())), side="right").clip(0, 25)
    return chars.astype(np.int64), _offsets(lengths)


def _capitalized(chars: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    out = chars.copy()
    first = offsets[:-1][np.diff(offsets) > 0]
    out[first] += np.where((out[first] >= 1) & (out[first] <= 26), _UPPER, 0)
    return out


def _with_suffix(chars: np.ndarray, offsets: np.ndarray, code: int) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.diff(offsets) + 1
    new = _offsets(lengths)
    out = np.full(int(new[-1]), code, dtype=np.int64)
    out[np.arange(chars.shape[0]) + np.repeat(np.arange(lengths.shape[0]), lengths - 1)] = chars
    return out, new


def _word_table(rng):
    """The words a record is made of, as one char table: ``(chars, offsets, bases)``.

    ``bases`` gives the first table index of each variant: ``name`` (capitalized
    names), ``name,`` (the same followed by a comma), ``word`` (lowercase title
    words, some of them numbers), ``Word`` (capitalized) and ``word.`` (followed
    by a full stop). Variant ``v`` of entry ``i`` is table entry ``bases[v] + i``.
    """
    names, name_off = _random_words(rng, DBLP_NAMES, 6.5)
    names = _capitalized(names, name_off)
    words, word_off = _random_words(rng, DBLP_WORDS, 7.0)
    numeric = np.repeat(rng.random(DBLP_WORDS) < DBLP_NUMERIC, np.diff(word_off))
    words[numeric] = _DIGIT + rng.integers(0, 10, int(numeric.sum()))
    variants = [
        (names, name_off), _with_suffix(names, name_off, _COMMA),
        (words, word_off), (_capitalized(words, word_off), word_off), _with_suffix(words, word_off, _DOT),
    ]
    keys = ["name", "name,", "word", "Word", "word."]
    bases, chars, lengths, start = {}, [], [], 0
    for key, (c, o) in zip(keys, variants):
        bases[key] = start
        chars.append(c)
        lengths.append(np.diff(o))
        start += o.shape[0] - 1
    return np.concatenate(chars), _offsets(np.concatenate(lengths)), bases


def _record_words(rng, n: int, bases: dict) -> tuple[np.ndarray, np.ndarray]:
    """Table entries of ``n`` records: 1-4 authors "First Last," then a title "Word word ... word."."""
    n_authors = 1 + np.minimum(rng.poisson(1.2, n), 3)
    n_title = np.maximum(2, rng.poisson(DBLP_TITLE_WORDS, n))
    lengths = 2 * n_authors + n_title
    offsets = _offsets(lengths)
    rec = np.repeat(np.arange(n), lengths)
    pos = np.arange(rec.shape[0]) - offsets[:-1][rec]  # position of each entry inside its record
    is_name = pos < 2 * n_authors[rec]
    name = _draw(rng, _zipf_cdf(DBLP_NAMES, 0.8), rec.shape[0])
    word = _draw(rng, _zipf_cdf(DBLP_WORDS, 1.0), rec.shape[0])
    surname_comma = is_name & (pos % 2 == 1) & (pos < 2 * n_authors[rec] - 1)
    title_pos = pos - 2 * n_authors[rec]
    entries = np.where(is_name, bases["name"] + name, bases["word"] + word)
    entries = np.where(surname_comma, bases["name,"] + name, entries)
    entries = np.where(~is_name & (title_pos == 0), bases["Word"] + word, entries)
    entries = np.where(~is_name & (pos == lengths[rec] - 1), bases["word."] + word, entries)
    return entries, offsets


def _perturb_words(rng, words, offsets, n_copies: int, bases: dict):
    """Copies of records: each entry dropped or replaced with probability ``r / 2``, ``r ~ U(0, 0.3)``."""
    sources = _pick_sources(rng, offsets.shape[0] - 1, n_copies)
    rate = rng.uniform(0.0, MAX_PERTURB, n_copies)
    w, seg = _gather(words, offsets, sources)
    u = rng.random(w.shape[0])
    replace = u < rate[seg] / 2
    w = np.where(replace, bases["word"] + rng.integers(0, DBLP_WORDS, w.shape[0]), w)
    keep = replace | (rng.random(w.shape[0]) >= rate[seg] / 2)
    keep[_offsets(np.diff(offsets)[sources])[:-1]] = True  # every copy keeps its first entry
    return w[keep], _offsets(np.bincount(seg[keep], minlength=n_copies)), rate


def _bigram_sets(chars_table, table_off, words, offsets, typo_rate, rng):
    """Each record's text ``" w1 w2 ... wn "`` as its set of character 2-grams (codes ``x * 65 + y``)."""
    n = offsets.shape[0] - 1
    wlen = np.diff(table_off)[words]
    rec_of_word = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    text_len = 1 + np.bincount(rec_of_word, weights=wlen + 1, minlength=n).astype(np.int64)
    text_off = _offsets(text_len)
    chars = np.zeros(int(text_off[-1]), dtype=np.int64)  # spaces
    before = np.cumsum(wlen + 1) - (wlen + 1)  # characters of earlier words, over all records
    first_word = np.minimum(offsets[:-1][rec_of_word], max(words.shape[0] - 1, 0))
    word_start = text_off[:-1][rec_of_word] + 1 + before - before[first_word]
    within = np.arange(int(wlen.sum())) - np.repeat(_offsets(wlen)[:-1], wlen)
    chars[np.repeat(word_start, wlen) + within] = chars_table[np.repeat(table_off[:-1][words], wlen) + within]
    rec_of_char = np.repeat(np.arange(n, dtype=np.int64), text_len)
    typo = (chars >= 1) & (chars <= 26) & (rng.random(chars.shape[0]) < typo_rate[rec_of_char])
    chars[typo] = rng.integers(1, 27, int(typo.sum()))
    same = rec_of_char[:-1] == rec_of_char[1:]
    codes = chars[:-1][same] * ALPHABET + chars[1:][same]
    seg, tok = _dedupe(rec_of_char[:-1][same], codes, ALPHABET * ALPHABET)
    return tok, _offsets(np.bincount(seg, minlength=n))


def dblp_like(n_sets: int = 100_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Author-and-title-like strings as sets of character 2-grams, like the DBLP benchmark: ``(tokens, offsets)``.

    A record is 1-4 authors ("First Last," from 20,000 random capitalized
    names with Zipf popularity a = 0.8) and a title ("Word word ... word." with
    about 8 words from 30,000 random words, 3% of them numbers, with Zipf
    popularity a = 1), written with single spaces and padded with one space at
    each end. Its set is the distinct 2-grams of that text, about 88 per record,
    coded ``x * 65 + y`` with space = 0, a..z = 1..26, A..Z = 27..52,
    0..9 = 53..62, comma = 63, full stop = 64. 7% of the records are copies of
    others with words dropped or replaced and letters mistyped (each at a rate
    ``r / 2`` or ``r / 10``, ``r ~ U(0, 0.3)``).

    Examples
    --------
    >>> tokens, offsets = dblp_like(5_000, seed=1)
    >>> sizes = np.diff(offsets)
    >>> bool(80 < sizes.mean() < 96), int(tokens.max()) < 65 * 65
    (True, True)
    """
    n_sets = _check_int(n_sets, "n_sets", 0)
    seed = _check_int(seed, "seed", 0)
    rng = np.random.default_rng(seed)
    chars_table, table_off, bases = _word_table(rng)
    n_base = _n_base(n_sets, DUP_FRACTION)
    words, offsets = _record_words(rng, n_base, bases)
    rate = np.zeros(n_base)
    if n_sets > n_base:
        cw, co, crate = _perturb_words(rng, words, offsets, n_sets - n_base, bases)
        words = np.concatenate([words, cw])
        offsets = np.concatenate([offsets[:-1], co + offsets[-1]])
        rate = np.concatenate([rate, crate])
    tokens, offsets = _bigram_sets(chars_table, table_off, words, offsets, rate / 5, rng)
    perm = rng.permutation(n_sets)
    tokens, _ = _gather(tokens, offsets, perm)
    return tokens, _offsets(np.diff(offsets)[perm])


GENERATORS = {"kosarak": kosarak_like, "dblp": dblp_like}


def write_synth_sets(kind: str, n: int, out, seed: int = 0, *, overwrite: bool = False) -> str:
    """Generate a synthetic collection (``"kosarak"`` or ``"dblp"``) of ``n`` sets and write it as a set store.

    The store's attrs record the recipe (``generator``, ``n``, ``seed``).

    Examples
    --------
    >>> import os, tempfile
    >>> from daskjoin.io.sets_in import open_sets
    >>> path = write_synth_sets("kosarak", 2000, os.path.join(tempfile.mkdtemp(), "k.zarr"), seed=0)
    >>> c = open_sets(path)
    >>> len(c), c.vocab_kind
    (2000, 'int')
    """
    from .sets_prepare import prepare_flat
    from .sets_store import write_sets
    from ..validation import check_output_path

    if kind not in GENERATORS:
        raise InputError(f"unknown synthetic set kind {kind!r}; choose one of {sorted(GENERATORS)}")
    n = _check_int(n, "n (number of sets)", 0)
    seed = _check_int(seed, "seed", 0)
    out = check_output_path(out, overwrite)
    tokens, offsets = GENERATORS[kind](n, seed=seed)
    coll = prepare_flat(tokens, offsets)
    return write_sets(coll, out, overwrite, attrs={"source": "synth", "generator": kind, "n": n, "seed": seed})


__all__ = ["GENERATORS", "dblp_like", "kosarak_like", "write_synth_sets", "zipf_sets"]
