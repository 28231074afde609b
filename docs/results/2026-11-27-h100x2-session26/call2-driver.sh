#!/usr/bin/env bash
# Call 2 (nvidia-h100-x2): call 1 again with every step bounded by tools/device_call.sh's `bounded` (call 1's
# `timeout 260` killed gpu_run.sh at 260 s but left its torchrun running: every later step found port 29500 taken).
# The whole suite on HEAD (hooks; call 1 saw one test fail on both ranks, test_reused_worker_pool by its place, and
# the suite outran 260 s), then graph d+c A/B of HEAD against w64 and fr (session 25's patches), then
# test_all_to_all.py on fr (hooks) in what time is left. Trees as in call1-driver.sh.
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/base .exp/baseh:hooks .exp/fr .exp/frh:hooks .exp/w64 >> $OUT/driver.log
log "built rc=$?"
bounded 340 bash -c "cd .exp/baseh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 150 .exp/base .exp/fr .exp/w64
left=$((575 - (SECONDS - T0)))
log "fr tests with ${left}s"
if [ $left -gt 40 ]; then
  bounded $left bash -c "cd .exp/frh && GPU_TESTS=tests/python/gpu/test_all_to_all.py bash tools/gpu_run.sh $L/flagged tests > $L/flagged.log 2>&1"
  log "fr test_all_to_all rc=$?"
  cp $L/flagged/summary.txt $OUT/fr-summary.txt 2> /dev/null
fi
cd $OUT && tar czf all.tar.gz logs graph && rm -rf logs graph
log done
