#!/usr/bin/env bash
# Prepared, not run (session 46's device time was spent): for a session that has one GPU only. What no world above 4
# has had: the sanitizers (memcheck, racecheck, synccheck, initcheck ran at worlds 2, 3 and 4) and the whole soak mix
# at worlds 6 and 7 (it ran at 3, 5 and 8). Also the first GPU run of a08d2d1's one-line error statuses (the soak and
# the sanitizers do not reach them; any benchmark step does). The ranks time-sliced on the GPU (correctness only), each
# step bounded by what is left of 560 s.
source tools/device_call.sh
left() { echo $((560 - (SECONDS - T0))); }
bounded 120 bash tools/gpu_run.sh $L/build build > $L/build.log 2>&1
log "build rc=$?"
SANITIZE_RANKS=8 SANITIZE_TOOL_LIMIT_S=100 bounded 420 bash tools/sanitize.sh $L/san8 > $L/san8.log 2>&1
log "sanitizers at world 8 rc=$?"
grep "^-- sanitize" $L/san8.log > $OUT/san8-summary.txt
soak w7 7 "$(( $(left) / 2 ))" --seed 7 --max-minutes 0.9
soak w6 6 "$(left)" --seed 6 --max-minutes 0.9
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
