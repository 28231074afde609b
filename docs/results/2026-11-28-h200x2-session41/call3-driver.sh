#!/usr/bin/env bash
# Session 41, call 3 (2 x H200), issue 40. Trees (from 1589d3c): main; early = main with the
# sources' counts loaded by one wave inside send_group (load_route_tokens_wave, off the publish's
# path), so that the plain instance's blocks with a group skip load_route_tokens (a global load
# and two block barriers) between their own answers and the wait for the peers' groups
# (call3-early.patch); earlyh = early with hooks, for the gradient tests.
# carry [".exp/main", ".exp/early", ".exp/earlyh"]
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/main .exp/early .exp/earlyh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_BENCH=layer AB_ROUNDS=3 AB_LAYER_ARGS="--tokens 128,256,384,512 --phases dispatch,combine-bwd,combine-bwd-y" \
  ab every 150 .exp/main .exp/early
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 128,256 --counts drawn;0/128;128/32 --phases combine-bwd" \
  ab unequal 90 .exp/main .exp/early
left=$((480 - (SECONDS - T0)))
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py" \
  bounded $left bash -c "cd .exp/earlyh && bash tools/gpu_run.sh $L/early-tests tests > $L/early-tests.log 2>&1"
log "early tests rc=$?"
cp $L/early-tests/summary.txt $OUT/early-tests-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs every unequal 2> /dev/null; rm -rf logs every unequal
log done
