#!/usr/bin/env bash
# Call 1 (session 8): combine units in parts at large batches (the working tree: 4 parts from 16 tokens a
# group; .exp/p7: 7 parts from 8; .exp/p2: 2 parts from 16) against main (cfb9c4b, .exp/main), all built
# here: bench_graph at DeepSeek-V3 1024 / 2048 / 4096 tokens, counts max and drawn, the floor in the
# candidate's run. Then test_all_to_all on the candidate, and test_all_to_all + test_round_order on
# wip/combine-set-position (.exp/sp).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o1; mkdir -p $O/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 200 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . cand & build .exp/main main & build .exp/p7 p7 & build .exp/p2 p2 & build .exp/sp sp &
wait; for n in cand main p7 p2 sp; do log "$(tail -1 $O/${n}_build_driver.log)"; done
p=29641
bench() {  # tree name send_sms shapes counts [extra]
  local t=$1 n=$2 s=$3 shapes=$4 counts=$5; shift 5
  [ $((SECONDS - T0)) -gt 480 ] && { log "$n skipped (time)"; return; }
  (cd $t && PYTHONPATH=$PWD/python MOE_A2A_SEND_SMS=$s timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts "$counts" --no-microbench "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
L="256,8,7168,4096;256,8,7168,2048;256,8,7168,1024"
bench . cand auto "$L" "max;drawn"
bench .exp/main main auto "$L" "max;drawn" --no-floor
bench .exp/p7 p7 auto "$L" "max;drawn" --no-floor
bench .exp/p2 p2 auto "$L" "max;drawn" --no-floor
bench .exp/main main2 auto "256,8,7168,4096" "max" --no-floor
GPU_TESTS="tests/python/gpu/test_all_to_all.py" timeout 120 setsid bash tools/gpu_run.sh $O/cand_tests tests > $O/cand_tests_driver.log 2>&1; log "cand tests rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/cand_tests/summary.txt $OUT/cand_tests_summary.txt 2>/dev/null
(cd .exp/sp && GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_round_order.py" timeout 120 setsid bash tools/gpu_run.sh $O/sp_tests tests > $O/sp_tests_driver.log 2>&1); log "sp tests rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/sp_tests/summary.txt $OUT/sp_tests_summary.txt 2>/dev/null
cp $O/bench/*.log $OUT/ 2>/dev/null
tar czf $OUT/o.tar.gz -C /tmp o1
log done
