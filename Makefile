# daskjoin - the two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.daskjoin-installed
# test processes (pytest-xdist): two on the 2-core CI machine took the suite from 25.8 to 19.1 minutes;
# 17.2 with the tests' Dask clusters kept quiet, long files first (tests/conftest.py) and lighter
# bounds-check and kernel-cache tests; 16.9-17.8 with `import daskjoin` loading no Numba, 16.1 for a second
# run on the same tree, which reuses the bounds-checked kernels (build/boundscheck-jit); 18.1 in a fresh
# worktree and 16.0 with its Numba cache warm (4,305 tests, 2026-11-27); on a faster VM of the same kind
# (cKDTree 1.1 s where earlier ones took 1.7-2.1 s) 12.3 in a fresh worktree and 8.2 with its cache warm and
# the kNN adversarial joins run in their test's thread (4,402 tests, 2026-11-27)
TEST_WORKERS ?= 2

.PHONY: demo test test-all gpu-test bench wheelhouse wheelhouse-slim clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	# compile the kernels into their caches once (50-70 s on 2 cores), so that neither the demo's first join
	# nor each test process pays for it (only a head start: should it fail, the kernels compile where used)
	$(BIN)/daskjoin warm || echo "daskjoin warm failed (above); the kernels will compile at their first use"
	touch $(STAMP)

## Set up, generate a synthetic dataset in Zarr, run a self-join on a local Dask cluster.
demo: $(STAMP)
	$(BIN)/python -m daskjoin.demo

## Set up and run the default test suite (slow and GPU cases excluded).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

## Every test, slow ones included.
test-all: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m 'not gpu'

## GPU-marked tests (skip cleanly where no CUDA device is visible).
gpu-test: $(STAMP)
	$(BIN)/python -m pytest -q -m gpu

## CPU benchmark against scipy cKDTree and scikit-learn (see benchmarks/README.md).
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_cpu.py

## Wheelhouse for air-gapped GPU nodes (Python 3.12, manylinux x86_64).
wheelhouse:
	bash deploy/build-wheelhouse.sh .wheelhouse

## The same without what CUDA Python images already ship (numba, pyarrow, pandas, ...).
wheelhouse-slim:
	bash deploy/build-wheelhouse.sh .wheelhouse --slim

clean:
	rm -rf $(VENV) demo-data .pytest_cache .hypothesis build *.egg-info
