#!/usr/bin/env bash
# Session 35, call 3 (one H200). Trees: nv (as in call 2), fin = the tree to land (main 47a75f1 + the out-contiguous
# kernel with x read in vectors + the automatic mode, whose 1-row body keeps 4 loads a column in flight: u4's p = 1
# of call 2; the integrations on the automatic mode, the limit 4 rows an expert; call3-fin-vs-nv.patch).
# 1. tests on fin, one GPU, 2 ranks time-sliced (correctness only): test_grouped_gemv.py, test_transformers.py,
#    test_moe_layer.py, the op-aliasing check; 2. bench_experts on fin and nv (in,out), alternated, twice.
# Everything but driver.log and summary.txt goes into all.tar.xz.
source tools/device_call.sh
BUILD_TIMEOUT=240 bash tools/build_trees.sh $L .exp/nv .exp/fin:hooks >> $OUT/driver.log
log "built rc=$?"
experts() {  # experts TREE TAG ARGS...: bench_experts.py of TREE on GPU 0
  (cd .exp/$1 && PYTHONPATH=$PWD/python bounded 100 python3 benchmarks/bench_experts.py "${@:3}" \
    --json $L/bench_experts-$2.json) > $L/bench_experts-$2.log 2>&1
  log "bench_experts $2 rc=$?"
  { echo "== $2"; grep -A 40 -E "^ *shape " $L/bench_experts-$2.log; } >> $OUT/summary.txt
}
(cd .exp/fin && GPU_TESTS="tests/python/gpu/test_grouped_gemv.py tests/python/gpu/test_transformers.py \
  tests/python/gpu/test_moe_layer.py tests/python/gpu/test_all_to_all.py::test_no_op_output_aliases_an_input_or_another_output" \
  bounded 230 bash tools/gpu_run.sh $L/tests tests) > $L/tests.log 2>&1
log "tests fin rc=$? $(grep -E '^-- gpu_tests' $L/tests/summary.txt)"
cat $L/tests/summary.txt >> $OUT/summary.txt
experts fin fin --layouts in,out --tokens 1,2,4,8,16
experts nv nv --layouts in,out --tokens 1,2,4,8,16
if [ $((SECONDS - T0)) -lt 430 ]; then
  experts fin fin-2 --layouts in,out --tokens 1,2,4,8,16
  experts nv nv-2 --layouts in,out --tokens 1,2,4,8,16
fi
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
