#!/usr/bin/env bash
# Session 49's call 1 (one H200; ranks time-sliced: correctness only), on f6a6cee as landed (a tree of it at
# .exp/f6a6, carried, so that edits made here while the call starts do not reach it): the soak mix at world 2 and at
# world 8 (it has not run since c33ea29 changed the dispatch's counting), then at world 2 the tests whose errors
# travel (the fault table, bad ids, check while the round runs, capacity, missing peers), which f6a6cee's host error
# path decides, bounded by 560 s.
cd .exp/f6a6 || exit 1
source tools/device_call.sh
left() { echo $((560 - (SECONDS - T0))); }
bounded 100 bash tools/gpu_run.sh $L/build build > $L/build.log 2>&1
log "build rc=$?"
soak w2-seed49 2 170 --seed 49 --max-minutes 2.5
soak w8-seed49 8 200 --seed 49 --max-minutes 2.5
ONE_GPU_RANKS=2 GPU_TESTS="tests/python/gpu/test_faults.py tests/python/gpu/test_fp8.py tests/python/gpu/test_all_to_all.py" \
  bounded "$(left)" bash tools/gpu_run.sh $L/err2 tests -k "fault or bad_expert_id or check_while or capacity or missing_peer" \
  -rs > $L/err2.log 2>&1
log "faults, bad ids, check while running, capacity, missing peers at world 2 rc=$?"
cp $L/err2/summary.txt $OUT/err2-summary.txt 2> /dev/null
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
