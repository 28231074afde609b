#!/usr/bin/env bash
# Call 4: the final tree (combine's backward skipping unasked weight gradients; the multi-node test's workers meeting
# through a file, not a port): the whole suite twice in a row.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o4; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/driver.log
timeout 120 bash tools/gpu_run.sh $O/build build > $O/build_driver.log 2>&1; log "build rc=$?"
left=$((${BUDGET_S:-480} - (SECONDS - T0)))
GPU_TEST_RUNS=2 timeout $left setsid bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1; log "suites rc=$?"
pkill -f torchrun; pkill -f pytest
cp $O/suite/summary.txt $OUT/suite_summary.txt
tar czf $OUT/o.tar.gz -C /tmp o4
log done
