#!/usr/bin/env bash
# Session 48's call 3 (one H200): a rank's own error before any echo of it (report_error records before it marks the
# round; a bad id no longer sets the counts' error bit, so the peers learn of it from its group's signal; the host
# reads peer_report before code). The whole GPU suite at world 2 on the new library, then at world 8 the files whose
# errors travel (the fault table, the bad-id tests, the new check-while-the-round-runs test), then the bad-id tests
# again at worlds 2-8 with what is left of 540 s. Ranks time-sliced on the GPU: correctness only.
source tools/device_call.sh
left() { echo $((540 - (SECONDS - T0))); }
bounded 300 bash tools/gpu_run.sh $L/w2 build,tests -rs > $L/w2.log 2>&1
log "build, then the whole suite at world 2 rc=$?"
cp $L/w2/summary.txt $OUT/w2-summary.txt 2> /dev/null
ONE_GPU_RANKS=8 GPU_TESTS="tests/python/gpu/test_faults.py tests/python/gpu/test_fp8.py tests/python/gpu/test_all_to_all.py" \
  bounded "$(left)" bash tools/gpu_run.sh $L/w8 tests -k "fault or bad_expert_id or check_while or capacity" -rs > $L/w8.log 2>&1
log "faults, bad ids, capacity at world 8 rc=$?"
cp $L/w8/summary.txt $OUT/w8-summary.txt 2> /dev/null
for n in 3 2 4 8 2 3; do
  [ "$(left)" -lt 45 ] && break
  ONE_GPU_RANKS=$n GPU_TESTS="tests/python/gpu/test_fp8.py tests/python/gpu/test_all_to_all.py" \
    bounded "$(left)" bash tools/gpu_run.sh $L/bad$n-$SECONDS tests -k "bad_expert_id or check_while" > $L/bad.log 2>&1
  rc=$?
  log "bad-id tests at world $n rc=$rc"
  grep -h -- "-- gpu_tests" $L/bad$n-*/summary.txt 2> /dev/null | tail -1 >> $OUT/bad-summary.txt
done
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
