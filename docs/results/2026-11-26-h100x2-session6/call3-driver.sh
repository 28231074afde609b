#!/usr/bin/env bash
# Call 3 (session 6): dispatch's sending blocks announce each group after routing the next (candidate, the working
# tree) against main (.exp/main), both built here. bench_graph at DeepSeek-V3 T=4096 and 1024, equal counts, for
# several dispatch sender counts (groups per block 1), alternating trees; then the protocol's test files on the
# candidate.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o3; mkdir -p $O/bench
nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/driver.log
(timeout 200 bash tools/gpu_run.sh $O/cand_build build > $O/cand_build_driver.log 2>&1; echo "cand build rc=$?" >> $O/cand_build_driver.log) &
(cd .exp/main && timeout 200 bash tools/gpu_run.sh $O/main_build build > $O/main_build_driver.log 2>&1; echo "main build rc=$?" >> $O/main_build_driver.log) &
wait; log "$(tail -1 $O/cand_build_driver.log) / $(tail -1 $O/main_build_driver.log)"
p=29661
bench() {  # tree name send_sms [extra]
  local t=$1 n=$2 s=$3; shift 3
  (cd $t && PYTHONPATH=$PWD/python MOE_A2A_SEND_SMS=$s timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "256,8,7168,4096;256,8,7168,1024" --counts max --no-microbench "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
bench . cand-auto auto
bench .exp/main main-auto auto --no-floor
bench . cand-s33 33,auto --no-floor
bench .exp/main main-s33 33,auto --no-floor
bench . cand-s16 16,auto --no-floor
bench . cand-s24 24,auto --no-floor
bench . cand-s44 44,auto --no-floor
bench . cand-s66 66,auto --no-floor
bench .exp/main main-s66 66,auto --no-floor
bench . cand-auto2 auto --no-floor
left=$((560 - (SECONDS - T0)))
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_round_order.py tests/python/gpu/test_fuzz.py tests/python/gpu/test_round_checks.py" \
  timeout $left setsid bash tools/gpu_run.sh $O/tests tests > $O/tests_driver.log 2>&1; log "tests rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/tests/summary.txt $OUT/tests_summary.txt 2>/dev/null
tar czf $OUT/o.tar.gz -C /tmp o3
log done
