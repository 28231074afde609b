#!/usr/bin/env bash
# Call 3 (nvidia-h100-x2): is call 1's failure (one test on both ranks just after test_profiler's skips, which is
# test_reused_worker_pool, and a suite 60+ s slower than usual) a flake of the pool test? test_reused_workers.py four
# times in a row, then the whole suite a third time (call 2's passed). HEAD 807a210 with the hooks (.exp/baseh).
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/baseh:hooks >> $OUT/driver.log
log "built rc=$?"
bounded 250 bash -c "cd .exp/baseh && GPU_TEST_RUNS=4 GPU_TESTS=tests/python/gpu/test_reused_workers.py bash tools/gpu_run.sh $L/pool tests > $L/pool.log 2>&1"
log "pool x4 rc=$?"
cp $L/pool/summary.txt $OUT/pool-summary.txt 2> /dev/null
left=$((580 - (SECONDS - T0)))
log "suite with ${left}s"
bounded $left bash -c "cd .exp/baseh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cd $OUT && tar czf all.tar.gz logs && rm -rf logs
log done
