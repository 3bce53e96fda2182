#!/usr/bin/env bash
# [methods] on a lent GPU machine: the method GPU tests, then the method comparison (bench_methods.py).
#   bash benchmarks/device_methods.sh [tests|bench|all] [bench_methods.py arguments...]
#   TESTS_K="grid_options or method_options" picks the tests (pytest -k); BENCH_NAME names the bench's files.
set -uo pipefail
what="${1:-all}"; shift || true
source benchmarks/device_setup.sh pytest pytest-timeout hypothesis
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for cu in grid szl nlj directory; do nvcc -std=c++17 -arch=sm_90 -cubin -Xptxas -v -o /dev/null daskjoin/kernels/cuda/$cu.cu; done 2>&1 | grep -E "error|spill stores" | grep -v " 0 bytes spill stores"
if [[ "$what" == tests || "$what" == all ]]; then
    timeout 400 python3 -m pytest -q -p no:cacheprovider -m gpu --timeout=300 tests/test_gpu.py tests/test_kernel_registry.py tests/test_work_report.py \
        -k "${TESTS_K:-szl or nlj or directory or work or method_options or grid_options}" > "$OUT/tests-methods.log" 2>&1
    echo "tests rc=$?"; tail -3 "$OUT/tests-methods.log"; grep -E "^FAILED|Error" "$OUT/tests-methods.log" | head -20
fi
if [[ "$what" == bench || "$what" == all ]]; then
    name="${BENCH_NAME:-methods}"
    timeout "${BENCH_TIMEOUT:-420}" python3 benchmarks/bench_methods.py --backend gpu --out-json "$OUT/$name.json" "$@" 2>&1 \
        | tee "$OUT/$name.log" | tail -40
fi
