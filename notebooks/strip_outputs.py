"""Strip outputs and execution counts from notebooks before they are committed.

    python notebooks/strip_outputs.py                  # every notebook in notebooks/
    python notebooks/strip_outputs.py a.ipynb b.ipynb  # just these
    python notebooks/strip_outputs.py --check          # exit 1 if any notebook has outputs

Also drops per-cell execution metadata (timings), the injected-parameters cell
that papermill adds and the interpreter details that running adds to the
notebook's language_info; cell sources, tags and ids are kept.  Needs nbformat
(``pip install -e '.[notebook]'`` or ``'.[test]'``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent


def strip(nb) -> bool:
    """Strip ``nb`` in place; True if anything changed."""
    changed = False
    kept = []
    for cell in nb.cells:
        if "injected-parameters" in cell.metadata.get("tags", []):
            changed = True
            continue
        for key in ("execution", "collapsed", "scrolled"):
            if key in cell.metadata:
                del cell.metadata[key]
                changed = True
        if cell.cell_type == "code":
            if cell.outputs or cell.execution_count is not None:
                changed = True
            cell.outputs = []
            cell.execution_count = None
        kept.append(cell)
    nb.cells = kept
    for key in ("papermill", "widgets"):
        if key in nb.metadata:
            del nb.metadata[key]
            changed = True
    info = nb.metadata.get("language_info")
    if info and set(info) != {"name"}:  # running fills in the Python version and more: keep only the name
        nb.metadata["language_info"] = {"name": info.get("name", "python")}
        changed = True
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: notebooks/*.ipynb)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook needs stripping")
    args = parser.parse_args(argv)
    paths = args.paths or sorted(HERE.glob("*.ipynb"))
    dirty = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if strip(nb):
            dirty.append(path)
            if not args.check:
                nbformat.write(nb, path)
    for path in dirty:
        print(f"{'needs stripping' if args.check else 'stripped'}: {path}")
    return 1 if (args.check and dirty) else 0


if __name__ == "__main__":
    sys.exit(main())
