#!/usr/bin/env bash
# Call 1 (session 7): this rank's own rows read from x by dispatch's receive half (self_in_x; the
# candidate, the working tree, which also starts the multinode workers once per layout) against main
# (4c26a1a, .exp/main), and combine's receive units drawn (wip/combine-drawn, .exp/comb), all built here.
# The protocol's test files and test_multinode on the candidate; then bench_graph: DeepSeek-V3 4096 / 1024 /
# 256 tokens equal counts (auto and dispatch senders 33 / 44), the small shapes with counts drawn, combine's
# forced split with and without drawn units.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o1; mkdir -p $O/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
(timeout 170 bash tools/gpu_run.sh $O/cand_build build > $O/cand_build_driver.log 2>&1; echo "cand build rc=$?" >> $O/cand_build_driver.log) &
(cd .exp/main && timeout 170 bash tools/gpu_run.sh $O/main_build build > $O/main_build_driver.log 2>&1; echo "main build rc=$?" >> $O/main_build_driver.log) &
(cd .exp/comb && timeout 170 bash tools/gpu_run.sh $O/comb_build build > $O/comb_build_driver.log 2>&1; echo "comb build rc=$?" >> $O/comb_build_driver.log) &
wait; log "$(tail -1 $O/cand_build_driver.log) / $(tail -1 $O/main_build_driver.log) / $(tail -1 $O/comb_build_driver.log)"
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_round_order.py tests/python/gpu/test_fuzz.py tests/python/gpu/test_round_checks.py tests/python/gpu/test_fp8.py tests/python/gpu/test_autograd.py tests/python/gpu/test_multinode.py" \
  timeout 200 setsid bash tools/gpu_run.sh $O/tests tests --durations=15 > $O/tests_driver.log 2>&1; log "tests rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/tests/summary.txt $OUT/tests_summary.txt 2>/dev/null
p=29611
bench() {  # tree name send_sms shapes counts
  local t=$1 n=$2 s=$3 shapes=$4 counts=$5
  [ $((SECONDS - T0)) -gt 500 ] && { log "$n skipped (time)"; return; }
  (cd $t && PYTHONPATH=$PWD/python MOE_A2A_SEND_SMS=$s timeout 40 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts $counts --no-microbench --no-floor --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
L="256,8,7168,4096;256,8,7168,1024;256,8,7168,256"
S="8,2,6144,16;64,6,2048,32;128,8,4096,256;256,8,7168,256"
bench . cand-auto auto "$L" max
bench .exp/main main-auto auto "$L" max
bench . cand-s44 44,auto "$L" max
bench . cand-s33 33,auto "$L" max
bench . cand-small auto "$S" drawn
bench .exp/main main-small auto "$S" drawn
bench . cand-drawn4096 auto "256,8,7168,4096" drawn
bench .exp/main main-drawn4096 auto "256,8,7168,4096" drawn
bench .exp/comb comb-c66 auto,66 "256,8,7168,4096;256,8,7168,1024" max
bench .exp/main main-c66 auto,66 "256,8,7168,4096;256,8,7168,1024" max
bench .exp/comb comb-c99 auto,99 "256,8,7168,4096;256,8,7168,1024" max
bench . cand-one auto "256,8,7168,1;256,8,7168,128" max
bench .exp/main main-one auto "256,8,7168,1;256,8,7168,128" max
tar czf $OUT/o.tar.gz -C /tmp o1
log done
