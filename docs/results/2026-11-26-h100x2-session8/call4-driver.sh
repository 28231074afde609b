#!/usr/bin/env bash
# Call 4 (session 8): the final tree (the backward of combine with row tasks and own rows answered while
# sending): the whole GPU suite three times in a row, then bench_moe_layer if time is left.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o4; mkdir -p $O/layer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
timeout 200 bash tools/gpu_run.sh $O/build build > $O/build_driver.log 2>&1; log "build rc=$?"
GPU_TEST_RUNS=3 timeout $((555 - (SECONDS - T0))) setsid bash tools/gpu_run.sh $O/suite tests --durations=15 > $O/suite_driver.log 2>&1; log "suite rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/suite/summary.txt $OUT/suite_summary.txt 2>/dev/null
if [ $((SECONDS - T0)) -lt 560 ]; then
  PYTHONPATH=$PWD/python timeout $((590 - (SECONDS - T0))) torchrun --master-port=29671 --nproc-per-node=2 benchmarks/bench_moe_layer.py --tokens 128,512,2048 --iters 30 \
    --phases dispatch,combine,dispatch-bwd,combine-bwd,combine-bwd-y --out $O/layer/cand > $O/layer/cand.log 2>&1; log "layer rc=$?"
fi
cp $O/layer/*.log $OUT/ 2>/dev/null
tar czf $OUT/o.tar.gz -C /tmp o4 2>/dev/null
log done
