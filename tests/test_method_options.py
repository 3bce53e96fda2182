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
    ("grid", {"threads_per_point": 0}, "integer from 1 to 32"),
    ("grid", {"work_queue": "no"}, "True or False"),
    ("grid", {"sort_by_workload": 1}, "True or False"),
    ("grid", {"max_dims": "abc"}, "integer from 0 to 64"),
    ("brute", {"tile": 0}, "integer from 1"),
    ("brute", {"batch_bytes": -5}, "integer from 1"),
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
    assert plan.row_bytes(64, 8, "brute") == plan.row_bytes(64, 8, "grid") + 4 * 64 + 12  # the float32 copy


def test_grid_pattern_reaches_the_cpu_driver_and_changes_only_the_work(monkeypatch):
    """``pattern`` is the grid's own option: it reaches the CPU driver, changes the candidates, not the pairs."""
    seen = []
    original = grid.GridJoin.__init__

    def spy(self, a, b, eps, **options):
        seen.append(options.get("pattern"))
        original(self, a, b, eps, **options)

    monkeypatch.setattr(grid.GridJoin, "__init__", spy)
    x = np.random.default_rng(1).random((4000, 2))
    counts = {p: dj.similarity_join(x, eps=0.02, method="grid", backend="cpu", output="count",
                                    gpu_options={"pattern": p}, client=in_process())
              for p in ("unicomp", "lid-unicomp")}
    assert "unicomp" in seen and "lid-unicomp" in seen and counts["unicomp"] == counts["lid-unicomp"] > 0
    work = {p: dj.profile_work(x, eps=0.02, method="grid", backend="cpu", pattern=p) for p in ("unicomp", "lid-unicomp")}
    assert work["unicomp"].describe() != work["lid-unicomp"].describe()


def test_set_join_block_must_be_a_warp_multiple_range():
    with pytest.raises(InputError, match="integer from 32 to 1024"):
        check_gpu_options("sets", "ppjoin", {"block": 16})


def test_explain_lists_the_options_and_says_which_the_cpu_ignores():
    x = np.random.default_rng(2).random((2000, 3))
    text = dj.plan_join(x, eps=0.05, method="grid", backend="cpu", client=in_process(),
                        gpu_options={"pattern": "unicomp", "threads_per_point": 4}).explain()
    line = next(s for s in text.splitlines() if s.strip().startswith("options:"))
    assert "pattern=unicomp," in line and "threads_per_point=4 (GPU only: unused on the CPU)" in line


def test_an_option_of_a_method_auto_did_not_choose_names_the_choice():
    x = np.random.default_rng(3).random((300, 20))  # 20-d: auto picks brute force
    with pytest.raises(InputError, match="method 'auto' chose 'brute' for 20-d rows"):
        dj.plan_join(x, eps=0.5, backend="cpu", client=in_process(), gpu_options={"pattern": "unicomp"})
