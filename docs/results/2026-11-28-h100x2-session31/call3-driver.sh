#!/usr/bin/env bash
# Session 31, call 3, nvidia-h100-x2, about 330 s with the start.
# Call 2: MOE_A2A_GROUPS_PER_BLOCK=2 made DeepSeek-V3 4096 tokens drawn 14 us faster (bf16 354.0 -> 340.8, fp8 318.0 ->
# 303.8) but every rank at 1024 10-20 us slower and fp8 every rank at 4096 7 us slower. Which counts gain: one engine
# built for 4096 tokens (a serving engine's capacity), equal and unequal pairs, groups_per_block 1, 2, 1 again.
# Setup (here): mkdir -p .exp/base; git archive 67c141e into it; rm -rf .exp/*/docs. carry [".exp/base"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/base >> $OUT/driver.log
log "built rc=$?"
export BENCH_TREE=.exp/base
C="1536/1536;2048/2048;3072/3072;4096/2048;2048/4096;4096/512;512/4096;1024/3072;drawn"
for g in 1 2 1b; do
  MOE_A2A_GROUPS_PER_BLOCK=${g%b} bench pairs-gpb$g 120 benchmarks/bench_graph.py --shapes "256,8,7168,4096" \
    --capacity 4096 --counts "$C" --fp8 e4m3fn --no-microbench --no-floor
done
cd $OUT && tar cJf all.tar.xz logs pairs-* 2> /dev/null; rm -rf logs pairs-*
log done
