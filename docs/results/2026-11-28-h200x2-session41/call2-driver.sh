#!/usr/bin/env bash
# Session 41, call 2 (2 x H200), issue 40. Trees (from 1589d3c): main; gate2 = session 40's
# next-balanced-answers.patch with its ask widened to every count where some group holds 2 rows
# and some fewer than 4 (call2-gate2.patch), so that 256 tokens every rank splits too; even = main
# with bench_moe_layer's routes replaced by ones that give every rank exactly topk / world of each
# token's experts (call2-even-routes.patch, a diagnostic: how much the pairs' spread over groups
# costs the answers); gate2h = gate2 with hooks, for the gradient tests.
# carry [".exp/main", ".exp/gate2", ".exp/even", ".exp/gate2h"]
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/main .exp/gate2 .exp/even .exp/gate2h:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 128,256,320,384,512 --phases dispatch,combine-bwd,combine-bwd-y" \
  ab every 170 .exp/main .exp/gate2 .exp/even
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 256 --counts drawn;0/256;256/64;256/192 --phases combine-bwd" \
  ab unequal256 70 .exp/main .exp/gate2
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 384 --counts drawn;384/96;0/384;384/288 --phases combine-bwd" \
  ab unequal384 70 .exp/main .exp/gate2
left=$((520 - (SECONDS - T0)))
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py" \
  bounded $left bash -c "cd .exp/gate2h && bash tools/gpu_run.sh $L/gate2-tests tests > $L/gate2-tests.log 2>&1"
log "gate2 tests rc=$?"
cp $L/gate2-tests/summary.txt $OUT/gate2-tests-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs every unequal256 unequal384 2> /dev/null; rm -rf logs every unequal256 unequal384
log done
