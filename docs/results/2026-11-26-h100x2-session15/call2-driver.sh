#!/usr/bin/env bash
# Call 2 (session 15): flagged partial sums up to 32 tokens (the working tree) against up to 4 (.exp/main4: 83d17e8,
# `git archive HEAD | tar -x -C .exp/main4`), at unequal pairs: DeepSeek-V3 128 tokens with issue 35's preset and
# 32/128, 128/32, 16/128 (graph_ab.sh: this, main4, this again), then E64-K6-H2048-T32 with issue 35's preset (the
# trees graph_ab.sh built: main4, this); then the whole GPU suite on the working tree.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
AB_GRAPH_ARGS="--shapes 256,8,7168,128 --counts issue35;32/128;128/32;16/128" timeout 240 bash tools/graph_ab.sh $OUT/ab . .exp/main4
echo "graph_ab rc=$?" >> $OUT/machine.txt
for t in "main4 .exp/main4" "this ."; do
  set -- $t
  PYTHONPATH=$(cd $2 && pwd)/python timeout 60 torchrun --nproc-per-node=2 benchmarks/bench_graph.py --shapes 64,6,2048,32 \
    --counts issue35 --replays 10 --iters 30 --no-microbench --no-floor --out $OUT/e64-$1 > $OUT/e64-$1.log 2>&1
  echo "e64 $1 rc=$?" >> $OUT/machine.txt
done
timeout 270 bash tools/gpu_run.sh $OUT/suite tests > $OUT/suite-driver.log 2>&1
echo "suite rc=$?" >> $OUT/machine.txt
