#!/usr/bin/env bash
# Session 50, call 1 (2 x H200, the first two-GPU machine since session 41): main 6ddb99f as landed, which no two-GPU
# machine has run (sessions 42-49 had one GPU: c54dd95, ef6dba0 and c33ea29 changed the kernels since 1589d3c).
# The whole GPU suite at world 2 on the hooks build, then README's performance table on the plain build (the ten drawn
# shapes, DeepSeek-V3 128 tokens with issue 35's pairs, the 4096 rows with fp8), floors and eager in the same runs.
# Setup (here): mkdir -p .exp/head .exp/headb; git archive HEAD | tar -x -C .exp/head --exclude=docs (the same into
# .exp/headb). carry [".exp/head", ".exp/headb"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/head:hooks .exp/headb >> $OUT/driver.log
log "built rc=$?"
(cd .exp/head && bounded 300 bash tools/gpu_run.sh $L/suite tests -rs > $L/suite.log 2>&1)
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
export BENCH_TREE=.exp/headb
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
bench graph 70 benchmarks/bench_graph.py --shapes "$S" --counts drawn
grep -A 14 -E "^ *shape " $L/graph.log > $OUT/graph-table.txt
bench pairs 60 benchmarks/bench_graph.py --shapes 256,8,7168,128 --counts issue35
grep -A 14 -E "^ *shape " $L/pairs.log > $OUT/pairs-table.txt
bench big 70 benchmarks/bench_graph.py --shapes 256,8,7168,4096 --counts "max;drawn;64/4096" --fp8 e4m3fn
grep -A 8 -E "^ *shape " $L/big.log > $OUT/big-table.txt
cd $OUT && tar cJf all.tar.xz logs graph pairs big 2> /dev/null; rm -rf logs graph pairs big
log done
