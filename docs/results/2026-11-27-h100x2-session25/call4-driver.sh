#!/usr/bin/env bash
# Session 25, call 4 (nvidia-h100-x2). Trees (carried): .exp/base = main 1cd6b5a; .exp/new = call 3's.
# 1. Issue 35's unequal counts at DeepSeek-V3 128 tokens (--counts issue35), one round.
# 2. fp8 dispatch (e4m3fn) next to bf16 at the small shapes, counts drawn, one round.
# 3. The MoE layer's dispatch and backward of combine at 128 tokens, counts max and drawn.
source tools/device_call.sh
BUILD_TIMEOUT=250 bash tools/build_trees.sh $L .exp/base .exp/new >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=1
AB_GRAPH_ARGS="--shapes 256,8,7168,128 --counts issue35" ab unequal 110 .exp/base .exp/new
AB_GRAPH_ARGS="--shapes 8,2,6144,16;64,6,2048,32;256,8,7168,1;256,8,7168,32 --counts drawn --fp8 e4m3fn" ab fp8 90 .exp/base .exp/new
AB_BENCH=layer AB_LAYER_ARGS="--tokens 128 --counts max;drawn --phases dispatch,combine-bwd" ab layer 90 .exp/base .exp/new
cd $OUT && tar czf all.tar.gz logs unequal fp8 layer && rm -rf logs unequal fp8 layer
log done
