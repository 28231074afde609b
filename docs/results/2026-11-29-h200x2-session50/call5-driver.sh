#!/usr/bin/env bash
# Session 50, call 5 (2 x H200; the alternative to call 4 where no four-GPU kind is lent): main 6ddb99f with the
# in-kernel profiler on two real GPUs. The profiler's tests at world 2 (the suite's 6 skipped: they need its build),
# its traced DeepSeek-V3 256-token round (gpu_run.sh's `profile` step), then the chains of one token and of 128 tokens
# a rank, counts drawn, in CUDA-graph steady state (tools/trace_graph.sh): the timelines of issue 35's smallest shapes
# on the current kernels over NVLink (the last ones: 2026-11-26, older kernels; protocol-measurements.md's are the
# one-GPU proxy's). First, on the plain build, bench_moe_layer with every phase: the training rounds next to their
# forward mirrors, the in-run floor and the all-to-all's share of a training step (issue 40's report), which call 2's
# run, six phases only, left out.
# Setup (here): .exp/head and .exp/headb as in call 1. carry [".exp/head", ".exp/headb"].
source tools/device_call.sh
BUILD_TIMEOUT=150 bash tools/build_trees.sh $L .exp/headb >> $OUT/driver.log
log "built rc=$?"
BENCH_TREE=.exp/headb bench layer 120 benchmarks/bench_moe_layer.py --iters 30
grep -B 2 -A 40 "^T/rank" $L/layer.log | tail -60 > $OUT/layer-tail.txt
cd .exp/head || exit 1
bounded 260 bash tools/gpu_run.sh $L/profile profile > $L/profile.log 2>&1
log "profile step rc=$?"
cp $L/profile/summary.txt $OUT/profile-summary.txt 2> /dev/null
TRACE_BUILT=1 bounded $((480 - (SECONDS - T0))) bash tools/trace_graph.sh $L/small "256,8,7168,1;256,8,7168,128" \
  > $L/small.log 2>&1
log "trace_graph rc=$?"
cp $L/small/chain-*.txt $OUT/ 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs layer 2> /dev/null; rm -rf logs layer
log done
