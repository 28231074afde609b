#!/usr/bin/env bash
# Session 31, call 4, nvidia-h100-x2, about 600 s with the start.
# dg = main + twice the token groups above 2048 tokens (EpConfig::num_groups, kDoubleGroupsAbove): what call 3's
# groups_per_block=2 gained at unequal counts, without its losses at 1024-2048 tokens.
# 1. graph A/B, one engine built for 4096 tokens, DeepSeek-V3, bf16 and fp8 e4m3fn, pairs and drawn, two rounds.
# 2. README's ten drawn shapes, one round (their path is unchanged; the kernels' group arithmetic is not).
# 3. the whole GPU suite on dgh (dg, hooks build), with the new tests of the doubled groups.
# Setup (here): mkdir -p .exp/{base,dg,dgh}; git archive 67c141e into each; the session's diff patched into dg and
# dgh; rm -rf .exp/*/docs. carry [".exp/base", ".exp/dg", ".exp/dgh"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/base .exp/dg .exp/dgh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes 256,8,7168,4096 --capacity 4096 --fp8 e4m3fn \
  --counts 4096/512;1024/3072;2304/2304;3072/3072;4096/4096;drawn" ab large 190 .exp/base .exp/dg
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab drawn 70 .exp/base .exp/dg
left=$((590 - (SECONDS - T0)))
bounded $left bash -c "cd .exp/dgh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs large drawn 2> /dev/null; rm -rf logs large drawn
log done
