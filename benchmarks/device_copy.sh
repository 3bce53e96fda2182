#!/usr/bin/env bash
# Device-to-host copies (kernels/host_copy.py) on a lent GPU machine in one call: the tests that use them,
# the kNN rows profile and bench_knn's 3-d workload, then bench_e2e (CLI count and Parquet, notebook);
# with _old/daskjoin present (an earlier copy of the package), its profile and e2e run beside, from /tmp
# so that the working tree is not imported first.   bash benchmarks/device_copy.sh
set -uo pipefail
source "$(dirname "$0")/device_setup.sh" pytest-timeout hypothesis
REPO=$(pwd)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -m pytest -q -p no:cacheprovider -m gpu --timeout=600 tests/test_host_copy.py tests/test_knn_gpu.py \
    > "$OUT/tests.log" 2>&1
echo "tests: $(tail -1 "$OUT/tests.log")"; grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
python3 benchmarks/profile_knn_gpu.py --n 2000000 --d 3 --method grid --out-json "$OUT/profile-3d.json" 2>&1 | tail -6
if [ -d _old/daskjoin ]; then
    echo "-- before:"
    (cd /tmp && PYTHONPATH="$REPO/_old" python3 "$REPO/benchmarks/profile_knn_gpu.py" --n 2000000 --d 3 --method grid \
        --out-json "$OUT/profile-3d-before.json" 2>&1 | tail -6)
fi
python3 benchmarks/bench_knn.py --workloads 3d --n 2000000 --backend gpu --repeat 2 --torch-rows 20000 \
    --out-json "$OUT/knn-3d.json" > "$OUT/knn.log" 2>&1; grep -vE "^\s*$" "$OUT/knn.log" | tail -8
python3 benchmarks/bench_e2e.py --n 20000000 --d 3 --nb-n 2000000 --nb-d 2 --skip-local-cluster \
    --out-json "$OUT/e2e.json" > "$OUT/e2e.log" 2>&1; tail -22 "$OUT/e2e.log"
if [ -d _old/daskjoin ]; then
    echo "-- before:"
    (cd /tmp && PYTHONPATH="$REPO/_old" python3 "$REPO/benchmarks/bench_e2e.py" --n 20000000 --d 3 --nb-n 2000000 \
        --nb-d 2 --skip-local-cluster --out-json "$OUT/e2e-before.json" > "$OUT/e2e-before.log" 2>&1; tail -22 "$OUT/e2e-before.log")
fi
