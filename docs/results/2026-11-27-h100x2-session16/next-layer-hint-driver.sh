#!/usr/bin/env bash
# NOT RUN (session 16's sixth call was refused: too little device time left to start a machine). For the next
# session, nvidia-h100-x2: tools/graph_ab.sh AB_BENCH=layer on GPUs for the first time, timing the L2 hint for y only,
# and only where the round reads y, against HEAD at 128, 512 and 2048 tokens, two rounds (this p1y p1y this). Setup: `git archive HEAD | tar -x -C
# .exp/p1y && rm -rf .exp/p1y/docs && (cd .exp/p1y && patch -p1 < ../../docs/results/2026-11-27-h100x2-session16/next-p1y.patch)`
# carry .exp/p1y.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--phases dispatch,combine-bwd,combine-bwd-y" \
  timeout 400 bash tools/graph_ab.sh $OUT/ab . .exp/p1y > $OUT/ab.log 2>&1
echo "graph_ab rc=$?" >> $OUT/ab.log
