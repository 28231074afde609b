#!/usr/bin/env bash
# Written in session 18 for the next one; session 19 ran it as docs/results/2026-11-27-h100x2-session19/call2-driver.sh, nvidia-h100-x4: the two gates by world that no 4-GPU run has
# timed, each against HEAD at world 4, alternated in one call (two rounds: this X X this):
# - .exp/w4: plain rows placed by their senders from 512 tokens at world 4 too (kOwnPlacedCopyWorld = 4), DeepSeek-V3
#   with counts 512 every rank, 768 every rank, 600/300 alternating and drawn in 1..1024;
# - .exp/fw: flagged partial sums up to 64 / world tokens (16 at world 4) instead of 32 at every world, the challenge
#   shapes and DeepSeek-V3 at 1 / 16 / 32 tokens, counts drawn.
# Setup: for d in w4 fw; do mkdir -p .exp/$d && git archive HEAD | tar -x -C .exp/$d && rm -rf .exp/$d/docs; done
#   sed -i 's/kOwnPlacedCopyWorld = 2;/kOwnPlacedCopyWorld = 4;/' .exp/w4/include/moe_a2a/ep/config.h
#   sed -i 's|return max_tokens < kFlaggedTokens ? max_tokens : kFlaggedTokens;|return max_tokens < 64 / world ? max_tokens : 64 / world;|' \
#     .exp/fw/include/moe_a2a/ep/config.h
# carry [".exp/w4", ".exp/fw"]. The tests of each change at world 4 (own_rows_placed, flagged) need another call.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes 256,8,7168,1024 --counts 512/512/512/512;768/768/768/768;600/300/600/300;drawn" \
  timeout 280 bash tools/graph_ab.sh $OUT/ab-w4 . .exp/w4 > $OUT/ab-w4.log 2>&1
echo "w4 graph_ab rc=$?" >> $OUT/machine.txt
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32"
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes $S --counts drawn" timeout 280 bash tools/graph_ab.sh $OUT/ab-fw . .exp/fw \
  > $OUT/ab-fw.log 2>&1
echo "fw graph_ab rc=$?" >> $OUT/machine.txt
cd $OUT && tar czf ab.tar.gz ab-w4 ab-fw && rm -rf ab-w4 ab-fw
