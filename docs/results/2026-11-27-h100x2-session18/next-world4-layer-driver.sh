#!/usr/bin/env bash
# Written in session 18 for the next one; session 19 ran it as docs/results/2026-11-27-h100x2-session19/call2-driver.sh, nvidia-h100-x4: the backward of combine's answers as tasks
# (HEAD) against the round before (.exp/cb0 = 4f7ddb9) at world 4, tools/graph_ab.sh AB_BENCH=layer, two rounds
# (cb0 this this cb0), DeepSeek-V3 at 128 / 512 / 2048 tokens every rank; then the gradient tests at world 4.
# Setup: mkdir -p .exp/cb0 && git archive 4f7ddb9 | tar -x -C .exp/cb0 && rm -rf .exp/cb0/docs; carry [".exp/cb0"].
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 330 bash tools/graph_ab.sh $OUT/ab .exp/cb0 . > $OUT/ab.log 2>&1
echo "graph_ab rc=$?" >> $OUT/machine.txt
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py" \
  timeout 200 bash tools/gpu_run.sh $OUT/tests build,tests > $OUT/tests-driver.log 2>&1
echo "tests rc=$?" >> $OUT/machine.txt
cd $OUT && tar czf ab.tar.gz ab && rm -rf ab
