#!/usr/bin/env bash
# One call on a GPU machine: install from the carried wheelhouse, compile-check the CUDA sources,
# run the gpu-marked tests, then the GPU benchmark.  Logs go to $OUT (default ./device-out).
#   bash benchmarks/device_run.sh [bench_gpu.py arguments...]
set -uo pipefail
OUT="${OUT:-device-out}"
mkdir -p "$OUT"
python3 -m pip install -q --no-index --find-links .wheelhouse --no-build-isolation -e '.[gpu]' > "$OUT/install.log" 2>&1 \
    || { tail -20 "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for cu in daskjoin/kernels/cuda/*.cu; do
    nvcc -std=c++17 -arch=sm_90 -cubin -Xptxas -v -o /dev/null "$cu" 2>&1 | grep -E "error|stack frame|registers" | sed "s|^|$(basename "$cu"): |"
done
python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py -x --timeout=600 > "$OUT/gpu-tests.log" 2>&1
echo "gpu tests: $(tail -1 "$OUT/gpu-tests.log")"
grep -E "FAILED|Error|assert" "$OUT/gpu-tests.log" | head -20
python3 benchmarks/bench_gpu.py "$@" --out-json "$OUT/bench-gpu.json" > "$OUT/bench.log" 2>&1
tail -30 "$OUT/bench.log"
