#!/usr/bin/env bash
# Session 16, call 1 (nvidia-h100-x4): session 15's next-world4-driver.sh as it was written: the transformers
# training tests at world 4 on b2533fa's grouped_linear fix, then the whole suite at world 4.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
# tools/gpu_run.sh builds with the tests' hooks, runs pytest under torchrun on every GPU (extra arguments go to
# pytest) and names what failed or hung in OUT/summary.txt.
GPU_TESTS=tests/python/gpu/test_transformers.py timeout 170 bash tools/gpu_run.sh $OUT/training build,tests \
  -k training_step > $OUT/training-driver.log 2>&1
echo "training tests rc=$?" >> $OUT/machine.txt
timeout 400 bash tools/gpu_run.sh $OUT/suite tests > $OUT/suite-driver.log 2>&1
echo "suite rc=$?" >> $OUT/machine.txt
cd $OUT && tar czf results.tgz --exclude=results.tgz . 2>/dev/null; ls $OUT
