#!/usr/bin/env bash
# Call 3: the tree with combine's backward skipping unasked weight gradients. test_autograd first; bench_moe_layer
# (combine-bwd with and without the router's gradient, same run); overlap.cu with the grouped senders; then the
# whole suite twice in a row (with call 4's run: three in a row on one tree).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o3; mkdir -p $O/layer $O/overlap
nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/driver.log
timeout 120 bash tools/gpu_run.sh $O/build build > $O/build_driver.log 2>&1; log "build rc=$?"
GPU_TESTS=tests/python/gpu/test_autograd.py timeout 100 setsid bash tools/gpu_run.sh $O/autograd tests > $O/autograd_driver.log 2>&1; ag=$?; log "autograd rc=$ag"
pkill -f torchrun; pkill -f pytest
cp $O/autograd/summary.txt $OUT/autograd_summary.txt
PYTHONPATH=$PWD/python timeout 90 torchrun --master-port=29641 --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 128,2048 --iters 30 \
  --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y --out $O/layer > $O/layer/bench_moe_layer.log 2>&1; log "layer rc=$?"
pkill -f torchrun
nvcc -O3 -arch=sm_90 -o $O/overlap/overlap docs/results/2026-11-26-h100x2-overlap-floor/overlap.cu > $O/overlap/build.log 2>&1
for T in 4096 1024; do timeout 60 $O/overlap/overlap $T > $O/overlap/T$T.txt 2>&1; log "overlap T=$T rc=$?"; done
left=$((585 - (SECONDS - T0)))
if [ $ag = 0 ]; then
  GPU_TEST_RUNS=2 timeout $left setsid bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1; log "suites rc=$?"
  pkill -f torchrun; pkill -f pytest
  cp $O/suite/summary.txt $OUT/suite_summary.txt
fi
tar czf $OUT/o.tar.gz -C /tmp o3
log done
