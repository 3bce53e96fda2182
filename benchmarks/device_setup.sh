# Sourced by the device_*.sh scripts: $OUT (logs and JSON), unbuffered Python, and the package installed
# from the carried wheelhouse with the GPU extra and any further packages named in the arguments.
#   source benchmarks/device_setup.sh [PACKAGE ...]
OUT="${OUT:-device-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --find-links .wheelhouse --no-build-isolation -e '.[gpu-rmm]' "$@" \
    > "$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
# The lent machine sets PYTHONDONTWRITEBYTECODE=1, so every new process compiled daskjoin's ~120 modules
# again (0.9 s of `compile` in a CLI run's profile, 2026-11-26). A user's install has its bytecode (pip
# compiles it at install; an editable install writes it at the first import), so do the same here.
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q daskjoin > /dev/null 2>&1 || true
