#!/usr/bin/env bash
# Prepared in session 40 for the next two-GPU call (nvidia-h200-x2 or nvidia-h100-x2), about 480 s with the start.
# Issue 40: session 40's call 5 found the backward of combine 7-11% faster at 256 and 384 tokens every rank when a
# group of 2 or 3 rows already splits its waves (6 answer the own rows from the start, 2 send: call5-ans2.diff), but
# 7-10% slower where a peer holds fewer tokens (0/256, 256/64) and 2-7% slower drawn. next-balanced-answers.patch
# (compile-checked for NVIDIA and gfx942, never run) does it only where every rank holds at least 3/4 of the most
# tokens (balanced_sources, as Turns decides), reading the counts before the sends only where this rank's groups hold
# 2 or 3 rows. Its small instance is 93.8 KB (main 88.2; budget 100): time it against main and ans2. Then
# next-answer-loop.cu (README, call 4) on GPU 0: what holds the answers below the HBM's rate.
# Setup (here): for t in main ans2 gate gateh: mkdir -p .exp/$t and `git archive HEAD | tar -x -C .exp/$t
# --exclude=docs`; (cd .exp/ans2 && patch -p0 csrc/ep/combine_backward.cu <
# ../../docs/results/2026-11-28-h200x2-session40/call5-ans2.diff); (cd .exp/gate && patch -p1 <
# ../../docs/results/2026-11-28-h200x2-session40/next-balanced-answers.patch), the same for gateh.
# carry [".exp/main", ".exp/ans2", ".exp/gate", ".exp/gateh"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/main .exp/ans2 .exp/gate .exp/gateh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 128,256,384,512 --phases dispatch,combine-bwd,combine-bwd-y" \
  ab every 150 .exp/main .exp/ans2 .exp/gate
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 256,384 --counts drawn;0/256;256/64;256/192;384/96 --phases combine-bwd" \
  ab unequal 120 .exp/main .exp/ans2 .exp/gate
# The answer loop alone on GPU 0 (next-answer-loop.cu): what holds it below the HBM's rate.
D=docs/results/2026-11-28-h200x2-session40
bounded 90 bash -c "nvcc -arch=sm_90 -O3 -std=c++17 -o $OUT/answer-loop $D/next-answer-loop.cu && $OUT/answer-loop" \
  > $OUT/answer-loop.txt 2>&1
log "answer loop rc=$?"
rm -f $OUT/answer-loop
left=$((500 - (SECONDS - T0)))
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py" \
  bounded $left bash -c "cd .exp/gateh && bash tools/gpu_run.sh $L/gate-tests tests > $L/gate-tests.log 2>&1"
log "gate tests rc=$?"
cp $L/gate-tests/summary.txt $OUT/gate-tests-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs every unequal 2> /dev/null; rm -rf logs every unequal
log done
