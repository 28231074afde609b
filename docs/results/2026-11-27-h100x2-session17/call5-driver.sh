#!/usr/bin/env bash
# Call 5 (session 17), nvidia-h100-x2: call 4's A/B again, its runs having failed (counts past the T = 768 shape's
# max): own rows placed by the senders from 512 tokens (this tree) against HEAD (.exp/base) where the ranks' counts
# differ around the threshold: DeepSeek-V3, T = 1024, counts drawn, 1000/520, 520/1000, 700/700, 600/300, 768/768;
# two rounds (base this this base).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
AB_ROUNDS=2 AB_GRAPH_ARGS="--shapes 256,8,7168,1024 --counts drawn;1000/520;520/1000;700/700;600/300;768/768" \
  timeout 300 bash tools/graph_ab.sh $OUT/ab .exp/base . > $OUT/ab.log 2>&1
echo "graph_ab rc=$?" >> $OUT/machine.txt
cd $OUT && tar czf ab.tar.gz ab && rm -rf ab
