"""The examples in the public docstrings run and print what they say."""
import doctest
import importlib

import pytest

MODULES = ["daskjoin.api", "daskjoin.api_sets", "daskjoin.api_knn", "daskjoin.io.synth", "daskjoin.io.importers", "daskjoin.io.zarr_out"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    if name == "daskjoin.api":
        assert result.attempted >= 3


def test_every_setting_is_in_the_deployment_guide():
    """docs/deployment.md lists each ``daskjoin.`` setting with its default (a new one must be documented)."""
    import pathlib

    from daskjoin.config import DEFAULTS

    guide = (pathlib.Path(__file__).parent.parent / "docs" / "deployment.md").read_text()
    table = guide[guide.index("## Settings"):]
    rows = {line.split("|")[1].strip().strip("`") for line in table.splitlines() if line.startswith("| `")}
    assert rows == set(DEFAULTS["daskjoin"])
