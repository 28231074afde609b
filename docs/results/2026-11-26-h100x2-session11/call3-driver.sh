#!/usr/bin/env bash
# Call 3 (session 11): the final tree (wip/final fc03cbc, the working tree) built here, and again with the profiler
# and the test hooks (.exp/prof). The whole GPU suite a second time on this tree; test_profiler.py on the profiler
# build (the backward of combine's stages); bench_moe_layer at 128 / 512 / 2048 tokens with its floor (issue 40's
# table).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o3; rm -rf $O; mkdir -p $O/layer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
(timeout 240 env MAX_JOBS=12 bash tools/gpu_run.sh $O/build build > $O/build_driver.log 2>&1; echo "build rc=$?" >> $O/build_driver.log) &
(cd .exp/prof && timeout 240 env MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=1 MAX_JOBS=12 python3 setup.py build_ext --inplace --force > $O/prof_build.log 2>&1; echo "prof build rc=$?" >> $O/prof_build.log) &
wait; log "$(tail -1 $O/build_driver.log)"; log "$(tail -1 $O/prof_build.log)"
timeout 280 bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1
log "suite rc=$?"; cp $O/suite/summary.txt $OUT/suite_summary.txt
(cd .exp/prof && PYTHONPATH=$PWD/python timeout 100 torchrun --master-port=29671 --nproc-per-node=2 -m pytest \
  tests/python/gpu/test_profiler.py -q -rfE -p no:cacheprovider > $O/prof_tests.log 2>&1)
log "prof tests rc=$? $(grep -E 'passed|failed' $O/prof_tests.log | tail -1)"; pkill -f torchrun
tar czf $OUT/o.tar.gz -C /tmp o3
PYTHONPATH=$PWD/python timeout $((585 - SECONDS + T0)) torchrun --master-port=29641 --nproc-per-node=2 benchmarks/bench_moe_layer.py \
  --tokens 128,512,2048 --iters 30 --out $O/layer > $O/layer/bench_moe_layer.log 2>&1
log "layer rc=$?"; pkill -f torchrun
tar czf $OUT/o.tar.gz -C /tmp o3
log done
