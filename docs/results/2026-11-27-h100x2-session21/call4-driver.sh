#!/usr/bin/env bash
# Session 21, call 4, nvidia-h100-x2: what a serving engine built for its largest batch pays at small ones. The
# README's table builds each shape's engine for its own T; an engine is built once, for the most tokens a rank it
# will see (here 4096), and then serves decode. Main (with bench_graph --capacity), graph d+c and eager, the
# challenge shapes and DeepSeek-V3 at 1..128 tokens with counts drawn, each engine for its T (capacity 0) against
# one for 4096, alternated twice; then the floor for the same shapes.
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
    PYTHONPATH=$PWD/python timeout 110 torchrun --master-port=$((29600 + r * 10 + cap / 1024)) --nproc-per-node=2 \
      benchmarks/bench_graph.py --shapes "$S" --counts drawn --replays 10 --iters 30 --no-microbench --no-floor \
      --capacity $cap --out $OUT/cap/cap$cap-r$r > $L/cap$cap-r$r.log 2>&1
    log "capacity $cap round $r rc=$?"; pkill -f torchrun
  done
done
PYTHONPATH=$PWD/python timeout 120 torchrun --nproc-per-node=2 benchmarks/bench_graph.py --shapes "$S" --counts drawn \
  --replays 10 --iters 30 --out $OUT/cap/floor > $L/floor.log 2>&1
log "floor rc=$?"
grep -H -E "graph d\+c" $L/cap*.log $L/floor.log > $OUT/summary.txt
cd $OUT && tar czf all.tar.gz logs cap && rm -rf logs cap
log done
