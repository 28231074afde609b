#!/usr/bin/env bash
# Session 43, call 3 (one H200; ranks time-sliced, correctness only). World 3: call 2's 26 failures again, with the
# tests fixed (the "E" bad id is now the first id past the experts, the tiny transformers models take
# experts_for_world). Then world 5 and world 7: the round, fp8, gradient and layer files, and test_fuzz.py (40
# examples), never run at those worlds before.
source tools/device_call.sh
G=tests/python/gpu
ONE_GPU_RANKS=3 GPU_TESTS="$G/test_all_to_all.py::test_bad_expert_id_is_caught_on_device $G/test_transformers.py" \
  bounded 240 bash tools/gpu_run.sh $L/w3 build,tests -rs > $L/w3.log 2>&1
log "build + world 3 rc=$?"
cp $L/w3/summary.txt $OUT/w3-summary.txt 2> /dev/null
ONE_GPU_RANKS=5 GPU_TESTS="$G/test_all_to_all.py $G/test_fp8.py $G/test_autograd.py $G/test_moe_layer.py" \
  bounded 170 bash tools/gpu_run.sh $L/w5 tests -rs > $L/w5.log 2>&1
log "world 5 rc=$?"
cp $L/w5/summary.txt $OUT/w5-summary.txt 2> /dev/null
left=$((550 - (SECONDS - T0)))
MOE_A2A_FUZZ_EXAMPLES=40 ONE_GPU_RANKS=7 GPU_TESTS="$G/test_fuzz.py $G/test_autograd.py $G/test_all_to_all.py" \
  bounded $left bash tools/gpu_run.sh $L/w7 tests -rs > $L/w7.log 2>&1
log "world 7 rc=$?"
cp $L/w7/summary.txt $OUT/w7-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
