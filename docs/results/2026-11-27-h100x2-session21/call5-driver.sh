#!/usr/bin/env bash
# Session 21, call 5, nvidia-h100-x4: call 4 at world 4 (engines built for each shape's T against engines built for
# 4096 tokens a rank, graph d+c and eager, counts drawn, alternated twice, then the floor), and the training round
# at 128 / 512 tokens in a layer built for each T against one built for 2048 (calls 1-3 timed that at world 2).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
L=$OUT/logs; mkdir -p $L
BUILD_TIMEOUT=200 bash tools/build_trees.sh $L . >> $OUT/driver.log
log "built rc=$?"
S="8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,16;256,8,7168,32;256,8,7168,64;256,8,7168,128"
for r in 1 2; do
  for cap in 0 4096; do
    PYTHONPATH=$PWD/python timeout 110 torchrun --master-port=$((29600 + r * 10 + cap / 1024)) --nproc-per-node=4 \
      benchmarks/bench_graph.py --shapes "$S" --counts drawn --replays 10 --iters 30 --no-microbench --no-floor \
      --capacity $cap --out $OUT/cap/cap$cap-r$r > $L/cap$cap-r$r.log 2>&1
    log "capacity $cap round $r rc=$?"; pkill -f torchrun
  done
done
PYTHONPATH=$PWD/python timeout 120 torchrun --nproc-per-node=4 benchmarks/bench_graph.py --shapes "$S" --counts drawn \
  --replays 10 --iters 30 --out $OUT/cap/floor > $L/floor.log 2>&1
log "floor rc=$?"
grep -H -E "graph d\+c" $L/cap*.log $L/floor.log > $OUT/summary.txt
for r in 1 2; do
  for cap in 0 2048; do
    PYTHONPATH=$PWD/python timeout 100 torchrun --master-port=$((29700 + r * 10 + cap / 1024)) --nproc-per-node=4 \
      benchmarks/bench_moe_layer.py --tokens 128,512 --capacity $cap --iters 30 --no-floor --no-check \
      --phases dispatch,combine-bwd,combine-bwd-y --out $OUT/layer/cap$cap-r$r > $L/layer-cap$cap-r$r.log 2>&1
    log "layer capacity $cap round $r rc=$?"; pkill -f torchrun
  done
done
grep -H -E "^ +(128|512) " $L/layer-*.log > $OUT/layer-summary.txt
cd $OUT && tar czf all.tar.gz logs cap layer && rm -rf logs cap layer
log done
