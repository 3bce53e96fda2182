#!/usr/bin/env bash
# Build a wheelhouse for air-gapped GPU nodes: Python 3.12, manylinux x86_64, the `gpu` and `gpu-rmm` extras.
#
#   bash deploy/build-wheelhouse.sh [DIR] [--slim]   (default DIR: .wheelhouse)
#
# --slim leaves out the large wheels a CUDA Python image already has (cupy, numba, llvmlite,
# pyarrow, pandas, and setuptools/wheel), for images like the project's GPU test machine.
#
# On the GPU node, from a checkout of daskjoin with DIR copied beside it:
#   python3 -m pip install --no-index --find-links DIR --no-build-isolation -e '.[gpu]'
# (--no-build-isolation: an isolated build would try to fetch setuptools from the network.)
# numpy and pillow are left out: GPU images ship their own, and mixing builds breaks CuPy.
set -euo pipefail
usage() { sed -n '2,12s/^# \{0,1\}//p' "$0"; }
dest=.wheelhouse
slim=0
for arg in "$@"; do
    case "$arg" in
        -h|--help) usage; exit 0 ;;
        --slim) slim=1 ;;
        -*) echo "build-wheelhouse.sh: unknown option $arg" >&2; usage >&2; exit 2 ;;
        *) dest="$arg" ;;
    esac
done
mkdir -p "$dest"
python3 -m pip download --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$dest" 'dask-cuda==26.10.0' 'rmm-cu13==26.10.0' 'cupy-cuda13x>=13' 'zarr>=3' 'dask[dataframe]' distributed numba pyarrow \
    pandas tqdm 'setuptools>=77' wheel
rm -f "$dest"/numpy-*.whl "$dest"/pillow-*.whl
if [ "$slim" = 1 ]; then
    rm -f "$dest"/cupy_cuda13x-*.whl "$dest"/numba-*.whl "$dest"/llvmlite-*.whl "$dest"/pyarrow-*.whl \
          "$dest"/pandas-*.whl "$dest"/setuptools-*.whl "$dest"/wheel-*.whl "$dest"/tzdata-*.whl \
          "$dest"/python_dateutil-*.whl
fi
echo "wheelhouse ready: $dest ($(du -sh "$dest" | cut -f1))"
