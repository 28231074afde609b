#!/usr/bin/env bash
# Session 38, call 5 (nvidia-h200-x2): moe_a2a.trace as a package (the commit after 1406887), on the GPUs: the checkout
# built with the profiler and the test hooks, test_profiler.py, the traced benchmark (trace.save through an AllToAll)
# and the trace commands on what it wrote (tools/gpu_run.sh OUT profile). About 250 s with the start.
source tools/device_call.sh
bounded 280 bash tools/gpu_run.sh $L/profile profile > $L/profile.log 2>&1
log "profile rc=$?"
grep -E "^--|^trace|passed|failed|error" $L/profile/summary.txt | head -30 > $OUT/profile-summary.txt
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
