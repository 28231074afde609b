#!/usr/bin/env bash
# Call 4 (session 12): the review's refactor (place_pair) built; test_fp8.py (own rows placed at large batches)
# and test_all_to_all.py on it, as far as the session's last device time goes.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o4; rm -rf $O; mkdir -p $O
(timeout 150 env MAX_JOBS=16 bash tools/gpu_run.sh $O/build build > $O/build_driver.log 2>&1; echo "build rc=$?" >> $O/build_driver.log)
log "$(tail -1 $O/build_driver.log)"
PYTHONPATH=$PWD/python timeout $((185 - SECONDS + T0)) torchrun --master-port=29671 --nproc-per-node=2 -m pytest \
  tests/python/gpu/test_fp8.py tests/python/gpu/test_all_to_all.py -q -rfE -p no:cacheprovider > $O/tests.log 2>&1
log "tests rc=$? $(grep -E 'passed|failed' $O/tests.log | tail -1)"; pkill -f torchrun
cp $O/tests.log $OUT/; log done
