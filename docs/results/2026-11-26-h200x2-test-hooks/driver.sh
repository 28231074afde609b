#!/usr/bin/env bash
# untracked driver: a user's build (no test hooks) refuses the GPU tests with the build hint; then the suite with hooks
source tools/no_multicast_env.sh
export PYTHONPATH=$PWD/python
env MOE_A2A_PROFILE=0 MAX_JOBS=32 python3 setup.py build_ext --inplace --force > $OUT/build-user.log 2>&1; echo "user build rc=$?"
python3 -c 'import torch, moe_a2a._C as C; print("TEST_HOOKS", C.TEST_HOOKS, "hooks present:", [n for n in ("engine_set_rounds_for_test","ep_flagged_region","FLAGGED_TOKENS","put_pattern","check_pattern","fp8_device_check") if hasattr(C, n)], "floor_exchange:", hasattr(C, "floor_exchange"))'
timeout 60 torchrun --nproc-per-node=2 -m pytest tests/python/gpu/test_heap.py -q -p no:cacheprovider > $OUT/tests-without-hooks.log 2>&1; echo "tests without hooks rc=$?"
grep -m2 "test hooks" $OUT/tests-without-hooks.log
bash tools/gpu_run.sh $OUT/suite build,tests > $OUT/gpu_run.log 2>&1; echo "suite rc=$?"
grep -E "^-- |^   " $OUT/suite/summary.txt
cp $OUT/suite/summary.txt $OUT/suite-summary.txt 2>/dev/null; tar -xzf $OUT/suite/results.tar.gz -C $OUT 2>/dev/null; find $OUT -name gpu_tests.log | head -1 | xargs -I{} cp {} $OUT/suite-gpu_tests.log; rm -rf $OUT/suite $OUT/results* 2>/dev/null; ls $OUT
