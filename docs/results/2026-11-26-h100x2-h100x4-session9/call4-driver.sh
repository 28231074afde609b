#!/usr/bin/env bash
# Call 4 (session 9): world 4 on 4 x H100 (the first real 4-GPU run of this project): the candidate built
# here; bench_graph (DeepSeek-V3 1 / 128 / 4096 tokens every rank, with the in-run floor; the challenge
# shapes with counts drawn per rank), bench_moe_layer (128 and 2048 tokens, every rank and drawn, every
# all-to-all round); then the whole GPU suite once, as far as the call's time allows.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o4; mkdir -p $O/bench $O/layer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
nvidia-smi topo -m > $O/topo.txt 2>&1; cat $O/topo.txt >> $OUT/driver.log
timeout 150 bash tools/gpu_run.sh $O/build build > $O/build_driver.log 2>&1; log "build rc=$?"
p=29681
PYTHONPATH=$PWD/python timeout 80 torchrun --master-port=$p --nproc-per-node=4 benchmarks/bench_graph.py \
  --shapes "256,8,7168,1;256,8,7168,128;256,8,7168,4096" --counts max --no-microbench --out $O/bench/equal \
  > $O/bench/equal.log 2>&1; log "graph equal rc=$?"; pkill -f torchrun; p=$((p+1))
PYTHONPATH=$PWD/python timeout 60 torchrun --master-port=$p --nproc-per-node=4 benchmarks/bench_graph.py \
  --shapes "8,2,6144,16;64,6,2048,32;128,4,2880,128;128,8,4096,256;256,8,7168,256" --counts drawn --no-microbench \
  --out $O/bench/small > $O/bench/small.log 2>&1; log "graph small rc=$?"; pkill -f torchrun; p=$((p+1))
PYTHONPATH=$PWD/python timeout 90 torchrun --master-port=$p --nproc-per-node=4 benchmarks/bench_moe_layer.py \
  --tokens 128,2048 --counts "max;drawn" --iters 30 --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y \
  --out $O/layer/w4 > $O/layer/w4.log 2>&1; log "layer rc=$?"; pkill -f torchrun
tar czf $OUT/o.tar.gz -C /tmp o4
left=$((585 - (SECONDS - T0)))
log "suite, $left s left"
timeout $left setsid bash tools/gpu_run.sh $O/suite tests --durations=15 > $O/suite_driver.log 2>&1; log "suite rc=$?"
pkill -f torchrun; pkill -f pytest
grep -E "^-- |^   " $O/suite/summary.txt | tee -a $OUT/driver.log
tar czf $OUT/o.tar.gz -C /tmp o4
log done
