#!/usr/bin/env bash
# Session 41, call 4 (2 x H200), issue 40. Trees (from 1589d3c): main; pool = main where send_group
# answers the first half of its group's own rows (rows - rows / 2) and leaves the rest to whichever
# block is free first after its peers' groups, drawn from a workspace ticket as dispatch draws its
# items (draw_pooled_rows; plain instance only; call4-pool.patch). The blocks whose sends the link
# serves last then answer fewer own rows before the peers' groups (session 40's traces at 512
# tokens: a block's own answers end with its sends + 8-11 us, its peers' 20 us after). Its small
# instance is 118.2 KB (main 88.2; budget 100): timed first, its size after. poolh: hooks, tests.
# carry [".exp/main", ".exp/pool", ".exp/poolh"]
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/main .exp/pool .exp/poolh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 128,256,384,512 --phases dispatch,combine-bwd,combine-bwd-y" \
  ab every 110 .exp/main .exp/pool
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 256,512 --counts drawn;0/256;256/64 --phases combine-bwd" \
  ab unequal 80 .exp/main .exp/pool
left=$((420 - (SECONDS - T0)))
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py" \
  bounded $left bash -c "cd .exp/poolh && bash tools/gpu_run.sh $L/pool-tests tests > $L/pool-tests.log 2>&1"
log "pool tests rc=$?"
cp $L/pool-tests/summary.txt $OUT/pool-tests-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs every unequal 2> /dev/null; rm -rf logs every unequal
log done
