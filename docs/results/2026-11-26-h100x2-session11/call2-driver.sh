#!/usr/bin/env bash
# Call 2 (session 11): the final candidate wip/final (main + combine's context divisor + fp8 own rows placed +
# layer traces + the backward of combine's profiler stages; the working tree) against main 7a1610e (.exp/main),
# both built here, plus the candidate with the profiler (.exp/prof). The whole GPU suite on the candidate; its
# test_profiler.py on the profiler build; bench_graph A/B alternating (challenge shapes drawn, DeepSeek-V3 equal,
# fp8 e4m3fn); then the layer's traces at 128 and 2048 tokens (backward rounds included).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o2; rm -rf $O; mkdir -p $O/bench $O/trace
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 240 env MAX_JOBS=10 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . cand & build .exp/main main &
(cd .exp/prof && timeout 240 env MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=10 python3 setup.py build_ext --inplace --force > $O/prof_build.log 2>&1; echo "prof build rc=$?" >> $O/prof_build.log) &
wait; for n in cand main; do log "$(tail -1 $O/${n}_build_driver.log)"; done; log "$(tail -1 $O/prof_build.log)"
timeout 280 bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1
log "suite rc=$?"; cp $O/suite/summary.txt $OUT/suite_summary.txt
(cd .exp/prof && PYTHONPATH=$PWD/python timeout 90 torchrun --master-port=29671 --nproc-per-node=2 -m pytest \
  tests/python/gpu/test_profiler.py -q -rfE -p no:cacheprovider > $O/prof_tests.log 2>&1)
log "prof tests rc=$? $(tail -1 $O/prof_tests.log)"; pkill -f torchrun
tar czf $OUT/o.tar.gz -C /tmp o2
p=29681
bench() {  # tree name shapes counts [extra]
  local t=$1 n=$2 shapes=$3 counts=$4; shift 4
  (cd $t && PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts "$counts" --no-microbench "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256"
L="256,8,7168,1;256,8,7168,128;256,8,7168,4096"
bench . cand-small1 "$S" drawn
bench .exp/main main-small1 "$S" drawn --no-floor
bench . cand-small2 "$S" drawn --no-floor
bench .exp/main main-small2 "$S" drawn --no-floor
bench . cand-equal1 "$L" max
bench .exp/main main-equal1 "$L" max --no-floor
bench . cand-fp8 "256,8,7168,128;256,8,7168,1024;256,8,7168,4096" "max;drawn" --no-floor --fp8 e4m3fn
tar czf $OUT/o.tar.gz -C /tmp o2
if [ $((SECONDS - T0)) -lt 530 ]; then
  (cd .exp/prof && PYTHONPATH=$PWD/python timeout $((580 - SECONDS + T0)) torchrun --master-port=$p --nproc-per-node=2 \
    benchmarks/bench_moe_layer.py --tokens 128,2048 --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y \
    --iters 10 --no-floor --no-check --out $O/layer --trace $O/trace/layer > $O/layer.log 2>&1)
  log "layer trace rc=$?"; pkill -f torchrun
  gzip -q $O/trace/*.json
  tar czf $OUT/o.tar.gz -C /tmp o2
fi
log done
