#!/usr/bin/env bash
# Session 45's next-one-gpu-driver2.sh, run as session 46's call 2 (one H200): the second one-GPU call after call1-driver.sh, the GPU suite's other half at world 8
# (gradients, the layer, fuzz, faults, lifetime, the soak's short run, transformers, ...), eight ranks time-sliced on
# the GPU (correctness only), bounded by what is left of 560 s.
source tools/device_call.sh
left() { echo $((560 - (SECONDS - T0))); }
files=$(ls tests/python/gpu/test_*.py | grep -v -e test_all_to_all -e test_fp8 -e test_round_order -e test_heap)
ONE_GPU_RANKS=8 GPU_TESTS="$(echo $files)" bounded "$(left)" bash tools/gpu_run.sh $L/w8b build,tests -rs > $L/w8b.log 2>&1
log "suite half b at world 8 rc=$?"
cp $L/w8b/summary.txt $OUT/w8b-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
