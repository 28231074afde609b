#!/usr/bin/env bash
# Call 5 (nvidia-h100-x2, the last 262 s of the budget): does the flagged-rows patch lose by its code or by its path?
# fr0 = next-flagged-rows.patch with EpConfig::flagged_rows() false at run time (`&& max_tokens < 0`): the same
# 138.2 KB bf16 dispatch instance (117 registers), the flagged path never taken. Graph d+c A/B against HEAD 807a210,
# counts drawn, two rounds, six of the README shapes. If fr0 loses as fr did (call 2: +0.5 us at one token, +1.4 at
# DeepSeek-V3 128), the dispatch kernel's size is the cost. Setup: .exp/fr0 = .exp/fr with that one-line change.
source tools/device_call.sh
BUILD_TIMEOUT=90 bash tools/build_trees.sh $L .exp/base .exp/fr0 >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;256,8,7168,1;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 95 .exp/base .exp/fr0
cd $OUT && tar czf all.tar.gz logs graph && rm -rf logs graph
log done
