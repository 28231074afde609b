#!/usr/bin/env bash
# Session 18, call 5 (nvidia-h100-x2): the whole GPU suite on the final kernel tree (the peers' rows as tasks,
# 8 a wave: call 4's .exp/e, committed), with the device time left.
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
timeout 290 bash tools/gpu_run.sh $OUT/suite build,tests > $OUT/suite-driver.log 2>&1
echo "suite rc=$?" >> $OUT/driver.log
cp $OUT/suite/summary.txt $OUT/suite-summary.txt
