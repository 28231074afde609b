#!/usr/bin/env bash
# Session 42, call 2 (2 x H200): session 41's prepared call (../2026-11-28-h200x2-session41/next-driver.sh), with 128 tokens added
# to the A/B of every rank at one count: there every group holds one token, the split does not apply, and only its code runs.
# Issue 40: session 40's trace at 512 tokens (blocks.py, session40-call4-blocks-T512.txt) has the blocks whose two
# senders the link serves last (their sends end at 26 us against 4-23 for the others) end their own rows last (37
# us), and with them the round. next-split-senders.patch (compile-checked for NVIDIA and gfx942, never run) gives
# the sends to blocks [0, S) alone, every wave of theirs sending their groups one after the other, and lets the
# other blocks answer a share of this rank's own rows each from the start, with no send beside them; then every
# block answers its peers' groups as now. Plain instance only (engines below 1056 tokens at 132 SMs), where some
# group holds 2 rows or more (launch_combine_backward decides, and sizes each answering block's share there).
# S from CombineBackwardArgs::senders (the tree's default) or MOE_A2A_BWD_SENDERS.
# Its small instance is 95.1 KB (main 88.2; budget 100; fp16's and fp32's are over theirs): size comes after speed.
# Setup (here): for t in main s22 s33 s66 s33h: mkdir -p .exp/$t and `git archive HEAD | tar -x -C .exp/$t
# --exclude=docs`; for t in s22 s33 s66 s33h: (cd .exp/$t && patch -p1 <
# ../../docs/results/2026-11-28-h200x2-session41/next-split-senders.patch) and set the default:
# sed -i "s/int32_t senders = 0;/int32_t senders = ${t//[!0-9]/};/" .exp/$t/include/moe_a2a/ep/kernels.h
# (s33h: 33). carry [".exp/main", ".exp/s22", ".exp/s33", ".exp/s66", ".exp/s33h"].
# The gradient tests run on s33h with MOE_A2A_BWD_SENDERS=1: test_autograd.py's "own-rows-while-sending" grids
# (2 blocks, 12 tokens a group) then send from block 0 alone and answer the own rows on block 1.
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/main .exp/s22 .exp/s33 .exp/s66 .exp/s33h:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 128,256,384,512 --phases dispatch,combine-bwd,combine-bwd-y" \
  ab every 200 .exp/main .exp/s22 .exp/s33 .exp/s66
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 256,512 --counts drawn;0/256;256/64 --phases combine-bwd" \
  ab unequal 80 .exp/main .exp/s33
# bench_moe_layer's CUDA-graph phases (this checkout's script, main's package): a training step's four rounds in graph
# steady state, with the floor, every rank at one count.
BENCH_TREE=.exp/main bench layer-graph 150 benchmarks/bench_moe_layer.py --tokens 128,512,2048 \
  --phases dispatch,combine,dispatch-bwd,combine-bwd,graph-fwd,graph-train --iters 30 --no-check
tail -30 $L/layer-graph.log > $OUT/layer-graph-tail.txt
left=$((500 - (SECONDS - T0)))
MOE_A2A_BWD_SENDERS=1 GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_all_to_all.py" \
  bounded $left bash -c "cd .exp/s33h && bash tools/gpu_run.sh $L/split-tests tests > $L/split-tests.log 2>&1"
log "split tests rc=$?"
cp $L/split-tests/summary.txt $OUT/split-tests-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs every unequal layer-graph 2> /dev/null; rm -rf logs every unequal layer-graph
log done
