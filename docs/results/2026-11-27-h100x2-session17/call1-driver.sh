#!/usr/bin/env bash
# Call 1 (session 17), nvidia-h100-x2: a fused dispatch of plain (bf16) rows places its own rows as it sends them
# (own_placed, until now fp8 only) from kOwnPlacedCopyTokens tokens. Trees: .exp/base (HEAD, 40948d7), . (256),
# .exp/t128, .exp/t512 (the threshold only). Graph A/B, one round + base again: DeepSeek-V3 at 128 / 256 / 512
# tokens and the two mid challenge shapes, counts drawn and every rank at T. Then the new tree's tests, from
# .exp/hk (a copy of ., built with the tests' hooks beside graph_ab's builds).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
(cd .exp/hk && env MOE_A2A_PROFILE=0 MOE_A2A_TEST_HOOKS=1 MAX_JOBS=16 python3 setup.py build_ext --inplace --force > $OUT/hk-build.log 2>&1; echo "hk build rc=$?" >> $OUT/machine.txt) &
S="128,8,4096,256;256,8,7168,256;256,8,7168,128;256,8,7168,512"
AB_GRAPH_ARGS="--shapes $S --counts drawn;max" timeout 420 bash tools/graph_ab.sh $OUT/ab .exp/base . .exp/t128 .exp/t512 > $OUT/ab.log 2>&1
echo "graph_ab rc=$?" >> $OUT/machine.txt
wait
(cd .exp/hk && timeout 130 torchrun --nproc-per-node=2 -m pytest tests/python/gpu/test_all_to_all.py -q -rfE -p no:cacheprovider \
  -k "own_rows_placed or challenge_shapes or sending_and_receiving or masked or edge_cases or alignment") > $OUT/tests.log 2>&1
echo "tests rc=$?" >> $OUT/machine.txt
cd $OUT && tar czf ab.tar.gz ab && rm -rf ab
