#!/usr/bin/env bash
# Call 2 (session 17), nvidia-h100-x2, the tree with kOwnPlacedCopyTokens = 512: built with the tests' hooks; then
# DeepSeek-V3 at 1024 / 2048 / 4096 tokens (every rank, and drawn), dispatch split in halves with own rows from x
# (auto: 66 senders) against every block on both halves, which now places its own rows as it sends them
# (--send-sms 0,auto; combine auto in both), one run each; then the whole GPU suite.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
bash tools/gpu_run.sh $OUT/build build > $OUT/build.log 2>&1
echo "build rc=$?" >> $OUT/machine.txt
S="256,8,7168,1024;256,8,7168,2048;256,8,7168,4096"
n=0
for ss in auto 0,auto; do
  n=$((n + 1))
  timeout 90 torchrun --nproc-per-node=2 benchmarks/bench_graph.py --shapes "$S" --counts "max;drawn" --send-sms $ss \
    --replays 10 --iters 30 --no-floor --no-microbench --out $OUT/large/$n-$ss > $OUT/large-$n-$ss.log 2>&1
  echo "large $n $ss rc=$?" >> $OUT/machine.txt
done
GPU_TESTS=tests/python/gpu timeout 290 bash tools/gpu_run.sh $OUT/suite tests > $OUT/suite.log 2>&1
echo "suite rc=$?" >> $OUT/machine.txt
