#!/usr/bin/env bash
# Session 49's call 3 (one H200; ranks time-sliced: correctness only), on the session's final tree (a copy at
# .exp/s49b, carried): call 2's tree plus the fp8 row checks moved from test_fp8.py into all_to_all_checks.py (no
# test module imports another now; mixed_rounds.py, the soak's host check, uses them). test_fp8.py and
# test_round_order.py at world 2, the soak mix at world 3, the four sanitizers at world 2 (their rounds are the
# soak's), then the soak at world 5 with what is left of 540 s.
cd .exp/s49b || exit 1
source tools/device_call.sh
left() { echo $((540 - (SECONDS - T0))); }
bounded 100 bash tools/gpu_run.sh $L/build build > $L/build.log 2>&1
log "build rc=$?"
ONE_GPU_RANKS=2 GPU_TESTS="tests/python/gpu/test_fp8.py tests/python/gpu/test_round_order.py" \
  bounded 150 bash tools/gpu_run.sh $L/fp8 tests -rs > $L/fp8.log 2>&1
log "test_fp8 and test_round_order at world 2 rc=$?"
cp $L/fp8/summary.txt $OUT/fp8-summary.txt 2> /dev/null
soak w3-seed49 3 150 --seed 49 --max-minutes 2
SANITIZE_TOOL_LIMIT_S=45 bounded 120 bash tools/sanitize.sh $L/san2 > $L/san2.log 2>&1
log "sanitizers at world 2 rc=$?"
grep "^-- sanitize" $L/san2.log > $OUT/san2-summary.txt
[ "$(left)" -gt 60 ] && soak w5-seed49 5 "$(left)" --seed 49 --max-minutes "$(python3 -c "print(max(0.5, ($(left) - 45) / 60))")"
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
