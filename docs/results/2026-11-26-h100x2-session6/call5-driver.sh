#!/usr/bin/env bash
# Call 5 (session 6): dispatch's receive items shared by whichever block is free (draw_item) and the automatic
# split in halves from 1024 tokens (candidate, the working tree) against main (.exp/main), both built here. The
# protocol's test files on the candidate first; then bench_graph at DeepSeek-V3 4096 / 1024 / 256 tokens, equal
# counts, automatic and forced splits; then counts drawn per rank at 4096, both trees.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o5; mkdir -p $O/bench
nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/driver.log
(timeout 150 bash tools/gpu_run.sh $O/cand_build build > $O/cand_build_driver.log 2>&1; echo "cand build rc=$?" >> $O/cand_build_driver.log) &
(cd .exp/main && timeout 150 bash tools/gpu_run.sh $O/main_build build > $O/main_build_driver.log 2>&1; echo "main build rc=$?" >> $O/main_build_driver.log) &
wait; log "$(tail -1 $O/cand_build_driver.log) / $(tail -1 $O/main_build_driver.log)"
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_round_order.py tests/python/gpu/test_fuzz.py tests/python/gpu/test_round_checks.py" \
  timeout 90 setsid bash tools/gpu_run.sh $O/tests tests > $O/tests_driver.log 2>&1; log "tests rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/tests/summary.txt $OUT/tests_summary.txt 2>/dev/null
p=29691
bench() {  # tree name send_sms shapes counts
  local t=$1 n=$2 s=$3 shapes=$4 counts=$5
  [ $((SECONDS - T0)) -gt 240 ] && { log "$n skipped (time)"; return; }
  (cd $t && PYTHONPATH=$PWD/python MOE_A2A_SEND_SMS=$s timeout 40 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts $counts --no-microbench --no-floor --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
L="256,8,7168,4096;256,8,7168,1024;256,8,7168,256"
bench . cand-auto auto "$L" max
bench .exp/main main-auto auto "$L" max
bench . cand-s66 66,auto "$L" max
bench . cand-s44 44,auto "$L" max
bench . cand-drawn auto "256,8,7168,4096" drawn
bench .exp/main main-drawn auto "256,8,7168,4096" drawn
bench . cand-s33 33,auto "$L" max
tar czf $OUT/o.tar.gz -C /tmp o5
log done
