#!/usr/bin/env bash
# Call 1 (session 12): main (bfec918, .exp/main) and wip/wide-numbering (a3ac670's kernels, .exp/wn) built, and main
# with the profiler (.exp/prof). The whole GPU suite on main (60d96c3's kernels had not run it); A/B of the wide
# numbering at the challenge shapes drawn (main with its floor) and DeepSeek-V3 4096 bf16 + fp8; traces of the two
# mid shapes drawn (E128-K8-H4096-T256, E256-K8-H7168-T256) and DeepSeek-V3 128 every rank, 8 graph iterations.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o1; rm -rf $O; mkdir -p $O/bench $O/trace
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 240 env MAX_JOBS=8 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build .exp/main main & build .exp/wn wn &
(cd .exp/prof && timeout 240 env MOE_A2A_PROFILE=1 MAX_JOBS=8 python3 setup.py build_ext --inplace --force > $O/prof_build.log 2>&1; echo "prof build rc=$?" >> $O/prof_build.log) &
wait; for n in main wn; do log "$(tail -1 $O/${n}_build_driver.log)"; done; log "$(tail -1 $O/prof_build.log)"
(cd .exp/main && timeout 250 bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1); log "suite rc=$?"
cp $O/suite/summary.txt $OUT/suite_summary.txt; pkill -f torchrun
tar czf $OUT/o.tar.gz -C /tmp o1
p=29681
bench() {  # tree name shapes counts [extra]
  local t=$1 n=$2 shapes=$3 counts=$4; shift 4
  (cd $t && PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts "$counts" --no-microbench "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256"
bench .exp/main main-small1 "$S" drawn; bench .exp/wn wn-small1 "$S" drawn --no-floor
bench .exp/wn wn-small2 "$S" drawn --no-floor; bench .exp/main main-small2 "$S" drawn --no-floor
tar czf $OUT/o.tar.gz -C /tmp o1
trace() {  # name shapes [extra]
  local n=$1 shapes=$2; shift 2
  (cd .exp/prof && PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_all2all.py \
    --shapes "$shapes" --systems moe_a2a --layout packed --no-graph --no-check --no-microbench --no-floor \
    --trace-graph 8 --trace $O/trace/$n "$@" > $O/trace/$n.log 2>&1)
  log "trace $n rc=$?"; p=$((p+1)); pkill -f torchrun
}
trace mid "128,8,4096,256;256,8,7168,256"; trace dsv3-128 "256,8,7168,128" --max-counts
tar czf $OUT/o.tar.gz -C /tmp o1
for n in main wn; do bench .exp/$n $n-4096 "256,8,7168,4096" "max;drawn" --no-floor --fp8 e4m3fn; done
tar czf $OUT/o.tar.gz -C /tmp o1
log done
