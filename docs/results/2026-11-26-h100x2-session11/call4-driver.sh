#!/usr/bin/env bash
# Call 4 (session 11): the final tree (wip/final fc03cbc) on 2 x H100 (4 x H100 was not lent): the whole GPU suite a
# third time.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
O=/tmp/o4; rm -rf $O; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
timeout 240 env MAX_JOBS=32 bash tools/gpu_run.sh $O/build build > $O/build_driver.log 2>&1; log "build rc=$?"
timeout 330 bash tools/gpu_run.sh $O/suite tests > $O/suite_driver.log 2>&1
log "suite rc=$?"; cp $O/suite/summary.txt $OUT/suite_summary.txt
tar czf $OUT/o.tar.gz -C /tmp o4
log done
