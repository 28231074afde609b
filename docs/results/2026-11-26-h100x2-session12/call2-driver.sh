#!/usr/bin/env bash
# Call 2 (session 12): the final tree (ce225ba, .exp/final) and the same tree with bfec918's transformers backend
# (.exp/old), both built. The new training-gradient test (gpt-oss: expert biases, the allocator's memory poisoned
# with NaN) on both: it must fail on the old backend and pass on the new; then the whole GPU suite twice in a row on
# the final tree (GPU_TEST_RUNS=2).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o2; rm -rf $O; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
build() { (cd $1 && timeout 240 env MAX_JOBS=12 bash tools/gpu_run.sh $O/$2_build build > $O/$2_build_driver.log 2>&1; echo "$2 build rc=$?" >> $O/$2_build_driver.log); }
build .exp/final final & build .exp/old old &
wait; for n in final old; do log "$(tail -1 $O/${n}_build_driver.log)"; done
for n in old final; do
  (cd .exp/$n && PYTHONPATH=$PWD/python timeout 120 torchrun --master-port=2967$((${#n})) --nproc-per-node=2 -m pytest \
    tests/python/gpu/test_transformers.py -k training -q -rfE -p no:cacheprovider > $O/$n-training.log 2>&1)
  log "$n training test rc=$? $(grep -E 'passed|failed' $O/$n-training.log | tail -1)"; pkill -f torchrun
done
tar czf $OUT/o.tar.gz -C /tmp o2
(cd .exp/final && GPU_TEST_RUNS=2 timeout $((590 - SECONDS + T0)) bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1)
log "suite rc=$?"; cp $O/suite/summary.txt $OUT/suite_summary.txt
tar czf $OUT/o.tar.gz -C /tmp o2
log done
