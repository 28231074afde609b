#!/usr/bin/env bash
# Session 41, call 5 (2 x H200), issue 40. Trees (from 1589d3c): main; send2 = main whose sending
# waves keep two chunks' loads in flight (store_group_grads, kSendsInFlight = 2: the loads, then
# the stores; call5-send2.patch). Session 40's traces at 512 tokens had a block's 2 senders done
# between 8 and 26 us, 7.5 MB at about 290 GB/s, one 2 KB load at a time a wave in an HBM busy
# with the answers. Its small instance is 98.5 KB (main 88.2; budget 100). send2h: hooks, tests.
# carry [".exp/main", ".exp/send2", ".exp/send2h"]
source tools/device_call.sh
BUILD_TIMEOUT=150 bash tools/build_trees.sh $L .exp/main .exp/send2 .exp/send2h:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 128,256,384,512 --phases dispatch,combine-bwd,combine-bwd-y" \
  ab every 100 .exp/main .exp/send2
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 256 --counts drawn;0/256;256/64 --phases combine-bwd" \
  ab unequal 50 .exp/main .exp/send2
left=$((290 - (SECONDS - T0)))
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py" \
  bounded $left bash -c "cd .exp/send2h && bash tools/gpu_run.sh $L/send2-tests tests > $L/send2-tests.log 2>&1"
log "send2 tests rc=$?"
cp $L/send2-tests/summary.txt $OUT/send2-tests-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs every unequal 2> /dev/null; rm -rf logs every unequal
log done
