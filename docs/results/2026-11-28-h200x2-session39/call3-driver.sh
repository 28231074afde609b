#!/usr/bin/env bash
# Session 39, call 3 (nvidia-h200-x2): own rows in the drain, now in the small instance (kOwnRows false; the drain a separate function, not inlined), from kOwnInDrainBytes (128 DeepSeek-V3 rows: 128 tokens
# at H 7168, 224 at 4096), against main cea285a. .exp/main = main's tree; .exp/drain = the working tree; .exp/drainh =
# the same with the test hooks. carry [".exp/main", ".exp/drain", ".exp/drainh"].
# 1. graph A/B, README's ten shapes with counts drawn, two rounds (below the threshold only code size may differ).
# 2. graph A/B, every rank at one count: DeepSeek-V3 at 96, 128, 192, 256, 384, 512 (own_placed: the larger
#    instance's code only), E128-K8-H4096 at 192 (below) and 256, two rounds.
# 3. graph A/B, DeepSeek-V3 engine of 256 tokens, unequal counts (rank 0 / rank 1), two rounds.
# 4. The whole GPU suite on drainh.
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/main .exp/drain .exp/drainh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $S --counts drawn" ab drawn 110 .exp/main .exp/drain
E="256,8,7168,96;256,8,7168,128;256,8,7168,192;256,8,7168,256;256,8,7168,384;256,8,7168,512;128,8,4096,192;128,8,4096,256"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $E" ab every 120 .exp/main .exp/drain
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes 256,8,7168,256 --counts 256/64;64/256;128/16;16/128;200/100;256/128" \
  ab pairs 100 .exp/main .exp/drain
left=$((585 - (SECONDS - T0)))
bounded $left bash -c "cd .exp/drainh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$? $(grep -E '^-- gpu_tests' $L/suite/summary.txt)"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs drawn every pairs 2> /dev/null; rm -rf logs drawn every pairs
log done
