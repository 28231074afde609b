#!/usr/bin/env bash
# Call 4 (session 13): c7a45e4 with the profiler and the test hooks (MOE_A2A_PROFILE=1): test_profiler.py and
# test_current_device.py, whose profiler tests the plain build skips; and fp8 e4m3fn dispatch at DeepSeek-V3 128 and
# 4096 tokens, c7a45e4 (plain build) against main df04cc0 (.exp/main).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o4; rm -rf $O; mkdir -p $O/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 200 env MAX_JOBS=8 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . new & build .exp/main main &
(cd .exp/prof && timeout 200 env MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=1 MAX_JOBS=8 python3 setup.py build_ext --inplace --force > $O/prof_build.log 2>&1; echo "prof build rc=$?" >> $O/prof_build.log) &
wait; for n in new main; do log "$(tail -1 $O/${n}_build_driver.log)"; done; log "$(tail -1 $O/prof_build.log)"
(cd .exp/prof && PYTHONPATH=$PWD/python timeout 120 torchrun --master-port=29671 --nproc-per-node=2 -m pytest \
  tests/python/gpu/test_profiler.py tests/python/gpu/test_current_device.py -q -rfEs -p no:cacheprovider > $O/prof_tests.log 2>&1)
log "prof tests rc=$? $(grep -E 'passed|failed' $O/prof_tests.log | tail -1)"; pkill -f torchrun
p=29681
bench() {  # tree name shapes counts [extra]
  local t=$1 n=$2 shapes=$3 counts=$4; shift 4
  (cd $t && PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts "$counts" --no-microbench "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
bench .exp/main main-fp8 "256,8,7168,128;256,8,7168,4096" max --no-floor --fp8 e4m3fn
bench . new-fp8 "256,8,7168,128;256,8,7168,4096" max --no-floor --fp8 e4m3fn
tar czf $OUT/o.tar.gz -C /tmp o4
log done
