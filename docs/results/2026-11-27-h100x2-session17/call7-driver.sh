#!/usr/bin/env bash
# Call 7 (session 17), nvidia-h100-x2: the two tests that now share rounds_fused_and_split (a refactor of the tests,
# after calls 2 and 6 ran the whole suite), on HEAD built with the tests' hooks.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
bash tools/gpu_run.sh $OUT/run build > $OUT/build.log 2>&1
echo "build rc=$?" >> $OUT/machine.txt
timeout 90 torchrun --nproc-per-node=2 -m pytest tests/python/gpu/test_all_to_all.py -q -rfE -p no:cacheprovider \
  -k "own_rows_placed or sending_and_receiving" > $OUT/tests.log 2>&1
echo "tests rc=$?" >> $OUT/machine.txt
