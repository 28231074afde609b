#!/usr/bin/env bash
# Call 1 (session 9): candidate (weight gradients signalled per token group + combine's set_position
# refactor) against main (bf42128, .exp/main; its bench_moe_layer.py and common.py replaced by the
# candidate's, for --counts), both built here: bench_moe_layer cand, main, cand; then the whole GPU
# suite once on the candidate.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=$OUT; mkdir -p $O/layer
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
layer . cand; layer .exp/main main; layer . cand2
log "suite"
timeout 330 setsid bash tools/gpu_run.sh $O/suite tests --durations=15 > $O/suite_driver.log 2>&1; log "suite rc=$?"
tail -5 $O/suite/summary.txt | tee -a $OUT/driver.log
log done
