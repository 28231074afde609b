#!/usr/bin/env bash
# Session 32, call 4: nvidia-h100-x2, about 420 s with the start.
# call4-balanced.patch: the alternate turns only where every rank holds at least 3/4 of the most tokens
# (balanced_sources), in dispatch and combine. Call 3's rule (by the sources' mean) still lost 0.6-2.2% wherever the
# counts differed and won 3.5% only where they were equal.
# 1. graph A/B, engine of 4096 tokens, DeepSeek-V3 bf16 and fp8 e4m3fn, pairs (4096/3072: the ratio's edge) and
#    drawn, two rounds.
# 2. README's ten drawn shapes (up to 256 tokens: one group a block, only code size changes), two rounds.
# 3. test_all_to_all.py and test_fp8.py on bal's hooks build.
# Setup (here): mkdir -p .exp/{main,bal,balh}; git archive HEAD (f2f331f) into each; (cd .exp/bal && patch -p1 <
# ../../docs/results/2026-11-28-h100x2-session32/call4-balanced.patch), same for balh; rm -rf .exp/*/docs.
# carry [".exp/main", ".exp/bal", ".exp/balh"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/main .exp/bal .exp/balh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes 256,8,7168,4096 --capacity 4096 --fp8 e4m3fn \
  --counts 4096/512;4096/3072;2304/2304;4096/4096;drawn" ab large 170 .exp/main .exp/bal
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $S --counts drawn" ab drawn 100 .exp/main .exp/bal
left=$((560 - (SECONDS - T0)))
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_fp8.py" \
  bounded $left bash -c "cd .exp/balh && bash tools/gpu_run.sh $L/bal-tests tests > $L/bal-tests.log 2>&1"
log "bal tests rc=$?"
cp $L/bal-tests/summary.txt $OUT/bal-tests-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs large drawn 2> /dev/null; rm -rf logs large drawn
log done
