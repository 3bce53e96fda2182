"""The boundary examples of docs/exactness.md ("How this compares with scipy and scikit-learn").

The numbers live here, once: ``test_doc_quotes_the_examples`` checks that the page
quotes them (``repr`` of every float), the answers it gives for each library and
the versions they were measured with, so the page and these tests cannot drift apart.

* daskjoin's decision (both CPU kernels, self and A×B, the oracle and the public
  ``similarity_join``) must equal the rule written out in pure Python: the float64
  squared differences summed in dimension order, ``<= eps * eps`` in float64.
* The peers' decisions are what the page documents for the versions it names.  A
  different scipy / scikit-learn (or a build for another machine) may legitimately
  decide otherwise; then the test is skipped with the reason, and the page needs
  updating.  Only on the documented version and machine is a different answer a
  failure.
"""
from __future__ import annotations

import math
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import oracle  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "exactness.md"

# The versions (and machine) the page documents the peers' answers for.
DOCUMENTED = {"scipy": "1.17.1", "scikit-learn": "1.9.1"}
DOCUMENTED_MACHINES = ("x86_64", "AMD64")


@dataclass(frozen=True)
class Example:
    q: tuple          # the second point; the first is the origin (same length)
    eps: float
    s: float          # float64 squared distance, summed in dimension order
    eps2: float       # float64 eps * eps
    lane: float | None  # scipy cKDTree's four-lane sum (quoted for the cKDTree examples)
    daskjoin: bool    # is the pair in the ε-join?
    peers: dict       # peer name -> documented decision (pair in?)

    @property
    def x(self) -> np.ndarray:
        return np.array([[0.0] * len(self.q), list(self.q)], dtype=np.float64)


EXAMPLES = {
    # d = 8: a pair at exactly eps (s == eps*eps); cKDTree's four-lane sum rounds up and drops it
    "ckdtree_drops": Example(
        q=(0.1, 0.4, 0.9, 0.2, 0.3, 0.4, 0.7, 0.5),
        eps=1.4177446878757824,  # math.sqrt(2.01)
        s=2.01,
        eps2=2.01,
        lane=2.0100000000000002,
        daskjoin=True,
        peers={
            "cKDTree.query_pairs": False,
            "KDTree.query_radius": True,
            "BallTree.query_radius": True,
            "NearestNeighbors(kd_tree)": True,
            "NearestNeighbors(ball_tree)": True,
            "NearestNeighbors(brute)": True,
        },
    ),
    # d = 8: s > eps*eps, but cKDTree's four-lane sum rounds down onto eps*eps and keeps it
    "ckdtree_adds": Example(
        q=(0.6, 0.4, 0.8, 0.7, 0.5, 0.7, 0.9, 0.0),
        eps=1.7888543819998317,  # math.sqrt(3.2)
        s=3.2,
        eps2=3.1999999999999997,
        lane=3.1999999999999997,
        daskjoin=False,
        peers={
            "cKDTree.query_pairs": True,
            "KDTree.query_radius": True,
            "BallTree.query_radius": True,
            "NearestNeighbors(kd_tree)": True,
            "NearestNeighbors(ball_tree)": True,
            "NearestNeighbors(brute)": False,
        },
    ),
    # d = 2: s > eps*eps, but sqrt(s) rounds to eps, and scikit-learn's trees compare sqrt(...) <= r
    "sklearn_adds": Example(
        q=(0.3, 0.9),
        eps=0.9486832980505138,  # math.sqrt(0.9)
        s=0.9,
        eps2=0.8999999999999999,
        lane=None,
        daskjoin=False,
        peers={
            "cKDTree.query_pairs": False,
            "KDTree.query_radius": True,
            "BallTree.query_radius": True,
            "NearestNeighbors(kd_tree)": True,
            "NearestNeighbors(ball_tree)": True,
            "NearestNeighbors(brute)": False,
        },
    ),
}


def rule(p, q, eps) -> bool:
    """The contract, literally: Python floats are IEEE float64."""
    s = 0.0
    for a, b in zip(p, q):
        t = float(a) - float(b)
        s += t * t
    e = float(eps)
    return s <= e * e


def _dimension_order_sum(q) -> float:
    s = 0.0
    for v in q:
        s += v * v
    return s


