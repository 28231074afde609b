#!/usr/bin/env bash
# Session 51, call 4 (2 x H200): dc124d3, the experts' SwiGLU as one kernel each way (moe_a2a.swiglu), weighted
# where the experts apply the router weights.
# 1. bench_moe_layer, every phase at 128 / 512 / 2048 tokens a rank, three layers one after the other: f9f0c43 (call 2's
#    library: torch ops for the activation) with the weights at combine, then dc124d3 with the weights at combine and
#    at the experts: what the fused activation gains each way, and whether the step with the weights at the experts
#    is now faster than the step with them at combine.
# 2. The whole GPU suite at world 2 on dc124d3 (test_swiglu.py new).
# Setup (here): git archive dc124d3 into .exp/sw and .exp/swb, f9f0c43 into .exp/waeb (--exclude=docs).
# carry [".exp/sw", ".exp/swb", ".exp/waeb"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/sw:hooks .exp/swb .exp/waeb >> $OUT/driver.log
log "built rc=$?"
BENCH_TREE=.exp/waeb bench layer-old 120 benchmarks/bench_moe_layer.py --iters 30
BENCH_TREE=.exp/swb bench layer-combine 120 benchmarks/bench_moe_layer.py --iters 30
BENCH_TREE=.exp/swb bench layer-experts 120 benchmarks/bench_moe_layer.py --iters 30 --weights-at-experts
for n in old combine experts; do grep -B 2 -A 40 "^T/rank" $L/layer-$n.log | tail -60 > $OUT/layer-$n-tail.txt; done
(cd .exp/sw && bounded $((585 - (SECONDS - T0))) bash tools/gpu_run.sh $L/suite tests -rs > $L/suite.log 2>&1)
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
tail -40 $L/suite.log > $OUT/suite-tail.txt
cd $OUT && tar cJf all.tar.xz logs layer-old layer-combine layer-experts 2> /dev/null
rm -rf logs layer-old layer-combine layer-experts
log done
