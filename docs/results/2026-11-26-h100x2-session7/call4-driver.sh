#!/usr/bin/env bash
# Call 4 (session 7): the candidate of call 3 with the backward of combine reading this rank's own
# gradients from grad_out (the working tree) against main (4c26a1a, .exp/main), both built here. The
# whole GPU suite on the candidate; bench_moe_layer on both (128 / 512 / 2048 tokens, every forward and
# backward phase); fp8 dispatch at 4096 tokens with dispatch's blocks split in halves (auto), every
# block both (0) and 33 senders, on both trees.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o4; mkdir -p $O/bench $O/layer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
(timeout 200 bash tools/gpu_run.sh $O/cand_build build > $O/cand_build_driver.log 2>&1; echo "cand build rc=$?" >> $O/cand_build_driver.log) &
(cd .exp/main && timeout 200 bash tools/gpu_run.sh $O/main_build build > $O/main_build_driver.log 2>&1; echo "main build rc=$?" >> $O/main_build_driver.log) &
wait; log "$(tail -1 $O/cand_build_driver.log) / $(tail -1 $O/main_build_driver.log)"
timeout 230 setsid bash tools/gpu_run.sh $O/suite tests --durations=20 > $O/suite_driver.log 2>&1; log "suite rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/suite/summary.txt $OUT/suite_summary.txt 2>/dev/null
p=29651
for t in . .exp/main; do n=$( [ $t = . ] && echo cand || echo main )
  [ $((SECONDS - T0)) -gt 430 ] && { log "layer $n skipped (time)"; continue; }
  (cd $t && PYTHONPATH=$PWD/python timeout 70 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 128,512,2048 --iters 30 \
    --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y --out $O/layer/$n > $O/layer/$n.log 2>&1); log "layer $n rc=$?"; p=$((p+1))
  pkill -f torchrun
done
bench() {  # tree name send_sms
  local t=$1 n=$2 s=$3
  [ $((SECONDS - T0)) -gt 500 ] && { log "$n skipped (time)"; return; }
  (cd $t && PYTHONPATH=$PWD/python MOE_A2A_SEND_SMS=$s timeout 40 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "256,8,7168,4096" --counts max --fp8 e4m3fn --no-microbench --no-floor --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
bench . cand-fp8-auto auto
bench .exp/main main-fp8-auto auto
bench . cand-fp8-d0 0,auto
bench . cand-fp8-d33 33,auto
tar czf $OUT/o.tar.gz -C /tmp o4
log done
