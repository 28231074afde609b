#!/usr/bin/env bash
# Written in session 28; ran as it is in session 29, call 1 (../2026-11-27-h100x2-session29/call1/). nvidia-h100-x2, about 600 s with the start (the trace only if time is left).
# Combine's start signal off the send path. Session 28's traces of main (call 4) at DeepSeek-V3 one token and
# E8-K2-H6144-T16: block 0's route stage ends 0.8-1.5 us after the other blocks' (every run), as the release of the
# start signal (block 0's last wave) holds the block's barriers; block 0 then sends its partial sums late, and the
# token blocks that wait for them can end last (7.1 against 6.0-6.2 us at one token, run 4: the kernel's end).
# ssr = main + next-start-relaxed.patch: the start signal a relaxed store (it publishes no data, only reads done).
# ssl = main + next-start-last-block.patch: published, with its release, by the last sending block, which below its
#       share of the units sends nothing.
# 1. graph d+c A/B of base, ssr, ssl: the ten README shapes drawn, two rounds; 4096 drawn, one round; the layer's
# rounds at 128 and 512 tokens (eager: the backward of dispatch waits for the start signals). 2. ssr's
# start-signal tests (hooks build): test_all_to_all.py, test_autograd.py, test_faults.py, test_round_order.py.
# 3. a profiler build of ssr and its traces at the same two shapes (does block 0 send with the others now?).
# Setup (here): for t in base ssr ssrh ssl: mkdir -p .exp/$t && git archive HEAD | tar -x -C .exp/$t; then
# (cd .exp/ssr && patch -p1 < ../../docs/results/2026-11-27-h100x2-session28/next-start-relaxed.patch), the same for
# ssrh, and for ssl with next-start-last-block.patch; rm -rf .exp/*/docs.
# carry [".exp/base", ".exp/ssr", ".exp/ssrh", ".exp/ssl"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/base .exp/ssr .exp/ssl .exp/ssrh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 130 .exp/base .exp/ssr .exp/ssl
AB_ROUNDS=1 AB_GRAPH_ARGS="--shapes 256,8,7168,4096 --counts drawn" ab big 90 .exp/base .exp/ssr .exp/ssl
# The backward of dispatch awaits every rank's start signal before it writes (issue 40: 1.15x the forward combine at
# 128 tokens in call 3): a relaxed one lands a fence sooner.
AB_BENCH=layer AB_ROUNDS=1 AB_LAYER_ARGS="--tokens 128,512 --phases dispatch,combine,dispatch-bwd,combine-bwd" \
  ab layer 90 .exp/base .exp/ssr .exp/ssl
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_autograd.py tests/python/gpu/test_faults.py \
tests/python/gpu/test_round_order.py" bounded 180 bash -c "cd .exp/ssrh && bash tools/gpu_run.sh $L/ssr-tests tests \
  > $L/ssr-tests.log 2>&1"
log "ssr tests rc=$?"
cp $L/ssr-tests/summary.txt $OUT/ssr-tests-summary.txt 2> /dev/null
left=$((545 - (SECONDS - T0)))
if [ $left -gt 100 ]; then
  bounded $left bash -c "cd .exp/ssr && MOE_A2A_PROFILE=1 MOE_A2A_TEST_HOOKS=0 MAX_JOBS=16 python3 setup.py build_ext \
    --inplace --force > $L/build-profiler.log 2>&1 && TRACE_BUILT=1 TRACE_TIMEOUT=80 bash tools/trace_graph.sh \
    $OUT/trace '256,8,7168,1;8,2,6144,16' > $L/trace.log 2>&1"
  log "ssr trace rc=$?"
  for f in $OUT/trace/chain-*.txt; do [ -f "$f" ] && cp "$f" "$OUT/ssr-$(basename "$f")"; done
fi
cd $OUT && tar czf all.tar.gz logs graph big layer trace 2> /dev/null; rm -rf logs graph big layer trace
log done
