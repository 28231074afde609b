#!/usr/bin/env bash
# Session 25, call 3 (nvidia-h100-x2). Trees (carried): .exp/base = main 1cd6b5a; .exp/new = flagged counts and
# whole batches where every group holds one token (call 2's fw1, as committed); .exp/newh = the same built with the
# test hooks.
# 1. The whole GPU suite on .exp/newh (world 2), with the fault table.
# 2. Large batches, base against new: DeepSeek-V3 1024 and 4096 tokens, counts drawn, one round.
source tools/device_call.sh
BUILD_TIMEOUT=280 bash tools/build_trees.sh $L .exp/base .exp/new .exp/newh:hooks >> $OUT/driver.log
log "built rc=$?"
(cd .exp/newh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1)
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2>/dev/null
export AB_BUILT=1 AB_ROUNDS=1
AB_GRAPH_ARGS="--shapes 256,8,7168,1024;256,8,7168,4096 --counts drawn" ab large 120 .exp/base .exp/new
cd $OUT && tar czf all.tar.gz logs large && rm -rf logs large
log done
