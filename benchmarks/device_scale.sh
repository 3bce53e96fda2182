#!/usr/bin/env bash
# [scale] on a lent GPU machine in one call: install from the carried wheelhouse, the GPU tests of
# out-of-memory retries and GPU clusters (two workers on one device, GPU + CPU workers, LocalCUDACluster),
# then bench_scale.py (20M x 3-d to Parquet under memory budgets).  Logs and JSON go to $OUT.
#   bash benchmarks/device_scale.sh [tests | bench | all] [bench_scale.py arguments...]
set -uo pipefail
source "$(dirname "$0")/device_setup.sh" pytest-timeout hypothesis
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
mode="${1:-all}"; shift || true
if [ "$mode" = tests ] || [ "$mode" = all ]; then
    timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu --timeout=280 tests/test_memory_retry.py \
        tests/test_gpu_cluster.py > "$OUT/scale-tests.log" 2>&1
    echo "scale gpu tests: $(tail -1 "$OUT/scale-tests.log")"
    grep -E "^FAILED|^ERROR|^E " "$OUT/scale-tests.log" | head -12
fi
[ "$mode" = tests ] && exit 0
timeout "${BENCH_TIMEOUT:-420}" python3 benchmarks/bench_scale.py --workdir /tmp/bench-scale --out-json "$OUT/scale.json" "$@" \
    > "$OUT/bench-scale.log" 2>&1
echo "bench rc=$?"
grep -v "^{" "$OUT/bench-scale.log" | grep -v -i "warn" | tail -14
