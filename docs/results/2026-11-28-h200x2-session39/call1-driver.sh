#!/usr/bin/env bash
# Session 39, call 1 (nvidia-h200-x2; no H100 lent): own rows in the drain (issue 35), against main cea285a.
# .exp/main = main's tree (git archive HEAD, no docs/); .exp/drain = the working tree with own_in_drain
# (kOwnInDrainTokens = 1: on wherever it applies, so every T below 512 shows its effect); .exp/drainh = the same
# built with the test hooks. carry [".exp/main", ".exp/drain", ".exp/drainh"].
# 1. graph A/B, README's ten shapes with counts drawn, two rounds.
# 2. graph A/B, DeepSeek-V3 with every rank at 1, 16, 64, 128, 256, 384 tokens and E128-K8-H4096 at 256, two rounds.
# 3. The whole GPU suite on drainh.
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/main .exp/drain .exp/drainh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $S --counts drawn" ab drawn 110 .exp/main .exp/drain
E="256,8,7168,1;256,8,7168,16;256,8,7168,64;256,8,7168,128;256,8,7168,256;256,8,7168,384;128,8,4096,256"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $E" ab every 110 .exp/main .exp/drain
left=$((585 - (SECONDS - T0)))
bounded $left bash -c "cd .exp/drainh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$? $(grep -E '^-- gpu_tests' $L/suite/summary.txt)"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs drawn every 2> /dev/null; rm -rf logs drawn every
log done
