#!/usr/bin/env bash
# Call 3 (session 15), 4 GPUs: flagged partial sums up to 32 tokens (the working tree) against up to 4 (.exp/main4,
# 83d17e8) at world 4: graph A/B (this, main4, this again) at the challenge shapes and DeepSeek-V3 1/16/32 tokens,
# counts drawn per rank; then, at world 4, the transformers tests (the file session 14's world-4 suite did not reach
# the end of) and the flagged tests of test_all_to_all.py on the working tree.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32"
AB_GRAPH_ARGS="--shapes $S --counts drawn" timeout 280 bash tools/graph_ab.sh $OUT/ab . .exp/main4
echo "graph_ab rc=$?" >> $OUT/machine.txt
A=tests/python/gpu/test_all_to_all.py
GPU_TESTS="tests/python/gpu/test_transformers.py $A::test_flagged_partial_sums_across_the_threshold $A::test_missing_peer_in_flagged_combine_times_out" \
  timeout 270 bash tools/gpu_run.sh $OUT/tests tests > $OUT/tests-driver.log 2>&1
echo "tests rc=$?" >> $OUT/machine.txt
rm -f $OUT/tests/results.tar.gz
