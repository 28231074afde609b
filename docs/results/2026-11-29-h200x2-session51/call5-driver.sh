#!/usr/bin/env bash
# Session 51, call 5 (2 x H200): 1f72dcc, call 4 again after its fixes: the fused SwiGLU given the experts' rows (the
# rows of no expert are zeros it does not read, so the layer masks no weights) and rounding h as torch's chain does
# (call 4: one bf16 element of the layer against the dense model off; the op-coverage test missed the swiglu ops).
# 1. bench_moe_layer, every phase at 128 / 512 / 2048 tokens a rank, three layers one after the other: f9f0c43 (torch
#    ops for the activation) with the weights at combine, then 1f72dcc with the weights at combine and at the experts.
# 2. The whole GPU suite at world 2 on 1f72dcc.
# Setup (here): git archive 1f72dcc into .exp/f5 and .exp/f5b, f9f0c43 into .exp/waeb (--exclude=docs).
# carry [".exp/f5", ".exp/f5b", ".exp/waeb"].
source tools/device_call.sh
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L .exp/f5:hooks .exp/f5b .exp/waeb >> $OUT/driver.log
log "built rc=$?"
BENCH_TREE=.exp/waeb bench layer-old 120 benchmarks/bench_moe_layer.py --iters 30
BENCH_TREE=.exp/f5b bench layer-combine 120 benchmarks/bench_moe_layer.py --iters 30
BENCH_TREE=.exp/f5b bench layer-experts 120 benchmarks/bench_moe_layer.py --iters 30 --weights-at-experts
for n in old combine experts; do grep -B 2 -A 40 "^T/rank" $L/layer-$n.log | tail -60 > $OUT/layer-$n-tail.txt; done
(cd .exp/f5 && bounded $((585 - (SECONDS - T0))) bash tools/gpu_run.sh $L/suite tests -rs > $L/suite.log 2>&1)
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2> /dev/null
tail -40 $L/suite.log > $OUT/suite-tail.txt
cd $OUT && tar cJf all.tar.xz logs layer-old layer-combine layer-experts 2> /dev/null
rm -rf logs layer-old layer-combine layer-experts
log done
