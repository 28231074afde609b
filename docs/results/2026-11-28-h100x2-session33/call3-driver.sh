#!/usr/bin/env bash
# Session 33, call 3: nvidia-h100-x2, about 560 s with the start.
# The tree "fold" is session 32's next-backward-turns.patch (call 2: frozen-router backward of combine 3.5% faster at
# 2304 / 4096 tokens, tests passed) with the three kernels' turn loops folded into one state machine (Turns,
# ep_device.cuh): dispatch's and combine's loops unchanged in behaviour, the backward's the patch's where a block has
# at most two groups (132 blocks up to 4096 tokens). Against main (3ef411b) in the same call:
# 1. graph A/B, engine of 4096 tokens, DeepSeek-V3 bf16 and fp8 e4m3fn, 4096/4096, 4096/512, drawn, two rounds.
# 2. README's ten drawn shapes (only code size changes there), two rounds.
# 3. The MoE layer's rounds at 2304 and 4096 tokens (AB_BENCH=layer), two rounds.
# 4. The whole GPU suite on fold's hooks build.
# Setup (here): mkdir -p .exp/{main,fold,foldh}; git archive HEAD into main; the working tree's csrc into fold and
# foldh (git stash create | git archive); rm -rf .exp/*/docs. carry [".exp/main", ".exp/fold", ".exp/foldh"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/main .exp/fold .exp/foldh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes 256,8,7168,4096 --capacity 4096 --fp8 e4m3fn \
  --counts 4096/4096;4096/512;drawn" ab large 150 .exp/main .exp/fold
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $S --counts drawn" ab drawn 100 .exp/main .exp/fold
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 2304,4096" ab layer 90 .exp/main .exp/fold
left=$((590 - (SECONDS - T0)))
bounded $left bash -c "cd .exp/foldh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs large drawn layer 2> /dev/null; rm -rf logs large drawn layer
log done
