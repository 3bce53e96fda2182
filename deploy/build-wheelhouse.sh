#!/usr/bin/env bash
# Build a wheelhouse for air-gapped GPU nodes: Python 3.12, manylinux x86_64, the `gpu` extra.
#
#   bash deploy/build-wheelhouse.sh [DIR]          (default DIR: .wheelhouse)
#
# On the GPU node, from a checkout of daskjoin with DIR copied beside it:
#   pip install --no-index --find-links DIR --no-build-isolation -e .
# (--no-build-isolation: an isolated build would try to fetch setuptools from the network.)
# numpy and pillow are left out: GPU images ship their own, and mixing builds breaks CuPy.
set -euo pipefail
dest="${1:-.wheelhouse}"
mkdir -p "$dest"
python3 -m pip download --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$dest" 'dask-cuda==26.10.0' 'zarr>=3' 'dask[dataframe]' distributed numba pyarrow pandas tqdm \
    'setuptools>=77' wheel
rm -f "$dest"/numpy-*.whl "$dest"/pillow-*.whl
echo "wheelhouse ready: $dest ($(du -sh "$dest" | cut -f1))"
