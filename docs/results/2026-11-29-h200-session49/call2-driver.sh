#!/usr/bin/env bash
# Session 49's call 2 (one H200; ranks time-sliced: correctness only), on the working tree of this session: the host
# waits for an own error still being written (EpEngine::own_error_once_written, engine_check without the GIL), and
# the GPU tests' split (test_all_to_all.py's error tests in test_errors.py, its shared checks in all_to_all_checks.py,
# with the new test_check_waits_for_an_own_error_being_written). The whole GPU suite at world 2, then at world 8
# test_errors.py and test_faults.py, then test_errors.py at worlds 3, 5 and 2 with what is left of 560 s. The tree is
# a copy at .exp/s49, carried.
cd .exp/s49 || exit 1
source tools/device_call.sh
left() { echo $((560 - (SECONDS - T0))); }
bounded 320 bash tools/gpu_run.sh $L/w2 build,tests -rs > $L/w2.log 2>&1
log "build, then the whole suite at world 2 rc=$?"
cp $L/w2/summary.txt $OUT/w2-summary.txt 2> /dev/null
ONE_GPU_RANKS=8 GPU_TESTS="tests/python/gpu/test_errors.py tests/python/gpu/test_faults.py" \
  bounded "$(left)" bash tools/gpu_run.sh $L/w8 tests -rs > $L/w8.log 2>&1
log "test_errors and test_faults at world 8 rc=$?"
cp $L/w8/summary.txt $OUT/w8-summary.txt 2> /dev/null
for n in 3 5 2; do
  [ "$(left)" -lt 60 ] && break
  ONE_GPU_RANKS=$n GPU_TESTS="tests/python/gpu/test_errors.py" \
    bounded "$(left)" bash tools/gpu_run.sh $L/err$n tests -rs > $L/err$n.log 2>&1
  log "test_errors at world $n rc=$?"
  grep -h -- "-- gpu_tests" $L/err$n/summary.txt 2> /dev/null | tail -1 | sed "s/^/world $n: /" >> $OUT/err-summary.txt
done
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
