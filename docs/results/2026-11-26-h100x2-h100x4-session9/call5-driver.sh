#!/usr/bin/env bash
# Call 5 (session 9), 4 x H100: combine's batches starting at rank (me + 1 + u) % world (the working tree)
# against the same tree without it (eec6e21, .exp/base), both built here. World 4: bench_graph at DeepSeek-V3
# 128 / 4096 tokens, bench_moe_layer's dispatch, combine and backward of dispatch at 2048 tokens. World 2 on
# GPUs 0 and 1: bench_graph at DeepSeek-V3 128 / 1024 / 4096 tokens and the challenge shapes with counts drawn.
# Then the whole GPU suite at world 4 on the candidate, as far as the call's time allows.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o5; mkdir -p $O/bench $O/layer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 150 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . cand & build .exp/base base &
wait; for n in cand base; do log "$(tail -1 $O/${n}_build_driver.log)"; done
p=29681
graph() {  # tree name nproc shapes counts
  local t=$1 n=$2 np=$3 shapes=$4 counts=$5 vis=0,1,2,3
  [ $np = 2 ] && vis=0,1
  (cd $t && CUDA_VISIBLE_DEVICES=$vis PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=$np \
    benchmarks/bench_graph.py --shapes "$shapes" --counts "$counts" --no-microbench --no-floor --out $O/bench/$n \
    > $O/bench/$n.log 2>&1); log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
layer() {  # tree name
  (cd $1 && PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=4 benchmarks/bench_moe_layer.py \
    --tokens 2048 --iters 30 --phases dispatch,combine,dispatch-bwd --no-floor --out $O/layer/$2 > $O/layer/$2.log 2>&1)
  log "layer $2 rc=$?"; p=$((p+1)); pkill -f torchrun
}
L4="256,8,7168,128;256,8,7168,4096"
graph . w4-cand 4 "$L4" max; graph .exp/base w4-base 4 "$L4" max
layer . w4-cand; layer .exp/base w4-base
L2="256,8,7168,128;256,8,7168,1024;256,8,7168,4096"
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256"
graph . w2-cand 2 "$L2" max; graph .exp/base w2-base 2 "$L2" max
graph . w2s-cand 2 "$S" drawn; graph .exp/base w2s-base 2 "$S" drawn
tar czf $OUT/o.tar.gz -C /tmp o5
left=$((400 - (SECONDS - T0)))
log "suite, $left s left"
[ $left -gt 60 ] && { timeout $left setsid bash tools/gpu_run.sh $O/suite tests --durations=15 > $O/suite_driver.log 2>&1; log "suite rc=$?"; }
pkill -f torchrun; pkill -f pytest
grep -E "^-- |^   " $O/suite/summary.txt | tee -a $OUT/driver.log
tail -3 $O/suite/gpu_tests.log >> $OUT/driver.log 2>/dev/null
tar czf $OUT/o.tar.gz -C /tmp o5
log done
