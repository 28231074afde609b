#!/usr/bin/env bash
# Call 3 (session 10): main a8165ce's kernels with test_fp8's new large-batch test. fp8 e4m3fn dispatch against
# bf16 at DeepSeek-V3 1024 / 4096 tokens with 1, 2 and 4 token groups a block (MOE_A2A_GROUPS_PER_BLOCK:
# every block both sends and receives, so more groups interleave sends with receives); then the whole GPU
# suite twice in a row (GPU_TEST_RUNS=2).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o3; mkdir -p $O/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
timeout 200 bash tools/gpu_run.sh $O/build build > $O/build_driver.log 2>&1; log "build rc=$?"
p=29681
for g in 1 2 4; do
  MOE_A2A_GROUPS_PER_BLOCK=$g timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "256,8,7168,1024;256,8,7168,4096" --counts max --no-microbench --no-floor --fp8 e4m3fn \
    --out $O/bench/gpb$g > $O/bench/gpb$g.log 2>&1
  log "gpb $g rc=$?"; p=$((p+1)); pkill -f torchrun
done
tar czf $OUT/o.tar.gz -C /tmp o3
GPU_TEST_RUNS=2 timeout $((590 - SECONDS + T0)) bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1; log "suite rc=$?"
cp $O/suite/summary.txt $OUT/suite_summary.txt
tar czf $OUT/o.tar.gz -C /tmp o3
log done
