#!/usr/bin/env bash
# Prepared, not run (session 46's device time was spent): for a session that has one GPU only. What no world above 4
# has had: the sanitizers (memcheck, racecheck, synccheck, initcheck ran at worlds 2, 3 and 4) and the whole soak mix
# at worlds 6 and 7 (it ran at 3, 5 and 8). Last, the first GPU run of the profiler's constructor without the GIL
# (session 46's last code commit): the profiler's build and tests at world 8. The ranks time-sliced on the GPU
# (correctness only), each step bounded by what is left of 560 s. a08d2d1's one-line error statuses need a benchmark
# step (two GPUs, or `proxy`).
source tools/device_call.sh
left() { echo $((560 - (SECONDS - T0))); }
bounded 120 bash tools/gpu_run.sh $L/build build > $L/build.log 2>&1
log "build rc=$?"
SANITIZE_RANKS=8 SANITIZE_TOOL_LIMIT_S=80 bounded 340 bash tools/sanitize.sh $L/san8 > $L/san8.log 2>&1
log "sanitizers at world 8 rc=$?"
grep "^-- sanitize" $L/san8.log > $OUT/san8-summary.txt
soak w7 7 "$(( ($(left) - 110) / 2 ))" --seed 7 --max-minutes 0.7
soak w6 6 "$(( $(left) - 110 ))" --seed 6 --max-minutes 0.7
ONE_GPU_RANKS=8 bounded "$(left)" bash tools/gpu_run.sh $L/prof8 profile -rs > $L/prof8.log 2>&1
log "profiler build and tests at world 8 rc=$?"
cp $L/prof8/summary.txt $OUT/prof8-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
