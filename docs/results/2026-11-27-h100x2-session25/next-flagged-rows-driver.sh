#!/usr/bin/env bash
# NOT RUN (written in session 25 for the next one), nvidia-h100-x2, about 520 s with the start.
# next-flagged-rows.patch (beside this file; protocol.md "Flagged dispatch rows" in it): a source with at most 32
# tokens sends its rows and their metadata as flagged words, its group signal relaxed right after the routing, no
# fence. Compile-checked for both vendors and the host layout tests pass; never run on a GPU. Dispatch's bf16
# instance grows 125.8 -> 138.5 KB, the own-rows one 129.2 -> 148.8, no spills (over check_kernel_sizes' budgets of
# 133 and 137: CI fails until the budgets or the code change), so the small shapes may pay in the instruction cache
# what the release saves.
# 1. test_all_to_all.py on the patch (it extends test_flagged_partial_sums_across_the_threshold: every flagged
#    dispatch word 0 after each round); the whole suite in a later call if the A/B keeps it.
# 2. graph d+c A/B against main, the README shapes, counts drawn, two rounds; issue 35's pairs at 128 tokens.
# Setup (here): mkdir -p .exp/base .exp/fr; git archive HEAD | tar -x -C .exp/base; git archive HEAD | tar -x -C
# .exp/fr; (cd .exp/fr && patch -p1 < ../../docs/results/2026-11-27-h100x2-session25/next-flagged-rows.patch);
# cp -r .exp/fr .exp/frh; rm -rf .exp/*/docs. carry [".exp/base", ".exp/fr", ".exp/frh"].
source tools/device_call.sh
BUILD_TIMEOUT=280 bash tools/build_trees.sh $L .exp/base .exp/fr .exp/frh:hooks >> $OUT/driver.log
log "built rc=$?"
(cd .exp/frh && GPU_TESTS="tests/python/gpu/test_all_to_all.py" timeout 200 bash tools/gpu_run.sh $L/flagged tests > $L/flagged.log 2>&1)
log "test_all_to_all rc=$?"
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 120 .exp/base .exp/fr
AB_ROUNDS=1 AB_GRAPH_ARGS="--shapes 256,8,7168,128 --counts issue35" ab unequal 80 .exp/base .exp/fr
cd $OUT && tar czf all.tar.gz logs graph unequal && rm -rf logs graph unequal
log done
