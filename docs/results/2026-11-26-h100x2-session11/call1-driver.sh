#!/usr/bin/env bash
# Call 1 (session 11): the candidate wip/cand (main + wip/fast-count + wip/fp8-own-placed + wip/layer-trace, the
# working tree) against main 7a1610e (.exp/main) and main + wip/fast-count (.exp/fast), all built here, plus the
# candidate with the profiler (.exp/prof). First the candidate's test_fp8.py and test_all_to_all.py; then
# bench_graph A/B alternating: fp8 e4m3fn at DeepSeek-V3 1024/4096 (cand vs fast: own rows placed), bf16 large
# (main / fast / cand), challenge shapes drawn (main vs fast: the 16-byte count); then layer traces if time is left.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o1; mkdir -p $O/bench $O/trace
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 240 env MAX_JOBS=8 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . cand & build .exp/main main & build .exp/fast fast &
(cd .exp/prof && timeout 240 env MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=8 python3 setup.py build_ext --inplace --force > $O/prof_build.log 2>&1; echo "prof build rc=$?" >> $O/prof_build.log) &
wait; for n in cand main fast; do log "$(tail -1 $O/${n}_build_driver.log)"; done; log "$(tail -1 $O/prof_build.log)"
GPU_TESTS="tests/python/gpu/test_fp8.py tests/python/gpu/test_all_to_all.py" timeout 200 bash tools/gpu_run.sh $O/tests tests > $O/tests_driver.log 2>&1
log "cand tests rc=$?"; cp $O/tests/summary.txt $OUT/tests_summary.txt
p=29681
bench() {  # tree name shapes counts [extra]
  local t=$1 n=$2 shapes=$3 counts=$4; shift 4
  (cd $t && PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts "$counts" --no-microbench "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
F="256,8,7168,1024;256,8,7168,4096"
bench . cand-fp8-1 "$F" "max;drawn" --fp8 e4m3fn
bench .exp/fast fast-fp8-1 "$F" "max;drawn" --no-floor --fp8 e4m3fn
bench . cand-fp8-2 "$F" "max;drawn" --no-floor --fp8 e4m3fn
bench .exp/fast fast-fp8-2 "$F" "max;drawn" --no-floor --fp8 e4m3fn
tar czf $OUT/o.tar.gz -C /tmp o1
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256"
L="256,8,7168,1;256,8,7168,128;256,8,7168,4096"
bench .exp/main main-small1 "$S" drawn
bench .exp/fast fast-small1 "$S" drawn --no-floor
bench .exp/main main-small2 "$S" drawn --no-floor
bench .exp/fast fast-small2 "$S" drawn --no-floor
bench .exp/main main-equal1 "$L" max --no-floor
bench .exp/fast fast-equal1 "$L" max --no-floor
bench . cand-equal1 "$L" max --no-floor
tar czf $OUT/o.tar.gz -C /tmp o1
if [ $((SECONDS - T0)) -lt 480 ]; then
  (cd .exp/prof && PYTHONPATH=$PWD/python timeout $((570 - SECONDS + T0)) torchrun --master-port=$p --nproc-per-node=2 \
    benchmarks/bench_moe_layer.py --tokens 128,2048 --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y \
    --iters 10 --no-floor --no-check --out $O/layer --trace $O/trace/layer > $O/layer.log 2>&1)
  log "layer trace rc=$?"; pkill -f torchrun
  gzip -q $O/trace/*.json
  tar czf $OUT/o.tar.gz -C /tmp o1
fi
log done
