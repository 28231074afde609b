#!/usr/bin/env bash
# NOT RUN (no device time left in session 17). For nvidia-h100-x4: a dispatch of plain rows placing its own rows
# from 512 tokens at world 4 too (.exp/w4: kOwnPlacedCopyWorld = 4 in include/moe_a2a/ep/config.h) against HEAD (world
# 2 only), graph A/B, two rounds (this w4 w4 this), DeepSeek-V3 at T = 1024 with counts 512 every rank, 768 every rank,
# 600/300 alternating, drawn; then the new test at world 4 on .exp/w4 (built with the tests' hooks), where it
# exercises own_placed. Setup: `mkdir -p .exp/w4 && git archive HEAD | tar -x -C .exp/w4 && rm -rf .exp/w4/docs &&
# sed -i 's/kOwnPlacedCopyWorld = 2;/kOwnPlacedCopyWorld = 4;/' .exp/w4/include/moe_a2a/ep/config.h`; carry .exp/w4.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes 256,8,7168,1024 --counts 512/512;768/768;600/300;drawn" \
  timeout 360 bash tools/graph_ab.sh $OUT/ab . .exp/w4 > $OUT/ab.log 2>&1
echo "graph_ab rc=$?" >> $OUT/machine.txt
(cd .exp/w4 && env MOE_A2A_PROFILE=0 MOE_A2A_TEST_HOOKS=1 MAX_JOBS=32 python3 setup.py build_ext --inplace --force \
  > $OUT/w4-build.log 2>&1 && timeout 120 torchrun --nproc-per-node=4 -m pytest tests/python/gpu/test_all_to_all.py -q \
  -rfE -p no:cacheprovider -k "own_rows_placed or sending_and_receiving") > $OUT/tests.log 2>&1
echo "tests rc=$?" >> $OUT/machine.txt
cd $OUT && tar czf ab.tar.gz ab && rm -rf ab
