#!/usr/bin/env bash
# Session 33, call 2: nvidia-h100-x2, about 450 s with the start. Written in session 32 as next-driver-2.sh.
# next-backward-turns.patch (compile-checked for NVIDIA and gfx942 only): the backward of combine takes turns as
# dispatch and combine do since session 32 (receives_first): where this rank sends more than one group a block (from
# 2113 tokens at 132 SMs) and every rank holds at least 3/4 of the most tokens, odd blocks answer group g between
# their sends of g and g + G instead of sending all their groups first. Only the sub-ranges' instance (an engine of
# groups of 8 tokens or more) has the code, in a loop with one call site of send_group and of answer_group (a second
# send_group added 44 KB); the other instance is written apart and is f2f331f's code, 88.2 / 97.9 / 74.0 KB. Sizes
# as patched (sm_90): the sub-ranges' instance 100.9 / 110.1 / 86.5 KB (was 100.6 / 110.1 / 86.4), within budget.
# Training with equal micro-batches above 2112 tokens a rank would gain.
# 1. The MoE layer's rounds (AB_BENCH=layer), every rank 2048 (unchanged: one group a block), 2304 and 4096 tokens,
#    main against the patch, two rounds.
# 2. Its tests on a hooks build: test_all_to_all.py (test_groups_doubled_where_they_would_be_large runs a training
#    round at 2368 tokens every rank on every SM, bitwise against a split launch), test_autograd.py,
#    test_moe_layer.py.
# Setup (here): mkdir -p .exp/{main,bwd,bwdh}; git archive HEAD into each; (cd .exp/bwd && patch -p1 <
# ../../docs/results/2026-11-28-h100x2-session32/next-backward-turns.patch), same for bwdh; rm -rf .exp/*/docs.
# carry [".exp/main", ".exp/bwd", ".exp/bwdh"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/main .exp/bwd .exp/bwdh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 2048,2304,4096" ab layer 240 .exp/main .exp/bwd
left=$((560 - (SECONDS - T0)))
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py" \
  bounded $left bash -c "cd .exp/bwdh && bash tools/gpu_run.sh $L/bwd-tests tests > $L/bwd-tests.log 2>&1"
log "bwd tests rc=$?"
cp $L/bwd-tests/summary.txt $OUT/bwd-tests-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs layer 2> /dev/null; rm -rf logs layer
log done
