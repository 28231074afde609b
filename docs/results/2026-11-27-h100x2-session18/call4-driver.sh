#!/usr/bin/env bash
# Session 18, call 4 (nvidia-h100-x2): the peers' rows too as tasks the waves take as they come free (answer_rows
# always takes tasks: kRowTasks = 4 a wave, .exp/d = this checkout), and the same with 8 a wave (.exp/e), against
# .exp/base (a7c2667: own rows only, 4 a wave). tools/graph_ab.sh AB_BENCH=layer, two rounds (base d e e d base),
# DeepSeek-V3 at 128 / 512 / 2048 tokens every rank; then the gradient tests (test_autograd.py, test_moe_layer.py,
# test_fuzz.py) on this checkout (= d) and on .exp/e, each built with the tests' hooks beside the timed trees.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
rm -rf .exp/e-tests && cp -r .exp/e .exp/e-tests  # built apart from .exp/e, which graph_ab.sh builds without hooks
(timeout 300 bash tools/gpu_run.sh $OUT/tests-d build > $OUT/tests-d-build-driver.log 2>&1;
  echo "d tests build rc=$?" >> $OUT/driver.log) &
(cd .exp/e-tests && timeout 300 bash tools/gpu_run.sh $OUT/tests-e build > $OUT/tests-e-build-driver.log 2>&1;
  echo "e tests build rc=$?" >> $OUT/driver.log) &
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 300 bash tools/graph_ab.sh $OUT/ab .exp/base .exp/d .exp/e > $OUT/ab.log 2>&1
log "graph_ab rc=$?"
wait
export GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py tests/python/gpu/test_fuzz.py"
timeout 120 bash tools/gpu_run.sh $OUT/tests-d tests > $OUT/tests-d-driver.log 2>&1
log "d tests rc=$?"
(cd .exp/e-tests && timeout $((585 - SECONDS + T0)) bash tools/gpu_run.sh $OUT/tests-e tests > $OUT/tests-e-driver.log 2>&1)
log "e tests rc=$?"
cd $OUT && tar czf ab.tar.gz ab && rm -rf ab && tar czf tests.tar.gz tests-d tests-e && rm -rf tests-d tests-e
