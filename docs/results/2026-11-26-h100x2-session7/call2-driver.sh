#!/usr/bin/env bash
# Call 2 (session 7): own rows direct from 1024 tokens (dispatch reads them from x, combine sums them on
# the token side) and combine's weights loaded once a row: the candidate (the working tree, 4f50bc6)
# against main (4c26a1a, .exp/main) and against the candidate without combine's own rows (.exp/dw), all
# built here, with a profiler build of the candidate (.exp/prof). The protocol's test files, autograd and
# the MoE layer on the candidate; bench_graph at DeepSeek-V3 4096 / 1024 / 256 tokens, counts drawn at
# 4096, the small shapes (drawn) and 1 / 128 tokens; a trace at 4096 tokens.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o2; mkdir -p $O/bench $O/trace
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
(timeout 200 bash tools/gpu_run.sh $O/cand_build build > $O/cand_build_driver.log 2>&1; echo "cand build rc=$?" >> $O/cand_build_driver.log) &
(cd .exp/main && timeout 200 bash tools/gpu_run.sh $O/main_build build > $O/main_build_driver.log 2>&1; echo "main build rc=$?" >> $O/main_build_driver.log) &
(cd .exp/dw && timeout 200 bash tools/gpu_run.sh $O/dw_build build > $O/dw_build_driver.log 2>&1; echo "dw build rc=$?" >> $O/dw_build_driver.log) &
(cd .exp/prof && MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=1 MAX_JOBS=8 timeout 200 python3 setup.py build_ext --inplace --force > $O/prof_build.log 2>&1; echo "prof build rc=$?" >> $O/prof_build.log) &
wait; log "$(tail -1 $O/cand_build_driver.log) / $(tail -1 $O/main_build_driver.log) / $(tail -1 $O/dw_build_driver.log) / $(tail -1 $O/prof_build.log)"
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_round_order.py tests/python/gpu/test_fuzz.py tests/python/gpu/test_round_checks.py tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py" \
  timeout 170 setsid bash tools/gpu_run.sh $O/tests tests --durations=10 > $O/tests_driver.log 2>&1; log "tests rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/tests/summary.txt $OUT/tests_summary.txt 2>/dev/null
p=29631
bench() {  # tree name send_sms shapes counts
  local t=$1 n=$2 s=$3 shapes=$4 counts=$5
  [ $((SECONDS - T0)) -gt 470 ] && { log "$n skipped (time)"; return; }
  (cd $t && PYTHONPATH=$PWD/python MOE_A2A_SEND_SMS=$s timeout 40 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts $counts --no-microbench --no-floor --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
L="256,8,7168,4096;256,8,7168,1024;256,8,7168,256"
S="8,2,6144,16;64,6,2048,32;128,8,4096,256;256,8,7168,256"
bench . cand-auto auto "$L" max
bench .exp/main main-auto auto "$L" max
bench .exp/dw dw-auto auto "$L" max
bench . cand-drawn4096 auto "256,8,7168,4096" drawn
bench .exp/main main-drawn4096 auto "256,8,7168,4096" drawn
bench . cand-small auto "$S" drawn
bench .exp/main main-small auto "$S" drawn
bench . cand-one auto "256,8,7168,1;256,8,7168,128" max
bench .exp/main main-one auto "256,8,7168,1;256,8,7168,128" max
left=$((560 - (SECONDS - T0)))
if [ $left -gt 30 ]; then
  (cd .exp/prof && PYTHONPATH=$PWD/python timeout $left torchrun --master-port=29681 --nproc-per-node=2 benchmarks/bench_all2all.py \
    --shapes 256,8,7168,4096 --systems moe_a2a --no-microbench --no-floor --no-graph --max-counts --trace $O/trace/trace.json \
    --out $O/trace/bench > $O/trace/bench.log 2>&1); log "trace rc=$?"
  pkill -f torchrun
  for t in $O/trace/trace-*.json; do
    [ -f "$t" ] || continue
    (cd .exp/prof && export PYTHONPATH=$PWD/python && { python3 -m moe_a2a.trace summary $t; python3 -m moe_a2a.trace chain $t;
      python3 -m moe_a2a.trace timeline $t --waves; } > ${t%.json}.txt 2>&1)
    gzip $t
  done
fi
tar czf $OUT/o.tar.gz -C /tmp o2
log done
