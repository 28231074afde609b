#!/usr/bin/env bash
# Session 50, call 6 (one H200: no two-GPU kind lent after call 3): a smoke run of bench_graph --fp8-given (d30501a),
# two ranks time-sliced on the one GPU (MOE_A2A_TEST_ONE_GPU=1): the rows quantized before the call go through
# dispatch(x_fp8, ..., x_scale=) in the CUDA graph and eagerly, next to the quantizing dispatch and bf16. The times
# are time slices of one GPU and mean nothing; call 5 (two GPUs) times it.
# Setup (here): .exp/headb as in call 1. carry [".exp/headb"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/headb >> $OUT/driver.log
log "built rc=$?"
MOE_A2A_TEST_ONE_GPU=1 BENCH_NPROC=2 BENCH_TREE=.exp/headb bench smoke 200 benchmarks/bench_graph.py \
  --shapes 256,8,7168,128 --counts "max;drawn" --fp8 e4m3fn --fp8-given --no-microbench --no-floor --replays 5
grep -A 12 -E "^ *shape |^fp8 " $L/smoke.log > $OUT/smoke-tables.txt
cd $OUT && tar cJf all.tar.xz logs smoke 2> /dev/null; rm -rf logs smoke
log done
