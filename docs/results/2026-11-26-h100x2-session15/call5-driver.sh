#!/usr/bin/env bash
# Call 5 (session 15), 4 GPUs: combine takes a differentiable dispatch's expert_x as an input with no gradient, so
# every rank runs the backward of dispatch (call 4: on 83d17e8 too, at world 4 the transformers gpt_oss training
# test had rank 0 skip it, its experts having got no row). test_autograd.py (with the new
# test_experts_that_do_not_read_expert_x), test_transformers.py and test_moe_layer.py at world 4 on the working tree.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1 MOE_A2A_TEST_TIMEOUT_S=60
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
env MOE_A2A_PROFILE=0 MOE_A2A_TEST_HOOKS=1 MAX_JOBS=64 python3 setup.py build_ext --inplace --force > $OUT/build.log 2>&1
echo "build rc=$?" >> $OUT/machine.txt
G=tests/python/gpu
timeout 220 torchrun --nproc-per-node=4 -m pytest $G/test_autograd.py $G/test_transformers.py $G/test_moe_layer.py \
  -q -rfE -p no:cacheprovider > $OUT/tests.log 2>&1
echo "tests rc=$?" >> $OUT/machine.txt
