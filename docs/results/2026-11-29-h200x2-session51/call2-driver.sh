#!/usr/bin/env bash
# Session 51, call 2 (2 x H200): f9f0c43, the router weights applied at the experts (issue 40,
# docs/design/weights-at-experts.md step 1), on two GPUs for the first time.
# 1. At world 2, the GPU test files the change touches: test_weights_at_experts.py (new), test_autograd.py,
#    test_round_order.py, test_moe_layer.py, test_all_to_all.py.
# 2. bench_moe_layer, every phase at 128 / 512 / 2048 tokens a rank, the weights at combine (as call 1) and at the
#    experts (--weights-at-experts), one after the other in this call: the backward rounds next to their forward
#    mirrors, the layer's fwd+bwd and graph-train both ways.
# Setup (here): git archive f9f0c43 into .exp/wae and .exp/waeb (--exclude=docs). carry [".exp/wae", ".exp/waeb"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/wae:hooks .exp/waeb >> $OUT/driver.log
log "built rc=$?"
export BENCH_TREE=.exp/waeb
bench layer-combine 120 benchmarks/bench_moe_layer.py --iters 30
bench layer-experts 120 benchmarks/bench_moe_layer.py --iters 30 --weights-at-experts
for n in combine experts; do grep -B 2 -A 40 "^T/rank" $L/layer-$n.log | tail -60 > $OUT/layer-$n-tail.txt; done
T="tests/python/gpu/test_weights_at_experts.py tests/python/gpu/test_autograd.py tests/python/gpu/test_round_order.py"
T="$T tests/python/gpu/test_moe_layer.py tests/python/gpu/test_all_to_all.py"
(cd .exp/wae && GPU_TESTS="$T" bounded $((570 - (SECONDS - T0))) bash tools/gpu_run.sh $L/tests tests -rs > $L/tests.log 2>&1)
log "tests rc=$?"
cp $L/tests/summary.txt $OUT/tests-summary.txt 2> /dev/null
tail -30 $L/tests.log > $OUT/tests-tail.txt
cd $OUT && tar cJf all.tar.xz logs layer-combine layer-experts 2> /dev/null; rm -rf logs layer-combine layer-experts
log done
