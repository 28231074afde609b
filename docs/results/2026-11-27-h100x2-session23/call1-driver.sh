#!/usr/bin/env bash
# Session 23, call 1, nvidia-h100-x2: dispatch's receive side looks for its first item's rows while the segments are
# laid out (peek_first_item), and every await_some_signals' first look is an acquire load (a signal already there
# costs one load, not two), against main (7546fce). Graph A/B, two rounds, the challenge shapes and DeepSeek-V3 at
# 1..128 tokens, counts drawn; the layer's dispatch (eager) and backward of combine at 128
# tokens; then test_all_to_all.py, test_fp8.py and test_autograd.py on the variant.
# Setup (on the CPU machine): .exp/base = git archive 7546fce; .exp/peek = the working tree; each without docs/.
# carry [".exp/base", ".exp/peek"]. "." (the working tree, with hooks) runs the tests.
source tools/device_call.sh
BUILD_TIMEOUT=250 bash tools/build_trees.sh $L .exp/base .exp/peek .:hooks >> $OUT/driver.log
log "built rc=$?"
export AB_BUILT=1 AB_ROUNDS=2
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_GRAPH_ARGS="--shapes $S --counts drawn" ab graph 230 .exp/base .exp/peek
AB_BENCH=layer AB_LAYER_ARGS="--tokens 128 --counts max;drawn --phases dispatch,combine-bwd" ab layer 90 .exp/base .exp/peek
GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_fp8.py tests/python/gpu/test_autograd.py" \
  timeout 150 bash tools/gpu_run.sh $OUT/tests tests > $L/tests-driver.log 2>&1
log "tests rc=$?"; cp $OUT/tests/summary.txt $OUT/tests-summary.txt
cd $OUT && tar czf all.tar.gz logs graph layer tests && rm -rf logs graph layer tests
log done
