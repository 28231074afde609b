#!/usr/bin/env bash
# Session 32, call 1: nvidia-h100-x2, about 560 s with the start. Written in session 31 as next-driver-1.sh.
# Session 31 landed the doubled token groups with their group arithmetic made smaller after its last GPU call (a shift
# and a minimum in num_groups, max_group_tokens from the host) and the threshold in tokens a group (16: from 2113
# tokens at 132 SMs, from 129 at 8 blocks, so test_few_blocks_many_groups and others now double): never run on a GPU.
# 1. README's ten drawn shapes, main before the doubling (67c141e) against this main, two rounds (session 31's call 5
#    had the larger arithmetic 0-0.3 us slower; the landed kernels are back to the old sizes).
# 2. The whole GPU suite on main (hooks build).
# Setup (here): mkdir -p .exp/{base,main,mainh}; git archive 67c141e into .exp/base, git archive HEAD into .exp/main
# and .exp/mainh; rm -rf .exp/*/docs. carry [".exp/base", ".exp/main", ".exp/mainh"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/base .exp/main .exp/mainh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $S --counts drawn" ab drawn 100 .exp/base .exp/main
left=$((590 - (SECONDS - T0)))
bounded $left bash -c "cd .exp/mainh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs drawn 2> /dev/null; rm -rf logs drawn
log done
