#!/usr/bin/env bash
# The kNN-join on a lent GPU machine in one call: install from the carried wheelhouse, compile-check
# cuda/knn.cu, the gpu-marked kNN tests, the GPU profile of both drivers, then bench_knn.py.
# Logs and JSON go to $OUT.   bash benchmarks/device_knn.sh [quick | methods [ROWS] | crossover]
set -uo pipefail
source "$(dirname "$0")/device_setup.sh" pytest-timeout hypothesis
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nvcc -std=c++17 -arch=sm_90 -cubin -Xptxas -v -o /dev/null daskjoin/kernels/cuda/knn.cu 2>&1 \
    | grep -E "error|Compiling|registers" | paste - - | sed -E 's/ptxas info *: //g'
python3 -m pytest -q -p no:cacheprovider -m gpu --timeout=600 tests/test_knn_gpu.py \
    tests/test_kernel_registry.py -k "knn or Knn" > "$OUT/knn-gpu-tests.log" 2>&1
echo "knn gpu tests: $(tail -1 "$OUT/knn-gpu-tests.log")"
grep -E "^FAILED|^ERROR" "$OUT/knn-gpu-tests.log" | head -10
[ "${1:-}" = quick ] && exit 0
if [ "${1:-}" = methods ]; then
    python3 benchmarks/bench_knn.py --workloads methods --methods-n "${2:-200000}" --backend gpu --repeat 1 \
        --out-json "$OUT/knn-methods.json" > "$OUT/methods.log" 2>&1; tail -7 "$OUT/methods.log"
    exit 0
fi
python3 benchmarks/profile_knn_gpu.py --n 2000000 --d 3 --method grid --out-json "$OUT/profile-3d.json" 2>&1 | tail -8
python3 benchmarks/profile_knn_gpu.py --n 1000000 --d 64 --method brute --repeat 1 --out-json "$OUT/profile-64d.json" 2>&1 | tail -8
if [ "${1:-}" = crossover ]; then
    python3 benchmarks/bench_knn.py --workloads gemm-crossover --crossover-n 200000 --backend gpu --repeat 1 \
        --out-json "$OUT/knn-crossover.json" > "$OUT/crossover.log" 2>&1; tail -9 "$OUT/crossover.log"
fi
python3 benchmarks/bench_knn.py --workloads 64d,3d,bigk --n 2000000 --n64 1000000 --backend gpu --repeat 2 \
    --torch-rows 100000 --out-json "$OUT/knn-gpu.json" > "$OUT/bench.log" 2>&1; grep -vE "^\s*$" "$OUT/bench.log" | tail -22
