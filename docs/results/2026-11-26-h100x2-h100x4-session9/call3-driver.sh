#!/usr/bin/env bash
# Call 3 (session 9): the candidate (the working tree: weight gradients signalled per token group, combine's
# set_position refactor) against main (bf42128, .exp/main, with the candidate's bench_moe_layer.py and
# common.py for --counts), both built here. bench_moe_layer alternating cand, main, cand, main (every rank T,
# and counts drawn per rank); then bench_graph (forward d+c) on both: DeepSeek-V3 1 / 128 / 256 / 1024 / 4096
# tokens and the challenge shapes with counts drawn, the floor measured in the candidate's runs.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o3; mkdir -p $O/layer $O/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 150 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . cand & build .exp/main main &
wait; for n in cand main; do log "$(tail -1 $O/${n}_build_driver.log)"; done
p=29681
layer() {  # tree name
  local t=$1 n=$2
  (cd $t && PYTHONPATH=$PWD/python timeout 70 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_moe_layer.py \
    --tokens 128,512,2048 --counts "max;drawn" --iters 30 --phases dispatch,combine,combine-bwd,combine-bwd-y \
    --out $O/layer/$n > $O/layer/$n.log 2>&1); log "layer $n rc=$?"; p=$((p+1))
  pkill -f torchrun
}
layer . cand1; layer .exp/main main1; layer . cand2; layer .exp/main main2
bench() {  # tree name shapes counts [extra]
  local t=$1 n=$2 shapes=$3 counts=$4; shift 4
  [ $((SECONDS - T0)) -gt 500 ] && { log "$n skipped (time)"; return; }
  (cd $t && PYTHONPATH=$PWD/python timeout 50 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts "$counts" --no-microbench "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
L="256,8,7168,1;256,8,7168,128;256,8,7168,256;256,8,7168,1024;256,8,7168,4096"
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256"
bench . cand-equal "$L" max
bench .exp/main main-equal "$L" max --no-floor
bench . cand-small "$S" drawn
bench .exp/main main-small "$S" drawn --no-floor
tar czf $OUT/o.tar.gz -C /tmp o3
log done
