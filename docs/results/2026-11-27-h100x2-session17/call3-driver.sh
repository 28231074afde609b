#!/usr/bin/env bash
# Call 3 (session 17), nvidia-h100-x2. (1) The MoE layer's rounds at 512 tokens a rank, HEAD (.exp/base) against
# this tree (own rows placed by the senders from 512 tokens), tools/graph_ab.sh AB_BENCH=layer, two rounds (base this
# this base). (2) Call 2's comparison again, its fused runs' files having been dropped (a comma in their name):
# DeepSeek-V3 at 1024 / 2048 / 4096 tokens, dispatch in halves (auto) against every block on both halves placing
# its own rows (--send-sms 0,auto), order fused auto auto fused.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
AB_BENCH=layer AB_ROUNDS=2 AB_LAYER_ARGS="--tokens 512 --phases dispatch,combine,dispatch-bwd,combine-bwd" \
  timeout 300 bash tools/graph_ab.sh $OUT/layer .exp/base . > $OUT/layer.log 2>&1
echo "layer ab rc=$?" >> $OUT/machine.txt
S="256,8,7168,1024;256,8,7168,2048;256,8,7168,4096"
n=0
for name in fused auto auto fused; do
  n=$((n + 1))
  ss=$([ $name = fused ] && echo 0,auto || echo auto)
  PYTHONPATH=$PWD/python timeout 70 torchrun --nproc-per-node=2 benchmarks/bench_graph.py --shapes "$S" --counts "max;drawn" \
    --send-sms $ss --replays 10 --iters 30 --no-floor --no-microbench --out $OUT/large/$n-$name > $OUT/large-$n-$name.log 2>&1
  echo "large $n $name rc=$?" >> $OUT/machine.txt
done
cd $OUT && tar czf layer.tar.gz layer && rm -rf layer
