#!/usr/bin/env bash
# Session 16, call 6 (nvidia-h100-x2, the last 190 s of the budget): tools/graph_ab.sh AB_BENCH=layer on GPUs for the
# first time, timing the L2 hint for y only, and only where the round reads y (.exp/p1y: HEAD + call 3's hint without
# the gradient's chunks and without any hint in the frozen router's round) against HEAD, at 512 and 2048 tokens.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
AB_BENCH=layer AB_LAYER_ARGS="--tokens 512,2048 --phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 140 bash tools/graph_ab.sh $OUT/ab . .exp/p1y > $OUT/ab.log 2>&1
echo "graph_ab rc=$?" >> $OUT/ab.log
