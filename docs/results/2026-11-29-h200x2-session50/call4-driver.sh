#!/usr/bin/env bash
# Session 50, call 4 (4 x H200, nvidia-h200-x4, lent this session): main 6ddb99f at world 4 on four real GPUs, which
# no machine has run since the twenty-second session (sessions 42-49 ran worlds 3-8 time-sliced on one GPU). First the
# ten drawn shapes and DeepSeek-V3's 128 and 4096 tokens in graph steady state and eager, floors in the same run; then
# the whole GPU suite at world 4 on the hooks build, in the time left (the call ends by 450 s: the session's last
# device time).
# Setup (here): .exp/head and .exp/headb as in call 1. carry [".exp/head", ".exp/headb"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/head:hooks .exp/headb >> $OUT/driver.log
log "built rc=$?"
export BENCH_TREE=.exp/headb
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
bench graph4 80 benchmarks/bench_graph.py --shapes "$S" --counts drawn
grep -A 14 -E "^ *shape " $L/graph4.log > $OUT/graph4-table.txt
bench big4 70 benchmarks/bench_graph.py --shapes "256,8,7168,128;256,8,7168,4096" --counts "max;drawn"
grep -A 8 -E "^ *shape " $L/big4.log > $OUT/big4-table.txt
(cd .exp/head && bounded $((450 - (SECONDS - T0))) bash tools/gpu_run.sh $L/suite4 tests -rs > $L/suite4.log 2>&1)
log "suite at world 4 rc=$?"
cp $L/suite4/summary.txt $OUT/suite4-summary.txt 2> /dev/null
tail -5 $L/suite4.log > $OUT/suite4-tail.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs graph4 big4 2> /dev/null; rm -rf logs graph4 big4
log done
