#!/usr/bin/env bash
# Session 48's call 4 (one H200), what is left of the device time: c33ea29's library (a rank's own error before any
# echo of it; dispatch's counting without bad-id tracking) under the four sanitizers at world 2, then the profiler's
# build and tests at world 2 (its kernels carry the same changes), bounded by what is left of 345 s. Two ranks
# time-sliced on the GPU: correctness only.
source tools/device_call.sh
left() { echo $((345 - (SECONDS - T0))); }
bounded 90 bash tools/gpu_run.sh $L/build build > $L/build.log 2>&1
log "build rc=$?"
SANITIZE_TOOL_LIMIT_S=45 bounded 190 bash tools/sanitize.sh $L/san2 > $L/san2.log 2>&1
log "sanitizers at world 2 rc=$?"
grep "^-- sanitize" $L/san2.log > $OUT/san2-summary.txt
bounded "$(left)" bash tools/gpu_run.sh $L/prof2 profile -rs > $L/prof2.log 2>&1
log "profiler build and tests at world 2 rc=$?"
cp $L/prof2/summary.txt $OUT/prof2-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
