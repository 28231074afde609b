#!/usr/bin/env bash
# Session 40, call 5 (nvidia-h200-x2): issue 40 at 256 tokens. Call 4's trace of main at 256 tokens every rank: a
# group holds 2 rows there, so every wave sends first (own_answer_waves: from 4 rows, half the block's waves) and the
# own rows' answers start at about 5 us; they hold the blocks until about 19 us, when the peer's gradients have
# landed, and the peers' answers follow to about 28. Trees: .exp/main (HEAD 30df1b9); .exp/ans2 (call5-ans2.diff:
# 6 waves answer from the start, 2 send, from 2 rows a group); .exp/ans1 (call5-ans1.diff: from 1 row, so at 128
# tokens too); .exp/ans2h (ans2, test hooks).
# 1. bench_moe_layer every rank 128 / 256 / 384 / 512, two rounds; 2. drawn 256 / 512 and 0/256, 256/64, two rounds;
# 3. test_all_to_all.py, test_autograd.py, test_moe_layer.py on .exp/ans2h.
# carry [".exp/main", ".exp/ans2", ".exp/ans1", ".exp/ans2h"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/main .exp/ans2 .exp/ans1 .exp/ans2h:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 128,256,384,512 --phases dispatch,combine-bwd,combine-bwd-y" \
  ab every 140 .exp/main .exp/ans2 .exp/ans1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 256,512 --counts drawn;0/256;256/64 --phases combine-bwd" \
  ab drawn 100 .exp/main .exp/ans2 .exp/ans1
left=$((420 - (SECONDS - T0)))
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py" \
  bounded $left bash -c "cd .exp/ans2h && bash tools/gpu_run.sh $L/ans2-tests tests > $L/ans2-tests.log 2>&1"
log "ans2 tests rc=$?"
cp $L/ans2-tests/summary.txt $OUT/ans2-tests-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs every drawn 2> /dev/null; rm -rf logs every drawn
log done
