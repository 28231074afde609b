#!/usr/bin/env bash
# Call 2 (session 8): the backward of combine with tasks (slot, part) over a row's local experts (the
# working tree: 2 y chunks in flight; .exp/bwd4: 4) against main (cfb9c4b, .exp/main): bench_moe_layer
# at 128 / 512 / 2048 tokens; the gradient tests on the candidate; then combine in parts at 4096 tokens
# (.exp/pipe) against main again, alternating.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o2; mkdir -p $O/bench $O/layer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 200 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . cand & build .exp/main main & build .exp/bwd4 bwd4 & build .exp/pipe pipe &
wait; for n in cand main bwd4 pipe; do log "$(tail -1 $O/${n}_build_driver.log)"; done
p=29651
layer() {  # tree name
  local t=$1 n=$2
  [ $((SECONDS - T0)) -gt 430 ] && { log "layer $n skipped (time)"; return; }
  (cd $t && PYTHONPATH=$PWD/python timeout 70 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 128,512,2048 --iters 30 \
    --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y --out $O/layer/$n > $O/layer/$n.log 2>&1); log "layer $n rc=$?"; p=$((p+1))
  pkill -f torchrun
}
layer . cand; layer .exp/main main; layer .exp/bwd4 bwd4
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py tests/python/gpu/test_fuzz.py" timeout 150 setsid bash tools/gpu_run.sh $O/cand_tests tests > $O/cand_tests_driver.log 2>&1; log "cand tests rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/cand_tests/summary.txt $OUT/cand_tests_summary.txt 2>/dev/null
bench() {  # tree name shapes counts [extra]
  local t=$1 n=$2 shapes=$3 counts=$4; shift 4
  [ $((SECONDS - T0)) -gt 520 ] && { log "$n skipped (time)"; return; }
  (cd $t && PYTHONPATH=$PWD/python timeout 45 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts "$counts" --no-microbench --no-floor "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
bench .exp/pipe pipe1 "256,8,7168,4096" "max;drawn"
bench .exp/main main1 "256,8,7168,4096" "max;drawn"
bench .exp/pipe pipe2 "256,8,7168,4096" "max;drawn"
bench .exp/main main2 "256,8,7168,4096" "max;drawn"
cp $O/layer/*.log $O/bench/*.log $OUT/ 2>/dev/null
tar czf $OUT/o.tar.gz -C /tmp o2
log done
