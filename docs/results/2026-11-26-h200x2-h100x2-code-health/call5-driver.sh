#!/usr/bin/env bash
# Call 5 (same warm 2 x H100): the whole suite again on the same build (second full run in a row), then fp8.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o5; mkdir -p $O
timeout 250 setsid bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1; log "suite rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/suite/summary.txt $OUT/suite_summary.txt
PYTHONPATH=$PWD/python timeout 40 torchrun --master-port=29613 --nproc-per-node=2 benchmarks/bench_graph.py --shapes "256,8,7168,128;256,8,7168,4096" --fp8 e4m3fn --no-microbench --out $O/fp8 > $O/bench_fp8.log 2>&1; log "fp8 rc=$?"
tar czf $OUT/o.tar.gz -C /tmp o5
log done
