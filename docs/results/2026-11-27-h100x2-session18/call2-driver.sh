#!/usr/bin/env bash
# Session 18, call 2 (nvidia-h100-x2): the backward of combine's own rows as tasks that the waves take as they come
# free (the sending waves join once their stores are out). Trees: .exp/base (HEAD 4f7ddb9), .exp/a (the change,
# own_answer_waves as before: a wave a row up to 6 answer from the start), .exp/b (6 answer from the start whenever
# the group has 4 rows or more), .exp/c (every wave sends first, then all answer). tools/graph_ab.sh AB_BENCH=layer,
# two rounds (base a b c c b a base), DeepSeek-V3 at 128 / 512 / 2048 tokens every rank; then the gradient tests
# (test_autograd.py, test_moe_layer.py, test_fuzz.py) on this checkout (= .exp/a), built with the tests' hooks
# beside the timed trees.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
(timeout 300 env MAX_JOBS=8 bash tools/gpu_run.sh $OUT/tests build > $OUT/tests-build-driver.log 2>&1;
  echo "tests build rc=$?" >> $OUT/driver.log) &
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 330 bash tools/graph_ab.sh $OUT/ab .exp/base .exp/a .exp/b .exp/c > $OUT/ab.log 2>&1
log "graph_ab rc=$?"
wait
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py tests/python/gpu/test_fuzz.py" \
  timeout $((585 - SECONDS + T0)) bash tools/gpu_run.sh $OUT/tests tests > $OUT/tests-driver.log 2>&1
log "tests rc=$?"
cd $OUT && tar czf ab.tar.gz ab && rm -rf ab && tar czf tests.tar.gz tests && rm -rf tests
