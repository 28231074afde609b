#!/usr/bin/env bash
# NOT RUN (written in session 15 for the next one), nvidia-h100-x4: flagged partial sums up to 64 / world tokens
# (.exp/fw: `git archive HEAD | tar -x -C .exp/fw && (cd .exp/fw && patch -p1 <
# ../../docs/results/2026-11-26-h100x2-session15/next-flagged-by-world.patch)`: 16 at world 4) against main's 32 at
# every world, at world 4, where 32 cost 0.1-0.6 us at the shapes it does not help (session 15, call 3). Two rounds
# (this fw fw this); then the flagged tests of test_all_to_all.py on fw at world 4 (its threshold moves with the world).
# World 2 needs no run: 64 / 2 = 32 is main's threshold there.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $S --counts drawn" timeout 330 bash tools/graph_ab.sh $OUT/ab . .exp/fw
echo "graph_ab rc=$?" >> $OUT/machine.txt
(cd .exp/fw && GPU_TESTS=tests/python/gpu/test_all_to_all.py timeout 200 bash tools/gpu_run.sh $OUT/fw-tests build,tests \
  -k flagged > $OUT/fw-tests-driver.log 2>&1)  # rebuilt with the tests' hooks, which graph_ab.sh's build leaves out
echo "fw flagged tests rc=$?" >> $OUT/machine.txt
