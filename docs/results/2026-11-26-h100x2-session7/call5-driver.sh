#!/usr/bin/env bash
# Call 5 (session 7): dispatch that quantizes into fp8 no longer splits in halves from 1024 tokens (the
# working tree). fp8 and the protocol's main test file on it; then bench_graph with fp8 e4m3fn at
# DeepSeek-V3 4096 and 1024 tokens, the new automatic choice and dispatch forced into halves (66 senders).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o5; mkdir -p $O/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
timeout 150 bash tools/gpu_run.sh $O/cand_build build > $O/cand_build_driver.log 2>&1; log "cand build rc=$?"
GPU_TESTS="tests/python/gpu/test_fp8.py tests/python/gpu/test_all_to_all.py" \
  timeout 110 setsid bash tools/gpu_run.sh $O/tests tests > $O/tests_driver.log 2>&1; log "tests rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/tests/summary.txt $OUT/tests_summary.txt 2>/dev/null
p=29671
bench() {  # name send_sms
  [ $((SECONDS - T0)) -gt 230 ] && { log "$1 skipped (time)"; return; }
  PYTHONPATH=$PWD/python MOE_A2A_SEND_SMS=$2 timeout 35 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "256,8,7168,4096;256,8,7168,1024" --counts max --fp8 e4m3fn --no-microbench --no-floor --out $O/bench/$1 > $O/bench/$1.log 2>&1
  log "$1 rc=$?"; p=$((p+1)); pkill -f torchrun
}
bench cand-fp8-auto auto
bench cand-fp8-d66 66,auto
tar czf $OUT/o.tar.gz -C /tmp o5
log done
