#!/usr/bin/env bash
# Every gpu-marked test on a lent GPU machine, in parallel shards (one GPU, many host cores):
# the set-join GPU tests alone take over 3 minutes in one process.  Logs go to $OUT.
#   bash benchmarks/device_gpu_tests.sh
set -uo pipefail
OUT="${OUT:-device-out}"
mkdir -p "$OUT"
python3 -m pip install -q --no-index --find-links .wheelhouse --no-build-isolation -e '.[gpu-rmm]' SetSimilaritySearch pytest pytest-timeout hypothesis \
    > "$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for cu in daskjoin/kernels/cuda/*.cu; do
    nvcc -std=c++17 -arch=sm_90 -cubin -Xptxas -v -o /dev/null "$cu" 2>&1 | grep -E "error|spill stores" \
        | grep -v " 0 bytes spill stores" | sed "s|^|$(basename "$cu"): |"
done
shard() {  # name, pytest arguments...
    local name=$1; shift
    python3 -m pytest -q -p no:cacheprovider -m gpu --timeout=600 "$@" > "$OUT/tests-$name.log" 2>&1
}
# in the background, on a machine of several GPUs the k-th on GPU k mod their count ("all": every GPU)
ngpus=$(nvidia-smi -L | wc -l); [ "$ngpus" -gt 0 ] || ngpus=1
pids=(); next=0
launch() {  # gpus ("one" or "all"), name, pytest arguments...
    local which=$1; shift
    if [ "$which" = all ] || [ "$ngpus" -eq 1 ]; then shard "$@" & else CUDA_VISIBLE_DEVICES=$((next % ngpus)) shard "$@" & fi
    pids+=($!); next=$((next + 1))
}
sets=tests/test_set_join.py
launch one ann tests/test_gpu.py tests/test_overhead.py tests/test_set_groups.py tests/test_cuda_sources.py -k "not method_options"
launch one options tests/test_gpu.py tests/test_gpu_ids.py -k "method_options or gpu_ids"
launch one registry tests/test_kernel_registry.py tests/test_knn_gpu.py tests/test_host_copy.py tests/test_host_pool.py tests/test_work_report.py tests/test_brute_tc_gpu.py
launch one knn-tc tests/test_knn_tc_gpu.py tests/test_pivot_chain.py
launch all clusters tests/test_gpu_cluster.py tests/test_memory_retry.py tests/test_query_shares.py -k "not rmm_pool"
launch one sets-block "$sets" -k "block"
launch one sets-thread "$sets" -k "thread"
launch one sets-path "$sets" -k "intersect_path"
launch one sets-default "$sets" -k "not block and not thread and not intersect_path"
rc=0
for pid in "${pids[@]}"; do
    wait "$pid" || rc=1
done
# alone: it asks for an RMM pool of 90% of the device, which the other shards' memory would refuse
shard rmm-pool tests/test_gpu_cluster.py -k "rmm_pool" || rc=1
for log in "$OUT"/tests-*.log; do
    echo "$(basename "$log" .log): $(tail -1 "$log")"
    grep -E "^FAILED|^ERROR" "$log" | head -5 || true
done
exit "$rc"
