#!/usr/bin/env bash
# Call 1 (nvidia-h100-x2): the whole suite on HEAD 807a210 (hooks; its new test_count_words_carry_their_round and
# the dispatch_kernel refactor never ran on a GPU), then graph d+c A/B of HEAD against session 25's two ready
# patches (next-whole-up-to-64.patch as w64, next-flagged-rows.patch as fr), counts drawn, two rounds, then
# test_all_to_all.py on the flagged-rows patch (hooks) in what time is left.
# Setup (here): for t in base baseh fr frh w64: git archive HEAD into .exp/$t; patch -p1 fr and frh with
# ../2026-11-27-h100x2-session25/next-flagged-rows.patch, w64 with next-whole-up-to-64.patch; rm -rf .exp/*/docs.
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/base .exp/baseh:hooks .exp/fr .exp/frh:hooks .exp/w64 >> $OUT/driver.log
log "built rc=$?"
(cd .exp/baseh && timeout 260 bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1)
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 150 .exp/base .exp/fr .exp/w64
left=$((570 - (SECONDS - T0)))
log "fr tests with ${left}s"
if [ $left -gt 40 ]; then
  (cd .exp/frh && GPU_TESTS="tests/python/gpu/test_all_to_all.py" timeout $left bash tools/gpu_run.sh $L/flagged tests > $L/flagged.log 2>&1)
  log "fr test_all_to_all rc=$?"
  cp $L/flagged/summary.txt $OUT/fr-summary.txt 2> /dev/null
fi
cd $OUT && tar czf all.tar.gz logs graph && rm -rf logs graph
log done
