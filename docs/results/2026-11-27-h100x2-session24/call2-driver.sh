#!/usr/bin/env bash
# Call 2, nvidia-h100-x2: call 1's trace had every sending block spend 1-3.5 us routing and numbering its group at
# the T=256 challenge shapes (counting up to 1264 ids into shared memory), and the SASS showed why it is slow: the
# block-scope counters of platform/sync.h took generic atomics (ATOM.E.ADD, 1204 of them in dispatch.cu) instead of
# the shared-memory unit's ATOMS. Here main (9b59f43) against .exp/atoms (the working tree: those atomics in the
# shared state space; dispatch 123.4 -> 119.6 KB). Graph A/B, two rounds, README's shapes drawn; DeepSeek-V3 at 1024
# and 4096 tokens every rank (one round); the layer's dispatch and backward of combine at 128 tokens. Then the
# profiler trace of the working tree at call 1's shapes.
# Setup: .exp/base = git archive 9b59f43; .exp/atoms = the working tree; each without docs/.
# carry [".exp/base", ".exp/atoms"].
source tools/device_call.sh
BUILD_TIMEOUT=250 bash tools/build_trees.sh $L .exp/base .exp/atoms >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 110 .exp/base .exp/atoms
AB_ROUNDS=1 AB_GRAPH_ARGS="--shapes 256,8,7168,1024;256,8,7168,4096" ab large 90 .exp/base .exp/atoms
AB_BENCH=layer AB_LAYER_ARGS="--tokens 128 --counts max;drawn --phases dispatch,combine-bwd" ab layer 80 .exp/base .exp/atoms
bash tools/trace_graph.sh $OUT "128,8,4096,256;256,8,7168,256;256,8,7168,1" > $L/trace.log 2>&1
log "trace rc=$?"
cd $OUT && tar czf all.tar.gz logs graph large layer trace && rm -rf logs graph large layer trace
log done
