#!/usr/bin/env bash
# Call 4 (same warm 2 x H100 as call 3): leftovers of call 3 killed; the whole suite on the build call 3 left;
# bench_moe_layer with its floor; bench_graph's issue-35 shapes.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
pkill -f torchrun; pkill -f pytest; sleep 2; nvidia-smi --query-compute-apps=pid --format=csv,noheader | head -3
O=/tmp/o4; mkdir -p $O/graph $O/layer
ls python/moe_a2a/_C*.so >> $OUT/driver.log 2>&1
timeout 300 setsid bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1; log "suite rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/suite/summary.txt $OUT/suite_summary.txt
export PYTHONPATH=$PWD/python
timeout 70 torchrun --master-port=29611 --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 128,2048 --iters 30 --out $O/layer > $O/layer/bench_moe_layer.log 2>&1; log "layer rc=$?"
pkill -f torchrun
timeout 90 torchrun --master-port=29612 --nproc-per-node=2 benchmarks/bench_graph.py --shapes "8,2,6144,16;64,6,2048,32;128,8,4096,256;256,8,7168,256;256,8,7168,1;256,8,7168,128;256,8,7168,4096" --counts "max;drawn" --no-microbench --out $O/graph > $O/graph/bench_graph.log 2>&1; log "graph rc=$?"
tar czf $OUT/o.tar.gz -C /tmp o4
log done
