"""The notebooks in ``notebooks/``: stored without outputs, and they run from top to bottom.

Each notebook is executed with nbclient on the CPU backend, in a temporary
working directory, with small parameters: a cell assigning them is inserted
right after the notebook's ``parameters``-tagged cell (as papermill does).  The
kernel is a kernelspec written for this test run that starts ``sys.executable``,
so neither a user-level kernelspec nor an activated environment is needed.
"""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(p.name for p in NOTEBOOKS_DIR.glob("*.ipynb"))
KERNEL_NAME = "daskjoin-tests-python"
CELL_TIMEOUT_S = 300

#: Small parameters per notebook (every notebook needs an entry: the suite runs them all).
SMALL = {
    "quickstart.ipynb": {"n": 3_000, "eps": 0.03, "backend": "cpu"},
    "scale-out.ipynb": {"n": 20_000, "memory_budget": "1MB", "backend": "cpu"},
    "near-duplicates.ipynb": {"n_docs": 150, "backend": "cpu"},
}
#: Text every run must print (stdout or a result's text/plain), and the least number of figures.
EXPECTED_TEXT = {
    "quickstart.ipynb": ["daskjoin plan:", "identical: True", "kNN identical to cKDTree: True"],
    "scale-out.ipynb": ["daskjoin plan:", "_SUCCESS", "read back:"],
    "near-duplicates.ipynb": ["identical: True"],
}
EXPECTED_FIGURES = {"quickstart.ipynb": 3, "scale-out.ipynb": 0, "near-duplicates.ipynb": 2}


def _read(name: str):
    import nbformat

    return nbformat.read(NOTEBOOKS_DIR / name, as_version=4)


def _parameters_index(nb) -> int:
    tagged = [k for k, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"expected exactly one cell tagged 'parameters', found {len(tagged)}"
    return tagged[0]


def _assigned_names(source: str) -> set[str]:
    return {t.id for node in ast.parse(source).body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)}


def test_every_notebook_has_small_parameters():
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOKS_DIR}"
    assert sorted(SMALL) == NOTEBOOKS, "add an entry to SMALL (and EXPECTED_*) for every notebook"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_is_clean(name):
    """No outputs, no execution counts, valid nbformat; parameters in the first code cell."""
    import nbformat

    nb = _read(name)
    nbformat.validate(nb)
    dirty = [k for k, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]
    assert not dirty, (
        f"{name}: cells {dirty} have outputs or execution counts; "
        f"strip them with `python notebooks/strip_outputs.py notebooks/{name}`"
    )
    index = _parameters_index(nb)
    first_code = next(k for k, c in enumerate(nb.cells) if c.cell_type == "code")
    assert index == first_code, f"{name}: the 'parameters' cell must be the first code cell"
    missing = set(SMALL.get(name, {})) - _assigned_names(nb.cells[index].source)
    assert not missing, f"{name}: the parameters cell does not assign {sorted(missing)} (tests/test_notebooks.py SMALL)"


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """A kernelspec for this interpreter on JUPYTER_PATH; no scheduler address or plotting backend inherited."""
    from ipykernel.kernelspec import write_kernel_spec

    root = tmp_path_factory.mktemp("jupyter")
    write_kernel_spec(path=str(root / "kernels" / KERNEL_NAME), overrides={"display_name": "daskjoin tests"})
    saved = {k: os.environ.get(k) for k in ("JUPYTER_PATH", "DASK_SCHEDULER_ADDRESS", "DASKJOIN_SCHEDULER", "MPLBACKEND")}
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(root), saved["JUPYTER_PATH"]]))
    for key in ("DASK_SCHEDULER_ADDRESS", "DASKJOIN_SCHEDULER", "MPLBACKEND"):
        os.environ.pop(key, None)
    yield KERNEL_NAME
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _outputs(nb):
    for cell in nb.cells:
        if cell.cell_type == "code":
            yield from cell.outputs


@pytest.mark.integration
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, kernel_env, tmp_path):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = _read(name)
    index = _parameters_index(nb)
    injected = "# Parameters injected by tests/test_notebooks.py\n" + "".join(
        f"{key} = {value!r}\n" for key, value in SMALL[name].items())
    cell = nbformat.v4.new_code_cell(injected)
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(index + 1, cell)

    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=kernel_env,
                            resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except CellExecutionError as exc:
        raise AssertionError(f"{name} failed (executed copy: {tmp_path / name}):\n{exc}") from None
    finally:
        nbformat.write(nb, tmp_path / name)

    outputs = list(_outputs(nb))
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, f"{name}: error outputs {[(o.ename, o.evalue) for o in errors]}"
    text = "".join(o.get("text", "") if o.output_type == "stream" and o.get("name") == "stdout"
                   else o.get("data", {}).get("text/plain", "") for o in outputs)
    missing = [t for t in EXPECTED_TEXT[name] if t not in text]
    assert not missing, f"{name}: expected output text {missing} not found (executed copy: {tmp_path / name})"
    figures = sum("image/png" in o.get("data", {}) for o in outputs)
    assert figures >= EXPECTED_FIGURES[name], f"{name}: {figures} figures, expected at least {EXPECTED_FIGURES[name]}"
