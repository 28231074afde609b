#!/usr/bin/env bash
# Call 6 (session 11): the count A/B. cand = wip/final-count (the working tree: the counting block alone reads
# topk_idx 16 bytes at a time from 8192 ids on), base = wip/final fc03cbc (.exp/base), v2 = wip/final + wip/fast-count
# (.exp/v2: every count_pairs site 16 bytes at a time). The candidate's offset-ids and fp8 large-batch tests, then
# bench_graph alternating: challenge shapes drawn, DeepSeek-V3 4096 every rank T with fp8 e4m3fn next to bf16.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o6; rm -rf $O; mkdir -p $O/bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 240 env MAX_JOBS=10 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build . cand & build .exp/base base & build .exp/v2 v2 &
wait; for n in cand base v2; do log "$(tail -1 $O/${n}_build_driver.log)"; done
PYTHONPATH=$PWD/python timeout 90 torchrun --master-port=29671 --nproc-per-node=2 -m pytest tests/python/gpu/test_all_to_all.py \
  tests/python/gpu/test_fp8.py -k "offset or large_batch" -q -rfE -p no:cacheprovider > $O/tests.log 2>&1
log "cand tests rc=$? $(grep -E 'passed|failed' $O/tests.log | tail -1)"; pkill -f torchrun
p=29681
bench() {  # tree name shapes counts [extra]
  local t=$1 n=$2 shapes=$3 counts=$4; shift 4
  (cd $t && PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_graph.py \
    --shapes "$shapes" --counts "$counts" --no-microbench --no-floor "$@" --out $O/bench/$n > $O/bench/$n.log 2>&1)
  log "$n rc=$?"; p=$((p+1)); pkill -f torchrun
}
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256"
for i in 1 2; do
  bench . cand-small$i "$S" drawn; bench .exp/base base-small$i "$S" drawn; bench .exp/v2 v2-small$i "$S" drawn
done
tar czf $OUT/o.tar.gz -C /tmp o6
for n in cand base v2; do t=.; [ $n = cand ] || t=.exp/$n; bench $t $n-4096 "256,8,7168,4096" max --fp8 e4m3fn; done
tar czf $OUT/o.tar.gz -C /tmp o6
log done
