#!/usr/bin/env bash
# Call 2 (session 14): dispatch's counts as signal words with no fence. "pr" (the working tree): each receiving
# block awaits the token words first, a thread a source, then polls the count words; "pr1" (.exp/pr1, call 1's
# version): every count word polled from the start by a thread per local expert. Against main 14d5d05 (.exp/main).
# Graph A/B at the challenge shapes drawn and DeepSeek-V3 1/128/256 every rank (main, pr, pr1, pr1, pr, main),
# unequal pairs with a 0-token rank (pr, main); then the whole GPU suite on pr.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o2; rm -rf $O; mkdir -p $O/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 240 env MAX_JOBS=8 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . pr & build .exp/pr1 pr1 & build .exp/main main &
wait; for n in pr pr1 main; do log "$(tail -1 $O/${n}_build_driver.log)"; done
p=29681
bench() {  # tree name shapes counts [extra]
  local t=$1 n=$2 shapes=$3 counts=$4; shift 4
  (cd $t && PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts "$counts" --no-microbench "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256"
D="256,8,7168,1;256,8,7168,128;256,8,7168,256"
bench .exp/main main-small1 "$S" drawn; bench . pr-small1 "$S" drawn --no-floor; bench .exp/pr1 pr1-small1 "$S" drawn --no-floor
bench .exp/main main-dsv1 "$D" max --no-floor; bench . pr-dsv1 "$D" max --no-floor; bench .exp/pr1 pr1-dsv1 "$D" max --no-floor
bench .exp/pr1 pr1-small2 "$S" drawn --no-floor; bench . pr-small2 "$S" drawn --no-floor; bench .exp/main main-small2 "$S" drawn --no-floor
bench .exp/pr1 pr1-dsv2 "$D" max --no-floor; bench . pr-dsv2 "$D" max --no-floor; bench .exp/main main-dsv2 "$D" max --no-floor
Z="0/32;32/0;1/32;32/32"
bench . pr-zero "256,8,7168,32" "$Z" --no-floor; bench .exp/main main-zero "256,8,7168,32" "$Z" --no-floor
tar czf $OUT/o.tar.gz -C /tmp o2
(timeout 230 bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1); log "suite rc=$?"
cp $O/suite/summary.txt $OUT/suite_summary.txt; pkill -f torchrun
tar czf $OUT/o.tar.gz -C /tmp o2
log done