def _lane_sum(q) -> float:
    """scipy 1.17.1 ckdtree ``sqeuclidean_distance_double`` (src/distance.h), against the origin."""
    acc = [0.0, 0.0, 0.0, 0.0]
    i = 0
    while i + 4 <= len(q):
        for k in range(4):
            acc[k] += q[i + k] * q[i + k]
        i += 4
    s = acc[0] + acc[1] + acc[2] + acc[3]
    for v in q[i:]:
        s += v * v
    return s


# --------------------------------------------------------------------------- the numbers


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_numbers(name):
    ex = EXAMPLES[name]
    assert _dimension_order_sum(ex.q) == ex.s
    assert math.sqrt(ex.s) == ex.eps  # the page writes eps as math.sqrt(s)
    assert ex.eps * ex.eps == ex.eps2
    assert rule([0.0] * len(ex.q), ex.q, ex.eps) is ex.daskjoin
    assert (ex.s <= ex.eps2) is ex.daskjoin
    if ex.lane is not None:
        # the explanation: the four-lane sum lands on the other side of eps*eps
        assert len(ex.q) >= 8
        assert _lane_sum(ex.q) == ex.lane
        assert (ex.lane <= ex.eps2) is not ex.daskjoin
    else:
        # the explanation: sqrt(s) rounds to eps although s > eps*eps
        assert math.sqrt(ex.s) <= ex.eps and ex.s > ex.eps2


def _doc_block(text: str, x_literal: str) -> str:
    """The fenced code block of docs/exactness.md that defines ``x`` as ``x_literal``."""
    at = text.find(x_literal)
    assert at >= 0, f"docs/exactness.md does not quote {x_literal!r}"
    end = text.find("```", at)
    return text[at:end]


def _answers(block: str) -> dict:
    """The answers the page's example block gives, by the peer names of ``EXAMPLES``."""
    b = r"(True|False)"
    patterns = {
        "rule": rf"in_daskjoin\(x, eps\)\s+# {b}\n",
        "similarity_join": r'daskjoin\.similarity_join\(x, eps=eps, output="count"\)\s+# (\d+)\n',
        "cKDTree.query_pairs": rf"\(0, 1\) in cKDTree\(x\)\.query_pairs\(eps\)\s+# {b}\n",
        "trees": rf"sk_tree\(KDTree, x, eps\), sk_tree\(BallTree, x, eps\)\s+# \({b}, {b}\)\n",
        "nn": rf'sk_nn\(x, eps, "kd_tree"\), sk_nn\(x, eps, "ball_tree"\), sk_nn\(x, eps, "brute"\)'
              rf"\s+# \({b}, {b}, {b}\)\n",
    }
    found = {}
    for key, pattern in patterns.items():
        m = re.search(pattern, block)
        assert m, f"docs/exactness.md: no {key} answer in the block\n{block}"
        found[key] = m.groups()
    truth = {"True": True, "False": False}
    return {
        "rule": truth[found["rule"][0]],
        "similarity_join": int(found["similarity_join"][0]),
        "cKDTree.query_pairs": truth[found["cKDTree.query_pairs"][0]],
        "KDTree.query_radius": truth[found["trees"][0]],
        "BallTree.query_radius": truth[found["trees"][1]],
        "NearestNeighbors(kd_tree)": truth[found["nn"][0]],
        "NearestNeighbors(ball_tree)": truth[found["nn"][1]],
        "NearestNeighbors(brute)": truth[found["nn"][2]],
    }


def test_doc_quotes_the_versions():
    text = DOC.read_text(encoding="utf-8")
    for lib, version in DOCUMENTED.items():
        assert f"{lib} {version}" in text


@pytest.mark.parametrize("name", EXAMPLES)
def test_doc_quotes_the_examples(name):
    ex = EXAMPLES[name]
    block = _doc_block(DOC.read_text(encoding="utf-8"), f"x = np.array([[0.0] * {len(ex.q)}, {list(ex.q)!r}])")
    assert f"eps = {ex.eps!r}  # math.sqrt({ex.s!r})" in block
    assert f"# s = {ex.s!r}, eps * eps = {ex.eps2!r}" in block
    if ex.lane is not None:
        assert f"cKDTree's lane sum = {ex.lane!r}" in block
    answers = _answers(block)
    assert answers.pop("rule") is ex.daskjoin
    assert answers.pop("similarity_join") == int(ex.daskjoin)
    assert answers == ex.peers


