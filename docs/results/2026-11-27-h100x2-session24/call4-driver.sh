#!/usr/bin/env bash
# Call 4, nvidia-h100-x2: calls 1-2's traces have a sending block take 1.1 us to route its group where no pair comes
# before it (block 0) and 2-3.5 us where it first counts the pairs before its group (16 to 1264 ids), at the T=256
# shapes; faster block-scope atomics changed nothing (call 2), so the wait is for the ids' loads, issued after the
# block's loads of its rows' first chunks (every block's at once, from HBM). main (9b59f43) against .exp/v1 (the first
# chunks loaded after the count instead of before it: nothing ahead of the ids) and .exp/v2 (the working tree: the
# count's first pass loaded before the first chunks, which stay ahead of the routing). Graph A/B, two rounds, README's
# shapes drawn. Setup: .exp/base = git archive 9b59f43; .exp/v1 = it with the reorder; .exp/v2 = the working tree;
# each without docs/. carry [".exp/base", ".exp/v1", ".exp/v2"].
source tools/device_call.sh
BUILD_TIMEOUT=250 bash tools/build_trees.sh $L .exp/base .exp/v1 .exp/v2 >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 160 .exp/base .exp/v1 .exp/v2
cd $OUT && tar czf all.tar.gz logs graph && rm -rf logs graph
log done
