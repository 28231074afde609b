#!/usr/bin/env bash
# Prepared, not run (session 44's device time was spent): for a session that has one GPU only. The whole soak mix has
# run at world 3 (9061 rounds, session 44 call 3) and the fp8 shape alone at 3, 4 and 8; not the whole mix above 3,
# where the experts' factors reach 8 (every GPU check's bounds at their widest: the backward rounds' closed forms,
# grad w's dot products) and the epoch wrap points meet eight ranks. The ranks time-sliced on the GPU (correctness
# only): the whole mix at world 8 past its wrap point (round 2000), at world 5, then the sanitizers at world 4, each
# bounded by what is left of 560 s.
source tools/device_call.sh
left() { echo $((560 - (SECONDS - T0))); }
bounded 120 bash tools/gpu_run.sh $L/build build > $L/build.log 2>&1
log "build rc=$?"
soak w8 8 270 --seed 8 --max-minutes 3.5
soak w5 5 150 --seed 5 --max-minutes 1.8
SANITIZE_RANKS=4 SANITIZE_TOOL_LIMIT_S=60 bounded "$(left)" bash tools/sanitize.sh $L/san4 > $L/san4.log 2>&1
log "sanitizers at world 4 rc=$?"
grep "^-- sanitize" $L/san4.log > $OUT/san4-summary.txt
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
