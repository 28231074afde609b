#!/usr/bin/env bash
# Session 40, call 2 (nvidia-h200-x2): issue 40, the backward of combine's answers as a chain of loads. A task of
# answer_rows is a chunk (512 tokens) or two (2048) of one row, and before its chunks' loads it waited for the slot's
# token, then its positions, then their weights: three dependent loads, as long as the work. call2-rt.patch: a wave
# loads its next task's token and positions before it answers the current task, the positions whatever the token
# (an empty slot's are -1), and the weights' shuffles come after the chunks' loads. Trees: .exp/main (HEAD 30df1b9),
# .exp/rt (the patch), .exp/rth (the patch, test hooks).
# 1. bench_moe_layer every rank 128 / 256 / 512 / 2048, two rounds; 2. drawn at 512 and 0/2048, 2048/512, two rounds;
# 3. test_all_to_all.py, test_autograd.py, test_moe_layer.py on .exp/rth.
# carry [".exp/main", ".exp/rt", ".exp/rth"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/main .exp/rt .exp/rth:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 128,256,512,2048 --phases dispatch,combine-bwd,combine-bwd-y,hbm-y" \
  ab every 150 .exp/main .exp/rt
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 512 --counts drawn --phases dispatch,combine-bwd,combine-bwd-y" \
  ab drawn 80 .exp/main .exp/rt
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 2048 --counts 0/2048;2048/512 --phases dispatch,combine-bwd" \
  ab pairs 100 .exp/main .exp/rt
left=$((560 - (SECONDS - T0)))
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py" \
  bounded $left bash -c "cd .exp/rth && bash tools/gpu_run.sh $L/rt-tests tests > $L/rt-tests.log 2>&1"
log "rt tests rc=$?"
cp $L/rt-tests/summary.txt $OUT/rt-tests-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs every drawn pairs 2> /dev/null; rm -rf logs every drawn pairs
log done
