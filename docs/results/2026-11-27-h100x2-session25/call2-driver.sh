#!/usr/bin/env bash
# Session 25, call 2 (nvidia-h100-x2). Trees (carried): .exp/base = main 1cd6b5a; .exp/fc = flagged counts (call 1's);
# .exp/fw2 = flagged counts + whole batches where every group holds at most 2 tokens (kSmallGroupTokens = 2: a
# receive item waits for every source's rows, one batch); .exp/fw1 = the same with 1; .exp/bw2 = main + whole
# batches (2), counts as before.
# 1. graph d+c A/B of the five, the README shapes, counts drawn, two rounds; every rank at T for three shapes.
# 2. fw2's trace at DeepSeek-V3 one token and E128-K8-H4096-T256 drawn (profiler build), with lineups.
source tools/device_call.sh
BUILD_TIMEOUT=280 bash tools/build_trees.sh $L .exp/base .exp/fc .exp/fw2 .exp/fw1 .exp/bw2 >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 260 .exp/base .exp/fc .exp/fw2 .exp/fw1 .exp/bw2
AB_ROUNDS=1 AB_GRAPH_ARGS="--shapes 256,8,7168,256;128,8,4096,256;256,8,7168,128" ab equal 80 .exp/base .exp/fw2 .exp/bw2
(cd .exp/fw2 && TRACE_TIMEOUT=150 BUILD_TIMEOUT=200 bash tools/trace_graph.sh $OUT/trace-fw2 "256,8,7168,1;128,8,4096,256" > $L/trace-fw2.log 2>&1)
log "trace fw2 rc=$?"
cd $OUT && tar czf all.tar.gz logs graph equal trace-fw2 && rm -rf logs graph equal
cp trace-fw2/chain-*E256*T1*.txt chain-fw2-T1.txt 2>/dev/null; rm -rf trace-fw2
log done
