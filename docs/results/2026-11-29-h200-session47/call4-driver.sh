#!/usr/bin/env bash
# Session 47's call 4 (one H200): a peer's error report kept apart from the rank's own (ErrorRecord::peer_report), after
# call 3's failure of test_fp8_bad_expert_id_at_a_large_batch (rank 0, whose id was bad, raised "rank 1 reported an
# error"). The files that check errors and their travel (fp8, all_to_all, autograd, faults) at world 2, then the bad-id
# tests again and again with what is left of 430 s (the race showed once in the suites of many sessions). Ranks
# time-sliced on the GPU: correctness only.
source tools/device_call.sh
left() { echo $((430 - (SECONDS - T0))); }
files="tests/python/gpu/test_fp8.py tests/python/gpu/test_all_to_all.py tests/python/gpu/test_autograd.py"
files="$files tests/python/gpu/test_faults.py"
GPU_TESTS="$files" bounded 300 bash tools/gpu_run.sh $L/w2 build,tests -rs > $L/w2.log 2>&1
log "build, then fp8, all_to_all, autograd, faults at world 2 rc=$?"
cp $L/w2/summary.txt $OUT/w2-summary.txt 2> /dev/null
for i in 1 2 3 4 5 6; do
  [ "$(left)" -lt 40 ] && break
  n=$(( i % 2 == 0 ? 4 : 2 ))
  ONE_GPU_RANKS=$n GPU_TESTS="tests/python/gpu/test_fp8.py tests/python/gpu/test_all_to_all.py" \
    bounded "$(left)" bash tools/gpu_run.sh $L/bad$i tests -k bad_expert_id > $L/bad$i.log 2>&1
  log "bad-id tests, run $i, world $n rc=$?"
  grep -- "-- gpu_tests" $L/bad$i/summary.txt >> $OUT/bad-summary.txt 2> /dev/null
done
cd $OUT && tar cJf all.tar.xz logs 2> /dev/null; rm -rf logs
log done
