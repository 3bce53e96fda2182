"""Named adversarial collections for exact set-similarity join tests.

Every case is deterministic and small enough for the brute-force oracle in
``tests/set_oracle.py``.  A case holds the sets ``a``, an optional second
collection ``b`` (for the R x S variant; ``None`` means "join ``a`` with a copy
of itself", see :meth:`SetCase.cross_b`) and one threshold per measure it is
meant for (``thresholds``; a case is run only with those measures).

Themes: empty input, one set, all-empty sets, empty sets mixed with non-empty
ones (two empty sets must not match), duplicate sets, tokens repeated inside a
set (sets are sets), threshold 1.0, tiny thresholds (0.01, 1e-6, 0.001 exactly
on a 1/1000 pair), similarities exactly on the threshold for every measure -
both where the decimal reading of the threshold includes the tie (``0.8`` and a
jaccard of 4/5; ``0.6666666666666666`` and a dice of 2/3, since that decimal is
*below* 2/3) and where it excludes it (``0.6363636363636364`` is *above* 7/11,
``0.8333333333333334`` above 5/6, ``0.7071067811865476`` above 1/sqrt(2)) - and
cases where a float64 evaluation of the similarity, or the binary value of the
threshold, gives the wrong answer; overlap thresholds 1 and larger than every
set; string tokens; token ids up to 2**62; sets of very different sizes (1 vs
1000); many sets sharing one frequent token; random Zipf data.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["SetCase", "SET_CASES", "build_set_cases", "set_case_by_name", "zipf_sets", "case_params"]

DEFAULT = {"jaccard": 0.5, "cosine": 0.5, "dice": 0.5, "overlap": 2}


@dataclass(frozen=True, eq=False)
class SetCase:
    name: str
    a: list
    b: list | None
    thresholds: dict = field(default_factory=lambda: dict(DEFAULT))
    note: str = ""

    def cross_b(self) -> list:
        """The S side of the R x S variant (a copy of ``a`` when ``b`` is None)."""
        return [list(s) for s in self.a] if self.b is None else self.b

    @property
    def size(self) -> int:
        return sum(len(s) for s in self.a) + sum(len(s) for s in (self.b or []))

    def __repr__(self) -> str:  # short, for pytest output
        nb = "None" if self.b is None else len(self.b)
        return f"SetCase({self.name!r}, n_a={len(self.a)}, n_b={nb}, thresholds={self.thresholds})"


# --------------------------------------------------------------------------- generators


def zipf_sets(n: int, *, seed: int, vocab: int = 2000, exponent: float = 1.3, min_size: int = 1,
              max_size: int = 30, offset: int = 0) -> list[list[int]]:
    """``n`` sets of Zipf-distributed tokens (a few very frequent ones, a long tail).

    Sizes are uniform in ``[min_size, max_size]`` before deduplication; tokens are
    ``offset + (zipf - 1) % vocab``, so repeated tokens inside a set occur too.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(min_size, max_size + 1, n)
    out = []
    for k in sizes:
        toks = (rng.zipf(exponent, int(k)) - 1) % vocab + offset
        out.append([int(t) for t in toks])
    return out


def _nested(kmax: int, start: int = 1) -> list[list[int]]:
    """``range(k)`` for ``k = start .. kmax``: jaccard(k, m) = k/m, dice = 2k/(k+m), cosine = sqrt(k/m)."""
    return [list(range(k)) for k in range(start, kmax + 1)]


