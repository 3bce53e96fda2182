#!/usr/bin/env bash
# The kNN brute force's tensor-core filter on a lent GPU machine in one call: compile check, the gpu-marked
# tests of the filter (and of the ε brute force, whose candidate loop it shares), the filters side by side
# (bench_knn_filters.py), then bench_knn's 64-d workload (auto) against torch.
#   bash benchmarks/device_knn_tc.sh [quick]
set -uo pipefail
source "$(dirname "$0")/device_setup.sh" pytest-timeout hypothesis
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for f in knn brute; do
    nvcc -std=c++17 -arch=sm_90 -cubin -Xptxas -v -o /dev/null daskjoin/kernels/cuda/$f.cu 2>&1 | grep -E "error" | head -5
done
python3 -m pytest -q -p no:cacheprovider -m gpu --timeout=900 -x tests/test_knn_tc_gpu.py > "$OUT/tc-tests.log" 2>&1
echo "knn tc tests: $(tail -1 "$OUT/tc-tests.log")"; grep -E "^FAILED|^ERROR|Error" "$OUT/tc-tests.log" | head -8
[ "${1:-}" = quick ] && exit 0
if [ "${1:-}" = profile ]; then
    for n in 200000 1000000; do
        python3 benchmarks/profile_knn_tc.py --n $n --d 64 --filter fp16 --out-json "$OUT/profile-tc-$n.json" 2>&1 | tail -7
    done
    python3 benchmarks/bench_knn_filters.py --n 200000 --dims 16,32,64,128,256 --repeat 1 \
        --out-json "$OUT/filters-200k.json" 2>&1 | tail -15
    python3 benchmarks/bench_knn_filters.py --n 1000000 --dims 32,64 --filters fp32,fp16,int8 --repeat 1 \
        --out-json "$OUT/filters-1m.json" 2>&1 | tail -6
    python3 benchmarks/bench_knn.py --workloads 64d --n64 1000000 --backend gpu --repeat 1 --torch-rows 100000 \
        --out-json "$OUT/knn-64d.json" > "$OUT/bench.log" 2>&1; grep -vE "^\s*$" "$OUT/bench.log" | tail -5
    exit 0
fi
python3 -m pytest -q -p no:cacheprovider -m gpu --timeout=900 tests/test_knn_gpu.py tests/test_brute_tc_gpu.py \
    tests/test_host_copy.py > "$OUT/tests.log" 2>&1
echo "knn + brute tc tests: $(tail -1 "$OUT/tests.log")"; grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head -8
python3 benchmarks/bench_knn_filters.py --n 200000 --dims 8,16,32,64,128,256 --repeat 2 \
    --out-json "$OUT/filters-200k.json" 2>&1 | tail -20
python3 benchmarks/bench_knn_filters.py --n 1000000 --dims 64 --repeat 1 --out-json "$OUT/filters-1m.json" 2>&1 | tail -4
python3 benchmarks/bench_knn.py --workloads 64d --n64 1000000 --backend gpu --repeat 1 --torch-rows 100000 \
    --out-json "$OUT/knn-64d.json" > "$OUT/bench.log" 2>&1; grep -vE "^\s*$" "$OUT/bench.log" | tail -8
