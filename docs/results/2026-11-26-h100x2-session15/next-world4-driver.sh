#!/usr/bin/env bash
# NOT RUN (session 15 had too little device time left to start a machine). For the next session, nvidia-h100-x4:
# the transformers training tests at world 4 first (call 5's one failure: rank 0's unused experts had no gradient;
# grouped_linear's empty product since, checked on the CPU only), then the whole suite at world 4 (session 14's
# stopped at the call cap in test_transformers.py; call 3's at the hang that call 5 fixed).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
env MOE_A2A_PROFILE=0 MOE_A2A_TEST_HOOKS=1 MAX_JOBS=64 python3 setup.py build_ext --inplace --force > $OUT/build.log 2>&1
echo "build rc=$?" >> $OUT/machine.txt
MOE_A2A_TEST_TIMEOUT_S=60 timeout 90 torchrun --nproc-per-node=4 -m pytest tests/python/gpu/test_transformers.py \
  -k training_step -q -rfE -p no:cacheprovider > $OUT/training.log 2>&1
echo "training tests rc=$?" >> $OUT/machine.txt
timeout 420 bash tools/gpu_run.sh $OUT/suite tests > $OUT/suite-driver.log 2>&1
echo "suite rc=$?" >> $OUT/machine.txt
