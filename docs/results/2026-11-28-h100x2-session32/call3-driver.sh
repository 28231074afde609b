#!/usr/bin/env bash
# Session 32, call 3: nvidia-h100-x2, about 480 s with the start.
# call3-turns.patch: call 2's alternate turns (next-alternate-turns.patch) kept only where the rank's receive half
# carries at least its send half's rows (receives_first): in combine a rank of at least the sources' mean tokens, in
# dispatch one of at most the mean. Call 2 had every rank alternate: combine 5-6% faster with equal counts, but 3%
# slower at 4096/512 and fp8 dispatch 9-11% slower at 1024/3072 and drawn.
# 1. graph A/B, engine of 4096 tokens, DeepSeek-V3 bf16 and fp8 e4m3fn, pairs and drawn, two rounds.
# 2. The whole GPU suite on turns' hooks build.
# Setup (here): mkdir -p .exp/{main,turns,turnsh}; git archive HEAD (f2f331f) into each; (cd .exp/turns && patch -p1 <
# ../../docs/results/2026-11-28-h100x2-session32/call3-turns.patch), same for turnsh; rm -rf .exp/*/docs.
# carry [".exp/main", ".exp/turns", ".exp/turnsh"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/main .exp/turns .exp/turnsh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes 256,8,7168,4096 --capacity 4096 --fp8 e4m3fn \
  --counts 4096/512;1024/3072;2304/2304;4096/2304;4096/4096;drawn" ab large 190 .exp/main .exp/turns
left=$((590 - (SECONDS - T0)))
bounded $left bash -c "cd .exp/turnsh && bash tools/gpu_run.sh $L/suite tests > $L/suite.log 2>&1"
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs large 2> /dev/null; rm -rf logs large
log done
