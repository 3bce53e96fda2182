# Sourced by the device_*.sh scripts: $OUT (logs and JSON), unbuffered Python, and the package installed
# from the carried wheelhouse with the GPU extra and any further packages named in the arguments.
#   source benchmarks/device_setup.sh [PACKAGE ...]
OUT="${OUT:-device-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --find-links .wheelhouse --no-build-isolation -e '.[gpu-rmm]' "$@" \
    > "$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
