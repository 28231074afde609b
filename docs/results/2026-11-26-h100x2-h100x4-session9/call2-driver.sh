#!/usr/bin/env bash
# Call 2 (session 9): the same machine as call 1, still warm, the candidate's build kept: the whole GPU
# suite twice more in a row (runs 2 and 3 after call 1's).
set -u
source tools/no_multicast_env.sh
export PYTHONUNBUFFERED=1
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a $OUT/driver.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/driver.log
prev=$(dirname "$(dirname "$(find / -xdev -path "*layer/cand2.log" -not -path "$OUT/*" 2>/dev/null | head -1)")"); log "call 1 out: $prev"; [ -d "$prev" ] && tar -czf $OUT/call1.tar.gz -C "$prev" . 
ls python/moe_a2a/_C*.so >> $OUT/driver.log 2>&1 || log "no build kept: building"
GPU_TEST_RUNS=2 timeout 560 setsid bash tools/gpu_run.sh $OUT/suite tests --durations=15 > $OUT/suite_driver.log 2>&1; log "suite rc=$?"
tail -8 $OUT/suite/summary.txt | tee -a $OUT/driver.log
log done
