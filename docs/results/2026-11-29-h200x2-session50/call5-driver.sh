#!/usr/bin/env bash
# Session 50, call 5 (2 x H200; prepared for the rest of the session's device time, the alternative to call 4 where no
# four-GPU kind is lent): main 6ddb99f, in order of what README and the issues lack most.
# 1. The NCCL path next to moe_a2a, eager, with the floor (bench_all2all.py: the challenge shapes with counts drawn,
#    DeepSeek-V3 at 1, 128 and 4096 tokens): the baseline README's table does not have in the same run (the last
#    run of the NCCL path was 2026-11-23).
# 2. fp8 dispatch at 4096 tokens three ways (bench_graph --fp8 e4m3fn --fp8-given): bf16, quantized in the send half,
#    and rows quantized before the call (the copy codec): what quantizing in the send half costs (issue 35: 0.74x of
#    bf16's against the target 0.55x).
# 3. bench_moe_layer with every phase: the training rounds next to their forward mirrors, the in-run floor and the
#    all-to-all's share of a training step (issue 40's report), which call 2's run, six phases only, left out.
# 4. With the in-kernel profiler, the chains of one token and of 128 tokens a rank, counts drawn, in CUDA-graph steady
#    state (tools/trace_graph.sh): issue 35's smallest shapes on the current kernels over NVLink (the last such
#    traces: 2026-11-26 and session 38, older kernels).
# Setup (here): .exp/head and .exp/headb as in call 1. carry [".exp/head", ".exp/headb"]. CALL5_END (default 480 s)
# ends the trace step, the last, that many seconds after the start: with less device time left, step 4 gets less.
source tools/device_call.sh
BUILD_TIMEOUT=150 bash tools/build_trees.sh $L .exp/headb .exp/head:profiler >> $OUT/driver.log
log "built rc=$?"
export BENCH_TREE=.exp/headb
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,128;256,8,7168,4096"
bench nccl 130 benchmarks/bench_all2all.py --systems nccl,moe_a2a --shapes "$S"
grep -B 2 -A 60 -E "^ *shape " $L/nccl.log | tail -80 > $OUT/nccl-table.txt
bench fp8given 100 benchmarks/bench_graph.py --shapes 256,8,7168,4096 --counts "max;drawn" --fp8 e4m3fn --fp8-given \
  --no-microbench
grep -A 12 -E "^ *shape " $L/fp8given.log > $OUT/fp8given-table.txt
bench layer 110 benchmarks/bench_moe_layer.py --iters 30
grep -B 2 -A 40 "^T/rank" $L/layer.log | tail -60 > $OUT/layer-tail.txt
cd .exp/head || exit 1
TRACE_BUILT=1 bounded $((${CALL5_END:-480} - (SECONDS - T0))) bash tools/trace_graph.sh $L/small "256,8,7168,1;256,8,7168,128" \
  > $L/small.log 2>&1
log "trace_graph rc=$?"
cp $L/small/chain-*.txt $OUT/ 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs nccl fp8given layer 2> /dev/null; rm -rf logs nccl fp8given layer
log done
