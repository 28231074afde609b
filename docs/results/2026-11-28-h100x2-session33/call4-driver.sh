#!/usr/bin/env bash
# Session 33, call 4: nvidia-h100-x2, about 300 s with the start. The fold tree of call 3 (the commit that lands).
# 1. Issue 40's table on this tree: bench_moe_layer at 128 / 512 / 2048 tokens every rank, with the floor.
# 2. Traces (profiler build) of one call each of dispatch, combine-bwd and combine-bwd-y at 128 and 2048 tokens:
#    where the backward of combine spends what the forward dispatch does not (issue 40: 1.17x at 128 tokens).
# Setup (here): mkdir -p .exp/{fold,prof}; the working tree into each (git stash create | git archive);
# rm -rf .exp/*/docs. carry [".exp/fold", ".exp/prof"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/fold .exp/prof:profiler >> $OUT/driver.log
log "built rc=$?"
BENCH_TREE=.exp/fold bench layer 150 benchmarks/bench_moe_layer.py --tokens 128,512,2048
mkdir -p $OUT/trace
BENCH_TREE=.exp/prof bench layer-traced 120 benchmarks/bench_moe_layer.py --tokens 128,2048 --no-floor --no-check \
  --phases dispatch,combine-bwd,combine-bwd-y --trace $OUT/trace/layer
cd $OUT && tar cJf all.tar.xz logs layer layer-traced trace 2> /dev/null; rm -rf logs layer layer-traced trace
log done
