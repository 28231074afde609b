#!/usr/bin/env bash
# Call 2 (session 10): fp8 dispatch quantizing this rank's own rows in its receive half (own rows direct, from
# 1024 tokens) and splitting in halves like bf16: the candidate (working tree) against main a8165ce (.exp/main),
# both built here, plus the candidate with the profiler (.exp/prof). test_fp8 first; then bench_graph --fp8
# e4m3fn at DeepSeek-V3 128 / 1024 / 4096 tokens: candidate (auto: halves), candidate every block both
# (--send-sms 0,auto), main, candidate again; an eager trace of the candidate's fp8 dispatch at 4096 tokens;
# then the whole suite on the candidate.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o2; mkdir -p $O/bench $O/trace
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 200 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . cand & build .exp/main main &
(cd .exp/prof && timeout 200 env MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=16 python3 setup.py build_ext --inplace --force > $O/prof_build.log 2>&1; echo "prof build rc=$?" >> $O/prof_build.log) &
wait; for n in cand main; do log "$(tail -1 $O/${n}_build_driver.log)"; done; log "$(tail -1 $O/prof_build.log)"
timeout 120 torchrun --master-port=29670 --nproc-per-node=2 -m pytest tests/python/gpu/test_fp8.py -q -rfE -p no:cacheprovider > $O/test_fp8.log 2>&1
log "test_fp8 rc=$? $(tail -1 $O/test_fp8.log)"
p=29681
bench() {  # tree name shapes counts [extra]
  local t=$1 n=$2 shapes=$3 counts=$4; shift 4
  (cd $t && PYTHONPATH=$PWD/python timeout 80 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts "$counts" --no-microbench --no-floor "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
F="256,8,7168,128;256,8,7168,1024;256,8,7168,4096"
bench . cand-fp8-1 "$F" max --fp8 e4m3fn
bench . cand-fp8-both "256,8,7168,1024;256,8,7168,4096" max --fp8 e4m3fn --send-sms 0,auto
bench .exp/main main-fp8-1 "$F" max --fp8 e4m3fn
bench . cand-fp8-2 "256,8,7168,1024;256,8,7168,4096" max --fp8 e4m3fn
bench . cand-fp8-drawn "256,8,7168,4096" drawn --fp8 e4m3fn
bench .exp/main main-fp8-drawn "256,8,7168,4096" drawn --fp8 e4m3fn
(cd .exp/prof && PYTHONPATH=$PWD/python timeout 90 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_all2all.py \
  --shapes "256,8,7168,4096" --systems moe_a2a --layout packed --max-counts --no-graph --no-check --no-microbench \
  --no-floor --trace $O/trace/fp8 --trace-fp8 e4m3fn --out $O/trace/fp8-out > $O/trace/fp8.log 2>&1)
log "trace rc=$?"; pkill -f torchrun
gzip -q $O/trace/*.json
tar czf $OUT/o.tar.gz -C /tmp o2
if [ $((SECONDS - T0)) -lt 360 ]; then
  timeout $((575 - SECONDS + T0)) bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1; log "suite rc=$?"
  cp $O/suite/summary.txt $OUT/suite_summary.txt
  tar czf $OUT/o.tar.gz -C /tmp o2
fi
log done
