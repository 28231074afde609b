#!/usr/bin/env bash
# NOT RUN (session 15 had too little device time left to start a machine). For the next session, nvidia-h100-x4:
# the transformers training tests at world 4 first (call 5's one failure: rank 0's unused experts had no gradient;
# grouped_linear's empty product since, checked on the CPU only), then the whole suite at world 4 (session 14's
# stopped at the call cap in test_transformers.py; call 3's at the hang that call 5 fixed).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
# tools/gpu_run.sh builds with the tests' hooks, runs pytest under torchrun on every GPU (extra arguments go to
# pytest) and names what failed or hung in OUT/summary.txt.
GPU_TESTS=tests/python/gpu/test_transformers.py timeout 200 bash tools/gpu_run.sh $OUT/training build,tests \
  -k training_step > $OUT/training-driver.log 2>&1
echo "training tests rc=$?" >> $OUT/machine.txt
timeout 420 bash tools/gpu_run.sh $OUT/suite tests > $OUT/suite-driver.log 2>&1
echo "suite rc=$?" >> $OUT/machine.txt
