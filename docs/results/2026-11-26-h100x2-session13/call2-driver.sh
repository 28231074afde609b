#!/usr/bin/env bash
# Call 2 (session 13): counts first (the working tree: a block on both halves that stages its own rows waits for
# the counts and lays out the segments before it announces its first group), main df04cc0 (.exp/main), the
# working tree with the profiler (.exp/prof). Graph A/B at the challenge shapes drawn and DeepSeek-V3 128/256/512
# every rank (main, cf, cf, main); a trace of E256-K8-H7168-T256 drawn; the whole GPU suite on the working tree.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o2; rm -rf $O; mkdir -p $O/bench $O/trace
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 240 env MAX_JOBS=8 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . cf & build .exp/main main &
(cd .exp/prof && timeout 240 env MOE_A2A_PROFILE=1 MAX_JOBS=6 python3 setup.py build_ext --inplace --force > $O/prof_build.log 2>&1; echo "prof build rc=$?" >> $O/prof_build.log) &
wait; for n in cf main; do log "$(tail -1 $O/${n}_build_driver.log)"; done; log "$(tail -1 $O/prof_build.log)"
p=29681
bench() {  # tree name shapes counts [extra]
  local t=$1 n=$2 shapes=$3 counts=$4; shift 4
  (cd $t && PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts "$counts" --no-microbench "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256"
D="256,8,7168,128;256,8,7168,256;256,8,7168,512"
bench .exp/main main-small1 "$S" drawn; bench . cf-small1 "$S" drawn --no-floor
bench .exp/main main-dsv1 "$D" max --no-floor; bench . cf-dsv1 "$D" max --no-floor
bench . cf-small2 "$S" drawn --no-floor; bench .exp/main main-small2 "$S" drawn --no-floor
bench . cf-dsv2 "$D" max --no-floor; bench .exp/main main-dsv2 "$D" max --no-floor
tar czf $OUT/o.tar.gz -C /tmp o2
(cd .exp/prof && PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_all2all.py \
  --shapes "256,8,7168,256" --systems moe_a2a --layout packed --no-graph --no-check --no-microbench --no-floor \
  --trace-graph 8 --trace $O/trace/mid > $O/trace/mid.log 2>&1); log "trace rc=$?"; pkill -f torchrun
tar czf $OUT/o.tar.gz -C /tmp o2
(timeout 250 bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1); log "suite rc=$?"
cp $O/suite/summary.txt $OUT/suite_summary.txt; pkill -f torchrun
tar czf $OUT/o.tar.gz -C /tmp o2
log done
