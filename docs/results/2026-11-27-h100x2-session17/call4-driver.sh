#!/usr/bin/env bash
# Call 4 (session 17), nvidia-h100-x2: own rows placed by the senders from 512 tokens (this tree) against HEAD
# (.exp/base) where the ranks' counts differ around the threshold, 512 to 1000 tokens: graph A/B, two rounds (base
# this this base), DeepSeek-V3 with T = 768 and 1024, counts drawn, 1000/520, 520/1000, 700/700, 600/300. Then this
# tree's floor at 512 tokens every rank and 1024 drawn (the README's numbers), in one bench_graph run.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
S="256,8,7168,1024;256,8,7168,768"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $S --counts drawn;1000/520;520/1000;700/700;600/300" \
  timeout 360 bash tools/graph_ab.sh $OUT/ab .exp/base . > $OUT/ab.log 2>&1
echo "graph_ab rc=$?" >> $OUT/machine.txt
PYTHONPATH=$PWD/python timeout 120 torchrun --nproc-per-node=2 benchmarks/bench_graph.py \
  --shapes "256,8,7168,512;256,8,7168,1024" --counts "max;drawn" --replays 10 --iters 30 --out $OUT/floor > $OUT/floor.log 2>&1
echo "floor rc=$?" >> $OUT/machine.txt
cd $OUT && tar czf ab.tar.gz ab floor && rm -rf ab floor
