#!/usr/bin/env bash
# Session 31, call 5, nvidia-h100-x2, about 210 s with the start.
# Call 4's one round of README's ten drawn shapes had dg 0.1-0.2 us slower at five of them (their path is unchanged;
# num_groups' doubling adds a compare to every kernel's group arithmetic): two more rounds to tell it from drift.
# Setup: as call 4 (.exp/base, .exp/dg). carry [".exp/base", ".exp/dg"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/base .exp/dg >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $S --counts drawn" ab drawn 100 .exp/base .exp/dg
cd $OUT && tar cJf all.tar.xz logs drawn 2> /dev/null; rm -rf logs drawn
log done
