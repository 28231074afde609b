#!/usr/bin/env bash
# Session 43, call 4 (one H200; ranks time-sliced, correctness only): the tree as committed. World 3: the whole GPU
# suite. World 5: test_moe_layer.py (call 3's world-5 run was cut by its time bound inside it). World 6: test_fuzz.py
# (40 examples), test_autograd.py and test_fp8.py.
source tools/device_call.sh
G=tests/python/gpu
ONE_GPU_RANKS=3 bounded 330 bash tools/gpu_run.sh $L/w3 build,tests -rs > $L/w3.log 2>&1
log "build + world 3 suite rc=$?"
cp $L/w3/summary.txt $OUT/w3-summary.txt 2> /dev/null
ONE_GPU_RANKS=5 GPU_TESTS="$G/test_moe_layer.py" bounded 100 bash tools/gpu_run.sh $L/w5 tests -rs > $L/w5.log 2>&1
log "world 5 rc=$?"
cp $L/w5/summary.txt $OUT/w5-summary.txt 2> /dev/null
left=$((540 - (SECONDS - T0)))
MOE_A2A_FUZZ_EXAMPLES=40 ONE_GPU_RANKS=6 GPU_TESTS="$G/test_fuzz.py $G/test_autograd.py $G/test_fp8.py" \
  bounded $left bash tools/gpu_run.sh $L/w6 tests -rs > $L/w6.log 2>&1
log "world 6 rc=$?"
cp $L/w6/summary.txt $OUT/w6-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
