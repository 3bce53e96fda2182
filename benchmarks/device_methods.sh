#!/usr/bin/env bash
# [methods] on a lent GPU machine: the szl/method GPU tests, then the method comparison (bench_methods.py).
#   bash benchmarks/device_methods.sh [tests|bench|all] [bench_methods.py arguments...]
set -uo pipefail
what="${1:-all}"; shift || true
source benchmarks/device_setup.sh pytest pytest-timeout hypothesis
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for cu in szl nlj directory; do nvcc -std=c++17 -arch=sm_90 -cubin -Xptxas -v -o /dev/null daskjoin/kernels/cuda/$cu.cu; done 2>&1 | grep -E "error|spill stores" | grep -v " 0 bytes spill stores"
if [[ "$what" == tests || "$what" == all ]]; then
    timeout 400 python3 -m pytest -q -p no:cacheprovider -m gpu --timeout=300 tests/test_gpu.py tests/test_kernel_registry.py tests/test_work_report.py \
        -k "szl or nlj or directory or work" > "$OUT/tests-szl.log" 2>&1
    echo "tests rc=$?"; tail -3 "$OUT/tests-szl.log"; grep -E "^FAILED|Error" "$OUT/tests-szl.log" | head -20
fi
if [[ "$what" == bench || "$what" == all ]]; then
    timeout 420 python3 benchmarks/bench_methods.py --backend gpu --out-json "$OUT/methods.json" "$@" 2>&1 | tee "$OUT/methods.log" | tail -40
fi
