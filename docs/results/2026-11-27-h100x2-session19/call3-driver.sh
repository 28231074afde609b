#!/usr/bin/env bash
# Session 19, call 3 (nvidia-h100-x4): the gradient tests at world 4 on HEAD (session 18's answers as tasks and
# test_autograd's grid of top-8 of 8 experts a rank had run at world 2 only), then the rest of the suite.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
GPU_TESTS="tests/python/gpu/test_autograd.py tests/python/gpu/test_moe_layer.py tests/python/gpu/test_fuzz.py" \
  timeout 330 bash tools/gpu_run.sh $OUT/grad build,tests > $OUT/grad-driver.log 2>&1
echo "grad tests rc=$?" >> $OUT/grad/summary.txt
cd $OUT && tar czf grad.tar.gz grad && rm -rf grad
