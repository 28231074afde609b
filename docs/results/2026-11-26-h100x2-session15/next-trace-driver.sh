#!/usr/bin/env bash
# NOT RUN (session 15 had no device time left). For the next session, 2 x H100: main (flagged partial sums up to 32
# tokens) built with the in-kernel profiler and traced at the two smallest challenge shapes and DeepSeek-V3 with 1 and
# 32 tokens a rank, 8 graph iterations each: where dispatch's 8-9 us go now that combine needs no fence below 33
# tokens (the last traces, 2026-11-26-h200x2-small-shape-traces/, are from before). Then, locally:
#   python -m moe_a2a.trace chain OUT/trace-*/...json.gz
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/machine.txt
env MOE_A2A_PROFILE=1 MAX_JOBS=16 python3 setup.py build_ext --inplace --force > $OUT/build.log 2>&1
echo "build rc=$?" >> $OUT/machine.txt
p=29681
for s in "8,2,6144,16" "64,6,2048,32" "256,8,7168,1" "256,8,7168,32"; do
  n=$(echo $s | tr , -)
  PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=2 benchmarks/bench_all2all.py \
    --shapes "$s" --systems moe_a2a --layout packed --no-graph --no-check --no-microbench --no-floor \
    --trace-graph 8 --trace $OUT/trace-$n > $OUT/trace-$n.log 2>&1
  echo "trace $n rc=$?" >> $OUT/machine.txt; p=$((p + 1)); pkill -f torchrun
done
