#!/usr/bin/env bash
# Session 35, call 1 (one H200: the only kind lent today). Trees: out = main 47a75f1 + session 34's
# next-gemv-out-contiguous.patch; u4 = out + next-gemv-unroll4.patch; c8 = out with kColsPerWave 8 (the cols8 patch by
# hand: the out patch moved its line). 1. bench_experts on the kept kernel (w along in) in out / u4 / c8, alternated,
# two rounds if time allows; 2. tests on one GPU (2 ranks time-sliced, correctness only): test_grouped_gemv.py,
# test_transformers.py, test_moe_layer.py, the op-aliasing check; 3. bench_experts --layouts out on out.
source tools/device_call.sh
BUILD_TIMEOUT=240 bash tools/build_trees.sh $L .exp/out:hooks .exp/u4 .exp/c8 >> $OUT/driver.log
log "built rc=$?"
experts() {  # experts TREE TAG ARGS...: bench_experts.py of TREE on GPU 0
  (cd .exp/$1 && PYTHONPATH=$PWD/python bounded 90 python3 benchmarks/bench_experts.py "${@:3}" \
    --json $OUT/bench_experts-$2.json) > $OUT/bench_experts-$2.log 2>&1
  log "bench_experts $2 rc=$?"
}
for t in out u4 c8; do experts $t $t --tokens 1,2,4,8,16; done
(cd .exp/out && GPU_TESTS="tests/python/gpu/test_grouped_gemv.py tests/python/gpu/test_transformers.py \
  tests/python/gpu/test_moe_layer.py tests/python/gpu/test_all_to_all.py::test_no_op_output_aliases_an_input_or_another_output" \
  bounded 230 bash tools/gpu_run.sh $L/tests tests) > $L/tests.log 2>&1
log "tests rc=$? $(grep -E '^-- gpu_tests' $L/tests/summary.txt)"
cp $L/tests/summary.txt $OUT/tests-summary.txt 2> /dev/null
experts out out-layout --layouts out --tokens 1,2,4,8,16,32
if [ $((SECONDS - T0)) -lt 420 ]; then
  for t in out u4 c8; do experts $t $t-2 --tokens 1,2,4,8,16; done
fi
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
