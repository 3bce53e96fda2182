#!/usr/bin/env bash
# [multi-gpu] on a lent machine with several GPUs, in one call: install from the carried wheelhouse, show the
# GPUs and how they are linked, the GPU cluster tests (a large join cut for every GPU worker, each on its own
# device), then bench_multigpu.py.  Logs and JSON go to $OUT; a table is printed last.
#   bash benchmarks/device_multigpu.sh [tests | bench | all] [bench_multigpu.py arguments...]
set -uo pipefail
# NVLink multicast stays off (the device documentation): daskjoin uses no NCCL, but keep the settings for
# anything that does
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}" TORCH_SYMM_MEM_DISABLE_MULTICAST="${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}" \
    NVSHMEM_DISABLE_NVLS="${NVSHMEM_DISABLE_NVLS:-1}"
source "$(dirname "$0")/device_setup.sh" pytest-timeout hypothesis
nvidia-smi --query-gpu=index,name,memory.total,pci.bus_id --format=csv,noheader
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
echo "cores $(nproc); $(free -g | awk '/Mem:/ {print "memory " $2 " GiB total, " $7 " available"}'); disk /tmp: $(df -h /tmp | awk 'NR==2 {print $4 " free"}')"
mode="${1:-all}"; shift || true
if [ "$mode" = tests ] || [ "$mode" = all ]; then
    timeout 400 python3 -m pytest -q -rs -p no:cacheprovider -m gpu --timeout=380 tests/test_gpu_cluster.py tests/test_query_shares.py \
        > "$OUT/multigpu-tests.log" 2>&1
    echo "multi-gpu tests: $(tail -1 "$OUT/multigpu-tests.log")"
    grep -E "^FAILED|^ERROR|^E |SKIPPED" "$OUT/multigpu-tests.log" | head -12
fi
[ "$mode" = tests ] && exit 0
timeout "${BENCH_TIMEOUT:-540}" python3 benchmarks/bench_multigpu.py --workdir /tmp/bench-multigpu \
    --out-json "$OUT/multigpu.json" "$@" > "$OUT/bench-multigpu.log" 2>&1
echo "bench rc=$?"
grep -v -i "warn" "$OUT/bench-multigpu.log" | grep -v "^{" | tail -22