# --------------------------------------------------------------------------- daskjoin


@pytest.mark.parametrize("method", ["grid", "brute"])
@pytest.mark.parametrize("name", EXAMPLES)
def test_kernels_decide_by_the_rule(name, method):
    from daskjoin.kernels import get_kernel

    ex = EXAMPLES[name]
    x = ex.x
    expected = int(rule(x[0], x[1], ex.eps))
    assert expected == int(ex.daskjoin)
    k = get_kernel(method, "cpu")
    assert k.self_count(x, ex.eps) == expected
    assert k.cross_count(x[:1], x[1:], ex.eps) == expected
    assert k.cross_count(x[1:], x[:1], ex.eps) == expected
    i, j, _ = k.self_join(x, ex.eps)
    assert list(zip(i.tolist(), j.tolist())) == ([(0, 1)] if expected else [])


@pytest.mark.parametrize("name", EXAMPLES)
def test_oracle_decides_by_the_rule(name):
    ex = EXAMPLES[name]
    expected = int(ex.daskjoin)
    assert oracle.oracle_self_count(ex.x, ex.eps) == expected
    assert oracle.oracle_cross_count(ex.x[:1], ex.x[1:], ex.eps) == expected
    assert float(oracle.squared_distances(ex.x[0], ex.x[1])[0]) == ex.s


@pytest.mark.integration
@pytest.mark.parametrize("method", ["grid", "brute"])
@pytest.mark.parametrize("name", EXAMPLES)
def test_similarity_join_decides_by_the_rule(client, name, method):
    import daskjoin

    ex = EXAMPLES[name]
    got = daskjoin.similarity_join(ex.x, eps=ex.eps, method=method, output="count", backend="cpu", client=client)
    assert got == int(ex.daskjoin)


# --------------------------------------------------------------------------- the peers


def _ckdtree_query_pairs(x, eps) -> bool:
    from scipy.spatial import cKDTree

    return (0, 1) in cKDTree(x).query_pairs(eps)


def _sk_tree(cls_name):
    def decide(x, eps) -> bool:
        import sklearn.neighbors

        tree = getattr(sklearn.neighbors, cls_name)(x)
        return 1 in tree.query_radius(x[:1], r=eps)[0].tolist()

    return decide


def _sk_nn(algorithm):
    def decide(x, eps) -> bool:
        from sklearn.neighbors import NearestNeighbors

        nn = NearestNeighbors(radius=eps, algorithm=algorithm).fit(x)
        return 1 in nn.radius_neighbors(x[:1], return_distance=False)[0].tolist()

    return decide


PEERS = {
    "cKDTree.query_pairs": ("scipy", _ckdtree_query_pairs),
    "KDTree.query_radius": ("scikit-learn", _sk_tree("KDTree")),
    "BallTree.query_radius": ("scikit-learn", _sk_tree("BallTree")),
    "NearestNeighbors(kd_tree)": ("scikit-learn", _sk_nn("kd_tree")),
    "NearestNeighbors(ball_tree)": ("scikit-learn", _sk_nn("ball_tree")),
    "NearestNeighbors(brute)": ("scikit-learn", _sk_nn("brute")),
}


def _installed(lib: str) -> str:
    if lib == "scipy":
        import scipy

        return scipy.__version__
    import sklearn

    return sklearn.__version__


@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("name", EXAMPLES)
def test_peer_decides_as_documented(name, peer):
    ex = EXAMPLES[name]
    lib, decide = PEERS[peer]
    documented = ex.peers[peer]
    got = decide(ex.x, ex.eps)
    if got == documented:
        return
    installed, machine = _installed(lib), platform.machine()
    if installed != DOCUMENTED[lib] or machine not in DOCUMENTED_MACHINES:
        pytest.skip(
            f"{peer} from {lib} {installed} on {machine} says in={got} on example {name!r}; docs/exactness.md "
            f"documents in={documented} for {lib} {DOCUMENTED[lib]} on x86-64: the page needs updating"
        )
    assert got == documented, f"{peer} ({lib} {installed}) on {name!r}: got in={got}, documented in={documented}"
