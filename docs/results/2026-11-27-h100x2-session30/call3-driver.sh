#!/usr/bin/env bash
# Session 30, call 3, nvidia-h100-x2, about 520 s with the start.
# rsv = main a6d396a + pairs numbered by reservation in the large-batch instance of dispatch (reserve_pairs: each
# sending block counts its own groups' pairs, reserves their ranks with one atomic add per expert on the workspace's
# pair_totals, and the last block to arrive publishes the counts), in place of one counting block reading every id
# and each block counting the pairs before its group (call 2's traces at 4096 tokens: 11 us of counting that every
# block of an fp8 dispatch waits for, then up to 18 us of numbering for the last groups).
# 1. graph A/B, DeepSeek-V3 at 512, 1024, 4096 tokens, every rank and drawn, bf16 and fp8 e4m3fn, one round and the
#    base again. 2. the layer's dispatch at 512 and 2048 tokens, two rounds. 3. rsvh (rsv with test hooks):
#    test_all_to_all.py and test_fp8.py.
# Setup (here): for t in base rsv rsvh: git archive a6d396a into .exp/$t; patch -p1 rsv and rsvh with the session's
# working diff of then (dcdd34b keeps it only where the launch quantizes; this diff had it in every launch of the
# large-batch instance); rm -rf .exp/*/docs. carry [".exp/base", ".exp/rsv", ".exp/rsvh"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/base .exp/rsv .exp/rsvh:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1
AB_GRAPH_ARGS="--shapes 256,8,7168,512;256,8,7168,1024;256,8,7168,4096 --counts max;drawn --fp8 e4m3fn" \
  ab large 230 .exp/base .exp/rsv
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 512,2048 --phases dispatch" ab layer 90 .exp/base .exp/rsv
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_fp8.py" bounded 150 bash -c \
  "cd .exp/rsvh && bash tools/gpu_run.sh $L/rsv-tests tests > $L/rsv-tests.log 2>&1"
log "rsv tests rc=$?"
cp $L/rsv-tests/summary.txt $OUT/rsv-tests-summary.txt 2> /dev/null
cd $OUT && tar czf all.tar.gz logs large layer 2> /dev/null; rm -rf logs large layer
log done
