#!/usr/bin/env bash
# Prepared for the next session (not run): nvidia-h100-x2, about 330 s with the start. next-gemv-out-contiguous.patch
# (written on the CPU in session 34 after its device time was spent: compiles for sm_90 and gfx942, CPU tests pass,
# never run on a GPU): grouped_gemv for weights contiguous along out (w[e] = the transpose of an [in, out] matrix:
# gpt-oss's and Llama 4's experts, and moe_a2a.layers' w_gate / w_up / w_down), a kernel of its own (8 lanes a 64-column
# slab of 16-byte vectors, the other lanes and the waves split `in`, sums through shared memory in a fixed order);
# the transformers integration takes it for transposed experts, and expert_swiglu("auto") for the MoE layer at a
# decode step's rows an expert with no gradient asked for.
# 1. test_grouped_gemv.py (both layouts, the layer's path) and test_transformers.py (gpt-oss and Llama 4 decode).
# 2. bench_experts.py --layouts in,out: the new kernel against torch._grouped_mm on the same weights, and the kept
#    kernel unchanged (in).
# 3. test_moe_layer.py, whose inference cases now may take the new path.
# Setup (here): mkdir -p .exp/{rel,hooks}; main's tree into each (git archive HEAD | tar -x -C), docs left out; in
# each: patch -p1 -s < ../../docs/results/2026-11-28-h100x2-session34/next-gemv-out-contiguous.patch.
# carry [".exp/rel", ".exp/hooks"].
source tools/device_call.sh
BUILD_TIMEOUT=220 bash tools/build_trees.sh $L .exp/rel .exp/hooks:hooks >> $OUT/driver.log
log "built rc=$?"
(cd .exp/hooks && PYTHONPATH=$PWD/python bounded 200 torchrun --nproc-per-node=2 -m pytest -q \
  tests/python/gpu/test_grouped_gemv.py tests/python/gpu/test_transformers.py tests/python/gpu/test_moe_layer.py) \
  > $L/tests.log 2>&1
log "tests rc=$? $(grep -E '(passed|failed)' $L/tests.log | tail -n 1)"
(cd .exp/rel && PYTHONPATH=$PWD/python bounded 150 python3 benchmarks/bench_experts.py --layouts in,out \
  --tokens 1,2,4,8,16,32 --json $OUT/bench_experts.json) > $OUT/bench_experts.log 2>&1
log "bench_experts rc=$?"
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
