#!/usr/bin/env bash
# Call 1 (session 10): the candidate (working tree: gather_batch as a scan in any source order; combine's
# batches take the peers first, own rank last) against main a8165ce (.exp/main), both built here, plus main
# built with the profiler (.exp/prof). bench_graph A/B alternating (challenge shapes with counts drawn,
# DeepSeek-V3 1 / 128 / 4096 every rank T); fp8 e4m3fn dispatch next to bf16 at 1024 / 4096 (candidate);
# eager traces of DeepSeek-V3 4096 tokens, bf16 and fp8 (profiler build); then the whole suite on the
# candidate if time is left.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o1; mkdir -p $O/bench $O/trace
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 200 env $3 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . cand X=1 & build .exp/main main X=1 &
(cd .exp/prof && timeout 200 env MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=16 python3 setup.py build_ext --inplace --force > $O/prof_build.log 2>&1; echo "prof build rc=$?" >> $O/prof_build.log) &
wait; for n in cand main; do log "$(tail -1 $O/${n}_build_driver.log)"; done; log "$(tail -1 $O/prof_build.log)"
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
bench . cand-fp8 "256,8,7168,1024;256,8,7168,4096" max --no-floor --fp8 e4m3fn
trace() {  # name [extra]
  local n=$1; shift
  (cd .exp/prof && PYTHONPATH=$PWD/python timeout 90 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_all2all.py \
    --shapes "256,8,7168,4096" --systems moe_a2a --layout packed --max-counts --no-graph --no-check --no-microbench \
    --no-floor --trace $O/trace/$n "$@" --out $O/trace/$n-out > $O/trace/$n.log 2>&1)
  log "trace $n rc=$?"; p=$((p+1)); pkill -f torchrun
}
trace bf16
trace fp8 --trace-fp8 e4m3fn
gzip -q $O/trace/*.json
tar czf $OUT/o.tar.gz -C /tmp o1
if [ $((SECONDS - T0)) -lt 360 ]; then
  timeout $((560 - SECONDS + T0)) bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1; log "suite rc=$?"
  cp $O/suite/summary.txt $OUT/suite_summary.txt
  tar czf $OUT/o.tar.gz -C /tmp o1
fi
log done
