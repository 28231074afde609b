#!/usr/bin/env bash
# Call 5, nvidia-h100-x2: the whole GPU suite on the kept change (a sending block loads its rows' first chunks after
# counting the pairs before its group; SASS identical to call 4's .exp/v1), built in place with the test hooks.
source tools/device_call.sh
timeout 330 bash tools/gpu_run.sh $L/suite build,tests > $L/suite.log 2>&1
log "suite rc=$?"
cp $L/suite/summary.txt $OUT/suite-summary.txt 2>/dev/null
cd $OUT && tar czf all.tar.gz logs && rm -rf logs
log done
