"""The options of the grid, szl, nlj and directory methods: checked before any work, passed to both backends."""
from __future__ import annotations

import numpy as np
import pytest

import daskjoin as dj
from daskjoin.execution.inprocess import in_process
from daskjoin.kernels import grid, szl
from daskjoin.options import check_gpu_options
from daskjoin.planning import plan
from daskjoin.validation import InputError


@pytest.mark.parametrize("method, options, words", [
    ("nlj", {"threads_per_point": 4}, "not options of method 'nlj'"),
    ("szl", {"lists": 0}, "integer from 1 to 8"),
    ("szl", {"lists": 9}, "integer from 1 to 8"),
    ("szl", {"shifts": "dyadic"}, "shifts"),
    ("directory", {"fanout": 1}, "integer from 2 to 63"),
    ("directory", {"levels": 4, "fanout": 16}, "below 64"),
    ("directory", {"pca": "yes"}, "pca"),
    ("grid", {"pattern": "gpucalcglobal"}, "lid-unicomp"),
])
def test_bad_method_options_are_refused_before_any_work(method, options, words):
    with pytest.raises(InputError, match=words):
        check_gpu_options("epsilon", method, options)


def test_good_method_options_pass():
    assert check_gpu_options("epsilon", "szl", {"lists": 3, "shifts": "random"}) == {"lists": 3, "shifts": "random"}
    assert check_gpu_options("epsilon", "directory", {"levels": 2, "fanout": 8, "pca": True})["pca"] is True


def test_method_options_reach_the_cpu_driver(monkeypatch):
    """A method's own options (szl's lists) reach its CPU driver; GPU-only ones never would."""
    seen = {}
    original = szl.SzlJoin.__init__

    def spy(self, a, b, eps, **options):
        seen.update(options)
        original(self, a, b, eps, **options)

    monkeypatch.setattr(szl.SzlJoin, "__init__", spy)
    x = np.random.default_rng(0).random((300, 2))
    count = dj.similarity_join(x, eps=0.05, method="szl", backend="cpu", output="count",
                               gpu_options={"lists": 2, "shifts": "random"}, client=in_process())
    assert seen == {"lists": 2, "shifts": "random"}
    assert count == dj.similarity_join(x, eps=0.05, method="grid", backend="cpu", output="count",
                                       client=in_process())


def test_plan_memory_counts_the_szl_lists():
    assert plan.SZL_MAX_LISTS == szl.MAX_LISTS
    assert plan.row_bytes(3, 8, "szl") > plan.row_bytes(3, 8, "directory") > plan.row_bytes(3, 8, "grid")


def test_grid_pattern_reaches_the_cpu_driver_and_changes_only_the_work(monkeypatch):
    """``pattern`` is the grid's own option: it reaches the CPU driver, changes the candidates, not the pairs."""
    seen = {}
    original = grid.GridJoin.__init__

    def spy(self, a, b, eps, **options):
        seen.update(options)
        original(self, a, b, eps, **options)

    monkeypatch.setattr(grid.GridJoin, "__init__", spy)
    x = np.random.default_rng(1).random((4000, 2))
    counts = {p: dj.similarity_join(x, eps=0.02, method="grid", backend="cpu", output="count",
                                    gpu_options={"pattern": p}, client=in_process())
              for p in ("unicomp", "lid-unicomp")}
    assert seen.get("pattern") == "lid-unicomp" and counts["unicomp"] == counts["lid-unicomp"] > 0
    work = {p: dj.profile_work(x, eps=0.02, method="grid", backend="cpu", pattern=p) for p in ("unicomp", "lid-unicomp")}
    assert work["unicomp"].describe() != work["lid-unicomp"].describe()
