#!/usr/bin/env bash
# Call 3 (session 8): the backward of combine with its own rows answered while the group is sent (the
# working tree: half the waves send, the others answer; .exp/s2: a quarter send), against the row tasks
# alone (.exp/bwd4, 4 y chunks in flight) and main (cfb9c4b, .exp/main): bench_moe_layer at 128 / 512 /
# 2048 tokens, twice for the candidate and main; the gradient tests on the candidate.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o3; mkdir -p $O/layer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 200 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . cand & build .exp/main main & build .exp/bwd4 bwd4 & build .exp/s2 s2 &
wait; for n in cand main bwd4 s2; do log "$(tail -1 $O/${n}_build_driver.log)"; done
p=29661
layer() {  # tree name
  local t=$1 n=$2
  [ $((SECONDS - T0)) -gt 400 ] && { log "layer $n skipped (time)"; return; }
  (cd $t && PYTHONPATH=$PWD/python timeout 70 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 128,512,2048 --iters 30 \
    --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y --out $O/layer/$n > $O/layer/$n.log 2>&1); log "layer $n rc=$?"; p=$((p+1))
  pkill -f torchrun
}
layer . cand; layer .exp/main main; layer .exp/bwd4 bwd4; layer .exp/s2 s2; layer . cand2; layer .exp/main main2
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py tests/python/gpu/test_fuzz.py" timeout 150 setsid bash tools/gpu_run.sh $O/cand_tests tests > $O/cand_tests_driver.log 2>&1; log "cand tests rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/cand_tests/summary.txt $OUT/cand_tests_summary.txt 2>/dev/null
cp $O/layer/*.log $OUT/ 2>/dev/null
tar czf $OUT/o.tar.gz -C /tmp o3
log done
