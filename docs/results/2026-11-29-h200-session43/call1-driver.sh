#!/usr/bin/env bash
# Session 43, call 1 (one H200; no two-GPU kind lent): main c010e9b at odd world sizes, never run before. Every
# test of the GPU suite takes the world from torchrun and sizes its experts by it (8 x world and the like), so a world
# of 3 or 5 runs the same checks with rank counts that are not powers of two: the rotations (me + 1 + u) % world, the
# divisors, the block shares and the rank masks. One GPU runs the ranks time-sliced (conftest's ONE_GPU): correctness
# only, no timing. World 3: the round, gradient, layer and fp8 files; then world 5: test_fuzz.py with 40 examples
# (hypothesis draws experts a rank, top-k, hidden, counts with 0 and the most, fp8, layout, alignment, grid).
source tools/device_call.sh
ONE_GPU_RANKS=3 GPU_TESTS="tests/python/gpu/test_all_to_all.py tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py tests/python/gpu/test_fp8.py" \
  bounded 420 bash tools/gpu_run.sh $L/w3 build,tests > $L/w3.log 2>&1
log "build + world 3 tests rc=$?"
cp $L/w3/summary.txt $OUT/w3-summary.txt 2> /dev/null
left=$((540 - (SECONDS - T0)))
MOE_A2A_FUZZ_EXAMPLES=40 ONE_GPU_RANKS=5 GPU_TESTS="tests/python/gpu/test_fuzz.py" \
  bounded $left bash tools/gpu_run.sh $L/w5 tests > $L/w5.log 2>&1
log "world 5 fuzz rc=$?"
cp $L/w5/summary.txt $OUT/w5-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
