#!/usr/bin/env bash
# Call 3 (session 14), 4 x H100: world 4 on main 14d5d05 (the working tree), the first world-4 run since session 9.
# bench_graph at world 4: the challenge shapes with counts drawn and DeepSeek-V3 1 / 128 / 4096 tokens every rank,
# floors measured; call 1's counts-as-words (.exp/pr1) at the same shapes, alternated with main; then the whole GPU
# suite at world 4 on main, as far as the call's time allows.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o3; rm -rf $O; mkdir -p $O/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 240 env MAX_JOBS=16 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . main & build .exp/pr1 pr1 &
wait; for n in main pr1; do log "$(tail -1 $O/${n}_build_driver.log)"; done
p=29681
bench() {  # tree name shapes counts [extra]
  local t=$1 n=$2 shapes=$3 counts=$4; shift 4
  (cd $t && PYTHONPATH=$PWD/python timeout 90 torchrun --master-port=$p --nproc-per-node=4 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts "$counts" --no-microbench "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256"
D="256,8,7168,1;256,8,7168,128"
bench . main-small1 "$S" drawn; bench .exp/pr1 pr1-small1 "$S" drawn --no-floor
bench . main-dsv1 "$D;256,8,7168,4096" max; bench .exp/pr1 pr1-dsv1 "$D" max --no-floor
bench .exp/pr1 pr1-small2 "$S" drawn --no-floor; bench . main-small2 "$S" drawn --no-floor
bench .exp/pr1 pr1-dsv2 "$D" max --no-floor; bench . main-dsv2 "$D" max --no-floor
tar czf $OUT/o.tar.gz -C /tmp o3
left=$((500 - (SECONDS - T0)))
log "suite, $left s left"
[ $left -gt 60 ] && { timeout $left setsid bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1; log "suite rc=$?"; }
pkill -f torchrun; pkill -f pytest
head -4 $O/suite/summary.txt >> $OUT/driver.log 2>/dev/null; tail -3 $O/suite/gpu_tests.log >> $OUT/driver.log 2>/dev/null
tar czf $OUT/o.tar.gz -C /tmp o3
log done
