#!/usr/bin/env bash
# Call 5 (session 8): the final tree (9853184) against main (cfb9c4b, .exp/main), both built here:
# bench_moe_layer at 128 / 512 / 2048 tokens, candidate, main, candidate.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o5; mkdir -p $O/layer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 150 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . cand & build .exp/main main &
wait; for n in cand main; do log "$(tail -1 $O/${n}_build_driver.log)"; done
p=29681
layer() {  # tree name
  local t=$1 n=$2
  [ $((SECONDS - T0)) -gt 190 ] && { log "layer $n skipped (time)"; return; }
  (cd $t && PYTHONPATH=$PWD/python timeout 40 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 128,512,2048 --iters 30 \
    --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y --out $O/layer/$n > $O/layer/$n.log 2>&1); log "layer $n rc=$?"; p=$((p+1))
  pkill -f torchrun
}
layer . cand; layer .exp/main main; layer . cand2
cp $O/layer/*.log $OUT/ 2>/dev/null
log done
