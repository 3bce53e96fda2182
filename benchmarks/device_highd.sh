#!/usr/bin/env bash
# [highd] on a lent GPU machine in one call: install from the carried wheelhouse, compile-check
# cuda/brute_tc.cu, the tensor-core and brute GPU tests, then bench_highd.py (FaSTED beside it when
# .peers/FaSTED/source/release/main was built and carried).  Logs and JSON go to $OUT.
#   bash benchmarks/device_highd.sh [tests | quick (tests + short bench) | bench (short bench) | full] [bench_highd.py arguments...]
set -uo pipefail
source "$(dirname "$0")/device_setup.sh" pytest-timeout hypothesis
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
nvcc -std=c++17 -arch=sm_90 -cubin -Xptxas -v -o /dev/null daskjoin/kernels/cuda/brute_tc.cu 2>&1 \
    | grep -E "error|Compiling|registers" | paste - - | sed -E 's/ptxas info *: //g'
mode="${1:-quick}"; shift || true
if [ "$mode" = tests ] || [ "$mode" = quick ]; then
    python3 -m pytest -q -p no:cacheprovider -m gpu --timeout=600 tests/test_brute_tc_gpu.py \
        "tests/test_gpu.py" -k "tensor or filter or brute" > "$OUT/tc-tests.log" 2>&1
    echo "tc + brute gpu tests: $(tail -1 "$OUT/tc-tests.log")"
    grep -E "^FAILED|^ERROR|Error" "$OUT/tc-tests.log" | head -12
fi
[ "$mode" = tests ] && exit 0
FASTED=.peers/FaSTED/source/release/main
extra=(); [ -x "$FASTED" ] && extra=(--fasted "$FASTED")
if [ "$mode" = quick ] || [ "$mode" = bench ]; then
    python3 benchmarks/bench_highd.py --workloads expo,emb512 --scale 0.2 --repeat 2 "${extra[@]}" "$@" \
        --out-json "$OUT/highd-quick.json" > "$OUT/bench-quick.log" 2>&1
    tail -6 "$OUT/bench-quick.log"
    python3 benchmarks/bench_highd.py --workloads expo --filters int8,fp16 --skip-torch --repeat 2 "${extra[@]}" "$@" \
        --out-json "$OUT/highd-expo.json" > "$OUT/bench-expo.log" 2>&1
    tail -4 "$OUT/bench-expo.log"
    exit 0
fi
python3 benchmarks/bench_highd.py "${extra[@]}" "$@" --out-json "$OUT/highd.json" > "$OUT/bench.log" 2>&1
tail -12 "$OUT/bench.log"