def _near_duplicates(n_groups: int, group: int, size: int, seed: int) -> list[list[int]]:
    """Groups of sets that each drop/replace one or two tokens of a base set (many high similarities)."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(n_groups):
        base = rng.choice(10 * size * n_groups, size, replace=False)
        for _ in range(group):
            s = base.copy()
            k = int(rng.integers(0, 3))
            if k:
                s[rng.choice(size, k, replace=False)] = rng.integers(10**6, 2 * 10**6, k)
            out.append([int(t) for t in rng.permutation(s)])
    order = rng.permutation(len(out))
    return [out[i] for i in order]


# --------------------------------------------------------------------------- cases


def build_set_cases() -> list[SetCase]:
    C = []

    def add(name, a, b=None, thresholds=None, note=""):
        th = dict(DEFAULT) if thresholds is None else dict(thresholds)
        C.append(SetCase(name, [list(s) for s in a], None if b is None else [list(s) for s in b], th, note))

    # ---- trivial shapes ----------------------------------------------------------------------
    add("empty_input", [], [[1, 2], [2, 3]], note="no sets at all; R x S with an empty R")
    add("empty_b", [[1, 2], [1, 2, 3]], [], note="R x S with an empty S")
    add("one_set", [[1, 2, 3]], [[1, 2, 3], [3, 4]])
    add("all_empty", [[], [], [], []], [[], []], note="empty sets never match, not even each other")
    add("empty_mixed", [[], [1, 2], [], [1, 2], [2, 3], [], [5]], [[], [1, 2], [5], []],
        thresholds={"jaccard": 0.01, "cosine": 0.01, "dice": 0.01, "overlap": 1})
    add("duplicate_sets", [[1, 2, 3]] * 5 + [[1, 2, 4]] * 3 + [[7]] * 2, [[1, 2, 3], [7], [1, 2, 4]] * 2,
        thresholds={"jaccard": 1.0, "cosine": 1.0, "dice": 1.0, "overlap": 3})
    add("repeated_tokens", [[1, 1, 1, 2], [1, 2, 2, 2], [2, 2, 3, 3, 3], [1, 2, 3, 3], [4, 4, 4, 4], [4]],
        [[2, 1, 2, 1], [4, 4], [3, 3, 3]],
        thresholds={"jaccard": 1.0, "cosine": 1.0, "dice": 1.0, "overlap": 2},
        note="{1,1,1,2} == {1,2,2,2}; a multiset view would give other sizes and miss these")
    add("repeated_tokens_half", [[1, 1, 1, 2], [1, 2, 2, 2], [2, 2, 3, 3, 3], [1, 2, 3, 3], [4, 4, 4, 4], [4, 5]],
        thresholds={"jaccard": 0.5, "cosine": 0.5, "dice": 0.5, "overlap": 2})

    # ---- threshold 1 and tiny thresholds -------------------------------------------------------
    z = zipf_sets(120, seed=1, vocab=30, max_size=6)
    add("zipf_small_t1", z + z[:20], zipf_sets(40, seed=2, vocab=30, max_size=6) + z[5:15],
        thresholds={"jaccard": 1.0, "cosine": 1.0, "dice": 1.0, "overlap": 1})
    add("zipf_small_t0.01", z, zipf_sets(50, seed=3, vocab=30, max_size=6),
        thresholds={"jaccard": 0.01, "cosine": 0.01, "dice": 0.01, "overlap": 1},
        note="every pair sharing a token (almost)")
    add("sizes_t1e-6", [[0]] + _nested(60, 2)[::7] + [list(range(1000))], [[999], [0, 5000]],
        thresholds={"jaccard": 1e-6, "cosine": 1e-6, "dice": 1e-6, "overlap": 1},
        note="every pair sharing a token")

    # ---- very different sizes; exactly 1/1000 ---------------------------------------------------
    big = [[0], list(range(1000)), list(range(999)), [0, 1], list(range(500)), list(range(1, 1001)), [999],
           list(range(0, 2000, 2))]
    add("sizes_1_vs_1000", big, [[0], [999, 1000], list(range(1000))],
        thresholds={"jaccard": 0.001, "cosine": 0.001, "dice": 0.002, "overlap": 1},
        note="{0} vs range(1000): jaccard 1/1000 == t (in); dice 2/1001 < 0.002 (out), 2/1000 (in)")
    add("sizes_1_vs_1000_half", big, [[0], [999, 1000], list(range(1000))],
        thresholds={"jaccard": 0.499, "cosine": 0.0316227766016838, "dice": 0.5, "overlap": 500},
        note="range(500) vs range(1000): jaccard 1/2 (in at 0.499), dice 2/3; cosine 1/sqrt(1000) near t")

    # ---- exact ties on nested prefixes range(k), k = 1..40 --------------------------------------
    nested = _nested(40)
    add("nested_ties_included", nested, _nested(40, 2)[::3],
        thresholds={"jaccard": 0.8, "dice": 2 / 3, "cosine": 0.8, "overlap": 5},
        note="jaccard k/m == 4/5 (0.8's binary value is above 4/5: a binary comparison loses them); "
             "dice 2k/(k+m) == 2/3 and 0.6666666666666666 < 2/3; cosine k/m == 16/25")
    add("nested_ties_excluded", nested, _nested(40, 2)[::3],
        thresholds={"jaccard": 7 / 11, "dice": 7 / 11, "cosine": 5 / 6, "overlap": 41},
        note="0.6363636363636364 > 7/11 although float(7/11) equals it; 0.8333333333333334 > 5/6; "
             "overlap 41 exceeds every set")
    add("nested_ties_9_digits", nested, _nested(40, 2)[::3],
        thresholds={"jaccard": 0.636363637, "dice": 0.636363636, "cosine": 0.707106782, "overlap": 40},
        note="9-digit decimals around ties (the long ones above need more than 2**30 as denominator): "
             "jaccard 7/11 < 0.636363637 (out); dice 2k/(k+m) == 7/11 at (7, 15), (14, 30) > 0.636363636 (in); "
             "cosine 1/sqrt(2) < 0.707106782 (out)")
    add("nested_ties_9_digits_below", nested,
        thresholds={"jaccard": 0.636363636, "cosine": 0.707106781, "dice": 0.833333333},
        note="just below: jaccard 7/11 in, cosine (k, 2k) in, dice 5/6 (2k/(k+m) at m = 1.4k) in")
    add("nested_ties_mixed", nested,
        thresholds={"jaccard": 2 / 3, "dice": 0.8, "cosine": 0.2, "overlap": 1},
        note="jaccard 2/3 in; dice 2k/(k+m) == 4/5 at m = 1.5k (0.8 binary > 4/5); cosine k/m == 1/25")
    add("nested_ties_decimal", nested,
        thresholds={"jaccard": 0.1, "dice": 5 / 6, "cosine": 0.5, "overlap": 40},
        note="jaccard 1/10 at 0.1 (binary 0.1 > 1/10); dice 5/6 at 0.8333333333333334 (out); cosine k/4k")
    add("nested_cosine_sqrt2", nested,
        thresholds={"cosine": 0.7071067811865476, "jaccard": 5 / 7, "dice": 0.9},
        note="cosine of range(k) vs range(2k) is 1/sqrt(2) < 0.7071067811865476, but k/sqrt(2k*k) rounds "
             "to 0.7071067811865476 in float64 for k = 3, 6, 7, ...: a float comparison includes them")
    add("nested_cosine_sqrt2_below", nested,
        thresholds={"cosine": 0.7071067811865475, "jaccard": 0.5, "dice": 0.5},
        note="0.7071067811865475 < 1/sqrt(2): every (k, 2k) pair is in")
    cos_sets = [[1, 2, 3, 4], [1, 2, 5, 6], [1, 2], [1, 2, 7, 8, 9, 10, 11, 12], [1], [1, 2, 3],
                [2, 3, 4], [3, 13, 14], [1, 2, 3, 4, 5, 6, 7, 8, 9]]
    add("cosine_half", cos_sets, [[1, 2, 5, 6], [1, 13], [3]],
        thresholds={"cosine": 0.5, "jaccard": 1 / 3, "dice": 0.5, "overlap": 2},
        note="|r|=|s|=4, o=2 -> 0.5; |r|=2, |s|=8, o=2 -> 0.5; {1} vs 4-set -> 0.5")
    add("cosine_float_ties", [[1], [1, 2, 3], [1, 2], [1, 2, 4], [5, 6], [5, 6, 7], [5, 8, 9]],
        [[1, 9, 10], [5, 6, 11]],
        thresholds={"cosine": 0.5773502691896258, "jaccard": 0.5, "dice": 0.8, "overlap": 2},
        note="1/sqrt(3) and 2/sqrt(6) both evaluate in float64 to exactly these thresholds but lie below them")
    add("cosine_float_ties_in", [[1], [1, 2], [1, 2, 3, 4], [5, 6, 7], [5, 6, 8]], [[1, 9], [5, 6, 7, 8]],
        thresholds={"cosine": 0.7071067811865475, "jaccard": 0.4, "dice": 4 / 7, "overlap": 3},
        note="1/sqrt(2) >= 0.7071067811865475 (in); dice 4/7 at 0.5714285714285714 (< 4/7, in)")

    # ---- tokens --------------------------------------------------------------------------------
    words = ["apple", "banana", "cherry", "date", "elder", "fig", "grape", "héllo", "", "x y", "日本"]
    rng = np.random.default_rng(7)
    sa = [[words[k] for k in rng.integers(0, len(words), int(rng.integers(0, 6)))] for _ in range(40)]
    sb = [[words[k] for k in rng.integers(0, len(words), int(rng.integers(1, 5)))] for _ in range(15)]
    add("string_tokens", sa, sb, note="str tokens incl. the empty string, spaces and non-ASCII")
    big_ids = [2**40, 2**40 + 1, 2**40 + 2, 2**62, 2**62 + 7, 2**33, 0, 1]
    la = [[big_ids[k] for k in rng.integers(0, len(big_ids), int(rng.integers(1, 5)))] for _ in range(40)]
    lb = [[big_ids[k] for k in rng.integers(0, len(big_ids), int(rng.integers(1, 5)))] for _ in range(15)]
    add("large_token_ids", la, lb, note="ids 2**40 .. 2**62 (beyond uint32 and float64's exact-int range)")
    add("sparse_token_ids", [[k * 1_000_003 for k in s] for s in z[:60]], None,
        thresholds={"jaccard": 0.4, "cosine": 0.5, "dice": 0.6, "overlap": 2})

    # ---- frequent token; near duplicates; random Zipf --------------------------------------------
    rng = np.random.default_rng(11)
    freq = [[0] + [int(t) for t in rng.integers(1, 400, int(rng.integers(0, 4)))] for _ in range(180)]
    add("frequent_token", freq, [[0], [0, 1, 2]] + freq[:10],
        thresholds={"jaccard": 0.25, "cosine": 0.4, "dice": 0.4, "overlap": 1},
        note="every set holds token 0: a prefix index bucket of size n, thousands of pairs")
    near = _near_duplicates(30, 5, 20, seed=12)
    add("near_duplicates", near, [s[1:] + [5_000_000] for s in near[::6]] + near[::25],
        thresholds={"jaccard": 0.8, "cosine": 0.9, "dice": 0.9, "overlap": 19})
    add("zipf_300", zipf_sets(300, seed=21, vocab=300, max_size=25), zipf_sets(120, seed=22, vocab=300, max_size=25),
        thresholds={"jaccard": 0.3, "cosine": 0.5, "dice": 0.45, "overlap": 4})
    add("zipf_300_high", zipf_sets(300, seed=23, vocab=300, max_size=25), None,
        thresholds={"jaccard": 0.75, "cosine": 0.8, "dice": 0.8, "overlap": 8})
    add("zipf_wide_sizes", zipf_sets(200, seed=24, vocab=500, min_size=1, max_size=200, exponent=1.1), None,
        thresholds={"jaccard": 0.2, "cosine": 0.3, "dice": 0.3, "overlap": 10})
    return C


SET_CASES = build_set_cases()
_BY_NAME = {c.name: c for c in SET_CASES}
assert len(_BY_NAME) == len(SET_CASES), "case names must be unique"


def set_case_by_name(name: str) -> SetCase:
    return _BY_NAME[name]


def case_params(cases=None, measures=None):
    """``(case, measure)`` pairs for ``pytest.mark.parametrize``: each case with each of its measures."""
    out = []
    for c in SET_CASES if cases is None else cases:
        for m, _ in c.thresholds.items():
            if measures is None or m in measures:
                out.append((c, m))
    return out


#: threshold grids for property tests: on-tie values (2/3, 7/11, 5/6, 1/sqrt(2), 1/sqrt(3)) and extremes
THRESHOLDS = {
    "jaccard": [1e-6, 0.01, 0.1, 0.2, 0.25, 1 / 3, 0.4, 0.5, 0.6, 2 / 3, 7 / 11, 0.75, 0.8, 5 / 6, 0.9, 1.0],
    "dice": [1e-6, 0.01, 0.2, 1 / 3, 0.4, 0.5, 4 / 7, 0.6, 2 / 3, 0.75, 0.8, 5 / 6, 0.9, 1.0],
    "cosine": [1e-6, 0.01, 0.2, 1 / 3, 0.5, 0.5773502691896258, 0.6, 2 / 3, 0.7071067811865475,
               0.7071067811865476, 0.75, 0.8, 0.9, 1.0],
    "overlap": [1, 2, 3, 4, 6],
}
