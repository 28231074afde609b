#!/usr/bin/env bash
# Call 1 (session 15): combine's flagged partial sums up to 4 tokens (main) against up to 16, 32 and 64 (.exp/fN:
# `git archive HEAD | tar -x -C .exp/fN`, kFlaggedTokens = N in include/moe_a2a/ep/config.h). The threshold 4 came
# from the one-GPU proxy; two GPUs never timed it. Graph A/B, two rounds (main f16 f32 f64 f64 f32 f16 main), the
# challenge shapes and DeepSeek-V3 at 1..128 tokens, counts drawn per rank; then main's floor for the same shapes.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $S --counts drawn" timeout 480 bash tools/graph_ab.sh $OUT/ab . .exp/f16 .exp/f32 .exp/f64
echo "graph_ab rc=$?" >> $OUT/machine.txt
PYTHONPATH=$PWD/python timeout 150 torchrun --nproc-per-node=2 benchmarks/bench_graph.py --shapes "$S" --counts drawn \
  --replays 10 --iters 30 --out $OUT/floor > $OUT/floor.log 2>&1
echo "floor rc=$?" >> $OUT/machine.txt
