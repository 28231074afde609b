#!/usr/bin/env bash
# NOT RUN (written in session 24 for the next one), nvidia-h100-x2, about 420 s with the start.
# 1. A/B of next-segments-before-announce.patch (beside this file): a block that sends and receives (no split, not
#    own_placed: from 66 tokens at 132 blocks) holds back its first group's announcement and lays out the segments
#    first where every source's counts are already here once its rows are out (one acquire look a source, no wait; a
#    count missing: it announces first, as now). Session 24's lineup of E256-K8-H7168-T256 drawn: on the rank with more
#    tokens each block's release waits 5-10 us for a link-bound drain and only then finds the peer's counts (there
#    since about 5 us) and lays out its segments (0.8 us, then 0.7 us recorded by no stage); the patch moves that under
#    the drain. Cost: 2.1 KB more dispatch code (123.4 -> 125.5 KB: the two smallest shapes have lost 0.5-0.8 us to
#    1.9 KB before) and a look on the rank with fewer tokens before it announces.
# 2. main's trace at the T=256 shapes and DeepSeek-V3 one token, with each kernel's lineup.
# Setup (here): mkdir -p .exp/base .exp/seg; git archive HEAD | tar -x -C .exp/base; git archive HEAD | tar -x -C
# .exp/seg; (cd .exp/seg && patch -p1 < ../../docs/results/2026-11-27-h100x2-session24/next-segments-before-announce.patch);
# rm -rf .exp/base/docs .exp/seg/docs. carry [".exp/base", ".exp/seg"].
source tools/device_call.sh
BUILD_TIMEOUT=250 bash tools/build_trees.sh $L .exp/base .exp/seg >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 110 .exp/base .exp/seg
AB_ROUNDS=1 AB_GRAPH_ARGS="--shapes 256,8,7168,256;128,8,4096,256;256,8,7168,128" ab equal 60 .exp/base .exp/seg
bash tools/trace_graph.sh $OUT "128,8,4096,256;256,8,7168,256;256,8,7168,1" > $L/trace.log 2>&1
log "trace rc=$?"
cd $OUT && tar czf all.tar.gz logs graph equal trace && rm -rf logs graph equal trace
log done
