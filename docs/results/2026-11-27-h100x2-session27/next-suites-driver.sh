#!/usr/bin/env bash
# Run in session 28 as its call 2 (../2026-11-27-h100x2-session28/), nvidia-h100-x2, about 560 s with the start.
# Issue 35's "GPU suite on 2 GPUs, 3 runs in a row": two whole suites on main in one call (next-driver.sh runs the
# first), gpu_run.sh's GPU_TEST_RUNS=2; a failure's text and captured output land in failures-rank<r>.txt at once, a
# stuck pool case quotes its workers' stacks. Setup (here): mkdir -p .exp/baseh && git archive HEAD | tar -x -C
# .exp/baseh; rm -rf .exp/baseh/docs. carry [".exp/baseh"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/baseh:hooks >> $OUT/driver.log
log "built rc=$?"
left=$((545 - (SECONDS - T0)))
GPU_TEST_RUNS=2 bounded $left bash -c "cd .exp/baseh && bash tools/gpu_run.sh $L/suites tests > $L/suites.log 2>&1"
log "suites rc=$?"
cp $L/suites/summary.txt $OUT/suites-summary.txt 2> /dev/null
cp $L/suites/failures-rank*.txt $OUT/ 2> /dev/null
cd $OUT && tar czf all.tar.gz logs 2> /dev/null; rm -rf logs
log done
