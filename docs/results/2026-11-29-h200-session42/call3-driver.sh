#!/usr/bin/env bash
# Session 42, call 3 (one H200): a training step captured whole in one CUDA graph and replayed
# (test_autograd.py's new test_training_step_replays_in_a_cuda_graph), on main 87669a5 plus that test, 2 then 4 ranks
# time-sliced on the GPU (correctness only), with the rest of test_autograd.py at world 2.
source tools/device_call.sh
GPU_TESTS=tests/python/gpu/test_autograd.py bounded 300 bash tools/gpu_run.sh $L/w2 build,tests > $L/w2.log 2>&1
log "world 2 rc=$?"
cp $L/w2/summary.txt $OUT/w2-summary.txt 2> /dev/null
ONE_GPU_RANKS=4 GPU_TESTS=tests/python/gpu/test_autograd.py bounded 120 bash tools/gpu_run.sh $L/w4 tests -k cuda_graph \
  > $L/w4.log 2>&1
log "world 4 rc=$?"
cp $L/w4/summary.txt $OUT/w4-summary.txt 2> /dev/null
grep -h -B2 -A40 "cuda_graph" $L/w2/gpu_tests.log $L/w4/gpu_tests.log | head -150 > $OUT/graph-test-excerpt.txt
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
