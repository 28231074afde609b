#!/usr/bin/env bash
# Session 23, call 2, nvidia-h100-x2: call 1's peek lost 1-2 us at the small shapes (its first batch held the sources
# it saw, this rank's own rows, and the peer's came in a second batch). Here: main (7546fce) against the acquire-first
# look alone (.exp/acq: main's dispatch.cu) and against the peek used only when it saw every source (.exp/peek2).
# Graph A/B, two rounds, the shapes of call 1, counts drawn; the layer's dispatch and backward of combine at 128.
# Setup: .exp/base = git archive 7546fce; .exp/peek2 = the working tree; .exp/acq = it with main's dispatch.cu; each
# without docs/. carry [".exp/base", ".exp/acq", ".exp/peek2"].
source tools/device_call.sh
BUILD_TIMEOUT=250 bash tools/build_trees.sh $L .exp/base .exp/acq .exp/peek2 >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 200 .exp/base .exp/acq .exp/peek2
AB_BENCH=layer AB_LAYER_ARGS="--tokens 128 --counts max;drawn --phases dispatch,combine-bwd" ab layer 150 .exp/base .exp/acq .exp/peek2
cd $OUT && tar czf all.tar.gz logs graph layer && rm -rf logs graph layer
log done
