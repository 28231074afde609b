#!/usr/bin/env bash
# Session 35, call 2 (one H200). Trees: out (as in call 1), u4 (as in call 1; its call-1 logs did not come back),
# nv = out + call2-nv.patch: the kept kernel's passes as one body function, an adaptive mode (rows_per_pass 0: each
# pass in the narrowest body, 4 / 2 / 1, that holds the expert's remaining rows; no reduction of dropped rows), and
# the out-contiguous kernel reading x as 16-byte vectors (a lane takes 8 consecutive `in` rows a step; rows_per_pass
# 0 maps to 2 there). bench_experts (in,out for out and nv; in for u4), alternated, twice; test_grouped_gemv.py on nv.
# Everything but driver.log and summary.txt goes into all.tar.xz.
source tools/device_call.sh
BUILD_TIMEOUT=240 bash tools/build_trees.sh $L .exp/out .exp/nv:hooks .exp/u4 >> $OUT/driver.log
log "built rc=$?"
experts() {  # experts TREE TAG ARGS...: bench_experts.py of TREE on GPU 0
  (cd .exp/$1 && PYTHONPATH=$PWD/python bounded 100 python3 benchmarks/bench_experts.py "${@:3}" \
    --json $L/bench_experts-$2.json) > $L/bench_experts-$2.log 2>&1
  log "bench_experts $2 rc=$?"
  { echo "== $2"; grep -A 40 -E "^ *shape " $L/bench_experts-$2.log; } >> $OUT/summary.txt
}
experts out out --layouts in,out --tokens 1,2,4,8,16
experts nv nv --layouts in,out --tokens 1,2,4,8,16
experts u4 u4 --layouts in --tokens 1,2,4,8,16
(cd .exp/nv && GPU_TESTS="tests/python/gpu/test_grouped_gemv.py" bounded 150 bash tools/gpu_run.sh $L/tests tests) \
  > $L/tests.log 2>&1
log "tests nv rc=$? $(grep -E '^-- gpu_tests' $L/tests/summary.txt)"
grep -E "^(FAILED|ERROR)" $L/tests/gpu_tests.log >> $OUT/summary.txt
if [ $((SECONDS - T0)) -lt 440 ]; then
  experts out out-2 --layouts in,out --tokens 1,2,4,8,16
  experts nv nv-2 --layouts in,out --tokens 1,2,4,8,16
fi
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
